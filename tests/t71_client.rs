//! `seatfence-client` against a real 3 regions × 3 nodes cluster: a home
//! region whose edge does not answer is left for the next region within
//! the call; a hold under one key is one hold however often it is sent
//! (the replay says so); a decided 409 is returned at once, not retried;
//! an answer below an epoch already seen is refused; the leader hint is
//! followed and a stale one recovers; a retried hold through a killed
//! leader is one hold; the waiting room end to end.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use seatfence_client::edges::Edges;
use seatfence_client::{Client, ClientError, ErrorCode, HoldRequest, RetryPolicy};
use seatfence_core::GroupId;
use seatfence_testkit::LocalCluster;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t71_the_client_fails_over_retries_once_and_fences() {
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_regions(dir.path(), 3, 3).await;
    let mut edges: BTreeMap<String, String> = cluster.edges().into_iter().collect();
    let seats: Vec<String> = (1..=20).map(|i| format!("S{i}")).collect();
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

    hints_and_a_killed_leader(&mut cluster, policy).await;
    waiting_room(&cluster, policy).await;
}

/// A client given every node's edge, at home in `home`, as `user`.
fn every_edge(cluster: &LocalCluster, home: &str, user: &str, policy: RetryPolicy) -> Client {
    let list = cluster.all_edges().into_iter().map(|(_, r, u)| (r, u));
    Client::with_edges(Edges::new(home, list), &token(cluster, user, false)).with_policy(policy)
}

/// The edge URL of node `id`.
fn edge_of(cluster: &LocalCluster, id: u64) -> String {
    let found = cluster.all_edges().into_iter().find(|(n, _, _)| *n == id);
    found.expect("node has an edge").2
}

async fn hints_and_a_killed_leader(cluster: &mut LocalCluster, policy: RetryPolicy) {
    tracing::info!("--- the leader hint: the second request goes straight to the leader's edge");
    let cy = every_edge(cluster, "ap-south", "cy", policy);
    let ev = cy.event("cli").await.unwrap();
    let group = GroupId(ev.body["group_id"].as_u64().expect("group_id"));
    let leader = cluster
        .wait_leader(group, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        ev.leader_edge.as_deref(),
        Some(edge_of(cluster, leader).as_str())
    );
    let h = cy.hold(&HoldRequest::seats("cli", &["S15"])).await.unwrap();
    assert_eq!(h.edge, edge_of(cluster, leader), "followed the hint");
    assert!(h.at_leader_edge(), "{h:?}");
    let hold_id = h.body["hold_id"].as_str().unwrap().to_string();

    tracing::info!("--- without hints the same client's requests stay in its region");
    let plain = every_edge(cluster, "ap-south", "cy", policy).follow_hints(false);
    let p = plain
        .hold(&HoldRequest::seats("cli", &["S16"]))
        .await
        .unwrap();
    assert_eq!(p.region, "ap-south");
    assert!(
        !p.at_leader_edge(),
        "ap-south does not lead a us-east event"
    );

    tracing::info!("--- leadership moves: the stale hint is forwarded, then replaced");
    let op =
        Client::new("us-east", cluster.edges(), &token(cluster, "ops", true)).with_policy(policy);
    let view = op.cluster().await.unwrap().body;
    let voters = view["groups"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["group_id"] == group.0))
        .map(|g| g["voters"].clone())
        .expect("the group in the cluster view");
    let to = voters
        .as_array()
        .and_then(|v| v.iter().filter_map(|n| n.as_u64()).find(|n| *n != leader))
        .expect("another voter");
    op.transfer_leader(group.0, to).await.expect("transfer");
    let stale = eventually("an answer naming the new leader's edge", || async {
        let a = cy.get_hold(&hold_id).await.unwrap();
        (a.leader_edge.as_deref() == Some(edge_of(cluster, to).as_str())).then_some(a)
    })
    .await;
    assert_eq!(
        stale.edge,
        edge_of(cluster, leader),
        "asked where the old hint pointed"
    );
    let fresh = cy.get_hold(&hold_id).await.unwrap();
    assert_eq!(
        fresh.edge,
        edge_of(cluster, to),
        "the new hint was followed"
    );

    tracing::info!("--- the leader's node killed while a keyed hold is retried: one hold");
    cluster.kill(to).unwrap();
    let req = HoldRequest::seats("cli", &["S17", "S18"]).with_key("cy-kill");
    let a = cy.hold(&req).await.expect("the hold through another node");
    assert_ne!(a.edge, edge_of(cluster, to), "the dead edge was left");
    let b = cy.hold(&req).await.unwrap();
    assert_eq!(a.body["hold_id"], b.body["hold_id"]);
    assert!(b.replayed);
    let again = cy.hold(&HoldRequest::seats("cli", &["S17"])).await;
    assert!(
        matches!(
            &again,
            Err(ClientError::Api {
                code: ErrorCode::SeatsUnavailable,
                ..
            })
        ),
        "S17 is held once, by that hold: {again:?}"
    );
    cluster.restart(to).unwrap();
}

async fn waiting_room(cluster: &LocalCluster, policy: RetryPolicy) {
    tracing::info!("--- the waiting room: join, poll as the server says, hold with the ticket");
    let op =
        Client::new("us-east", cluster.edges(), &token(cluster, "ops", true)).with_policy(policy);
    let opens = rfc3339((now_ms() / 1000 + 3) * 1000);
    let created = op
        .create_event(json!({
            "event_id": "cli-q", "name": "Queued", "home_region": "eu-west",
            "sections": [{"name": "A", "rows": 2, "seats_per_row": 5}],
            "opens_at": opens,
            "waiting_room": {"admit_per_sec": 5, "ticket_ttl_secs": 300},
        }))
        .await
        .expect("create");
    assert_eq!(created.status, 201);
    let dee = every_edge(cluster, "us-east", "dee", policy);
    match dee.hold(&HoldRequest::quantity("cli-q", None, 1)).await {
        Err(ClientError::Api { code, .. }) => {
            assert!(
                matches!(code, ErrorCode::TicketRequired | ErrorCode::SaleNotOpen),
                "{code:?}"
            )
        }
        other => panic!("a hold without a ticket: {other:?}"),
    }
    let s = dee
        .wait_for_admission("cli-q", Duration::from_secs(60))
        .await
        .unwrap()
        .expect("admitted within a minute");
    assert_eq!(s.state, "admitted");
    let ticket = s.ticket.unwrap();
    let h = dee
        .hold(&HoldRequest::quantity("cli-q", None, 2).with_ticket(&ticket))
        .await
        .expect("a hold with the ticket");
    assert_eq!(h.body["seats"].as_array().unwrap().len(), 2);
    let eve = every_edge(cluster, "ap-south", "eve", policy);
    match eve
        .hold(&HoldRequest::quantity("cli-q", None, 1).with_ticket(&ticket))
        .await
    {
        Err(ClientError::Api { status, code, .. }) => {
            assert_eq!((status, code), (403, ErrorCode::TicketInvalid))
        }
        other => panic!("another buyer's ticket: {other:?}"),
    }
}
