//! Ownership moves (DESIGN §6), as the directory records them.
//!
//! ```text
//!  Start ──▶ add_learners ──▶ change_membership ──▶ transfer_leader
//!              │ (abortable)      ──▶ bump_epoch ──▶ update_directory ──▶ done
//!              ▼
//!           aborted ──(learners removed)──▶ cleaned
//! ```
//!
//! The directory is the only place a move's progress lives: a coordinator
//! (any node leading the directory) reads the step, performs it (every step
//! is idempotent), then advances the step with a compare-and-set
//! ([`MoveOp::Advance`] names the step it expects), so a coordinator that
//! was replaced and wakes up late can never move a move backwards, and an
//! abort can never overtake the membership change: whichever of the two
//! commits first wins, on every replica.
//!
//! This file defines the move records, steps and operations; `apply.rs`
//! applies one operation to the directory (`Directory::apply_move`).

mod apply;

use serde::{Deserialize, Serialize};

use crate::ids::{Epoch, EventId, GroupId, NodeId, RegionId};

/// The step a running move is at: the step being performed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MoveStep {
    /// Step 2: the target nodes join as learners and catch up.
    AddLearners,
    /// Step 3: joint membership change to the target voters.
    ChangeMembership,
    /// Step 4: leadership into the target region (the only write pause).
    TransferLeader,
    /// Step 5: the new leader commits `BumpEpoch(epoch + 1, owner = to)`.
    BumpEpoch,
    /// Step 6: the directory records the new epoch and owner.
    UpdateDirectory,
    /// Finished (the old replicas drop their data after a grace period).
    Done,
}

impl MoveStep {
    /// Every step, in order.
    pub const ALL: [MoveStep; 6] = [
        MoveStep::AddLearners,
        MoveStep::ChangeMembership,
        MoveStep::TransferLeader,
        MoveStep::BumpEpoch,
        MoveStep::UpdateDirectory,
        MoveStep::Done,
    ];

    /// The name in the API (`step` of `GET /v1/admin/moves/{id}`).
    pub fn name(self) -> &'static str {
        match self {
            MoveStep::AddLearners => "add_learners",
            MoveStep::ChangeMembership => "change_membership",
            MoveStep::TransferLeader => "transfer_leader",
            MoveStep::BumpEpoch => "bump_epoch",
            MoveStep::UpdateDirectory => "update_directory",
            MoveStep::Done => "done",
        }
    }

    /// 1-based position among the steps (for progress bars).
    pub fn number(self) -> usize {
        MoveStep::ALL
            .iter()
            .position(|s| *s == self)
            .expect("every step is listed")
            + 1
    }

    /// The step after this one.
    pub fn next(self) -> MoveStep {
        MoveStep::ALL
            .get(self.number())
            .copied()
            .unwrap_or(MoveStep::Done)
    }

    /// A move can be aborted only before its membership change starts.
    pub fn abortable(self) -> bool {
        self <= MoveStep::AddLearners
    }
}

/// Whether a move runs, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MoveState {
    /// In progress at its `step`.
    Running,
    /// Finished: the route has the new epoch and owner.
    Done,
    /// Aborted before its membership change; the route is unchanged.
    Aborted,
    /// Given up on; `reason` says why (no [`MoveOp`] sets this state today).
    Failed,
}

impl MoveState {
    /// The name in the API (`state` of `GET /v1/admin/moves/{id}`).
    pub fn name(self) -> &'static str {
        match self {
            MoveState::Running => "running",
            MoveState::Done => "done",
            MoveState::Aborted => "aborted",
            MoveState::Failed => "failed",
        }
    }
}

/// One ownership move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRecord {
    /// The move's id (never 0).
    pub move_id: u64,
    /// The event moved.
    pub event_id: EventId,
    /// The event's group.
    pub group: GroupId,
    /// The region that owned the event when the move started.
    pub from_region: RegionId,
    /// The region that owns it once the move is done.
    pub to_region: RegionId,
    /// The event's epoch when the move started; the move ends at `+1`.
    pub from_epoch: Epoch,
    /// The group's voters before the move.
    pub from_members: Vec<NodeId>,
    /// The group's voters after it (placed in `to_region` at the start).
    pub to_members: Vec<NodeId>,
    /// The step it is at (`Done` once finished; an aborted move keeps its last).
    pub step: MoveStep,
    /// Running, or how it ended.
    pub state: MoveState,
    /// When it started: the proposer's clock, in ms since the Unix epoch.
    pub started_ms: u64,
    /// When the step last changed.
    pub updated_ms: u64,
    /// When each step was entered, in order (`(step, at_ms)`).
    pub history: Vec<(MoveStep, u64)>,
    /// Who asked (the operator's token `sub`).
    pub actor: String,
    /// Why the move was aborted or failed.
    pub reason: Option<String>,
    /// The id of the request that started it (see [`MoveOp::Start`]).
    #[serde(default)]
    pub request: String,
    /// Aborted moves: the learners it added have been removed again.
    pub cleaned: bool,
    /// How long the group had no leader in the target region able to take
    /// writes at the new epoch: from the membership change's commit (when
    /// the old leader hands over) to the bump's commit, as the coordinator
    /// measured it.
    pub pause_ms: Option<u64>,
}

impl MoveRecord {
    /// Nodes that host a replica only because of this move (learners that
    /// are not voters yet).
    pub fn joining(&self) -> Vec<NodeId> {
        self.to_members
            .iter()
            .filter(|n| !self.from_members.contains(n))
            .copied()
            .collect()
    }

    /// Whether the move is still in progress.
    pub fn is_running(&self) -> bool {
        self.state == MoveState::Running
    }

    /// Milliseconds from start to the last change.
    pub fn duration_ms(&self) -> u64 {
        self.updated_ms.saturating_sub(self.started_ms)
    }
}

/// What the directory is asked to do with moves. `at_ms` (in
/// [`crate::Command::Move`]) is the caller's clock, recorded, never compared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoveOp {
    /// Step 1: record the move, mark the event `moving`, place the target
    /// voters. Refused while another move of the event runs.
    Start {
        /// The event to move.
        event_id: EventId,
        /// The region to give it to.
        to_region: RegionId,
        /// Who asked (the operator's token `sub`).
        actor: String,
        /// The request's id: a start re-sent with the same id (a retry
        /// after its commit, or the same Idempotency-Key) answers the move
        /// it started instead of `move_in_progress`.
        request: String,
    },
    /// Advance `move_id` from `from` to the next step, only if it is at
    /// `from` and running. `pause_ms` is recorded when given.
    Advance {
        /// The move to advance.
        move_id: u64,
        /// The step it must be at now.
        from: MoveStep,
        /// The write pause the coordinator measured, in ms, if it did.
        pause_ms: Option<u64>,
    },
    /// Step 6: the new epoch is committed in the event group: record it,
    /// the owner and the voters, mark the event active, the move done.
    Finish {
        /// The move to finish.
        move_id: u64,
        /// The epoch committed in the event group (must be `from_epoch + 1`).
        epoch: Epoch,
    },
    /// Abort a running move before its membership change.
    Abort {
        /// The move to abort.
        move_id: u64,
        /// Why, recorded in [`MoveRecord::reason`].
        reason: String,
    },
    /// An aborted move's learners are gone.
    Cleaned {
        /// The aborted move whose learners were removed.
        move_id: u64,
    },
}

/// Why the directory refused a [`MoveOp`]: a stable code and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRefused {
    /// A stable snake_case code (`move_in_progress`, `step_mismatch`, …).
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// The move as it stands, when there is one.
    pub current: Option<Box<MoveRecord>>,
}

impl MoveRefused {
    /// A refusal with `code` and `message`, naming no move.
    pub fn new(code: &str, message: impl Into<String>) -> MoveRefused {
        MoveRefused {
            code: code.to_string(),
            message: message.into(),
            current: None,
        }
    }

    fn with(mut self, m: &MoveRecord) -> MoveRefused {
        self.current = Some(Box::new(m.clone()));
        self
    }
}

impl crate::directory::Directory {
    /// The running move of `group`, if any.
    pub fn running_move_of(&self, group: GroupId) -> Option<&MoveRecord> {
        self.moves
            .values()
            .find(|m| m.group == group && m.is_running())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::{Directory, EventRoute, GroupInfo, NodeInfo, RouteState};
    use crate::inventory::Survival;

    fn dir() -> Directory {
        let mut d = Directory::default();
        for (id, region) in [(1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "b"), (6, "b")] {
            d.nodes.insert(
                NodeId(id),
                NodeInfo {
                    id: NodeId(id),
                    region: RegionId::from(region),
                    grpc_addr: format!("127.0.0.1:{}", 7000 + id),
                    incarnation: 0,
                    format_max: crate::format::newest(),
                },
            );
        }
        d.groups.insert(
            GroupId(1),
            GroupInfo {
                id: GroupId(1),
                members: vec![NodeId(1), NodeId(2), NodeId(3)],
            },
        );
        d.events.insert(
            EventId("e".into()),
            EventRoute {
                event_id: EventId("e".into()),
                group: GroupId(1),
                home_region: "a".into(),
                owner_region: "a".into(),
                epoch: Epoch(1),
                survival: Survival::Zone,
                state: RouteState::Active,
            },
        );
        d
    }

    fn start(d: &mut Directory, to: &str) -> Result<MoveRecord, MoveRefused> {
        d.apply_move(
            &MoveOp::Start {
                event_id: EventId("e".into()),
                to_region: to.into(),
                actor: "op".into(),
                request: format!("r{}", d.moves.len()),
            },
            10,
            &mut Vec::new(),
        )
    }

    fn advance(d: &mut Directory, id: u64, from: MoveStep) -> Result<MoveRecord, MoveRefused> {
        d.apply_move(
            &MoveOp::Advance {
                move_id: id,
                from,
                pause_ms: None,
            },
            20,
            &mut Vec::new(),
        )
    }

    #[test]
    fn a_move_runs_its_steps_in_order_and_updates_the_route() {
        let mut d = dir();
        let m = start(&mut d, "b").unwrap();
        assert_eq!(m.to_members.len(), 3);
        assert!(m.to_members.iter().all(|n| n.0 >= 4), "{m:?}");
        assert_eq!(m.joining(), m.to_members);
        assert_eq!(
            start(&mut d, "b").unwrap_err().code,
            "move_in_progress",
            "one move at a time"
        );
        let mut step = MoveStep::AddLearners;
        while step < MoveStep::UpdateDirectory {
            // A late coordinator repeating an older step changes nothing.
            if step > MoveStep::AddLearners {
                assert_eq!(
                    advance(&mut d, m.move_id, MoveStep::AddLearners)
                        .unwrap_err()
                        .code,
                    "step_mismatch"
                );
            }
            step = advance(&mut d, m.move_id, step).unwrap().step;
        }
        let abort = MoveOp::Abort {
            move_id: m.move_id,
            reason: "late".into(),
        };
        assert_eq!(
            d.apply_move(&abort, 30, &mut Vec::new()).unwrap_err().code,
            "move_not_abortable"
        );
        let fin = MoveOp::Finish {
            move_id: m.move_id,
            epoch: Epoch(2),
        };
        let done = d.apply_move(&fin, 40, &mut Vec::new()).unwrap();
        assert_eq!(done.state, MoveState::Done);
        let route = &d.events[&EventId("e".into())];
        assert_eq!(
            (route.epoch, route.owner_region.0.as_str(), route.state),
            (Epoch(2), "b", RouteState::Active)
        );
        assert_eq!(d.groups[&GroupId(1)].members, m.to_members);
        // Finishing twice is harmless; a new move can start from the new owner.
        assert_eq!(d.apply_move(&fin, 50, &mut Vec::new()).unwrap(), done);
        assert_eq!(start(&mut d, "b").unwrap_err().code, "already_owner");
        assert_eq!(start(&mut d, "a").unwrap().from_epoch, Epoch(2));
    }

    #[test]
    fn abort_wins_only_before_the_membership_change() {
        let mut d = dir();
        let m = start(&mut d, "b").unwrap();
        let abort = MoveOp::Abort {
            move_id: m.move_id,
            reason: "operator".into(),
        };
        let a = d.apply_move(&abort, 30, &mut Vec::new()).unwrap();
        assert_eq!(a.state, MoveState::Aborted);
        assert_eq!(
            advance(&mut d, m.move_id, MoveStep::AddLearners)
                .unwrap_err()
                .code,
            "step_mismatch",
            "the coordinator cannot go on after an abort"
        );
        let route = &d.events[&EventId("e".into())];
        assert_eq!((route.epoch, route.state), (Epoch(1), RouteState::Active));
        assert_eq!(d.groups[&GroupId(1)].members.len(), 3);
        assert!(d.groups[&GroupId(1)].members.iter().all(|n| n.0 <= 3));
    }

    #[test]
    fn a_region_survival_move_keeps_the_voters_and_leads_from_the_target() {
        let mut d = dir();
        d.groups.get_mut(&GroupId(1)).unwrap().members = vec![NodeId(1), NodeId(2), NodeId(4)];
        d.events.get_mut(&EventId("e".into())).unwrap().survival = Survival::Region;
        let m = start(&mut d, "b").unwrap();
        assert_eq!(
            m.to_members[0],
            NodeId(4),
            "the target region's voter first"
        );
        let mut same = m.to_members.clone();
        same.sort();
        assert_eq!(same, vec![NodeId(1), NodeId(2), NodeId(4)]);
        assert!(m.joining().is_empty(), "no learners to add");
        // A drained voter in the target region is not put first.
        let mut d = dir();
        d.groups.get_mut(&GroupId(1)).unwrap().members = vec![NodeId(1), NodeId(4), NodeId(5)];
        d.events.get_mut(&EventId("e".into())).unwrap().survival = Survival::Region;
        d.drained.insert(NodeId(4));
        assert_eq!(start(&mut d, "b").unwrap().to_members[0], NodeId(5));
    }

    #[test]
    fn a_move_into_an_unknown_or_small_region_is_refused() {
        let mut d = dir();
        assert_eq!(start(&mut d, "zz").unwrap_err().code, "unknown_region");
        d.nodes.remove(&NodeId(6));
        assert_eq!(start(&mut d, "b").unwrap_err().code, "placement_failed");
        assert_eq!(start(&mut d, "a").unwrap_err().code, "already_owner");
        assert!(d.moves.is_empty());
    }

    #[test]
    fn a_start_sent_again_answers_the_move_it_started() {
        let mut d = dir();
        let op = |request: &str| MoveOp::Start {
            event_id: EventId("e".into()),
            to_region: "b".into(),
            actor: "op".into(),
            request: request.into(),
        };
        let first = d.apply_move(&op("k1"), 10, &mut Vec::new()).unwrap();
        // Re-sent after its commit (same request id): the same move.
        assert_eq!(d.apply_move(&op("k1"), 11, &mut Vec::new()).unwrap(), first);
        // Another request while it runs is refused.
        let other = d.apply_move(&op("k2"), 12, &mut Vec::new()).unwrap_err();
        assert_eq!(other.code, "move_in_progress");
        assert_eq!(d.moves.len(), 1);
    }
}
