//! Node lifecycle in the directory: each node's state, and the replica
//! replacements (repairs) that keep every group at full strength.
//!
//! ```text
//!   live ⇄ suspect ─▶ dead ─(answers again, unless an operator declared it)─▶ live
//!   live/suspect ─decommission─▶ decommissioning ─(no replica left)─▶ decommissioned
//!                  decommissioning ─recommission─▶ live
//! ```
//!
//! A [`Repair`] replaces one voter of one group (`remove`) with a node of
//! the same region (`add`): the new node joins as a learner, catches up,
//! the voters change in one membership change, and only then does the
//! directory record the new members. At most one repair per group (they
//! are keyed by group), never while the group's event is moving (and no
//! move starts while a repair runs), and the owner region and epoch never
//! change: a repair is not a move.
//!
//! The states `live`, `suspect` and `dead` are what the directory leader's
//! pings saw ([`NodeOp::SetState`]); an operator may declare a node dead at
//! once. Everything here is pure: the directory leader's lifecycle task
//! (`seatfence_duties::directory::lifecycle`) proposes the operations and performs the
//! membership changes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::directory::Directory;
use crate::ids::{GroupId, NodeId};
mod apply;

/// A node's state in the directory. A node with no record is `Live`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    /// In service and answering the directory's leader (a node with no record).
    Live,
    /// Unreachable from the directory's leader past `suspect_after_ms`.
    Suspect,
    /// Unreachable past `dead_after_ms`, or declared dead by an operator
    /// (`declared`): its replicas are replaced.
    Dead {
        /// An operator declared it dead; liveness never brings it back.
        declared: bool,
    },
    /// Being retired: its replicas are moved off, it leads nothing.
    Decommissioning,
    /// Retired: it holds no replica and may be deleted.
    Decommissioned,
}

impl NodeState {
    /// The name in the API (`state` of a node in `GET /v1/admin/cluster`).
    pub fn name(self) -> &'static str {
        match self {
            NodeState::Live => "live",
            NodeState::Suspect => "suspect",
            NodeState::Dead { .. } => "dead",
            NodeState::Decommissioning => "decommissioning",
            NodeState::Decommissioned => "decommissioned",
        }
    }

    /// New replicas may be placed on a node in this state.
    pub fn takes_replicas(self) -> bool {
        self == NodeState::Live
    }

    /// A node in this state is refused everything on the node plane, and
    /// nothing is sent to it: decommissioned, or declared dead by an
    /// operator (a node that only went silent may come back).
    pub fn is_retired(self) -> bool {
        matches!(
            self,
            NodeState::Decommissioned | NodeState::Dead { declared: true }
        )
    }

    /// A voter on a node in this state is replaced.
    pub fn needs_repair(self) -> bool {
        matches!(
            self,
            NodeState::Dead { .. } | NodeState::Decommissioning | NodeState::Decommissioned
        )
    }
}

/// Why a replica is being replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RepairReason {
    /// Its node is dead.
    Dead,
    /// Its node is being decommissioned.
    Decommission,
    /// Its node holds more replicas than the others of its region (a node
    /// added to the region takes its share).
    Rebalance,
    /// Its node came back on an empty data dir (`--rejoin-empty`): the
    /// same node is demoted to a learner, catches up, and is made a voter
    /// again (`remove == add`; see [`Rejoin`]).
    Rejoin,
}

impl RepairReason {
    /// The name in the API (`reason` of a repair in `GET /v1/admin/cluster`).
    pub fn name(self) -> &'static str {
        match self {
            RepairReason::Dead => "dead",
            RepairReason::Decommission => "decommission",
            RepairReason::Rebalance => "rebalance",
            RepairReason::Rejoin => "rejoin",
        }
    }
}

/// The step a repair is at: the step being performed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RepairStep {
    /// `add` joins as a learner and catches up.
    AddLearner,
    /// The voters change from `remove` to `add` (then [`NodeOp::FinishRepair`]).
    ChangeMembership,
}

impl RepairStep {
    /// The name in the API (`step` of a repair in `GET /v1/admin/cluster`).
    pub fn name(self) -> &'static str {
        match self {
            RepairStep::AddLearner => "add_learner",
            RepairStep::ChangeMembership => "change_membership",
        }
    }
}

/// One running replacement of a voter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repair {
    /// The group repaired (at most one repair per group).
    pub group: GroupId,
    /// The voter being replaced.
    pub remove: NodeId,
    /// The node replacing it, of the same region (`remove` itself for a rejoin).
    pub add: NodeId,
    /// Why the voter is replaced.
    pub reason: RepairReason,
    /// The step being performed now.
    pub step: RepairStep,
    /// When it started: the proposer's clock, in ms since the Unix epoch.
    pub started_ms: u64,
}

impl Repair {
    /// The group's voters once this repair is done: `members` with
    /// `remove` replaced by `add`, in place.
    pub fn members_after(&self, members: &[NodeId]) -> Vec<NodeId> {
        members
            .iter()
            .map(|m| if *m == self.remove { self.add } else { *m })
            .collect()
    }
}

/// A node that came back under its id on an empty data dir, started with
/// `--rejoin-empty`: its new store incarnation, and the groups whose
/// replica on it must not vote yet. Each of those groups demotes the node
/// to a learner, lets it catch up and makes it a voter again (a
/// [`RepairReason::Rejoin`] repair), or drops it (a move or another repair
/// that removes it); group 0 by replacing it as a directory voter. Until
/// then its replica refuses every vote, pre-vote and leadership transfer
/// and never campaigns, so the log it forgot cannot elect anyone. Kept
/// once done (`pending` empty), so the node can tell "settled" from "not
/// heard of yet" in a lagging directory replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejoin {
    /// The store incarnation of the node's new data dir (never 0).
    pub incarnation: u64,
    /// Groups still waiting for the node to be a caught-up voter again or
    /// gone (group 0 included at the start); empty once the rejoin is done.
    pub pending: std::collections::BTreeSet<GroupId>,
    /// When it started: the proposer's clock, in ms since the Unix epoch.
    pub started_ms: u64,
    /// The directory's leader took the node out of group 0's voters (or is
    /// about to): it must be made a voter again once caught up.
    pub directory_demoted: bool,
    /// Per event group, the term at which the group's leader took the node
    /// out of its voters. Until a group has one, the node's replica takes
    /// no append or snapshot at all; then only from that term on. A node
    /// that forgot its term must not acknowledge a deposed leader's
    /// entries: that leader could count it toward a quorum its successor
    /// already overruled.
    #[serde(default)]
    pub floors: BTreeMap<GroupId, u64>,
}

impl Rejoin {
    /// The lowest term whose appends `group`'s replica may take while the
    /// rejoin is pending (`None`: none yet).
    pub fn floor(&self, group: GroupId) -> Option<u64> {
        self.floors.get(&group).copied()
    }
}

/// What the directory is asked to do with node states and repairs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeOp {
    /// Liveness as the directory's leader saw it (`live`, `suspect`,
    /// `dead`), or an operator declaring a node dead (`Dead{declared}`).
    /// Liveness never overrides a decommission or a declared death.
    SetState {
        /// The node.
        node: NodeId,
        /// The state it should take.
        state: NodeState,
    },
    /// Retire `node`: refused unless every group with a voter there has a
    /// live node of the same region to go to.
    Decommission {
        /// The node to retire.
        node: NodeId,
    },
    /// Undo a decommission that has not completed.
    Recommission {
        /// The decommissioning node to put back in service.
        node: NodeId,
    },
    /// A decommissioning node holds no replica and no directory vote:
    /// mark it decommissioned.
    Decommissioned {
        /// The decommissioning node, now empty.
        node: NodeId,
    },
    /// Replace `remove` in `group`'s voters: with `add`, or (None) the
    /// least loaded live node of `remove`'s region that is not a member.
    StartRepair {
        /// The group to repair.
        group: GroupId,
        /// The voter to replace.
        remove: NodeId,
        /// The node to replace it with; `None`: the directory picks one (`remove` for a rejoin).
        add: Option<NodeId>,
        /// Why the voter is replaced.
        reason: RepairReason,
    },
    /// Advance `group`'s repair from `from` (compare-and-set).
    AdvanceRepair {
        /// The group whose repair advances.
        group: GroupId,
        /// The step the repair must be at (only `AddLearner` advances).
        from: RepairStep,
    },
    /// The voters changed: record the group's new members, end the repair.
    FinishRepair {
        /// The group whose repair ends.
        group: GroupId,
    },
    /// Give up a repair whose new node is no longer live. The caller
    /// removes the learner first and cancels only while the group's voters
    /// are still the old ones (as its leader reports them).
    CancelRepair {
        /// The group whose repair is dropped.
        group: GroupId,
    },
    /// `node`, known to the directory, came back on an empty data dir with
    /// store incarnation `incarnation` (`--rejoin-empty`): record it, and
    /// make every group it is a voter of (and group 0) pending until it is
    /// back as a caught-up voter or gone from it. Refused for a retired
    /// node (`node_retired`). Repeating it with the same incarnation
    /// changes nothing.
    Rejoin {
        /// The node that came back.
        node: NodeId,
        /// The store incarnation of its new data dir (0 is refused).
        incarnation: u64,
    },
    /// `group` no longer waits for `node`'s rejoin: the node is not a voter
    /// of it any more (or, for group 0, not a directory voter, or one
    /// again after catching up).
    RejoinDone {
        /// The rejoining node.
        node: NodeId,
        /// The group that stops waiting for it.
        group: GroupId,
    },
    /// The directory's leader is about to take rejoining `node` out of
    /// group 0's voters, to make it one again once caught up: recorded
    /// first, so a leader that takes over knows to.
    RejoinDirectoryDemoted {
        /// The rejoining node.
        node: NodeId,
    },
    /// `group`'s leader at `term` took rejoining `node` out of the group's
    /// voters: its replica may take appends from that term on (see
    /// [`Rejoin::floors`]). The first floor stays.
    RejoinDemoted {
        /// The rejoining node.
        node: NodeId,
        /// The group that took it out of its voters.
        group: GroupId,
        /// The Raft term of the group's leader that did.
        term: u64,
    },
}

/// The answer to a [`NodeOp`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeOpDone {
    /// The node's state afterwards.
    State(NodeState),
    /// The repair as it stands afterwards (`None`: finished or cancelled).
    Repair(Option<Repair>),
    /// The node's rejoin as it stands afterwards.
    Rejoin(Rejoin),
}

/// Why the directory refused a [`NodeOp`]: a stable code and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRefused {
    /// A stable snake_case code (`node_not_found`, `repair_in_progress`, …).
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
}

impl NodeRefused {
    /// A refusal with `code` and `message`.
    pub fn new(code: &str, message: impl Into<String>) -> NodeRefused {
        NodeRefused {
            code: code.to_owned(),
            message: message.into(),
        }
    }
}

impl Directory {
    /// `node`'s state (no record: live; an unknown node too).
    pub fn node_state(&self, node: NodeId) -> NodeState {
        self.node_states
            .get(&node)
            .copied()
            .unwrap_or(NodeState::Live)
    }

    /// Whether `node`'s replica of `group` must still refuse votes: the
    /// node rejoined on an empty data dir and `group` has not taken it back
    /// as a caught-up voter yet.
    pub fn rejoin_pending(&self, node: NodeId, group: GroupId) -> bool {
        self.rejoins
            .get(&node)
            .is_some_and(|r| r.pending.contains(&group))
    }

    /// Nodes that must not lead: drained ones, and those being retired,
    /// retired or dead, or rejoining. Leaderships they get are handed off.
    pub fn not_leading(&self) -> std::collections::BTreeSet<NodeId> {
        let retiring = self.node_states.iter().filter(|(_, s)| {
            matches!(
                s,
                NodeState::Decommissioning | NodeState::Decommissioned | NodeState::Dead { .. }
            )
        });
        let rejoining = self.rejoins.iter().filter(|(_, r)| !r.pending.is_empty());
        self.drained
            .iter()
            .copied()
            .chain(retiring.map(|(n, _)| *n))
            .chain(rejoining.map(|(n, _)| *n))
            .collect()
    }

    /// Replicas `node` holds or is receiving: groups it is a voter of,
    /// and those a running move or repair is adding it to.
    pub fn replica_count(&self, node: NodeId) -> usize {
        self.hosted_on(node).len()
    }

    /// Every node's replica count, in one pass over the groups.
    pub fn replica_counts(&self) -> BTreeMap<NodeId, usize> {
        let mut counts: BTreeMap<NodeId, usize> = self.nodes.keys().map(|n| (*n, 0)).collect();
        for g in self.groups.values() {
            for m in &g.members {
                *counts.entry(*m).or_default() += 1;
            }
        }
        for m in self.moves.values().filter(|m| m.is_running()) {
            for n in m.joining() {
                *counts.entry(n).or_default() += 1;
            }
        }
        for r in self.repairs.values() {
            *counts.entry(r.add).or_default() += 1;
        }
        counts
    }

    /// Where a replacement for `remove` in `group` goes: a live node of
    /// `remove`'s region that is not a member, holding the fewest replicas
    /// (lowest id on a tie; `counts` from [`Directory::replica_counts`]).
    /// `None`: no spare node (the group stays under-replicated).
    pub fn replacement(
        &self,
        group: GroupId,
        remove: NodeId,
        counts: &BTreeMap<NodeId, usize>,
    ) -> Option<NodeId> {
        let region = &self.nodes.get(&remove)?.region;
        let members = &self.groups.get(&group)?.members;
        self.nodes
            .values()
            .filter(|n| &n.region == region && !members.contains(&n.id))
            .filter(|n| self.node_state(n.id).takes_replicas())
            .min_by_key(|n| (counts.get(&n.id).copied().unwrap_or(0), n.id))
            .map(|n| n.id)
    }

    /// Whether a repair of `group` replacing `remove` can complete: every
    /// other voter is live or being retired (reachable), so both the old
    /// and the new configuration have a majority. A group that lost two
    /// voters cannot change its membership at all.
    pub fn repairable(&self, group: GroupId, remove: NodeId) -> bool {
        self.groups.get(&group).is_some_and(|g| {
            g.members.iter().filter(|m| **m != remove).all(|m| {
                matches!(
                    self.node_state(*m),
                    NodeState::Live | NodeState::Decommissioning
                )
            })
        })
    }

    /// Groups with a voter on a dead or retiring node that no repair is
    /// fixing: no spare node in its region, or too few live voters left to
    /// change membership. Shown, never guessed at.
    pub fn under_replicated(&self) -> Vec<GroupId> {
        let mut counts = None;
        self.groups
            .values()
            .filter(|g| !self.repairs.contains_key(&g.id))
            .filter(|g| {
                g.members.iter().any(|m| {
                    self.node_state(*m).needs_repair() && {
                        let counts = counts.get_or_insert_with(|| self.replica_counts());
                        self.replacement(g.id, *m, counts).is_none() || !self.repairable(g.id, *m)
                    }
                })
            })
            .map(|g| g.id)
            .collect()
    }

    /// Whether `group`'s event has a running move, or an aborted one
    /// whose learners are still being removed (a membership change too).
    pub fn is_moving(&self, group: GroupId) -> bool {
        self.moves.values().any(|m| {
            m.group == group
                && (m.is_running() || (m.state == crate::moves::MoveState::Aborted && !m.cleaned))
        })
    }
}
