//! `seatfence ctl` commands that talk gRPC to one node (`--addr`): its
//! groups' status, creating a group, writing and reading a key.

use seatfence_core::{Command, GroupId, Placement};
use seatfence_node::create_group;
use seatfence_raft::network::Dialer;
use seatfence_raft::ClusterClient;

use super::show::{Align, Table};
use super::CtlCmd;

/// Run a node-level command against the node at `addr`, dialled through
/// `dialer` (the operator's certificate, or plaintext).
pub(super) async fn run(addr: String, dialer: Dialer, cmd: CtlCmd) -> anyhow::Result<()> {
    let client = ClusterClient::new(vec![addr.clone()], dialer);
    match cmd {
        CtlCmd::Status { json } => {
            let s = client.status_at(&addr).await?;
            if json {
                let groups: Vec<_> = s
                    .groups
                    .iter()
                    .map(|g| {
                        serde_json::json!({
                            "group_id": g.group_id, "role": g.role, "term": g.term, "leader": g.leader,
                            "last_log_index": g.last_log_index, "applied_index": g.applied_index,
                            "snapshot_index": g.snapshot_index, "purged_index": g.purged_index,
                            "voters": g.voters, "learners": g.learners, "keys": g.key_count,
                            "asleep": g.asleep,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({"node_id": s.node_id, "region": s.region, "groups": groups})
                );
            } else {
                println!("node {} ({})", s.node_id, s.region);
                let right = |name: &'static str| (name, Align::Right);
                let mut t = Table::new(&[
                    right("group"),
                    right("role"),
                    right("term"),
                    right("leader"),
                    right("last_log"),
                    right("applied"),
                    right("snapshot"),
                    right("asleep"),
                    ("voters", Align::Left),
                ]);
                for g in &s.groups {
                    t.row(vec![
                        g.group_id.to_string(),
                        g.role.clone(),
                        g.term.to_string(),
                        g.leader.map_or("-".into(), |l| l.to_string()),
                        g.last_log_index.to_string(),
                        g.applied_index.to_string(),
                        g.snapshot_index.to_string(),
                        String::from(if g.asleep { "yes" } else { "no" }),
                        format!("{:?}", g.voters),
                    ]);
                }
                t.print();
            }
        }
        CtlCmd::CreateGroup { replicas, region } => {
            let placement = match region {
                Some(r) => Placement::InRegion {
                    region: r.as_str().into(),
                    replicas,
                },
                None => Placement::Spread { replicas },
            };
            let (g, members) = create_group(&client, None, placement).await?;
            println!(
                "created group {} on nodes {:?}",
                g.0,
                members.iter().map(|m| m.0).collect::<Vec<_>>()
            );
        }
        CtlCmd::Put { group, key, value } => {
            let out = client
                .write(
                    GroupId(group),
                    &Command::Put {
                        key,
                        value: value.into_bytes(),
                    },
                )
                .await?;
            println!(
                "committed at index {} (term {}): {}",
                out.log_index, out.term, out.response
            );
        }
        CtlCmd::Events(_) => unreachable!("event commands go through an edge"),
        CtlCmd::Get { group, key } => {
            let r = client.read_at(&addr, GroupId(group), &key).await?;
            if r.found {
                println!(
                    "{} (applied index {})",
                    String::from_utf8_lossy(&r.value),
                    r.applied_index
                );
            } else {
                println!("(not found; applied index {})", r.applied_index);
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
