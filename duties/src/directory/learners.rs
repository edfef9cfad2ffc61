//! Directory learners: on the directory's leader, every registered node
//! that is not yet in group 0's membership is added as a learner, so it
//! receives the directory (and with it the groups placed on it). Runs on
//! every node, acts only while leading.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use seatfence_core::{Directory, GroupId, NodeState};
use seatfence_raft::membership::{self, MembershipOp};
use seatfence_raft::registry::Registry;
use tokio::sync::watch;

/// The registered nodes (id, gRPC address) that group 0's membership
/// (`members`: its voters and learners) lacks; a decommissioned node
/// receives the directory no more.
pub fn plan(d: &Directory, members: &BTreeSet<u64>) -> Vec<(u64, String)> {
    d.nodes
        .values()
        .filter(|n| !members.contains(&n.id.0))
        .filter(|n| d.node_state(n.id) != NodeState::Decommissioned)
        .map(|n| (n.id.0, n.grpc_addr.clone()))
        .collect()
}

/// Add the learners `plan` names after every directory apply (and every
/// second: leadership may arrive without one), while this node leads
/// group 0, until `rx_stop`.
pub async fn run(registry: Arc<Registry>, mut rx_stop: watch::Receiver<bool>) {
    let Some(dir) = registry.get(GroupId::DIRECTORY) else {
        return;
    };
    let mut rx_applied = dir.subscribe_applied();
    loop {
        if dir.leads() {
            let missing = dir.read(|s| {
                let m = s.membership.membership();
                let members = m.voter_ids().chain(m.learner_ids()).collect();
                plan(s.state.directory(), &members)
            });
            if !missing.is_empty() {
                let ids: Vec<u64> = missing.iter().map(|(id, _)| *id).collect();
                match membership::apply(&dir, MembershipOp::AddLearners(missing)).await {
                    Ok(_) => tracing::info!(
                        group = 0,
                        nodes = ?ids,
                        "added nodes to the directory as learners"
                    ),
                    Err(e) => tracing::debug!(group = 0, nodes = ?ids, "add learners: {e:?}"),
                }
            }
        }
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            changed = rx_applied.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seatfence_core::{NodeId, NodeInfo, RegionId};

    #[test]
    fn registered_nodes_outside_group_0_learn_it_unless_decommissioned() {
        let mut d = Directory::default();
        for id in 1..=5 {
            d.nodes.insert(
                NodeId(id),
                NodeInfo {
                    id: NodeId(id),
                    region: RegionId::from("a"),
                    grpc_addr: format!("127.0.0.1:{}", 7000 + id),
                    incarnation: 0,
                    format_max: seatfence_core::format::newest(),
                },
            );
        }
        d.node_states.insert(NodeId(5), NodeState::Decommissioned);
        let members = BTreeSet::from([1, 2, 3]);
        assert_eq!(plan(&d, &members), vec![(4, "127.0.0.1:7004".to_string())]);
        assert!(plan(&d, &BTreeSet::from([1, 2, 3, 4])).is_empty());
    }
}
