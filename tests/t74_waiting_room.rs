//! The waiting room against a real 3 regions × 3 nodes cluster: buyers
//! join through every region before the opening and are drawn in one
//! random order (the same through every edge), later joiners follow by
//! arrival, admission keeps its rate, holds need the buyer's own ticket,
//! and a ticket holds the per-buyer limit, then is `ticket_used`.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use seatfence_testkit::http_client::{HttpAnswer, HttpClient};
use serde_json::{json, Value};

const EARLY_PER_REGION: usize = 40;
const RATE: u64 = 10;
/// Seconds from the event's creation to its opening: time enough for
/// every early join on a slow machine.
const OPENS_IN_SECS: u64 = 12;

fn buyer(region: usize, i: usize) -> String {
    format!("b{region}-{i}")
}

/// Every early buyer's place, each read through one of `r.edges` (polls
/// retried while a leader is elected).
async fn places(r: &Room) -> Vec<u64> {
    let mut now = Vec::new();
    for k in 0..3 * EARLY_PER_REGION {
        let b = buyer(k / EARLY_PER_REGION, k % EARLY_PER_REGION);
        let url = format!("{}/v1/events/room/queue/me", r.edges[k % 3]);
        let tok = r.token(&b);
        let v = eventually("a poll is answered", || async {
            let a = r.http.get(&url, Some(&tok)).await.ok()?;
            a.status.is_success().then_some(a.body)
        })
        .await;
        now.push(v["position"].as_u64().unwrap());
    }
    now
}

struct Room {
    http: HttpClient,
    edges: Vec<String>,
    cluster: seatfence_testkit::LocalCluster,
}

impl Room {
    fn token(&self, user: &str) -> String {
        token(&self.cluster, user, false)
    }

    async fn join(&self, edge: &str, user: &str) -> Value {
        let a = self
            .http
            .post(
                &format!("{edge}/v1/events/room/queue"),
                Some(&self.token(user)),
                None,
                &json!({}),
            )
            .await
            .unwrap();
        assert_eq!(
            a.status.as_u16(),
            200,
            "{user} joins via {edge}: {}",
            a.body
        );
        a.body
    }

    async fn me(&self, edge: &str, user: &str) -> Value {
        let a = self
            .http
            .get(
                &format!("{edge}/v1/events/room/queue/me"),
                Some(&self.token(user)),
            )
            .await
            .unwrap();
        assert_eq!(
            a.status.as_u16(),
            200,
            "{user} polls via {edge}: {}",
            a.body
        );
        a.body
    }

    async fn hold(&self, edge: &str, user: &str, ticket: Option<&str>, seat: &str) -> HttpAnswer {
        let headers: Vec<(&str, &str)> = ticket
            .map(|t| ("admission-ticket", t))
            .into_iter()
            .collect();
        self.http
            .post_with(
                &format!("{edge}/v1/holds"),
                Some(&self.token(user)),
                &headers,
                &json!({"event_id": "room", "seats": [seat]}),
            )
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t74_a_fair_queue_in_front_of_the_sale() {
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = start_regions(dir.path(), 3, 3).await;
    let by_region = cluster.edges();
    let edges: Vec<String> = ["us-east", "eu-west", "ap-south"]
        .iter()
        .map(|r| by_region[*r].clone())
        .collect();
    let opens_at_ms = (now_ms() / 1000 + OPENS_IN_SECS) * 1000;
    let seats: Vec<String> = (1..=20).map(|i| format!("S{i}")).collect();
    let created = create_event(
        &cluster,
        &edges[2],
        json!({"event_id": "room", "name": "Room", "home_region": "us-east", "seats": seats,
               "opens_at": rfc3339(opens_at_ms),
               "waiting_room": {"admit_per_sec": RATE, "ticket_ttl_secs": 300}}),
    )
    .await;
    let mut r = Room {
        http: HttpClient::default(),
        edges,
        cluster,
    };

    tracing::info!("--- before the opening: 40 buyers join through each region's edge");
    for region in 0..3 {
        let mut joins = tokio::task::JoinSet::new();
        for i in 0..EARLY_PER_REGION {
            let (http, tok) = (r.http.clone(), r.token(&buyer(region, i)));
            let url = format!("{}/v1/events/room/queue", r.edges[region]);
            joins.spawn(async move { http.post(&url, Some(&tok), None, &json!({})).await });
        }
        while let Some(answer) = joins.join_next().await {
            let a = answer.unwrap().unwrap();
            assert_eq!(a.status.as_u16(), 200, "{}", a.body);
            assert_eq!(a.body["state"], "waiting");
            assert_eq!(a.body["position"], Value::Null, "no place before the draw");
        }
    }
    assert!(
        now_ms() < opens_at_ms,
        "the early joins took longer than {OPENS_IN_SECS} s"
    );
    // Joining twice keeps the one place; a stranger cannot hold.
    r.join(&r.edges[1], &buyer(0, 0)).await;
    let a = r.hold(&r.edges[0], "stranger", None, "S1").await;
    assert_eq!(a.code(), Some("ticket_required"), "{}", a.body);
    let a = r.hold(&r.edges[0], &buyer(0, 1), None, "S1").await;
    assert_eq!(a.code(), Some("ticket_required"), "{}", a.body);

    tracing::info!("--- the opening's draw");
    let first = eventually("the draw places the early buyers", || async {
        let v = r.me(&r.edges[0], &buyer(0, 0)).await;
        v["position"].as_u64()
    })
    .await;
    assert!(first >= 1);
    // After the opening, later joiners follow by arrival.
    let mut late = Vec::new();
    for i in 0..3 {
        let v = r.join(&r.edges[i], &format!("late-{i}")).await;
        late.push(v["position"].as_u64().expect("a place at once"));
    }
    let early = (3 * EARLY_PER_REGION) as u64;
    assert_eq!(late, [early + 1, early + 2, early + 3]);

    tracing::info!("--- admission at {RATE} a second");
    let sample = || async {
        let v = r.me(&r.edges[1], "late-2").await;
        (now_ms(), v["queue_length"].as_u64().unwrap())
    };
    let (t0, q0) = sample().await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let (t1, q1) = sample().await;
    assert!(q1 > 0, "the queue drained before the second sample");
    // The rate within 5%, plus one admission for the sampling instants.
    let admitted = (q0 - q1) as f64;
    let expected = (t1 - t0) as f64 * RATE as f64 / 1000.0;
    assert!(
        (admitted - expected).abs() <= expected * 0.05 + 1.0,
        "admitted {admitted} in {} ms, expected {expected:.1}",
        t1 - t0
    );

    tracing::info!("--- every edge gives every early buyer the same place");
    let mut positions = Vec::new();
    for region in 0..3 {
        for i in 0..EARLY_PER_REGION {
            let b = buyer(region, i);
            let mut seen = BTreeSet::new();
            for edge in &r.edges {
                seen.insert(r.me(edge, &b).await["position"].as_u64().unwrap());
            }
            assert_eq!(
                seen.len(),
                1,
                "{b} has places {seen:?} through different edges"
            );
            positions.push(seen.into_iter().next().unwrap());
        }
    }
    let mut sorted = positions.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=early).collect::<Vec<_>>());
    assert_ne!(positions, sorted, "the draw kept the arrival order");
    for region in 0..3 {
        let front = positions[region * EARLY_PER_REGION..(region + 1) * EARLY_PER_REGION]
            .iter()
            .filter(|p| **p <= EARLY_PER_REGION as u64)
            .count();
        assert!(
            front < EARLY_PER_REGION,
            "region {region} took the whole front of the queue"
        );
    }

    tracing::info!("--- a leader kill and a move while admitting keep every place");
    let gid = created["group_id"].as_u64().unwrap();
    let leader = eventually("the group's leader", || {
        common::moves::leader_of(&r.cluster, gid)
    })
    .await;
    r.cluster.kill(leader).unwrap();
    // From here on, one edge per region on a running node.
    r.edges = ["us-east", "eu-west", "ap-south"]
        .iter()
        .map(|region| {
            let id = common::moves::region_nodes(region)
                .into_iter()
                .find(|id| *id != leader)
                .unwrap();
            let node = r.cluster.nodes.iter().find(|n| n.id() == id).unwrap();
            node.edge_url().unwrap()
        })
        .collect();
    assert_eq!(
        places(&r).await,
        positions,
        "places after the leader's kill"
    );
    let op = token(&r.cluster, "ops", true);
    let mv = common::moves::post_move(&r.edges[1], &op, "room", "eu-west").await;
    eventually("the move is done", || async {
        let m = common::moves::get_move(&r.edges[1], &op, &mv["move_id"]).await?;
        (m["state"] == "done").then_some(())
    })
    .await;
    assert_eq!(places(&r).await, positions, "places after the move");
    r.cluster.restart(leader).unwrap();

    tracing::info!("--- holds: only with the buyer's own ticket");
    let last = (0..3 * EARLY_PER_REGION)
        .find(|k| positions[*k] == early)
        .map(|k| buyer(k / EARLY_PER_REGION, k % EARLY_PER_REGION))
        .unwrap();
    let front = (0..3 * EARLY_PER_REGION)
        .find(|k| positions[*k] == 1)
        .map(|k| buyer(k / EARLY_PER_REGION, k % EARLY_PER_REGION))
        .unwrap();
    let admitted = r.me(&r.edges[2], &front).await;
    assert_eq!(admitted["state"], "admitted", "{admitted}");
    let ticket = admitted["ticket"].as_str().unwrap().to_string();
    let a = r.hold(&r.edges[1], &last, Some(&ticket), "S1").await;
    assert_eq!(
        a.code(),
        Some("ticket_invalid"),
        "another buyer's ticket: {}",
        a.body
    );
    let a = r
        .hold(&r.edges[1], &front, Some(&format!("{ticket}0")), "S1")
        .await;
    assert_eq!(
        a.code(),
        Some("ticket_invalid"),
        "a forged ticket: {}",
        a.body
    );
    let a = r.hold(&r.edges[1], &front, None, "S1").await;
    assert_eq!(a.code(), Some("ticket_required"), "no ticket: {}", a.body);
    let a = r.hold(&r.edges[1], &front, Some(&ticket), "S1").await;
    assert_eq!(a.status.as_u16(), 201, "the buyer's own ticket: {}", a.body);

    tracing::info!("--- operators change the rate");
    let a = r
        .http
        .post(
            &format!("{}/v1/admin/events/room/waiting-room", r.edges[0]),
            Some(&op),
            None,
            &json!({"admit_per_sec": 500}),
        )
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    assert_eq!(a.body["waiting_room"]["admit_per_sec"], 500);
    assert_eq!(
        a.body["waiting_room"]["ticket_ttl_secs"], 300,
        "a new rate keeps the ticket time"
    );
    eventually("the event shows the new rate", || async {
        let a = r
            .http
            .get(&format!("{}/v1/events/room", r.edges[2]), Some(&op))
            .await
            .ok()?;
        (a.body["waiting_room"]["admit_per_sec"] == 500).then_some(())
    })
    .await;
    eventually("everyone is admitted at the new rate", || async {
        let v = r.me(&r.edges[0], "late-2").await;
        (v["state"] == "admitted").then_some(())
    })
    .await;
    tracing::info!("--- a ticket whose time ran out");
    let opens_at_ms = (now_ms() / 1000 + 2) * 1000;
    create_event(
        &r.cluster,
        &r.edges[0],
        json!({"event_id": "room-short", "name": "Short", "home_region": "us-east",
               "seats": ["T1", "T2"], "max_seats_per_buyer": 1,
               "opens_at": rfc3339(opens_at_ms),
               "waiting_room": {"admit_per_sec": 100, "ticket_ttl_secs": 10}}),
    )
    .await;
    let tok = r.token("slow");
    let url = format!("{}/v1/events/room-short/queue", r.edges[0]);
    let a = r
        .http
        .post(&url, Some(&tok), None, &json!({}))
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    let admitted = eventually("the slow buyer is admitted", || async {
        let a = r.http.get(&format!("{url}/me"), Some(&tok)).await.ok()?;
        (a.body["state"] == "admitted").then_some(a.body)
    })
    .await;
    let ticket = admitted["ticket"].as_str().unwrap().to_string();
    eventually("the admission lapses", || async {
        let a = r.http.get(&format!("{url}/me"), Some(&tok)).await.ok()?;
        (a.body["state"] == "lapsed").then_some(())
    })
    .await;
    let a = r
        .http
        .post_with(
            &format!("{}/v1/holds", r.edges[1]),
            Some(&tok),
            &[("admission-ticket", ticket.as_str())],
            &json!({"event_id": "room-short", "seats": ["T1"]}),
        )
        .await
        .unwrap();
    assert_eq!(
        a.code(),
        Some("ticket_invalid"),
        "a lapsed ticket: {}",
        a.body
    );
    let again = r
        .http
        .post(&url, Some(&tok), None, &json!({}))
        .await
        .unwrap();
    assert_eq!(
        again.body["state"], "admitted",
        "joined again at the back: {}",
        again.body
    );
    assert_eq!(again.body["position"], 2, "{}", again.body);
    tracing::info!("--- a ticket holds the per-buyer limit (one seat), then it is used");
    let ticket = again.body["ticket"].as_str().unwrap().to_string();
    let hold = |seat: &'static str| {
        let (http, tok, ticket) = (r.http.clone(), tok.clone(), ticket.clone());
        let url = format!("{}/v1/holds", r.edges[2]);
        async move {
            http.post_with(
                &url,
                Some(&tok),
                &[("admission-ticket", ticket.as_str())],
                &json!({"event_id": "room-short", "seats": [seat]}),
            )
            .await
            .unwrap()
        }
    };
    let a = hold("T1").await;
    assert_eq!(a.status.as_u16(), 201, "the new ticket: {}", a.body);
    let a = hold("T2").await;
    assert_eq!(
        (a.status.as_u16(), a.code()),
        (409, Some("ticket_used")),
        "{}",
        a.body
    );

    // The group's leader reports the room: one ticket used.
    let all = common::moves::all_metrics(&common::moves::all_edges(&r.cluster)).await;
    assert!(
        all.contains("seatfence_queue_tickets_used_total{event=\"room\"} 1"),
        "{}",
        all.lines()
            .filter(|l| l.contains("queue"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
