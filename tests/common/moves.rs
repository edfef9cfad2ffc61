//! Helpers of the ownership-move tests (`t95`, `t96`): hold traffic from
//! edges of every region, and the checks every move must pass.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seatfence_core::inventory::{EventAction, EventCommand, Outcome, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, Response, UserId};
use seatfence_testkit::cluster::LocalCluster;
use seatfence_testkit::http_client::HttpClient;
use serde_json::{json, Value};

use super::*;

/// Nodes of each region: ids are round-robin over the regions.
pub fn region_nodes(region: &str) -> Vec<u64> {
    let first = match region {
        "us-east" => 1,
        "eu-west" => 2,
        "ap-south" => 3,
        other => panic!("region {other}"),
    };
    vec![first, first + 3, first + 6]
}

/// Every edge URL, by node id.
pub fn all_edges(cluster: &LocalCluster) -> Vec<String> {
    cluster
        .nodes
        .iter()
        .map(|n| n.edge_url().expect("every node is an edge"))
        .collect()
}

/// One acknowledged hold.
#[derive(Clone)]
pub struct Acked {
    pub hold_id: String,
    pub seat: String,
    pub token: String,
    /// The buyer (the token's subject).
    pub user: String,
}

/// Buyers holding one seat at a time through edges of every region. A
/// request whose outcome is unknown (5xx, connection error) is retried with
/// the same Idempotency-Key, on the next edge when the node is down.
pub struct Traffic {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Acked>>>,
    /// Requests given up on with their outcome unknown.
    unknown: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Traffic {
    pub fn start(cluster: &LocalCluster, event: &str, workers_per_region: usize) -> Traffic {
        let edges = all_edges(cluster);
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let unknown = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for w in 0..3 * workers_per_region {
            let (stop, acked, unknown) = (stop.clone(), acked.clone(), unknown.clone());
            let edges = edges.clone();
            let user = format!("{event}-buyer{w}");
            let tok = token(cluster, &user, false);
            let event = event.to_string();
            tasks.push(tokio::spawn(async move {
                let http = HttpClient::default();
                // Start at an edge of region w % 3.
                let mut at = w % 3;
                let mut n = 0u64;
                'holds: while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let key = format!("w{w}-{n}");
                    let body = json!({"event_id": event, "quantity": 1});
                    for _attempt in 0..60 {
                        let url = format!("{}/v1/holds", edges[at % edges.len()]);
                        match http.post(&url, Some(&tok), Some(&key), &body).await {
                            Ok(a) if a.status.as_u16() == 201 => {
                                acked.lock().unwrap().push(Acked {
                                    hold_id: a.body["hold_id"].as_str().unwrap().to_string(),
                                    seat: a.body["seats"][0].as_str().unwrap().to_string(),
                                    token: tok.clone(),
                                    user: user.clone(),
                                });
                                tokio::time::sleep(Duration::from_millis(60)).await;
                                continue 'holds;
                            }
                            Ok(a) if a.status.as_u16() == 409 => {
                                assert_eq!(a.code(), Some("seats_unavailable"), "{}", a.body);
                                return;
                            }
                            Ok(a) if a.status.is_client_error() && a.status.as_u16() != 429 => {
                                panic!("hold refused: {} {}", a.status, a.body)
                            }
                            Ok(_) => {}
                            // The node is down: try another edge.
                            Err(_) => at += 1,
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    unknown.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        Traffic {
            stop,
            acked,
            unknown,
            tasks,
        }
    }

    pub fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// The holds acknowledged so far.
    pub fn acked_now(&self) -> Vec<Acked> {
        self.acked.lock().unwrap().clone()
    }

    pub async fn finish(self) -> (Vec<Acked>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.expect("traffic worker");
        }
        let acked = self.acked.lock().unwrap().clone();
        (acked, self.unknown.load(Ordering::Relaxed))
    }
}

/// Every acknowledged hold is present, held, with its seat; no seat is held
/// twice; the counters add up and count every acknowledged hold (plus at
/// most the requests whose outcome stayed unknown).
pub async fn verify_holds(edge: &str, event: &str, acked: &[Acked], unknown: u64, capacity: u64) {
    let http = HttpClient::default();
    let mut seats: BTreeMap<&str, &str> = BTreeMap::new();
    for a in acked {
        if let Some(other) = seats.insert(&a.seat, &a.hold_id) {
            panic!("seat {} acknowledged to {other} and {}", a.seat, a.hold_id);
        }
    }
    for a in acked {
        let r = http
            .get(&format!("{edge}/v1/holds/{}", a.hold_id), Some(&a.token))
            .await
            .unwrap();
        assert_eq!(r.status.as_u16(), 200, "hold {}: {}", a.hold_id, r.body);
        assert_eq!(r.body["status"], "held", "{}", r.body);
        assert_eq!(r.body["seats"], json!([a.seat]), "{}", r.body);
    }
    let av = http
        .get(
            &format!("{edge}/v1/events/{event}/availability"),
            Some(&acked[0].token),
        )
        .await
        .unwrap();
    let n = |k: &str| av.body[k].as_u64().unwrap();
    assert_eq!(n("capacity"), capacity);
    assert_eq!(
        n("available") + n("held") + n("sold"),
        capacity,
        "{}",
        av.body
    );
    let held = n("held");
    assert!(
        held >= acked.len() as u64 && held <= acked.len() as u64 + unknown,
        "held {held}, acknowledged {}, unknown {unknown}",
        acked.len()
    );
}

pub async fn post_move(edge: &str, op: &str, event: &str, to: &str) -> Value {
    let a = HttpClient::default()
        .post(
            &format!("{edge}/v1/admin/events/{event}/move"),
            Some(op),
            None,
            &json!({"to_region": to}),
        )
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 202, "{}", a.body);
    assert_eq!(
        a.epoch,
        a.body["from_epoch"].as_u64(),
        "the answer carries the event's fence"
    );
    a.body
}

pub async fn get_move(edge: &str, op: &str, id: &Value) -> Option<Value> {
    let a = HttpClient::default()
        .get(&format!("{edge}/v1/admin/moves/{id}"), Some(op))
        .await
        .ok()?;
    a.status.is_success().then_some(a.body)
}

/// The node the group's leader runs on, as the running nodes report it.
pub async fn leader_of(cluster: &LocalCluster, group: u64) -> Option<u64> {
    let client = cluster.client();
    let mut best: Option<(u64, u64)> = None;
    for n in cluster.nodes.iter().filter(|n| n.is_running()) {
        if let Ok(s) = client.status_at(n.addr()).await {
            for g in s.groups.iter().filter(|g| g.group_id == group) {
                if g.role == "leader" && best.is_none_or(|(t, _)| g.term > t) {
                    best = Some((g.term, n.id()));
                }
            }
        }
    }
    best.map(|(_, id)| id)
}

/// After a move of `event` (group `gid`) to `to`: every edge reports the
/// new epoch and owner, the leader is in `to`, the old voters stop hosting
/// the group, and a writer still using the old epoch is refused every time.
pub async fn verify_moved(cluster: &LocalCluster, event: &str, gid: u64, to: &str, from: &str) {
    let http = HttpClient::default();
    let tok = token(cluster, "reader", false);
    for edge in all_edges(cluster) {
        eventually(&format!("{edge} reports epoch 2 in {to}"), || async {
            let a = http
                .get(&format!("{edge}/v1/events/{event}"), Some(&tok))
                .await
                .ok()?;
            (a.body["epoch"] == 2 && a.body["owner_region"] == to && a.body["state"] == "active")
                .then_some(())
        })
        .await;
    }
    let leader = eventually("a leader", || leader_of(cluster, gid)).await;
    assert!(
        region_nodes(to).contains(&leader),
        "leader {leader} is not in {to}"
    );
    let client = cluster.client();
    for old in region_nodes(from) {
        let addr = cluster.addr(old).unwrap();
        eventually(&format!("node {old} stops hosting group {gid}"), || async {
            let s = client.status_at(&addr).await.ok()?;
            (!s.groups.iter().any(|g| g.group_id == gid)).then_some(())
        })
        .await;
    }

    tracing::info!("--- a zombie writer with the old epoch is refused every time");
    let held = || async {
        http.get(
            &format!("{}/v1/events/{event}/availability", all_edges(cluster)[1]),
            Some(&tok),
        )
        .await
        .unwrap()
        .body["held"]
            .clone()
    };
    let before = held().await;
    for i in 0..10 {
        let cmd = Command::event(EventCommand {
            event_id: EventId(event.to_string()),
            epoch: Epoch(1),
            now_ms: 0,
            idempotency: Some((UserId("zombie".into()), format!("z{i}"))),
            action: EventAction::Hold {
                owner: UserId("zombie".into()),
                pick: SeatPick::Quantity {
                    section: None,
                    quantity: 1,
                },
            },
        });
        let out = client.write(GroupId(gid), &cmd).await.expect("write");
        match out.response {
            Response::Event(r) => match r.outcome {
                Outcome::StaleEpoch { current, owner } => {
                    assert_eq!((current, owner.0.as_str()), (Epoch(2), to))
                }
                other => panic!("zombie write {i} was not refused: {other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
    let after = held().await;
    assert_eq!(before, after, "zombie writes changed nothing");
}

pub async fn create(cluster: &LocalCluster, event: &str, home: &str, rows: u32) -> (u64, u64) {
    let edge = all_edges(cluster)[0].clone();
    let c = create_event(
        cluster,
        &edge,
        json!({"event_id": event, "name": event, "home_region": home,
               "sections": [{"name": "A", "rows": rows, "seats_per_row": 100}]}),
    )
    .await;
    (c["group_id"].as_u64().unwrap(), u64::from(rows) * 100)
}

/// Every edge's /metrics, concatenated.
pub async fn all_metrics(edges: &[String]) -> String {
    let http = HttpClient::default();
    let mut all = String::new();
    for e in edges {
        if let Ok(a) = http.get(&format!("{e}/metrics"), None).await {
            all += a.body.as_str().unwrap_or_default();
        }
    }
    all
}
