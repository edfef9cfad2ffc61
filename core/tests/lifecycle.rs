//! Node lifecycle in the directory: states, decommission, repairs, and how
//! placement and moves respect them (through `State::apply`, as every
//! directory replica runs it).

use seatfence_core::inventory::Survival;
use seatfence_core::{
    Command, EventId, GroupId, MoveOp, NodeId, NodeInfo, NodeOp, NodeOpDone, NodeRefused,
    NodeState, RegionId, RepairReason, RepairStep, Response, State,
};

const DIR: GroupId = GroupId::DIRECTORY;

/// Nodes 1-3 in region a, 4-6 in b (and `extra` more in a: 7, 8, ...),
/// one zone-survival event in a (group 1).
fn cluster(extra: u64) -> State {
    let mut s = State::new(DIR);
    let ids = (1..=6).chain(7..7 + extra);
    for id in ids {
        let region = if (4..=6).contains(&id) { "b" } else { "a" };
        s.apply(
            DIR,
            &Command::RegisterNode(NodeInfo {
                id: NodeId(id),
                region: RegionId::from(region),
                grpc_addr: format!("127.0.0.1:{}", 7000 + id),
                incarnation: 0,
                format_max: seatfence_core::format::newest(),
            }),
        );
    }
    let r = s.apply(
        DIR,
        &Command::RegisterEvent {
            event_id: EventId("e1".into()),
            home_region: "a".into(),
            survival: Survival::Zone,
        },
    );
    assert!(matches!(r.response, Response::EventRegistered(_)), "{r:?}");
    s
}

fn node_op(s: &mut State, op: NodeOp) -> Result<NodeOpDone, NodeRefused> {
    match s.apply(DIR, &Command::Node { op, at_ms: 1 }).response {
        Response::Node(r) => r.map(|d| *d),
        other => panic!("answered {other:?}"),
    }
}

fn members(s: &State) -> Vec<u64> {
    let mut m: Vec<u64> = s.directory().groups[&GroupId(1)]
        .members
        .iter()
        .map(|n| n.0)
        .collect();
    m.sort_unstable();
    m
}

fn reloaded(s: &State) -> State {
    let mut loaded = State::new(DIR);
    for (k, v) in s.records() {
        loaded.load_record(&k, &v).unwrap();
    }
    loaded
}

#[test]
fn decommission_is_refused_without_a_spare_node_in_the_region() {
    let mut s = cluster(0);
    assert_eq!(members(&s), vec![1, 2, 3]);
    let e = node_op(&mut s, NodeOp::Decommission { node: NodeId(2) }).unwrap_err();
    assert_eq!(e.code, "no_spare_node", "{e:?}");
    assert_eq!(s.directory().node_state(NodeId(2)), NodeState::Live);
    // A node of region b holds no replica of group 1: it may go.
    let ok = node_op(&mut s, NodeOp::Decommission { node: NodeId(4) }).unwrap();
    assert_eq!(ok, NodeOpDone::State(NodeState::Decommissioning));
    let ok = node_op(&mut s, NodeOp::Decommissioned { node: NodeId(4) }).unwrap();
    assert_eq!(ok, NodeOpDone::State(NodeState::Decommissioned));
}

#[test]
fn a_decommission_replaces_the_voter_in_its_region_and_completes() {
    let mut s = cluster(1);
    node_op(&mut s, NodeOp::Decommission { node: NodeId(2) }).unwrap();
    // Not done while it holds a replica.
    let e = node_op(&mut s, NodeOp::Decommissioned { node: NodeId(2) }).unwrap_err();
    assert_eq!(e.code, "replicas_remain");
    let start = NodeOp::StartRepair {
        group: GroupId(1),
        remove: NodeId(2),
        add: None,
        reason: RepairReason::Decommission,
    };
    let Ok(NodeOpDone::Repair(Some(r))) = node_op(&mut s, start.clone()) else {
        panic!("repair not started");
    };
    assert_eq!((r.add, r.step), (NodeId(7), RepairStep::AddLearner));
    // Node 7 hosts the group (as a learner) while the repair runs.
    assert!(s.directory().hosted_on(NodeId(7)).contains(&GroupId(1)));
    // Starting it again answers it; another repair of the group is refused.
    assert_eq!(
        node_op(&mut s, start).unwrap(),
        NodeOpDone::Repair(Some(r.clone()))
    );
    let other = NodeOp::StartRepair {
        group: GroupId(1),
        remove: NodeId(3),
        add: None,
        reason: RepairReason::Dead,
    };
    assert_eq!(
        node_op(&mut s, other).unwrap_err().code,
        "repair_in_progress"
    );
    // Finish only after the membership step; the repair survives a reload.
    let finish = NodeOp::FinishRepair { group: GroupId(1) };
    assert_eq!(
        node_op(&mut s, finish.clone()).unwrap_err().code,
        "step_mismatch"
    );
    let mut s = reloaded(&s);
    assert_eq!(s.directory().repairs[&GroupId(1)], r);
    let advance = NodeOp::AdvanceRepair {
        group: GroupId(1),
        from: RepairStep::AddLearner,
    };
    node_op(&mut s, advance.clone()).unwrap();
    assert_eq!(node_op(&mut s, advance).unwrap_err().code, "step_mismatch");
    node_op(&mut s, finish).unwrap();
    assert_eq!(members(&s), vec![1, 3, 7]);
    assert!(s.directory().repairs.is_empty());
    let s = &mut reloaded(&s);
    assert_eq!(members(s), vec![1, 3, 7]);
    assert_eq!(
        node_op(s, NodeOp::Decommissioned { node: NodeId(2) }).unwrap(),
        NodeOpDone::State(NodeState::Decommissioned)
    );
    assert_eq!(
        node_op(s, NodeOp::Recommission { node: NodeId(2) })
            .unwrap_err()
            .code,
        "not_decommissioning"
    );
}

#[test]
fn liveness_never_overrides_an_operator_and_placement_skips_the_dead() {
    let mut s = cluster(1);
    let set = |node, state| NodeOp::SetState {
        node: NodeId(node),
        state,
    };
    // An operator declares dead only a node liveness holds suspect.
    let e = node_op(&mut s, set(7, NodeState::Dead { declared: true })).unwrap_err();
    assert_eq!(e.code, "node_alive");
    node_op(&mut s, set(7, NodeState::Suspect)).unwrap();
    node_op(&mut s, set(7, NodeState::Dead { declared: true })).unwrap();
    let e = node_op(&mut s, set(7, NodeState::Live)).unwrap_err();
    assert_eq!(e.code, "state_refused");
    // Node 7 was the spare of region a.
    assert_eq!(
        node_op(&mut s, NodeOp::Decommission { node: NodeId(3) })
            .unwrap_err()
            .code,
        "no_spare_node"
    );
    node_op(&mut s, NodeOp::Decommission { node: NodeId(4) }).unwrap();
    assert_eq!(
        node_op(&mut s, set(4, NodeState::Suspect))
            .unwrap_err()
            .code,
        "state_refused"
    );
    node_op(&mut s, NodeOp::Recommission { node: NodeId(4) }).unwrap();
    assert_eq!(s.directory().node_state(NodeId(4)), NodeState::Live);
    // Suspect nodes are used only when live ones run out; dead never.
    node_op(&mut s, set(1, NodeState::Suspect)).unwrap();
    let r = s.apply(
        DIR,
        &Command::RegisterEvent {
            event_id: EventId("e2".into()),
            home_region: "a".into(),
            survival: Survival::Zone,
        },
    );
    let Response::EventRegistered(route) = r.response else {
        panic!("{r:?}")
    };
    let mut m: Vec<u64> = s.directory().groups[&route.group]
        .members
        .iter()
        .map(|n| n.0)
        .collect();
    m.sort_unstable();
    assert_eq!(m, vec![1, 2, 3], "suspect 1 fills in for dead 7");
    node_op(&mut s, set(1, NodeState::Live)).unwrap();
    assert_eq!(s.directory().node_state(NodeId(1)), NodeState::Live);
    assert!(s.directory().not_leading().contains(&NodeId(7)));
    assert!(!s.directory().not_leading().contains(&NodeId(1)));
}

#[test]
fn repairs_and_moves_never_overlap() {
    let mut s = cluster(1);
    node_op(
        &mut s,
        NodeOp::SetState {
            node: NodeId(2),
            state: NodeState::Dead { declared: false },
        },
    )
    .unwrap();
    node_op(
        &mut s,
        NodeOp::StartRepair {
            group: GroupId(1),
            remove: NodeId(2),
            add: None,
            reason: RepairReason::Dead,
        },
    )
    .unwrap();
    let start = |s: &mut State| match s
        .apply(
            DIR,
            &Command::Move {
                op: MoveOp::Start {
                    event_id: EventId("e1".into()),
                    to_region: "b".into(),
                    actor: "ops".into(),
                    request: "r1".into(),
                },
                at_ms: 2,
            },
        )
        .response
    {
        Response::Move(r) => r.map(|_| ()).map_err(|e| e.code),
        other => panic!("{other:?}"),
    };
    assert_eq!(start(&mut s), Err("repair_in_progress".to_string()));
    node_op(&mut s, NodeOp::CancelRepair { group: GroupId(1) }).unwrap();
    assert_eq!(start(&mut s), Ok(()));
    let e = node_op(
        &mut s,
        NodeOp::StartRepair {
            group: GroupId(1),
            remove: NodeId(2),
            add: None,
            reason: RepairReason::Dead,
        },
    )
    .unwrap_err();
    assert_eq!(e.code, "move_in_progress");
}

/// A node back on an empty data dir (`--rejoin-empty`): the directory takes
/// its new incarnation, makes every group it is a voter of (and group 0)
/// wait for it, and a group stops waiting only when a rejoin repair put
/// the same node back, or the node is no longer a voter there.
#[test]
fn a_rejoin_keeps_each_group_waiting_until_the_node_is_put_back() {
    let mut s = cluster(0);
    assert_eq!(members(&s), vec![1, 2, 3]);
    let rejoin = NodeOp::Rejoin {
        node: NodeId(2),
        incarnation: 77,
    };
    let Ok(NodeOpDone::Rejoin(r)) = node_op(&mut s, rejoin.clone()) else {
        panic!("rejoin refused");
    };
    assert_eq!(r.pending, [DIR, GroupId(1)].into_iter().collect());
    assert_eq!(r.floor(GroupId(1)), None);
    assert_eq!(s.directory().nodes[&NodeId(2)].incarnation, 77);
    assert!(s.directory().rejoin_pending(NodeId(2), GroupId(1)));
    assert!(s.directory().not_leading().contains(&NodeId(2)));
    // The same rejoin again changes nothing; the registration under the
    // new incarnation is accepted, under the old one refused.
    assert_eq!(node_op(&mut s, rejoin), Ok(NodeOpDone::Rejoin(r)));
    let register = |inc| {
        Command::RegisterNode(NodeInfo {
            id: NodeId(2),
            region: RegionId::from("a"),
            grpc_addr: "127.0.0.1:7002".into(),
            incarnation: inc,
            format_max: seatfence_core::format::newest(),
        })
    };
    let ok = s.apply(DIR, &register(77)).response;
    assert!(matches!(ok, Response::NodeRegistered { .. }), "{ok:?}");
    let old = s.apply(DIR, &register(5)).response;
    assert!(
        matches!(old, Response::IncarnationMismatch { .. }),
        "{old:?}"
    );

    // A rejoin repair puts back the same node, only for a pending group,
    // and only as a rejoin.
    let bad = node_op(
        &mut s,
        NodeOp::StartRepair {
            group: GroupId(1),
            remove: NodeId(2),
            add: Some(NodeId(2)),
            reason: RepairReason::Dead,
        },
    );
    assert_eq!(bad.unwrap_err().code, "invalid_request");
    let bad = node_op(
        &mut s,
        NodeOp::StartRepair {
            group: GroupId(1),
            remove: NodeId(1),
            add: None,
            reason: RepairReason::Rejoin,
        },
    );
    assert_eq!(bad.unwrap_err().code, "rejoin_not_found");
    // Still a voter: group 1 cannot stop waiting by fiat.
    let bad = node_op(
        &mut s,
        NodeOp::RejoinDone {
            node: NodeId(2),
            group: GroupId(1),
        },
    );
    assert_eq!(bad.unwrap_err().code, "still_a_member");
    let start = NodeOp::StartRepair {
        group: GroupId(1),
        remove: NodeId(2),
        add: None,
        reason: RepairReason::Rejoin,
    };
    let Ok(NodeOpDone::Repair(Some(repair))) = node_op(&mut s, start) else {
        panic!("rejoin repair refused");
    };
    assert_eq!((repair.remove, repair.add), (NodeId(2), NodeId(2)));
    // The leader at term 5 demoted it: appends from term 5 on; the first
    // floor stays.
    for term in [5, 3] {
        let op = NodeOp::RejoinDemoted {
            node: NodeId(2),
            group: GroupId(1),
            term,
        };
        let Ok(NodeOpDone::Rejoin(r)) = node_op(&mut s, op) else {
            panic!("floor refused");
        };
        assert_eq!(r.floor(GroupId(1)), Some(5));
    }
    // Wiped again mid-way: the old life's repair goes, the plan starts anew.
    let again = NodeOp::Rejoin {
        node: NodeId(2),
        incarnation: 78,
    };
    let Ok(NodeOpDone::Rejoin(r)) = node_op(&mut s, again) else {
        panic!("second rejoin refused");
    };
    assert_eq!(r.floor(GroupId(1)), None);
    assert!(s.directory().repairs.is_empty());
    let start = NodeOp::StartRepair {
        group: GroupId(1),
        remove: NodeId(2),
        add: None,
        reason: RepairReason::Rejoin,
    };
    node_op(&mut s, start).unwrap();
    for op in [
        NodeOp::AdvanceRepair {
            group: GroupId(1),
            from: RepairStep::AddLearner,
        },
        NodeOp::FinishRepair { group: GroupId(1) },
    ] {
        node_op(&mut s, op).unwrap();
    }
    assert_eq!(members(&s), vec![1, 2, 3]);
    assert!(!s.directory().rejoin_pending(NodeId(2), GroupId(1)));
    // Group 0: demoted, then done; the record stays, with nothing pending.
    let demoted = node_op(&mut s, NodeOp::RejoinDirectoryDemoted { node: NodeId(2) });
    assert!(matches!(demoted, Ok(NodeOpDone::Rejoin(r)) if r.directory_demoted));
    node_op(
        &mut s,
        NodeOp::RejoinDone {
            node: NodeId(2),
            group: DIR,
        },
    )
    .unwrap();
    let loaded = reloaded(&s);
    assert!(loaded.directory().rejoins[&NodeId(2)].pending.is_empty());
    assert_eq!(loaded.directory(), s.directory());
    assert!(!s.directory().not_leading().contains(&NodeId(2)));
}

/// A node an operator retired does not come back under its id.
#[test]
fn a_retired_node_cannot_rejoin() {
    let mut s = cluster(1);
    for declared in [false, true] {
        node_op(
            &mut s,
            NodeOp::SetState {
                node: NodeId(2),
                state: NodeState::Dead { declared },
            },
        )
        .unwrap();
    }
    let r = node_op(
        &mut s,
        NodeOp::Rejoin {
            node: NodeId(2),
            incarnation: 9,
        },
    );
    assert_eq!(r.unwrap_err().code, "node_retired");
    assert!(s.directory().rejoins.is_empty());
}
