//! What the directory's leader starts: repairs for voters on dead or
//! retiring nodes, then replica rebalancing within a region; and the
//! lifecycle gauges every node sets from its directory replica.

use std::collections::BTreeMap;

use seatfence_core::{Directory, NodeId, NodeOp, NodeState, RepairReason};
use seatfence_raft::metrics::METRICS;
use seatfence_regions::config::MovesConfig;

/// The lifecycle gauges, from this node's directory replica.
pub(super) fn record_metrics(d: &Directory) {
    let mut states = [
        ("live", 0),
        ("suspect", 0),
        ("dead", 0),
        ("decommissioning", 0),
        ("decommissioned", 0),
    ];
    for n in d.nodes.keys() {
        let name = d.node_state(*n).name();
        if let Some(s) = states.iter_mut().find(|(s, _)| *s == name) {
            s.1 += 1;
        }
    }
    METRICS.node_lifecycle(&states, d.under_replicated().len(), d.repairs.len());
}

/// The repairs to start now: voters on dead or retiring nodes first (at
/// most `repair_parallel` running; only where a spare node exists and the
/// other voters are live, so the change can commit); when there are none,
/// one replica from the fullest to the emptiest live node of a region whose
/// counts differ by two or more (at most `rebalance_parallel` running).
pub fn plan_repairs(d: &Directory, config: &MovesConfig) -> Vec<NodeOp> {
    let mut ops = Vec::new();
    let mut running = d.repairs.len();
    let mut needed = false;
    let counts = d.replica_counts();
    for g in d.groups.values() {
        if d.repairs.contains_key(&g.id) || d.is_moving(g.id) {
            continue;
        }
        for m in &g.members {
            let reason = match d.node_state(*m) {
                NodeState::Dead { .. } => RepairReason::Dead,
                NodeState::Decommissioning | NodeState::Decommissioned => {
                    RepairReason::Decommission
                }
                // Back on an empty data dir: demoted, caught up, a voter
                // again, in place (no spare node needed).
                NodeState::Live if d.rejoin_pending(*m, g.id) => {
                    if !d.repairable(g.id, *m) {
                        continue;
                    }
                    needed = true;
                    if running < config.repair_parallel {
                        running += 1;
                        ops.push(NodeOp::StartRepair {
                            group: g.id,
                            remove: *m,
                            add: Some(*m),
                            reason: RepairReason::Rejoin,
                        });
                    }
                    break;
                }
                _ => continue,
            };
            if d.replacement(g.id, *m, &counts).is_none() || !d.repairable(g.id, *m) {
                continue; // Under-replicated: reported, not guessed.
            }
            needed = true;
            if running < config.repair_parallel {
                running += 1;
                ops.push(NodeOp::StartRepair {
                    group: g.id,
                    remove: *m,
                    add: None,
                    reason,
                });
            }
            break;
        }
    }
    let rebalancing = d
        .repairs
        .values()
        .filter(|r| r.reason == RepairReason::Rebalance)
        .count();
    // A rejoining node's pending group it is no longer a voter of (moved
    // away, or repaired off it meanwhile) waits for nothing.
    for (node, r) in &d.rejoins {
        for g in &r.pending {
            let member = d.groups.get(g).is_some_and(|g| g.members.contains(node));
            // A running move or repair may still make it a voter there.
            let changing = d.is_moving(*g) || d.repairs.contains_key(g);
            if !g.is_directory() && !member && !changing {
                ops.push(NodeOp::RejoinDone {
                    node: *node,
                    group: *g,
                });
            }
        }
    }
    if needed || rebalancing >= config.rebalance_parallel {
        return ops;
    }
    let mut by_region: BTreeMap<&seatfence_core::RegionId, Vec<(usize, NodeId)>> = BTreeMap::new();
    for n in d.nodes.values() {
        if d.node_state(n.id).takes_replicas() {
            by_region
                .entry(&n.region)
                .or_default()
                .push((counts.get(&n.id).copied().unwrap_or(0), n.id));
        }
    }
    for nodes in by_region.values() {
        let (Some(&(most, from)), Some(&(least, to))) = (nodes.iter().max(), nodes.iter().min())
        else {
            continue;
        };
        if most < least + 2 {
            continue;
        }
        let group = d.groups_of(from).find(|g| {
            !g.members.contains(&to)
                && !d.repairs.contains_key(&g.id)
                && !d.is_moving(g.id)
                && d.repairable(g.id, from)
        });
        if let Some(g) = group {
            ops.push(NodeOp::StartRepair {
                group: g.id,
                remove: from,
                add: Some(to),
                reason: RepairReason::Rebalance,
            });
            break; // One at a time: counts change with it.
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use seatfence_core::{GroupId, GroupInfo, NodeInfo, RegionId};

    /// Region a: nodes 1-3 hosting `groups` groups of three, and node 4
    /// (empty) when `spare`.
    fn dir(groups: u64, spare: bool) -> Directory {
        let mut d = Directory::default();
        for id in 1..=if spare { 4 } else { 3 } {
            d.nodes.insert(
                NodeId(id),
                NodeInfo {
                    id: NodeId(id),
                    region: RegionId::from("a"),
                    grpc_addr: format!("127.0.0.1:{}", 7000 + id),
                    incarnation: 0,
                },
            );
        }
        for g in 1..=groups {
            d.groups.insert(
                GroupId(g),
                GroupInfo {
                    id: GroupId(g),
                    members: vec![NodeId(1), NodeId(2), NodeId(3)],
                },
            );
        }
        d
    }

    #[test]
    fn a_new_node_takes_replicas_one_at_a_time() {
        let config = MovesConfig::default();
        let ops = plan_repairs(&dir(3, true), &config);
        assert_eq!(
            ops,
            vec![NodeOp::StartRepair {
                group: GroupId(1),
                remove: NodeId(3),
                add: Some(NodeId(4)),
                reason: RepairReason::Rebalance,
            }]
        );
        // Three groups on three nodes of three: nothing to even out; the
        // switch off: nothing either.
        assert!(plan_repairs(&dir(3, false), &config).is_empty());
        let off = MovesConfig {
            rebalance_parallel: 0,
            ..MovesConfig::default()
        };
        assert!(plan_repairs(&dir(3, true), &off).is_empty());
    }

    #[test]
    fn a_rejoining_node_is_put_back_in_place_and_gone_groups_wait_no_more() {
        let mut d = dir(2, false);
        let pending = [GroupId::DIRECTORY, GroupId(1), GroupId(2), GroupId(9)];
        d.rejoins.insert(
            NodeId(2),
            seatfence_core::Rejoin {
                incarnation: 7,
                pending: pending.into_iter().collect(),
                started_ms: 0,
                directory_demoted: false,
                floors: Default::default(),
            },
        );
        let config = MovesConfig {
            repair_parallel: 1,
            ..MovesConfig::default()
        };
        let ops = plan_repairs(&d, &config);
        // No spare node is needed; one at a time; group 9 (no longer a
        // voter there) waits no more; group 0 is the directory leader's.
        assert_eq!(
            ops,
            vec![
                NodeOp::StartRepair {
                    group: GroupId(1),
                    remove: NodeId(2),
                    add: Some(NodeId(2)),
                    reason: RepairReason::Rejoin,
                },
                NodeOp::RejoinDone {
                    node: NodeId(2),
                    group: GroupId(9),
                },
            ]
        );
    }

    #[test]
    fn dead_voters_are_repaired_before_anything_is_rebalanced() {
        let mut d = dir(3, true);
        d.node_states
            .insert(NodeId(2), NodeState::Dead { declared: false });
        let config = MovesConfig {
            repair_parallel: 2,
            ..MovesConfig::default()
        };
        let ops = plan_repairs(&d, &config);
        assert_eq!(ops.len(), 2, "{ops:?}");
        for op in &ops {
            assert!(
                matches!(
                    op,
                    NodeOp::StartRepair {
                        remove: NodeId(2),
                        add: None,
                        reason: RepairReason::Dead,
                        ..
                    }
                ),
                "{op:?}"
            );
        }
        // No spare node: nothing to start, the groups are under-replicated.
        let mut d = dir(3, false);
        d.node_states
            .insert(NodeId(2), NodeState::Dead { declared: true });
        assert!(plan_repairs(&d, &config).is_empty());
        assert_eq!(d.under_replicated().len(), 3);
    }
}
