//! Hostile input to the node API and the edge, one test per attack: each is
//! refused with a code, changes nothing, and every node keeps serving. (The
//! same bounds are checked again in `apply`, for entries no leader
//! checked: `core/tests/hostile_props.rs`.)
//! (Who may reach the node API at all is the security issue's mutual TLS,
//! not built yet; these are the inputs a reachable port must survive.)

mod common;

use std::time::Duration;

use common::*;
use seatfence_core::inventory::{EventAction, EventCommand, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, Query, QueryResult, Response, UserId};
use seatfence_proto::v1::{WriteBatchRequest, WriteRequest};
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::LocalCluster;
use serde_json::json;

fn encoded_cmd(c: &Command) -> Vec<u8> {
    seatfence_raft::codec::encode(c).unwrap()
}

/// An event of 6 seats whose group has one voter per region (the default
/// cluster has one node in each), and that group's id.
async fn event(cluster: &LocalCluster, id: &str) -> GroupId {
    let edge = cluster.nodes[0].edge_url().unwrap();
    let body = create_event(
        cluster,
        &edge,
        json!({"event_id": id, "name": id, "home_region": "us-east", "survival": "region",
               "sections": [{"name": "A", "rows": 2, "seats_per_row": 3}]}),
    )
    .await;
    GroupId(body["group_id"].as_u64().unwrap())
}

fn hold(event: &str, owner: String, now_ms: u64) -> Command {
    Command::event(EventCommand {
        event_id: EventId(event.into()),
        epoch: Epoch(1),
        now_ms,
        idempotency: None,
        action: EventAction::Hold {
            owner: UserId(owner),
            pick: SeatPick::Quantity {
                section: None,
                quantity: 1,
            },
        },
    })
}

/// Every node answers its status.
async fn all_serving(cluster: &LocalCluster) {
    let client = cluster.client();
    for n in &cluster.nodes {
        client
            .status_at(n.addr())
            .await
            .unwrap_or_else(|e| panic!("node {} stopped serving: {e}", n.id()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t52_nested_batches_are_refused_and_the_node_keeps_serving() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let g = new_group(&cluster).await;
    let client = cluster.client();
    put(&client, g, "k", b"v").await;
    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let mut node = client.node(&cluster.addr(leader).unwrap()).unwrap();

    // 400 KB of batches nested 200,000 deep (it used to overflow the
    // stack of the thread decoding it): the format version, then postcard's
    // variant index and item count.
    let mut deep = vec![seatfence_core::format::V1];
    for _ in 0..200_000 {
        deep.extend([3u8, 1]); // Command::Batch of one
    }
    deep.extend(&encoded_cmd(&Command::Delete { key: "k".into() })[1..]);
    let err = node
        .write(WriteRequest {
            group_id: g.0,
            command: deep,
            expected_term: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");

    // One level of batch from a client: the leader makes batches, not callers.
    let one = Command::Batch(vec![Command::Delete { key: "k".into() }]);
    for req in [
        node.write(WriteRequest {
            group_id: g.0,
            command: encoded_cmd(&one),
            expected_term: None,
        })
        .await
        .map(drop),
        node.write_batch(WriteBatchRequest {
            group_id: g.0,
            commands: vec![encoded_cmd(&one)],
            expected_term: None,
        })
        .await
        .map(drop),
    ] {
        let err = req.unwrap_err();
        assert!(err.message().contains("malformed_command"), "{err}");
    }
    all_serving(&cluster).await;
    let r = client
        .read_at(&cluster.addr(leader).unwrap(), g, "k")
        .await
        .unwrap();
    assert!(r.found && r.value == b"v", "k was not deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t52_an_oversized_owner_is_refused_by_every_replica() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let g = event(&cluster, "big-owner").await;
    let client = cluster.client();
    // 70 KB: more than a record key's two-byte owner length can say (it
    // used to panic inside apply, on every replica, at every restart).
    let err = client
        .write(g, &hold("big-owner", "o".repeat(70_000), 0))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("malformed_command") && err.to_string().contains("owner"),
        "{err}"
    );
    all_serving(&cluster).await;
    let (ev, _) = client.query(g, &Query::Event, true).await.unwrap();
    let QueryResult::Event(Some(ev)) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!((ev.available, ev.held), (6, 0), "nothing was held");
    let ok = client
        .write(g, &hold("big-owner", "alice".into(), 0))
        .await
        .unwrap();
    assert!(
        matches!(ok.response, Response::Event(ref r) if r.outcome.error_code().is_none()),
        "{:?}",
        ok.response
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t52_event_sizes_that_overflow_are_400_and_nothing_is_committed() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let edge = cluster.nodes[0].edge_url().unwrap();
    let http = HttpClient::default();
    let op = token(&cluster, "ops", true);
    let max = u64::from(u32::MAX);
    let sections: Vec<_> = (0..4)
        .map(|i| json!({"name": format!("S{i}"), "rows": max, "seats_per_row": max}))
        .collect();
    let a = http
        .post(
            &format!("{edge}/v1/events"),
            Some(&op),
            None,
            &json!({"event_id": "huge", "name": "huge", "home_region": "us-east",
                    "survival": "region", "sections": sections}),
        )
        .await
        .expect("the edge answers");
    assert_eq!(a.status.as_u16(), 400, "{}", a.body);
    let a = http
        .get(&format!("{edge}/v1/events/huge"), Some(&op))
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 404, "{}", a.body);
    all_serving(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t52_a_forged_time_in_a_write_batch_is_replaced_by_the_leaders() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let g = event(&cluster, "clock").await;
    let client = cluster.client();
    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let mut node = client.node(&cluster.addr(leader).unwrap()).unwrap();
    // A hold stamped a century ahead: it would expire every hold at once
    // and move the event's clock for good.
    let century = 100 * 365 * 24 * 3600 * 1000u64;
    let forged = hold("clock", "mallory".into(), now_ms() + century);
    node.write_batch(WriteBatchRequest {
        group_id: g.0,
        commands: vec![encoded_cmd(&forged)],
        expected_term: None,
    })
    .await
    .expect("the hold itself is fine");
    let (ev, _) = client.query(g, &Query::Event, true).await.unwrap();
    let QueryResult::Event(Some(ev)) = ev else {
        panic!("{ev:?}")
    };
    assert!(
        ev.clock_ms < now_ms() + Duration::from_secs(3600).as_millis() as u64,
        "the event's clock is the leader's, not the sender's: {}",
        ev.clock_ms
    );
    assert_eq!(ev.held, 1);
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
