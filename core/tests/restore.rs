//! Restore steps through `State::apply`, as every replica runs them: a
//! backup's records load into a new event group and come back equal, the
//! seal raises the epoch by 2^32 and shuts the group to more records, and
//! every refusal changes nothing (a non-empty cluster, another backup, a
//! group with data of its own, a directory record a restore must not
//! touch).

use seatfence_core::inventory::{EventAction, EventCommand, EventSpec, SeatPick, Section};
use seatfence_core::restore::{RestoreDone, RestoreOp, EPOCH_JUMP, ID_JUMP};
use seatfence_core::{
    Command, Epoch, EventId, GroupId, NodeId, NodeInfo, Placement, RecordKey, RegionId, Response,
    State, UserId,
};

const DIR: GroupId = GroupId::DIRECTORY;
const G: GroupId = GroupId(7);

fn spec() -> EventSpec {
    EventSpec {
        event_id: EventId("e".into()),
        name: "e".into(),
        home_region: RegionId("a".into()),
        seats: Vec::new(),
        sections: vec![Section {
            name: "A".into(),
            rows: 2,
            seats_per_row: 5,
        }],
        hold_ttl_ms: 60_000,
        max_seats_per_hold: 4,
        max_seats_per_buyer: None,
        opens_at_ms: None,
        closes_at_ms: None,
        survival: Default::default(),
        price_cents: 100,
        currency: "EUR".into(),
        retention_ms: seatfence_core::inventory::DEFAULT_RETENTION_MS,
        changes_retention_ms: seatfence_core::inventory::DEFAULT_CHANGES_RETENTION_MS,
        waiting_room: None,
    }
}

fn event(epoch: u64, action: EventAction) -> Command {
    Command::event(EventCommand {
        event_id: EventId("e".into()),
        epoch: Epoch(epoch),
        now_ms: 1_000,
        idempotency: None,
        action,
    })
}

fn hold(epoch: u64, user: &str) -> Command {
    event(
        epoch,
        EventAction::Hold {
            owner: UserId(user.into()),
            pick: SeatPick::Quantity {
                section: None,
                quantity: 2,
            },
        },
    )
}

/// An event group with the event and two holds: the backed-up one.
fn source() -> State {
    let mut s = State::new(G);
    s.apply(G, &event(1, EventAction::Create(Box::new(spec()))));
    s.apply(G, &hold(1, "ann"));
    s.apply(G, &hold(1, "ben"));
    s
}

fn step(s: &mut State, g: GroupId, op: RestoreOp) -> (Result<RestoreDone, String>, Vec<RecordKey>) {
    let a = s.apply(g, &Command::Restore(op));
    match a.response {
        Response::Restore(r) => (r, a.changed),
        other => panic!("{other:?}"),
    }
}

fn records(s: &State) -> Vec<(Vec<u8>, Vec<u8>)> {
    s.records().collect()
}

fn load(backup: &str, records: Vec<(Vec<u8>, Vec<u8>)>) -> RestoreOp {
    RestoreOp::Records {
        backup: backup.into(),
        records,
    }
}

#[test]
fn a_group_loads_seals_with_its_epoch_raised_and_takes_nothing_more() {
    let src = source();
    let all = records(&src);
    let mut s = State::new(G);
    // Two chunks, the second sent twice (a restore run again).
    let (first, rest) = all.split_at(all.len() / 2);
    assert_eq!(
        step(&mut s, G, load("b1", first.to_vec())).0,
        Ok(RestoreDone::Ok)
    );
    assert_eq!(
        step(&mut s, G, load("b1", rest.to_vec())).0,
        Ok(RestoreDone::Ok)
    );
    assert_eq!(
        step(&mut s, G, load("b1", rest.to_vec())).0,
        Ok(RestoreDone::Ok)
    );
    let (sealed, changed) = step(
        &mut s,
        G,
        RestoreOp::Seal {
            backup: "b1".into(),
        },
    );
    let raised = Epoch(1 + EPOCH_JUMP);
    assert_eq!(sealed, Ok(RestoreDone::Sealed { epoch: raised }));
    assert!(changed.contains(&RecordKey::Event) && changed.contains(&RecordKey::Restore));
    // The same seal again changes nothing and says the same epoch.
    let (again, changed) = step(
        &mut s,
        G,
        RestoreOp::Seal {
            backup: "b1".into(),
        },
    );
    assert_eq!(
        (again, changed.len()),
        (Ok(RestoreDone::Sealed { epoch: raised }), 0)
    );

    let inv = s.inventory();
    assert_eq!(inv.event().unwrap().epoch, raised);
    assert_eq!(inv.holds().len(), 2);
    assert_eq!(inv.event().unwrap().held, 4);
    // Stored and loaded again (a restart), the same state.
    let mut reloaded = State::new(G);
    for (k, v) in s.records() {
        reloaded.load_record(&k, &v).unwrap();
    }
    reloaded.rebuild_indexes();
    assert_eq!(reloaded, s);

    // Sealed: no more records, from this backup or another.
    let before = s.clone();
    assert!(step(&mut s, G, load("b1", all.clone()))
        .0
        .unwrap_err()
        .contains("sealed"));
    assert!(step(&mut s, G, load("b2", all.clone()))
        .0
        .unwrap_err()
        .contains("restored from backup b1"));
    assert_eq!(s, before);

    // The old epoch is refused, the raised one sells.
    let a = s.apply(G, &hold(1, "zed"));
    assert!(format!("{:?}", a.response).contains("StaleEpoch"), "{a:?}");
    let a = s.apply(G, &hold(raised.0, "cat"));
    assert!(format!("{:?}", a.response).contains("Held"), "{a:?}");
}

#[test]
fn a_group_with_data_of_its_own_or_a_bad_record_takes_nothing() {
    let mut live = source();
    let before = live.clone();
    let (r, changed) = step(&mut live, G, load("b1", records(&source())));
    assert!(r.unwrap_err().contains("data of its own"));
    assert!(changed.is_empty());
    assert_eq!(live, before);

    // One damaged value: the whole chunk is refused.
    let mut s = State::new(G);
    let mut recs = records(&source());
    let last = recs.len() - 1;
    recs[last].1 = vec![1, 0xff, 0xff];
    let (r, changed) = step(&mut s, G, load("b1", recs));
    assert!(r.is_err() && changed.is_empty());
    assert_eq!(s, State::new(G));
    let (r, _) = step(
        &mut s,
        G,
        RestoreOp::Seal {
            backup: "b1".into(),
        },
    );
    assert!(r.unwrap_err().contains("nothing of this backup"));
}

fn directory() -> State {
    let mut s = State::new(DIR);
    for id in 1..=3 {
        s.apply(
            DIR,
            &Command::RegisterNode(NodeInfo {
                id: NodeId(id),
                region: RegionId::from("a"),
                grpc_addr: format!("127.0.0.1:{}", 7000 + id),
                incarnation: id,
                format_max: seatfence_core::format::newest(),
            }),
        );
    }
    s
}

#[test]
fn the_directory_restores_only_into_an_empty_cluster_and_one_backup_at_a_time() {
    let mut d = directory();
    let begin = |b: &str| RestoreOp::Begin { backup: b.into() };
    assert_eq!(step(&mut d, DIR, begin("b1")).0, Ok(RestoreDone::Ok));
    assert_eq!(
        step(&mut d, DIR, begin("b1")).0,
        Ok(RestoreDone::Ok),
        "run again"
    );
    assert!(step(&mut d, DIR, begin("b2"))
        .0
        .unwrap_err()
        .contains("restore of backup b1"));
    let placement = Placement::InRegion {
        region: RegionId::from("a"),
        replicas: 3,
    };
    let group = RestoreOp::Group {
        backup: "b1".into(),
        group_id: G,
        placement,
    };
    let (r, _) = step(&mut d, DIR, group.clone());
    assert!(
        matches!(r, Ok(RestoreDone::Group { ref members }) if members.len() == 3),
        "{r:?}"
    );
    assert_eq!(d.directory().groups[&G].id, G);
    assert!(
        d.directory().next_group_id > G.0,
        "new groups get ids past the restored ones"
    );

    // Only history: a node record is refused, and nothing changes.
    let before = d.clone();
    let node = (RecordKey::Node(NodeId(9)).encode(), vec![1]);
    let (r, changed) = step(&mut d, DIR, load("b1", vec![node]));
    assert!(r.unwrap_err().contains("does not load"));
    assert!(changed.is_empty());
    assert_eq!(d, before);

    assert_eq!(
        step(
            &mut d,
            DIR,
            RestoreOp::Finish {
                backup: "b1".into()
            }
        )
        .0,
        Ok(RestoreDone::Ok)
    );
    assert!(step(&mut d, DIR, begin("b1"))
        .0
        .unwrap_err()
        .contains("restored here already"));
    assert!(
        step(&mut d, DIR, group).0.is_err(),
        "finished: no more groups"
    );

    // A cluster that routes an event takes no restore.
    let mut busy = directory();
    busy.apply(
        DIR,
        &Command::RegisterEvent {
            event_id: EventId("e".into()),
            home_region: "a".into(),
            survival: Default::default(),
        },
    );
    assert!(step(&mut busy, DIR, begin("b3"))
        .0
        .unwrap_err()
        .contains("not empty"));
}

#[test]
fn a_sealed_group_hands_out_no_id_the_old_cluster_could_have_given() {
    let src = source();
    let old_next = src.inventory().event().unwrap().next_hold_seq;
    let mut s = State::new(G);
    assert!(step(&mut s, G, load("b1", records(&src))).0.is_ok());
    assert!(step(
        &mut s,
        G,
        RestoreOp::Seal {
            backup: "b1".into(),
        },
    )
    .0
    .is_ok());
    let ev = s.inventory().event().unwrap();
    assert_eq!(ev.next_hold_seq, old_next + ID_JUMP);
    assert!(ev.next_outbox_id > ID_JUMP);
    // The first hold after the restore is far past any the old cluster gave.
    let a = s.apply(G, &hold(1 + EPOCH_JUMP, "cat"));
    let held = format!("{:?}", a.response);
    assert!(
        held.contains(&format!("seq: {}", old_next + ID_JUMP)),
        "{held}"
    );
}

#[test]
fn a_group_being_restored_sells_nothing_until_its_seal() {
    let mut s = State::new(G);
    assert!(step(&mut s, G, load("b1", records(&source()))).0.is_ok());
    let before = s.clone();
    let a = s.apply(G, &hold(1, "zed"));
    assert!(
        matches!(&a.response, Response::Restore(Err(r)) if r.contains("being restored")),
        "{a:?}"
    );
    assert_eq!(s, before);
}

fn in_region() -> Placement {
    Placement::InRegion {
        region: RegionId::from("a"),
        replicas: 3,
    }
}

#[test]
fn a_restore_creates_its_own_groups_and_never_reroutes_an_event() {
    let mut d = directory();
    // A group that exists before the restore (placed by CreateGroup).
    d.apply(
        DIR,
        &Command::CreateGroup {
            group_id: Some(GroupId(3)),
            placement: in_region(),
        },
    );
    assert!(step(
        &mut d,
        DIR,
        RestoreOp::Begin {
            backup: "b1".into()
        }
    )
    .0
    .is_ok());
    let group = |id| RestoreOp::Group {
        backup: "b1".into(),
        group_id: GroupId(id),
        placement: in_region(),
    };
    let before = d.clone();
    let (r, changed) = step(&mut d, DIR, group(3));
    assert!(r.unwrap_err().contains("not created by this restore"));
    assert!(changed.is_empty());
    assert_eq!(d, before);
    assert!(step(&mut d, DIR, group(7)).0.is_ok());
    assert!(step(&mut d, DIR, group(7)).0.is_ok(), "run again");
    assert!(step(&mut d, DIR, group(8)).0.is_ok());

    let route = |g: u64| seatfence_core::EventRoute {
        event_id: EventId("e".into()),
        group: GroupId(g),
        home_region: "a".into(),
        owner_region: "a".into(),
        epoch: Epoch(1 + EPOCH_JUMP),
        survival: Default::default(),
        state: seatfence_core::RouteState::Active,
    };
    let to = |g| RestoreOp::Route {
        backup: "b1".into(),
        route: route(g),
    };
    assert!(
        step(&mut d, DIR, to(3))
            .0
            .unwrap_err()
            .contains("not created"),
        "a route only to a group this restore made"
    );
    assert_eq!(step(&mut d, DIR, to(7)).0, Ok(RestoreDone::Ok));
    assert_eq!(step(&mut d, DIR, to(7)).0, Ok(RestoreDone::Ok), "run again");
    let before = d.clone();
    let (r, changed) = step(&mut d, DIR, to(8));
    assert!(r.unwrap_err().contains("is routed to group"));
    assert!(changed.is_empty());
    assert_eq!(d, before);
}

#[test]
fn no_event_is_created_while_a_restore_runs_and_an_abort_ends_it() {
    let mut d = directory();
    let register = Command::RegisterEvent {
        event_id: EventId("new".into()),
        home_region: "a".into(),
        survival: Default::default(),
    };
    assert!(step(
        &mut d,
        DIR,
        RestoreOp::BeginBy {
            backup: "b1".into(),
            operator: "alice".into(),
        },
    )
    .0
    .is_ok());
    assert_eq!(
        d.kv().get(seatfence_core::restore::keys::OPERATOR),
        Some(&b"alice".to_vec())
    );
    let before = d.clone();
    let a = d.apply(DIR, &register);
    assert!(
        matches!(&a.response, Response::Restore(Err(r)) if r.contains("being restored")),
        "{a:?}"
    );
    assert_eq!(d, before);

    let abort = RestoreOp::Abort {
        backup: "b1".into(),
    };
    assert_eq!(step(&mut d, DIR, abort.clone()).0, Ok(RestoreDone::Ok));
    assert!(step(&mut d, DIR, abort).0.is_err(), "aborted once");
    let group = RestoreOp::Group {
        backup: "b1".into(),
        group_id: G,
        placement: in_region(),
    };
    assert!(
        step(&mut d, DIR, group).0.is_err(),
        "no step after the abort"
    );
    assert!(step(
        &mut d,
        DIR,
        RestoreOp::Begin {
            backup: "b2".into()
        }
    )
    .0
    .is_err());
    let a = d.apply(DIR, &register);
    assert!(matches!(a.response, Response::EventRegistered(_)), "{a:?}");
}
