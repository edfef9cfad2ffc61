//! What the move coordinator does next, decided from the directory alone:
//! which moves need a drive (`pending`) and what a move's recorded step
//! asks for (`plan_step`). The coordinator (`mod.rs`) carries it out at
//! the group's leader and records the step done.

use seatfence_core::{Directory, Epoch, GroupId, MoveRecord, MoveState, MoveStep, RegionId};

/// What performing a move's recorded step means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveAction {
    /// Aborted, not cleaned up: the nodes that were joining leave the
    /// group as learners, then the directory records it `Cleaned`.
    CleanUp {
        /// The moving event's group.
        group: GroupId,
        /// Node ids of the nodes that were joining.
        learners: Vec<u64>,
    },
    /// Step 2: the joining nodes (id, gRPC address) become learners; the
    /// step is done once every one is caught up.
    AddLearners {
        /// The moving event's group.
        group: GroupId,
        /// The joining nodes the directory knows: (node id, gRPC address).
        learners: Vec<(u64, String)>,
    },
    /// Step 3: exactly these voters (joint, then final).
    SetVoters {
        /// The moving event's group.
        group: GroupId,
        /// Node ids of the move's target voters.
        voters: Vec<u64>,
    },
    /// Step 4: one of `to` (target voters in the target region) leads;
    /// never a node in `avoid` (drained).
    TransferInto {
        /// The moving event's group.
        group: GroupId,
        /// Node ids of the target voters in the target region.
        to: Vec<u64>,
        /// Node ids that must not lead (drained).
        avoid: Vec<u64>,
    },
    /// Step 5: the group's leader commits the next epoch for its new owner.
    BumpEpoch {
        /// The next epoch: the move's `from_epoch` plus one.
        to: Epoch,
        /// The target region, the event's new owner.
        owner: RegionId,
    },
    /// Step 6: the directory records the new epoch and owner.
    Finish {
        /// The epoch the group committed at step 5 (`from_epoch` plus one).
        epoch: Epoch,
    },
    /// Nothing to do: done, or ended.
    Nothing,
}

/// The moves that need a drive: running ones, and aborted ones whose
/// learners are not cleaned up yet.
pub fn pending(d: &Directory) -> Vec<u64> {
    d.moves
        .values()
        .filter(|m| m.is_running() || (m.state == MoveState::Aborted && !m.cleaned))
        .map(|m| m.move_id)
        .collect()
}

/// What `m`'s recorded step asks for, with the directory `d` as it is now.
pub fn plan_step(d: &Directory, m: &MoveRecord) -> MoveAction {
    if m.state == MoveState::Aborted && !m.cleaned {
        return MoveAction::CleanUp {
            group: m.group,
            learners: m.joining().iter().map(|n| n.0).collect(),
        };
    }
    if !m.is_running() {
        return MoveAction::Nothing;
    }
    let next = Epoch(m.from_epoch.0 + 1);
    match m.step {
        MoveStep::AddLearners => MoveAction::AddLearners {
            group: m.group,
            learners: m
                .joining()
                .iter()
                .filter_map(|n| d.nodes.get(n).map(|i| (n.0, i.grpc_addr.clone())))
                .collect(),
        },
        MoveStep::ChangeMembership => MoveAction::SetVoters {
            group: m.group,
            voters: m.to_members.iter().map(|n| n.0).collect(),
        },
        // The voters that may lead: those in the target region (all of
        // them for zone survival; one for region survival).
        MoveStep::TransferLeader => MoveAction::TransferInto {
            group: m.group,
            to: m
                .to_members
                .iter()
                .filter(|n| d.nodes.get(n).is_some_and(|i| i.region == m.to_region))
                .map(|n| n.0)
                .collect(),
            avoid: d.not_leading().iter().map(|n| n.0).collect(),
        },
        MoveStep::BumpEpoch => MoveAction::BumpEpoch {
            to: next,
            owner: m.to_region.clone(),
        },
        MoveStep::UpdateDirectory => MoveAction::Finish { epoch: next },
        MoveStep::Done => MoveAction::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seatfence_core::{EventId, NodeId, NodeInfo};

    /// Nodes 1-3 in us-east, 4-6 in eu-west.
    fn directory() -> Directory {
        let mut d = Directory::default();
        for id in 1..=6 {
            let region = if id <= 3 { "us-east" } else { "eu-west" };
            d.nodes.insert(
                NodeId(id),
                NodeInfo {
                    id: NodeId(id),
                    region: RegionId::from(region),
                    grpc_addr: format!("127.0.0.1:{}", 7000 + id),
                    incarnation: 0,
                    format_max: seatfence_core::format::newest(),
                },
            );
        }
        d
    }

    /// A move of group 7 from nodes 1-3 (us-east) to 1, 4, 5 (eu-west
    /// leads), at `step`.
    fn record(step: MoveStep) -> MoveRecord {
        let nodes = |ids: &[u64]| ids.iter().map(|i| NodeId(*i)).collect();
        MoveRecord {
            move_id: 1,
            event_id: EventId("e1".into()),
            group: GroupId(7),
            from_region: RegionId::from("us-east"),
            to_region: RegionId::from("eu-west"),
            from_epoch: Epoch(3),
            from_members: nodes(&[1, 2, 3]),
            to_members: nodes(&[1, 4, 5]),
            step,
            state: MoveState::Running,
            started_ms: 0,
            updated_ms: 0,
            history: Vec::new(),
            actor: "op".into(),
            reason: None,
            request: String::new(),
            cleaned: false,
            pause_ms: None,
        }
    }

    #[test]
    fn each_step_acts_on_the_joining_nodes_the_target_voters_and_the_next_epoch() {
        let d = directory();
        let g = GroupId(7);
        assert_eq!(
            plan_step(&d, &record(MoveStep::AddLearners)),
            MoveAction::AddLearners {
                group: g,
                learners: vec![(4, "127.0.0.1:7004".into()), (5, "127.0.0.1:7005".into())],
            }
        );
        assert_eq!(
            plan_step(&d, &record(MoveStep::ChangeMembership)),
            MoveAction::SetVoters {
                group: g,
                voters: vec![1, 4, 5],
            }
        );
        let owner = RegionId::from("eu-west");
        assert_eq!(
            plan_step(&d, &record(MoveStep::BumpEpoch)),
            MoveAction::BumpEpoch {
                to: Epoch(4),
                owner
            }
        );
        assert_eq!(
            plan_step(&d, &record(MoveStep::UpdateDirectory)),
            MoveAction::Finish { epoch: Epoch(4) }
        );
        assert_eq!(plan_step(&d, &record(MoveStep::Done)), MoveAction::Nothing);
    }

    #[test]
    fn leadership_goes_only_to_target_voters_in_the_target_region_never_a_drained_one() {
        let mut d = directory();
        d.drained.insert(NodeId(4));
        // Node 1 stays a voter but is in us-east: not a target to lead.
        assert_eq!(
            plan_step(&d, &record(MoveStep::TransferLeader)),
            MoveAction::TransferInto {
                group: GroupId(7),
                to: vec![4, 5],
                avoid: vec![4],
            }
        );
    }

    #[test]
    fn an_aborted_move_is_cleaned_up_once_and_an_ended_one_needs_no_drive() {
        let mut d = directory();
        let mut m = record(MoveStep::TransferLeader);
        m.state = MoveState::Aborted;
        assert_eq!(
            plan_step(&d, &m),
            MoveAction::CleanUp {
                group: GroupId(7),
                learners: vec![4, 5],
            }
        );
        d.moves.insert(1, m.clone());
        assert_eq!(pending(&d), vec![1]);
        m.cleaned = true;
        assert_eq!(plan_step(&d, &m), MoveAction::Nothing);
        d.moves.insert(1, m.clone());
        let mut running = record(MoveStep::AddLearners);
        running.move_id = 2;
        d.moves.insert(2, running);
        let mut failed = record(MoveStep::AddLearners);
        failed.move_id = 3;
        failed.state = MoveState::Failed;
        d.moves.insert(3, failed);
        assert_eq!(pending(&d), vec![2]);
    }
}
