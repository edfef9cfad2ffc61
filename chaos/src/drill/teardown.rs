//! The end of a drill's cluster: each node's final view saved next to its
//! log, then the nodes stopped and (unless kept) their data removed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use seatfence_testkit::LocalCluster;
use serde_json::json;

use super::nemesis::Nemesis;
use super::World;

/// Stop the nodes, each one's final view saved next to its log first;
/// unless `keep_data`, remove the data directories of the nodes `ids`.
pub(super) async fn stop_cluster(
    nemesis: Arc<Nemesis>,
    world: &World,
    out: &Path,
    ids: &[u64],
    keep_data: bool,
) {
    if let Some(cluster) = nemesis.into_cluster() {
        save_node_states(world, &cluster, out).await;
        drop(cluster);
        if !keep_data {
            for id in ids {
                let _ = std::fs::remove_dir_all(
                    out.join("cluster").join(format!("n{id}")).join("data"),
                );
            }
        }
    }
}

/// Each node's final view (`Status`) next to its log.
async fn save_node_states(w: &World, cluster: &LocalCluster, out: &Path) {
    for n in &cluster.nodes {
        let path: PathBuf = out
            .join("cluster")
            .join(format!("n{}", n.id()))
            .join("status.json");
        let status = match w.client.status_with_digests_at(n.addr()).await {
            Ok(s) => json!({
                "node_id": s.node_id,
                "region": s.region,
                "groups": s.groups.iter().map(|g| json!({
                    "group_id": g.group_id, "role": g.role, "term": g.term, "leader": g.leader,
                    "last_log_index": g.last_log_index, "applied_index": g.applied_index,
                    "voters": g.voters, "learners": g.learners, "state_digest": g.state_digest,
                })).collect::<Vec<_>>(),
            }),
            Err(e) => json!({"error": e.to_string()}),
        };
        let _ = std::fs::write(
            &path,
            serde_json::to_string_pretty(&status).unwrap_or_default(),
        );
    }
}
