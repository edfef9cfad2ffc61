//! What the directory's leader decides each round, as pure functions of
//! the directory and what it observed (`Observed`): node states from
//! silence (`plan_states`), repairs for voters on dead or retiring nodes
//! then replica rebalancing within a region (`plan_repairs`), directory
//! voters to replace, decommissions that completed and retired learners
//! to drop (`plan_membership`); and the lifecycle gauges every node sets
//! from its directory replica. The task (`mod.rs`) carries them out.

use std::collections::{BTreeMap, BTreeSet};

use seatfence_core::{Directory, GroupId, GroupInfo, NodeId, NodeOp, NodeState, RepairReason};
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

/// What the lifecycle task observed outside the directory this round.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Per node that did not answer its ping: for how long (ms) this
    /// leader has seen it silent. A node absent here answered.
    pub silent_ms: BTreeMap<NodeId, u64>,
    /// Group 0's voters and learners, from this node's replica.
    pub directory_voters: BTreeSet<u64>,
    /// Node ids of group 0's learners, from this node's replica.
    pub directory_learners: BTreeSet<u64>,
}

/// The node state changes silence or an answer calls for (`SetState`):
/// silent `dead_after_ms` or more: dead; `suspect_after_ms`: suspect; an
/// answer: live. Silence alone never lowers a recorded state (a new leader
/// counts silence from its own start, and must not turn a node an earlier
/// leader found dead back into a suspect: t64_b saw it flip mid-repair);
/// only an answer does. States an operator set (declared dead,
/// decommissioning, decommissioned) are not liveness's to change.
pub fn plan_states(d: &Directory, observed: &Observed, config: &MovesConfig) -> Vec<NodeOp> {
    let mut ops = Vec::new();
    for id in d.nodes.keys() {
        let was = d.node_state(*id);
        let want = match observed.silent_ms.get(id).copied() {
            None => NodeState::Live,
            Some(ms) if ms >= config.dead_after_ms => NodeState::Dead { declared: false },
            Some(_) if was == (NodeState::Dead { declared: false }) => was,
            Some(ms) if ms >= config.suspect_after_ms => NodeState::Suspect,
            Some(_) => was,
        };
        let liveness_owns = matches!(
            was,
            NodeState::Live | NodeState::Suspect | NodeState::Dead { declared: false }
        );
        if want != was && liveness_owns {
            ops.push(NodeOp::SetState {
                node: *id,
                state: want,
            });
        }
    }
    ops
}

/// A change to group 0's membership or the node records, after repairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipAction {
    /// A directory voter on a dead or retiring node gives its vote to a
    /// live node that is not a voter (its own region first; every node is
    /// a learner of the directory, so it is caught up).
    ReplaceDirectoryVoter {
        /// Node id of the voter that gives up its vote.
        remove: u64,
        /// Node id of the live node that takes it.
        add: u64,
    },
    /// A directory voter to replace, and no live node to take its vote.
    NoDirectoryVoterFor(u64),
    /// A decommissioning node that holds no replica and no directory vote.
    Decommissioned(NodeId),
    /// Retired nodes still learning the directory: they stop receiving it.
    RemoveDirectoryLearners(Vec<u64>),
}

/// Group 0's voters to replace (one a round), decommissions that
/// completed, and retired nodes to drop as directory learners.
pub fn plan_membership(d: &Directory, observed: &Observed) -> Vec<MembershipAction> {
    let voters = &observed.directory_voters;
    let mut actions = Vec::new();
    if let Some(v) = voters
        .iter()
        .find(|v| d.node_state(NodeId(**v)).needs_repair())
    {
        let region = d.nodes.get(&NodeId(*v)).map(|n| &n.region);
        let add = d
            .nodes
            .values()
            .filter(|n| !voters.contains(&n.id.0) && d.node_state(n.id).takes_replicas())
            .filter(|n| !d.rejoin_pending(n.id, GroupId::DIRECTORY))
            .min_by_key(|n| (Some(&n.region) != region, n.id))
            .map(|n| n.id.0);
        actions.push(match add {
            Some(add) => MembershipAction::ReplaceDirectoryVoter { remove: *v, add },
            None => MembershipAction::NoDirectoryVoterFor(*v),
        });
    }
    let counts = d.replica_counts();
    for (n, s) in &d.node_states {
        if *s == NodeState::Decommissioning
            && counts.get(n).copied().unwrap_or(0) == 0
            && !voters.contains(&n.0)
        {
            actions.push(MembershipAction::Decommissioned(*n));
        }
    }
    let gone: Vec<u64> = d
        .node_states
        .iter()
        .filter(|(n, s)| {
            **s == NodeState::Decommissioned && observed.directory_learners.contains(&n.0)
        })
        .map(|(n, _)| n.0)
        .collect();
    if !gone.is_empty() {
        actions.push(MembershipAction::RemoveDirectoryLearners(gone));
    }
    actions
}

/// The repairs to start now: voters on dead or retiring nodes first (at
/// most `repair_parallel` running; only where a spare node exists and the
/// other voters are live, so the change can commit); when there are none,
/// one replica from the fullest to the emptiest live node of a region whose
/// counts differ by two or more (at most `rebalance_parallel` running).
pub fn plan_repairs(d: &Directory, config: &MovesConfig) -> Vec<NodeOp> {
    let mut ops = Vec::new();
    let counts = d.replica_counts();
    let needed = plan_voter_repairs(d, config, &counts, &mut ops);
    let rebalancing = d
        .repairs
        .values()
        .filter(|r| r.reason == RepairReason::Rebalance)
        .count();
    plan_rejoins_done(d, &mut ops);
    if needed || rebalancing >= config.rebalance_parallel {
        return ops;
    }
    if let Some(op) = plan_rebalance(d, &counts) {
        ops.push(op);
    }
    ops
}

/// Add to `ops` a repair for each group with a voter to repair, while fewer
/// than `repair_parallel` run; whether any group needed one (started or
/// not: rebalancing waits for them all).
fn plan_voter_repairs(
    d: &Directory,
    config: &MovesConfig,
    counts: &BTreeMap<NodeId, usize>,
    ops: &mut Vec<NodeOp>,
) -> bool {
    let mut running = d.repairs.len();
    let mut needed = false;
    for g in d.groups.values() {
        if d.repairs.contains_key(&g.id) || d.is_moving(g.id) {
            continue;
        }
        let Some(op) = voter_repair(d, g, counts) else {
            continue;
        };
        needed = true;
        if running < config.repair_parallel {
            running += 1;
            ops.push(op);
        }
    }
    needed
}

/// The repair of `g`'s first voter that needs one and can have one: a voter
/// on a dead or retiring node with a replacement, or one back on an empty
/// data dir; `None`: no such voter.
fn voter_repair(d: &Directory, g: &GroupInfo, counts: &BTreeMap<NodeId, usize>) -> Option<NodeOp> {
    for m in &g.members {
        let reason = match d.node_state(*m) {
            NodeState::Dead { .. } => RepairReason::Dead,
            NodeState::Decommissioning | NodeState::Decommissioned => RepairReason::Decommission,
            // Back on an empty data dir: demoted, caught up, a voter
            // again, in place (no spare node needed).
            NodeState::Live if d.rejoin_pending(*m, g.id) => {
                if !d.repairable(g.id, *m) {
                    continue;
                }
                return Some(NodeOp::StartRepair {
                    group: g.id,
                    remove: *m,
                    add: Some(*m),
                    reason: RepairReason::Rejoin,
                });
            }
            _ => continue,
        };
        if d.replacement(g.id, *m, counts).is_none() || !d.repairable(g.id, *m) {
            continue; // Under-replicated: reported, not guessed.
        }
        return Some(NodeOp::StartRepair {
            group: g.id,
            remove: *m,
            add: None,
            reason,
        });
    }
    None
}

/// Add to `ops` a `RejoinDone` for each rejoining node's pending group that
/// it no longer votes in and nothing may make it vote in again.
fn plan_rejoins_done(d: &Directory, ops: &mut Vec<NodeOp>) {
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
}

/// One replica to move from the fullest to the emptiest live node of the
/// first region whose counts differ by two or more and that has a group to
/// move; `None`: the regions are even.
fn plan_rebalance(d: &Directory, counts: &BTreeMap<NodeId, usize>) -> Option<NodeOp> {
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
            // One at a time: counts change with it.
            return Some(NodeOp::StartRepair {
                group: g.id,
                remove: from,
                add: Some(to),
                reason: RepairReason::Rebalance,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use seatfence_core::{GroupInfo, NodeInfo, RegionId};

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
                    format_max: seatfence_core::format::newest(),
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

    fn config() -> MovesConfig {
        MovesConfig {
            suspect_after_ms: 1_000,
            dead_after_ms: 5_000,
            ..MovesConfig::default()
        }
    }

    fn silent(nodes: &[(u64, u64)]) -> Observed {
        Observed {
            silent_ms: nodes.iter().map(|(n, ms)| (NodeId(*n), *ms)).collect(),
            ..Observed::default()
        }
    }

    fn set(node: u64, state: NodeState) -> NodeOp {
        NodeOp::SetState {
            node: NodeId(node),
            state,
        }
    }

    #[test]
    fn silence_makes_a_node_suspect_then_dead_and_an_answer_live_again() {
        let mut d = dir(0, true);
        let dead = NodeState::Dead { declared: false };
        // Node 2 silent past suspect, node 3 past dead, node 4 briefly.
        let ops = plan_states(&d, &silent(&[(2, 1_500), (3, 6_000), (4, 10)]), &config());
        assert_eq!(ops, vec![set(2, NodeState::Suspect), set(3, dead)]);
        // Recorded so; node 3 answers; node 2 still silent but below the
        // dead threshold: unchanged.
        d.node_states.insert(NodeId(2), NodeState::Suspect);
        d.node_states.insert(NodeId(3), dead);
        let ops = plan_states(&d, &silent(&[(2, 1_500)]), &config());
        assert_eq!(ops, vec![set(3, NodeState::Live)]);
    }

    #[test]
    fn silence_never_lowers_a_state_and_operator_states_are_kept() {
        let mut d = dir(0, true);
        // A new leader has seen node 2 silent only briefly: dead stays dead.
        d.node_states
            .insert(NodeId(2), NodeState::Dead { declared: false });
        // Declared dead and decommissioning nodes that answer stay so.
        d.node_states
            .insert(NodeId(3), NodeState::Dead { declared: true });
        d.node_states.insert(NodeId(4), NodeState::Decommissioning);
        let ops = plan_states(&d, &silent(&[(2, 1_500)]), &config());
        assert!(ops.is_empty(), "{ops:?}");
    }

    #[test]
    fn a_dead_directory_voter_gives_its_vote_to_a_live_node_of_its_region_first() {
        let mut d = dir(0, true);
        d.nodes.insert(
            NodeId(5),
            NodeInfo {
                id: NodeId(5),
                region: RegionId::from("b"),
                grpc_addr: "127.0.0.1:7005".into(),
                incarnation: 0,
                format_max: seatfence_core::format::newest(),
            },
        );
        d.node_states
            .insert(NodeId(2), NodeState::Dead { declared: false });
        let observed = Observed {
            directory_voters: BTreeSet::from([1, 2, 3]),
            ..Observed::default()
        };
        // Node 4 (region a, like node 2) before node 5 (region b).
        assert_eq!(
            plan_membership(&d, &observed),
            vec![MembershipAction::ReplaceDirectoryVoter { remove: 2, add: 4 }]
        );
        // No live node outside the voters: reported, nothing changed.
        d.node_states
            .insert(NodeId(4), NodeState::Dead { declared: true });
        d.node_states.insert(NodeId(5), NodeState::Suspect);
        assert_eq!(
            plan_membership(&d, &observed),
            vec![MembershipAction::NoDirectoryVoterFor(2)]
        );
    }

    #[test]
    fn an_emptied_decommissioning_node_is_decommissioned_and_stops_learning_the_directory() {
        // Node 4 holds no replica; node 3 holds three.
        let mut d = dir(3, true);
        d.node_states.insert(NodeId(3), NodeState::Decommissioning);
        d.node_states.insert(NodeId(4), NodeState::Decommissioning);
        let mut observed = Observed {
            directory_voters: BTreeSet::from([1, 2, 4]),
            directory_learners: BTreeSet::from([3]),
            ..Observed::default()
        };
        // Node 4 still votes in group 0: first its vote goes (to no one
        // here: 1 and 2 vote already, 3 is leaving), not decommissioned yet.
        assert_eq!(
            plan_membership(&d, &observed),
            vec![MembershipAction::NoDirectoryVoterFor(4)]
        );
        observed.directory_voters = BTreeSet::from([1, 2]);
        assert_eq!(
            plan_membership(&d, &observed),
            vec![MembershipAction::Decommissioned(NodeId(4))]
        );
        // Decommissioned, still a learner: it stops receiving the directory.
        d.node_states.insert(NodeId(4), NodeState::Decommissioned);
        observed.directory_learners.insert(4);
        assert_eq!(
            plan_membership(&d, &observed),
            vec![MembershipAction::RemoveDirectoryLearners(vec![4])]
        );
    }
}
