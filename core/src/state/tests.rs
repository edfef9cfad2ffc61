//! `State::apply` of the key→value table and the directory.
use super::*;
use crate::directory::{NodeInfo, Placement};
use crate::ids::NodeId;

#[test]
fn drained_nodes_are_recorded_and_reload() {
    let mut s = State::new(GroupId::DIRECTORY);
    let set = |drained| Command::SetDrained {
        node: NodeId(2),
        drained,
    };
    assert_eq!(
        s.apply(GroupId(4), &set(true)).response,
        Response::WrongGroup
    );
    let a = s.apply(GroupId::DIRECTORY, &set(true));
    assert_eq!(a.response, Response::DrainedSet { was: false });
    assert_eq!(a.changed, vec![RecordKey::Drained(NodeId(2))]);
    let mut loaded = State::new(GroupId::DIRECTORY);
    for (k, v) in s.records() {
        loaded.load_record(&k, &v).unwrap();
    }
    assert!(loaded.directory().drained.contains(&NodeId(2)));
    let a = s.apply(GroupId::DIRECTORY, &set(false));
    assert_eq!(a.response, Response::DrainedSet { was: true });
    assert!(s.directory().drained.is_empty());
    assert!(s.encode_record(&RecordKey::Drained(NodeId(2))).is_none());
}

#[test]
fn the_audit_trail_numbers_entries_keeps_the_newest_and_reloads() {
    use crate::audit::{AuditEntry, AUDIT_KEEP};
    let entry = |n: u64| {
        Command::Audit(AuditEntry {
            seq: 0,
            at_ms: n,
            actor: "ops".into(),
            action: "drain".into(),
            target: format!("node {n}"),
            result: "ok".into(),
            id: format!("a{n}"),
        })
    };
    let mut s = State::new(GroupId::DIRECTORY);
    assert_eq!(
        s.apply(GroupId(5), &entry(1)).response,
        Response::WrongGroup
    );
    let extra = 5;
    for n in 1..=(AUDIT_KEEP as u64 + extra) {
        let a = s.apply(GroupId::DIRECTORY, &entry(n));
        assert_eq!(a.response, Response::Audited { seq: n });
    }
    assert_eq!(s.audit().len(), AUDIT_KEEP);
    // A re-sent entry (a transport error after the commit) counts once.
    let last = AUDIT_KEEP as u64 + extra;
    let again = s.apply(GroupId::DIRECTORY, &entry(last));
    assert_eq!(again.response, Response::Audited { seq: last });
    assert_eq!(s.audit().keys().next_back(), Some(&last));
    assert_eq!(
        s.audit().keys().next(),
        Some(&(extra + 1)),
        "the oldest went first"
    );
    let newest = s.query(&crate::Query::Audit { limit: 2 });
    let crate::QueryResult::Audit(list) = newest else {
        panic!("{newest:?}")
    };
    assert_eq!(
        list.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![AUDIT_KEEP as u64 + extra, AUDIT_KEEP as u64 + extra - 1]
    );
    let mut loaded = State::new(GroupId::DIRECTORY);
    for (k, v) in s.records() {
        loaded.load_record(&k, &v).unwrap();
    }
    assert_eq!(loaded.audit(), s.audit());
}

#[test]
fn records_round_trip_through_storage_encoding() {
    let mut s = State::new(GroupId::DIRECTORY);
    let g0 = GroupId::DIRECTORY;
    for id in 1..=3 {
        s.apply(
            g0,
            &Command::RegisterNode(NodeInfo {
                id: NodeId(id),
                region: format!("r{id}").as_str().into(),
                grpc_addr: "127.0.0.1:1".into(),
                incarnation: 0,
                format_max: crate::format::newest(),
            }),
        );
    }
    let a = s.apply(
        g0,
        &Command::CreateGroup {
            group_id: None,
            placement: Placement::Spread { replicas: 3 },
        },
    );
    assert!(matches!(
        a.response,
        Response::GroupCreated {
            group_id: GroupId(1),
            ..
        }
    ));
    let mut loaded = State::new(GroupId::DIRECTORY);
    for (k, v) in s.records() {
        loaded.load_record(&k, &v).unwrap();
    }
    assert_eq!(loaded, s);
}

#[test]
fn commands_for_the_other_kind_of_group_change_nothing() {
    let mut s = State::new(GroupId::DIRECTORY);
    let a = s.apply(
        GroupId::DIRECTORY,
        &Command::Put {
            key: "k".into(),
            value: vec![1],
        },
    );
    assert_eq!(a.response, Response::WrongGroup);
    assert!(a.changed.is_empty());
    assert_eq!(s, State::new(GroupId::DIRECTORY));
}

#[test]
fn a_batch_answers_each_command_as_if_applied_alone() {
    let g = GroupId(3);
    let mut s = State::new(g);
    let put = |k: &str| Command::Put {
        key: k.into(),
        value: k.as_bytes().to_vec(),
    };
    let a = s.apply(
        g,
        &Command::Batch(vec![
            put("a"),
            put("a"),
            Command::RegisterNode(NodeInfo {
                id: NodeId(1),
                region: "r".into(),
                grpc_addr: "x".into(),
                incarnation: 0,
                format_max: crate::format::newest(),
            }),
            Command::Delete { key: "a".into() },
        ]),
    );
    assert_eq!(
        a.response,
        Response::Batch(vec![
            Response::Written { existed: false },
            Response::Written { existed: true },
            Response::WrongGroup,
            Response::Written { existed: true },
        ])
    );
    assert!(s.kv().is_empty());
    assert!(s.directory().nodes.is_empty());
}

#[test]
fn a_node_known_under_another_incarnation_is_refused_and_nothing_changes() {
    let mut s = State::new(GroupId::DIRECTORY);
    let g0 = GroupId::DIRECTORY;
    let register = |incarnation: u64, addr: &str| {
        Command::RegisterNode(NodeInfo {
            id: NodeId(4),
            region: "a".into(),
            grpc_addr: addr.into(),
            incarnation,
            format_max: crate::format::newest(),
        })
    };
    // A record from before store identities (0) takes the first one.
    s.apply(g0, &register(0, "old"));
    s.apply(g0, &register(77, "x"));
    assert_eq!(s.directory().nodes[&NodeId(4)].incarnation, 77);
    // The same data dir registering again (a restart) is fine.
    let again = s.apply(g0, &register(77, "y")).response;
    assert_eq!(again, Response::NodeRegistered { node_id: NodeId(4) });
    // A wiped or replaced data dir under the same id is not.
    let wiped = s.apply(g0, &register(78, "z"));
    assert_eq!(
        wiped.response,
        Response::IncarnationMismatch {
            node_id: NodeId(4),
            known: 77,
            claimed: 78
        }
    );
    assert!(wiped.changed.is_empty());
    assert_eq!(s.directory().nodes[&NodeId(4)].grpc_addr, "y");
    assert_eq!(s.directory().nodes[&NodeId(4)].incarnation, 77);
    // Its region is for life: a config naming another is refused.
    let moved = s.apply(
        g0,
        &Command::RegisterNode(NodeInfo {
            id: NodeId(4),
            region: "b".into(),
            grpc_addr: "y".into(),
            incarnation: 77,
            format_max: crate::format::newest(),
        }),
    );
    assert_eq!(
        moved.response,
        Response::RegionMismatch {
            node_id: NodeId(4),
            known: "a".into(),
            claimed: "b".into()
        }
    );
    assert!(moved.changed.is_empty());
    assert_eq!(s.directory().nodes[&NodeId(4)].region, "a".into());
}

#[test]
fn create_group_is_idempotent_by_id() {
    let mut s = State::new(GroupId::DIRECTORY);
    let g0 = GroupId::DIRECTORY;
    s.apply(
        g0,
        &Command::RegisterNode(NodeInfo {
            id: NodeId(1),
            region: "a".into(),
            grpc_addr: "x".into(),
            incarnation: 0,
            format_max: crate::format::newest(),
        }),
    );
    let create = Command::CreateGroup {
        group_id: Some(GroupId(7)),
        placement: Placement::Spread { replicas: 1 },
    };
    let first = s.apply(g0, &create).response;
    let second = s.apply(g0, &create).response;
    assert_eq!(first, second);
    assert_eq!(s.directory().next_group_id, 8);
}

#[test]
fn a_keyed_answer_is_kept_first_for_a_day_and_reloads() {
    use crate::answers::{KeyedAnswer, ANSWER_TTL_MS};
    let answer = |at_ms: u64, status: u16| KeyedAnswer {
        request_hash: 7,
        at_ms,
        status,
        body: format!("{{\"n\":{status}}}"),
        headers: vec![("location".into(), "/v1/x".into())],
        request: format!("r{at_ms}"),
    };
    let remember = |key: &str, a: KeyedAnswer| Command::RememberAnswer {
        owner: "ops".into(),
        key: key.into(),
        answer: a,
    };
    let mut s = State::new(GroupId::DIRECTORY);
    let g0 = GroupId::DIRECTORY;
    let first = s.apply(g0, &remember("k1", answer(10, 201))).response;
    assert_eq!(first, Response::Answer(Box::new(answer(10, 201))));
    let again = s.apply(g0, &remember("k1", answer(20, 409))).response;
    assert_eq!(
        again,
        Response::Answer(Box::new(answer(10, 201))),
        "the first stays"
    );
    let mut loaded = State::new(GroupId::DIRECTORY);
    for (k, v) in s.records() {
        loaded.load_record(&k, &v).unwrap();
    }
    assert_eq!(loaded.answers(), s.answers());
    // A day later, k1 is forgotten when the next answer is recorded.
    let later = answer(10 + ANSWER_TTL_MS, 202);
    let applied = s.apply(g0, &remember("k2", later));
    assert!(applied
        .changed
        .contains(&RecordKey::Answer("ops".into(), "k1".into())));
    assert_eq!(
        s.query(&crate::Query::Answer {
            owner: "ops".into(),
            key: "k1".into()
        }),
        crate::QueryResult::Answer(None)
    );
}

#[test]
fn one_request_at_a_time_holds_a_key_until_it_answers() {
    use crate::answers::{KeyedAnswer, PENDING_TTL_MS};
    let g0 = GroupId::DIRECTORY;
    let mk = |request: &str, at_ms: u64, status: u16| KeyedAnswer {
        request_hash: 1,
        at_ms,
        status,
        body: "{}".into(),
        headers: vec![],
        request: request.into(),
    };
    let remember = |a: KeyedAnswer| Command::RememberAnswer {
        owner: "ops".into(),
        key: "k".into(),
        answer: a,
    };
    let forget = |request: &str| Command::ForgetAnswer {
        owner: "ops".into(),
        key: "k".into(),
        request: request.into(),
    };
    let mut s = State::new(GroupId::DIRECTORY);
    let r1 = mk("r1", 0, 0);
    assert_eq!(
        s.apply(g0, &remember(r1.clone())).response,
        Response::Answer(Box::new(r1.clone()))
    );
    // r2 meets r1's reservation, and cannot drop it.
    assert_eq!(
        s.apply(g0, &remember(mk("r2", 5, 0))).response,
        Response::Answer(Box::new(r1.clone()))
    );
    s.apply(g0, &forget("r2"));
    assert_eq!(s.answers().len(), 1);
    // r1 answers 5xx: it forgets; r2 may run now.
    s.apply(g0, &forget("r1"));
    assert!(s.answers().is_empty());
    let r2 = mk("r2", 10, 0);
    assert_eq!(
        s.apply(g0, &remember(r2.clone())).response,
        Response::Answer(Box::new(r2))
    );
    let done = mk("r2", 20, 201);
    assert_eq!(
        s.apply(g0, &remember(done.clone())).response,
        Response::Answer(Box::new(done.clone()))
    );
    assert_eq!(
        s.apply(g0, &remember(mk("r3", 30, 0))).response,
        Response::Answer(Box::new(done))
    );
    // A reservation whose edge died lapses.
    let mut t = State::new(GroupId::DIRECTORY);
    t.apply(g0, &remember(mk("dead", 0, 0)));
    let late = mk("r4", PENDING_TTL_MS, 0);
    assert_eq!(
        t.apply(g0, &remember(late.clone())).response,
        Response::Answer(Box::new(late))
    );
}

#[test]
fn each_kind_of_group_holds_only_its_own_records() {
    let dir = State::new(GroupId::DIRECTORY);
    let event = State::new(GroupId(9));
    assert!(dir.is_for(GroupId::DIRECTORY) && !dir.is_for(GroupId(9)));
    assert!(event.is_for(GroupId(9)) && !event.is_for(GroupId::DIRECTORY));
    // A directory record offered to an event group (a corrupt or planted
    // delta) is refused, and the other way round; nothing changes.
    let mut s = State::new(GroupId(9));
    let node = RecordKey::Node(NodeId(1)).encode();
    let err = s.load_record(&node, b"x").unwrap_err();
    assert_eq!(err.code(), "record_corrupt");
    assert!(s.remove_record(&node).is_err());
    assert_eq!(s, event);
    let mut d = State::new(GroupId::DIRECTORY);
    let hold = RecordKey::Hold(4).encode();
    assert!(d.load_record(&hold, b"x").is_err());
    assert_eq!(d, dir);
    // Plain keys belong to both.
    let kv = RecordKey::Kv("k".into()).encode();
    s.load_record(&kv, b"v").unwrap();
    assert_eq!(s.kv().get("k"), Some(&b"v".to_vec()));
}

/// The cluster's data format rises only when every live node reads it,
/// is stored like any record, never goes down, and a node whose binary
/// cannot read it is refused registration.
#[test]
fn the_data_format_rises_only_when_every_live_node_reads_it() {
    let g0 = GroupId::DIRECTORY;
    let mut s = State::new(g0);
    let node = |id: u64, format_max: u8| {
        Command::RegisterNode(NodeInfo {
            id: NodeId(id),
            region: "r".into(),
            grpc_addr: "127.0.0.1:1".into(),
            incarnation: id,
            format_max,
        })
    };
    for id in 1..=3 {
        s.apply(g0, &node(id, 1));
    }
    assert_eq!(s.directory().format(), 1, "a new directory writes v1");
    let refused = s.apply(g0, &Command::SetFormat { version: 2 });
    let Response::FormatRefused { reason } = refused.response else {
        panic!("{:?}", refused.response)
    };
    assert!(reason.contains("node 1 reads v1 at most"), "{reason}");
    assert!(refused.changed.is_empty());

    // Two nodes upgraded: still refused, naming the one left.
    s.apply(g0, &node(1, 2));
    s.apply(g0, &node(2, 2));
    let Response::FormatRefused { reason } =
        s.apply(g0, &Command::SetFormat { version: 2 }).response
    else {
        panic!("raised with node 3 behind")
    };
    assert!(
        reason.contains("node 3") && !reason.contains("node 1"),
        "{reason}"
    );

    // A retired node would not hold it back.
    let mut d = s.directory().clone();
    d.node_states
        .insert(NodeId(3), crate::lifecycle::NodeState::Decommissioned);
    assert_eq!(d.format_blocker(2), None);

    s.apply(g0, &node(3, 2));
    let raised = s.apply(g0, &Command::SetFormat { version: 2 });
    assert_eq!(raised.response, Response::FormatSet { version: 2 });
    assert_eq!(raised.changed, vec![RecordKey::Format]);
    assert_eq!(s.directory().format(), 2);

    // Never lowered; asking again changes nothing.
    let lower = s.apply(g0, &Command::SetFormat { version: 1 });
    assert_eq!(lower.response, Response::FormatSet { version: 2 });
    assert!(lower.changed.is_empty());

    // A binary that reads v1 only may not register any more.
    let old = s.apply(g0, &node(4, 1));
    let Response::FormatRefused { reason } = old.response else {
        panic!("{:?}", old.response)
    };
    assert!(reason.contains("writes data format v2"), "{reason}");
    assert!(!s.directory().nodes.contains_key(&NodeId(4)));

    // Stored and loaded like every record.
    let mut loaded = State::new(g0);
    for (k, v) in s.records() {
        loaded.load_record(&k, &v).unwrap();
    }
    assert_eq!(loaded.directory().format(), 2);
}
