//! The typed propose path, in process: a one-node group, its `Proposer`,
//! and a `ClusterClient` that reaches it without gRPC (its only seed is an
//! address nobody listens on, so any remote call would fail).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use seatfence_core::inventory::{
    EventAction, EventCommand, EventReply, EventSpec, Outcome, SeatPick, Survival,
};
use seatfence_core::{Command, Epoch, EventId, GroupId, Query, QueryResult, RegionId, Response};
use seatfence_raft::batcher::WriteLimits;
use seatfence_raft::clock::SystemClock;
use seatfence_raft::registry::Registry;
use seatfence_raft::storage::{FlushMode, NodeDb};
use seatfence_raft::{ClientError, ClusterClient, ProposeError, Proposer};

const GROUP: GroupId = GroupId(5);
/// Nothing listens here: a call that left the process would not connect.
const NOWHERE: &str = "127.0.0.1:1";

struct OneNode {
    _dir: tempfile::TempDir,
    proposer: Arc<Proposer>,
}

/// A node with one initialized group it leads.
async fn one_node() -> OneNode {
    one_node_with(WriteLimits::unbounded()).await
}

/// [`one_node`] admitting writes within `limits`.
async fn one_node_with(limits: Arc<WriteLimits>) -> OneNode {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = NodeDb::open(dir.path(), FlushMode::Shared).expect("open sled");
    let config = Arc::new(
        openraft::Config {
            heartbeat_interval: 50,
            election_timeout_min: 150,
            election_timeout_max: 300,
            ..Default::default()
        }
        .validate()
        .expect("raft config"),
    );
    let registry =
        Arc::new(Registry::new(1, db, Default::default(), config).with_write_limits(limits));
    let members = BTreeMap::from([(1, BasicNode::new(NOWHERE))]);
    registry.initialize(GROUP, members).await.expect("init");
    let g = registry.get(GROUP).expect("opened");
    tokio::time::timeout(Duration::from_secs(30), async {
        while !g.leads() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the only voter leads within 30 s");
    let proposer = Arc::new(Proposer::new(registry, Arc::new(SystemClock::default())));
    OneNode {
        _dir: dir,
        proposer,
    }
}

fn event_cmd(epoch: u64, action: EventAction) -> Command {
    Command::event(EventCommand {
        event_id: EventId("e".into()),
        epoch: Epoch(epoch),
        now_ms: 0,
        idempotency: None,
        action,
    })
}

fn create() -> Command {
    event_cmd(
        0,
        EventAction::Create(Box::new(EventSpec {
            event_id: EventId("e".into()),
            name: "e".into(),
            home_region: RegionId("us-east".into()),
            seats: vec!["A1".into(), "A2".into()],
            sections: vec![],
            hold_ttl_ms: 60_000,
            max_seats_per_hold: 2,
            max_seats_per_buyer: None,
            opens_at_ms: None,
            closes_at_ms: None,
            survival: Survival::Zone,
            price_cents: 100,
            currency: "EUR".into(),
            retention_ms: seatfence_core::inventory::DEFAULT_RETENTION_MS,
            changes_retention_ms: seatfence_core::inventory::DEFAULT_CHANGES_RETENTION_MS,
            waiting_room: None,
        })),
    )
}

fn hold(epoch: u64, user: &str, seat: &str) -> Command {
    event_cmd(
        epoch,
        EventAction::Hold {
            owner: seatfence_core::UserId(user.into()),
            pick: SeatPick::Seats(vec![seat.into()]),
        },
    )
}

fn outcome(r: &Response) -> &Outcome {
    match r {
        Response::Event(EventReply { outcome, .. }) => outcome,
        other => panic!("not an event reply: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_commits_and_answers_typed() {
    let n = one_node().await;
    let c = n
        .proposer
        .write(GROUP, create(), None)
        .await
        .expect("create");
    assert!(matches!(
        outcome(&c.response),
        Outcome::Created { capacity: 2 }
    ));
    assert!(c.log_index > 0, "a proposed command has an entry");
    let c = n
        .proposer
        .write(GROUP, hold(1, "u1", "A1"), None)
        .await
        .expect("hold");
    assert!(matches!(outcome(&c.response), Outcome::Held(_)));
    assert_eq!(c.term, n.proposer.registry().get(GROUP).unwrap().term());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_epoch_is_answered_without_proposing() {
    let n = one_node().await;
    n.proposer
        .write(GROUP, create(), None)
        .await
        .expect("create");
    let bump = event_cmd(
        1,
        EventAction::BumpEpoch {
            epoch: Epoch(2),
            owner: RegionId("eu-west".into()),
        },
    );
    n.proposer.write(GROUP, bump, None).await.expect("bump");
    let c = n
        .proposer
        .write(GROUP, hold(1, "u1", "A1"), None)
        .await
        .expect("answered");
    assert_eq!(c.log_index, 0, "refused before proposing");
    assert!(matches!(
        outcome(&c.response),
        Outcome::StaleEpoch {
            current: Epoch(2),
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_keeps_every_answer_in_order() {
    let n = one_node().await;
    n.proposer
        .write(GROUP, create(), None)
        .await
        .expect("create");
    let b = n
        .proposer
        .write_batch(
            GROUP,
            vec![
                hold(1, "u1", "A1"),
                hold(1, "u2", "A1"),
                hold(1, "u3", "A2"),
            ],
            None,
        )
        .await
        .expect("batch");
    assert_eq!(b.responses.len(), 3);
    assert!(matches!(outcome(&b.responses[0]), Outcome::Held(_)));
    assert!(
        !matches!(outcome(&b.responses[1]), Outcome::Held(_)),
        "A1 is taken"
    );
    assert!(matches!(outcome(&b.responses[2]), Outcome::Held(_)));
    let empty = n.proposer.write_batch(GROUP, vec![], None).await;
    assert_eq!(empty.unwrap_err().code(), "malformed_command");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_each_get_their_own_answer() {
    let n = one_node().await;
    let writes = (0..200).map(|i| {
        let p = n.proposer.clone();
        async move {
            let cmd = Command::Put {
                key: format!("k{i}"),
                value: vec![i as u8],
            };
            p.write(GROUP, cmd, None).await
        }
    });
    let answers = futures::future::join_all(writes).await;
    let mut entries = std::collections::BTreeSet::new();
    for a in answers {
        let c = a.expect("committed");
        assert!(matches!(c.response, Response::Written { existed: false }));
        entries.insert(c.log_index);
    }
    // Proposals that arrive together leave together: the batcher packs
    // them into a few log entries, not 200.
    assert!(
        entries.len() < 200,
        "{} entries for 200 writes",
        entries.len()
    );
}

/// Beyond its group's bound a write is refused at once, `overloaded`
/// (the client stops there: its caller backs off), and changes nothing;
/// every admitted write commits; once they are answered the bound is free.
/// One thread: every write is admitted or refused before any commits.
#[tokio::test(flavor = "current_thread")]
async fn writes_beyond_the_groups_bound_are_refused_overloaded_and_change_nothing() {
    let limits = WriteLimits::new(0, 8);
    let n = one_node_with(limits.clone()).await;
    let put = |i: usize| Command::Put {
        key: format!("k{i}"),
        value: vec![1],
    };
    let writes = (0..100).map(|i| {
        let p = n.proposer.clone();
        async move { p.write(GROUP, put(i), None).await }
    });
    let answers = futures::future::join_all(writes).await;
    let g = n.proposer.registry().get(GROUP).expect("hosted");
    let (mut committed, mut refused) = (0, 0);
    for (i, a) in answers.into_iter().enumerate() {
        let stored = g.read(|s| s.state.kv().contains_key(&format!("k{i}")));
        match a {
            Ok(_) => {
                committed += 1;
                assert!(stored, "k{i} was answered committed");
            }
            Err(e) => {
                assert_eq!(e.code(), "overloaded", "{e}");
                assert!(e.is_final(), "the client does not look for another leader");
                assert!(!stored, "refused k{i} was written");
                refused += 1;
            }
        }
    }
    assert!(committed >= 8, "only {committed} of the first 8 committed");
    assert!(refused > 0, "nothing refused beyond a bound of 8");
    assert_eq!(limits.pending(), 0, "every admitted write was given back");
    n.proposer
        .write(GROUP, put(1_000), None)
        .await
        .expect("admitted once the others are answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_group_is_a_typed_error() {
    let n = one_node().await;
    let e = n
        .proposer
        .write(GroupId(99), create(), None)
        .await
        .unwrap_err();
    assert_eq!(e, ProposeError::UnknownGroup(GroupId(99)));
    assert_eq!(e.code(), "unknown_group");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_stays_in_process_for_a_group_this_node_leads() {
    let n = one_node().await;
    let client = ClusterClient::new(vec![NOWHERE.into()], Default::default())
        .with_deadline(Duration::from_secs(2))
        .with_local(n.proposer.clone());
    let c = client.write(GROUP, &create()).await.expect("local write");
    assert!(matches!(outcome(&c.response), Outcome::Created { .. }));
    let (answer, _term) = client
        .query(GROUP, &Query::Event, true)
        .await
        .expect("local linearizable read");
    assert!(matches!(answer, QueryResult::Event(Some(_))));
    assert_eq!(client.redirects(), 0);
    // A group it does not host goes over gRPC, where nobody answers.
    let e = client.write(GroupId(99), &create()).await.unwrap_err();
    assert!(matches!(e, ClientError::NoLeader { .. }), "{e:?}");
}

/// With time paused, a client that finds no leader gives up at its
/// deadline with `no_leader` (the 60 s pass in virtual time).
#[tokio::test(start_paused = true)]
async fn a_client_with_no_reachable_node_gives_up_at_its_deadline() {
    let client = ClusterClient::new(vec![NOWHERE.into()], Default::default())
        .with_deadline(Duration::from_secs(60));
    let started = tokio::time::Instant::now();
    let e = client.write(GROUP, &create()).await.unwrap_err();
    match e {
        ClientError::NoLeader { group, waited, .. } => {
            assert_eq!(group, GROUP);
            assert!(waited >= Duration::from_secs(60), "{waited:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_secs(60));
    assert_eq!(e.code(), "no_leader");
}
