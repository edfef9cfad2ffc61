//! `seatfence-client` against a real 3 regions × 3 nodes cluster: a home
//! region whose edge does not answer is left for the next region within
//! the call; a hold under one key is one hold however often it is sent
//! (the replay says so); a decided 409 is returned at once, not retried;
//! an answer below an epoch already seen is refused.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use seatfence_client::{Client, ClientError, ErrorCode, HoldRequest, RetryPolicy};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t71_the_client_fails_over_retries_once_and_fences() {
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = start_regions(dir.path(), 3, 3).await;
    let mut edges: BTreeMap<String, String> = cluster.edges().into_iter().collect();
    let seats: Vec<String> = (1..=10).map(|i| format!("S{i}")).collect();
    create_event(
        &cluster,
        &edges["eu-west"],
        json!({"event_id": "cli", "name": "Client", "home_region": "us-east", "seats": seats}),
    )
    .await;

    tracing::info!(
        "--- home region us-east, its edge not answering: the call goes to another region"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    edges.insert("us-east".into(), dead);
    let policy = RetryPolicy {
        // Generous: a bound against hangs only.
        deadline: Duration::from_secs(60),
        ..RetryPolicy::default()
    };
    let ann =
        Client::new("us-east", edges.clone(), &token(&cluster, "ann", false)).with_policy(policy);
    let req = HoldRequest::seats("cli", &["S1", "S2"]).with_key("ann-1");
    let first = ann.hold(&req).await.expect("a hold through another region");
    assert_eq!(first.status, 201, "{}", first.body);
    assert_ne!(first.region, "us-east");
    assert!(first.attempts >= 2, "the dead home edge was tried first");
    assert!(!first.replayed);
    assert!(first.request_id.is_some());
    assert_eq!(first.epoch, Some(1));

    tracing::info!("--- the same logical hold again: the same hold, marked a replay");
    let again = ann.hold(&req).await.unwrap();
    assert_eq!(again.body["hold_id"], first.body["hold_id"]);
    assert!(again.replayed, "{:?}", again);
    assert_ne!(again.region, "us-east");

    tracing::info!("--- bob wants S2: 409 seats_unavailable at once, never retried");
    let bob =
        Client::new("eu-west", edges.clone(), &token(&cluster, "bob", false)).with_policy(policy);
    match bob.hold(&HoldRequest::seats("cli", &["S2"])).await {
        Err(ClientError::Api {
            status, code, body, ..
        }) => {
            assert_eq!((status, code), (409, ErrorCode::SeatsUnavailable));
            assert_eq!(body["error"]["unavailable"], json!(["S2"]));
        }
        other => panic!("expected seats_unavailable, got {other:?}"),
    }
    let other = bob
        .hold(&HoldRequest::quantity("cli", None, 2))
        .await
        .unwrap();
    assert_eq!(other.body["seats"].as_array().unwrap().len(), 2);

    tracing::info!("--- an answer below an epoch already seen is refused");
    bob.fences().observe("cli", 7).unwrap();
    match bob.hold(&HoldRequest::quantity("cli", None, 1)).await {
        Err(ClientError::StaleEpoch {
            seen: 7, got: 1, ..
        }) => {}
        other => panic!("expected a stale epoch, got {other:?}"),
    }

    tracing::info!("--- reads and a cancel");
    let ev = ann.event("cli").await.unwrap();
    assert_eq!(ev.body["owner_region"], "us-east");
    let hold_id = first.body["hold_id"].as_str().unwrap();
    let cancelled = ann.cancel_hold(hold_id).await.unwrap();
    assert_eq!(cancelled.body["status"], "released", "{}", cancelled.body);
}
