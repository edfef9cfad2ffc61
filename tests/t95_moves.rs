//! Ownership moves against real processes (3 regions × 3 nodes), under
//! continuous hold traffic from edges in every region: a move completes
//! with every acknowledged hold present once and no seat held twice; the
//! coordinator and the group's leader are SIGKILLed at every step and the
//! move still completes; a zombie writer with the old epoch is refused every
//! time; an abort before the membership change leaves the event where it was.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use seatfence::cluster::LocalCluster;
use seatfence::http_client::HttpClient;
use seatfence_core::inventory::{EventAction, EventCommand, Outcome, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, Response, UserId};
use serde_json::{json, Value};

/// Nodes of each region: ids are round-robin over the regions.
fn region_nodes(region: &str) -> Vec<u64> {
    let first = match region {
        "us-east" => 1,
        "eu-west" => 2,
        "ap-south" => 3,
        other => panic!("region {other}"),
    };
    vec![first, first + 3, first + 6]
}

/// Every edge URL, by node id.
fn all_edges(cluster: &LocalCluster) -> Vec<String> {
    cluster
        .nodes
        .iter()
        .map(|n| n.edge_url().expect("every node is an edge"))
        .collect()
}

/// One acknowledged hold.
#[derive(Clone)]
struct Acked {
    hold_id: String,
    seat: String,
    token: String,
}

/// Buyers holding one seat at a time through edges of every region. A
/// request whose outcome is unknown (5xx, connection error) is retried with
/// the same Idempotency-Key, on the next edge when the node is down.
struct Traffic {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Acked>>>,
    /// Requests given up on with their outcome unknown.
    unknown: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Traffic {
    fn start(cluster: &LocalCluster, event: &str, workers_per_region: usize) -> Traffic {
        let edges = all_edges(cluster);
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let unknown = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for w in 0..3 * workers_per_region {
            let (stop, acked, unknown) = (stop.clone(), acked.clone(), unknown.clone());
            let edges = edges.clone();
            let tok = token(cluster, &format!("{event}-buyer{w}"), false);
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

    fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    async fn finish(self) -> (Vec<Acked>, u64) {
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
async fn verify_holds(edge: &str, event: &str, acked: &[Acked], unknown: u64, capacity: u64) {
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

async fn post_move(edge: &str, op: &str, event: &str, to: &str) -> Value {
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
    a.body
}

async fn get_move(edge: &str, op: &str, id: &Value) -> Option<Value> {
    let a = HttpClient::default()
        .get(&format!("{edge}/v1/admin/moves/{id}"), Some(op))
        .await
        .ok()?;
    a.status.is_success().then_some(a.body)
}

/// The node the group's leader runs on, as the running nodes report it.
async fn leader_of(cluster: &LocalCluster, group: u64) -> Option<u64> {
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
async fn verify_moved(cluster: &LocalCluster, event: &str, gid: u64, to: &str, from: &str) {
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
    let before = http
        .get(
            &format!("{}/v1/events/{event}/availability", all_edges(cluster)[1]),
            Some(&tok),
        )
        .await
        .unwrap()
        .body["held"]
        .clone();
    for i in 0..10 {
        let cmd = Command::Event(EventCommand {
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
    let after = http
        .get(
            &format!("{}/v1/events/{event}/availability", all_edges(cluster)[1]),
            Some(&tok),
        )
        .await
        .unwrap()
        .body["held"]
        .clone();
    assert_eq!(before, after, "zombie writes changed nothing");
}

async fn create(cluster: &LocalCluster, event: &str, home: &str, rows: u32) -> (u64, u64) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t95_move_under_load_from_every_region() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = start_regions(dir.path(), 3, 3).await;
    let edges = all_edges(&cluster);
    let op = token(&cluster, "ops", true);
    let (gid, capacity) = create(&cluster, "mv", "us-east", 50).await;
    cluster.wait_leader(GroupId(gid), PATIENCE).await.unwrap();

    let traffic = Traffic::start(&cluster, "mv", 2);
    eventually("holds flowing", || async {
        (traffic.acked_count() >= 50).then_some(())
    })
    .await;
    let before_move = traffic.acked_count();

    tracing::info!("--- move us-east -> eu-west with `seatfence ctl move --wait`");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_seatfence"))
        .args(["ctl", "--edge", &edges[2], "--token", &op])
        .args(["move", "mv", "--to", "eu-west", "--wait"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("6/6 done") && text.contains("write pause"),
        "{text}"
    );
    tracing::info!("ctl move printed:\n{text}");
    let at_done = traffic.acked_count();
    eventually("holds flowing after the move", || async {
        (traffic.acked_count() >= at_done + 50).then_some(())
    })
    .await;
    let (acked, unknown) = traffic.finish().await;
    assert!(before_move >= 50 && acked.len() > at_done);
    tracing::info!(acked = acked.len(), unknown, "traffic done");

    verify_holds(&edges[4], "mv", &acked, unknown, capacity).await;
    verify_moved(&cluster, "mv", gid, "eu-west", "us-east").await;

    let http = HttpClient::default();
    let moves = http
        .get(&format!("{}/v1/admin/moves", edges[0]), Some(&op))
        .await
        .unwrap();
    let m = &moves.body["moves"][0];
    assert_eq!(
        (m["event_id"].clone(), m["state"].clone(), m["step"].clone()),
        (json!("mv"), json!("done"), json!("done"))
    );
    assert!(m["pause_ms"].is_u64(), "{m}");
    let voters: BTreeSet<u64> = m["to_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(voters, region_nodes("eu-west").into_iter().collect());
    let again = http
        .post(
            &format!("{}/v1/admin/events/mv/move", edges[0]),
            Some(&op),
            None,
            &json!({"to_region": "eu-west"}),
        )
        .await
        .unwrap();
    assert_eq!(
        (again.status.as_u16(), again.code()),
        (409, Some("already_owner"))
    );
    let metrics = futures_metrics(&edges).await;
    assert!(
        metrics.contains("seatfence_moves_total{result=\"completed\"} 1"),
        "one coordinator counted the move"
    );
}

/// Every edge's /metrics, concatenated.
async fn futures_metrics(edges: &[String]) -> String {
    let http = HttpClient::default();
    let mut all = String::new();
    for e in edges {
        if let Ok(a) = http.get(&format!("{e}/metrics"), None).await {
            all += a.body.as_str().unwrap_or_default();
        }
    }
    all
}

async fn start_slow_moves(dir: &Path) -> LocalCluster {
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let moves = seatfence_raft::config::MovesConfig {
        step_delay_ms: 1500,
        retired_grace_ms: 2000,
        ..Default::default()
    };
    let cluster = LocalCluster::start_regions_moves(bin, dir, 3, 3, test_tuning(), moves)
        .expect("start cluster");
    cluster.wait_ready(PATIENCE).await.unwrap();
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t95_kill_coordinator_and_leader_at_every_step() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_slow_moves(dir.path()).await;
    let op = token(&cluster, "ops", true);
    let steps = [
        "add_learners",
        "change_membership",
        "transfer_leader",
        "bump_epoch",
        "update_directory",
    ];
    for (i, step) in steps.iter().enumerate() {
        let event = format!("k{i}");
        tracing::info!("--- step {step}: kill the coordinator, then the group's leader");
        let (gid, capacity) = create(&cluster, &event, "us-east", 10).await;
        cluster.wait_leader(GroupId(gid), PATIENCE).await.unwrap();
        let traffic = Traffic::start(&cluster, &event, 1);
        eventually("holds flowing", || async {
            (traffic.acked_count() >= 10).then_some(())
        })
        .await;
        // Ask an edge in ap-south (never killed here: it is neither in the
        // source nor the target region).
        let edge = cluster.nodes[2].edge_url().unwrap();
        let m = post_move(&edge, &op, &event, "eu-west").await;
        let id = m["move_id"].clone();
        eventually(&format!("move at {step}"), || async {
            let m = get_move(&edge, &op, &id).await?;
            assert_eq!(m["state"], "running", "{m}");
            (m["step"] == *step).then_some(())
        })
        .await;
        let coordinator = leader_of(&cluster, 0).await.expect("directory leader");
        cluster.kill(coordinator).unwrap();
        let group_leader = eventually("group leader", || leader_of(&cluster, gid)).await;
        cluster.kill(group_leader).unwrap();
        tracing::info!(coordinator, group_leader, "killed");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        cluster.restart(coordinator).unwrap();
        if group_leader != coordinator {
            cluster.restart(group_leader).unwrap();
        }
        let end = eventually("move finished", || async {
            let m = get_move(&edge, &op, &id).await?;
            (m["state"] != "running").then_some(m)
        })
        .await;
        assert_eq!(end["state"], "done", "{end}");
        let before = traffic.acked_count();
        eventually("holds flowing after the move", || async {
            (traffic.acked_count() >= before + 10).then_some(())
        })
        .await;
        let (acked, unknown) = traffic.finish().await;
        verify_holds(&edge, &event, &acked, unknown, capacity).await;
        verify_moved(&cluster, &event, gid, "eu-west", "us-east").await;
    }

    tracing::info!("--- abort before the membership change: the event stays where it was");
    let (gid, _) = create(&cluster, "ab", "us-east", 10).await;
    cluster.wait_leader(GroupId(gid), PATIENCE).await.unwrap();
    let edge = cluster.nodes[2].edge_url().unwrap();
    let m = post_move(&edge, &op, "ab", "ap-south").await;
    let http = HttpClient::default();
    let a = http
        .post(
            &format!("{edge}/v1/admin/moves/{}/abort", m["move_id"]),
            Some(&op),
            None,
            &json!({}),
        )
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    assert_eq!(a.body["state"], "aborted");
    let client = cluster.client();
    for n in region_nodes("ap-south") {
        let addr = cluster.addr(n).unwrap();
        eventually(&format!("node {n} does not host group {gid}"), || async {
            let s = client.status_at(&addr).await.ok()?;
            (!s.groups.iter().any(|g| g.group_id == gid)).then_some(())
        })
        .await;
    }
    let leader = eventually("a leader", || leader_of(&cluster, gid)).await;
    let st = client
        .membership(
            GroupId(gid),
            &seatfence_raft::membership::MembershipOp::Status,
        )
        .await
        .unwrap();
    assert!(st.learners.is_empty(), "learners removed: {st:?}");
    assert!(region_nodes("us-east").contains(&leader));
    let tok = token(&cluster, "late", false);
    let ev = http
        .get(&format!("{edge}/v1/events/ab"), Some(&tok))
        .await
        .unwrap();
    assert_eq!(
        (ev.body["epoch"].clone(), ev.body["owner_region"].clone()),
        (json!(1), json!("us-east"))
    );
    let hold = http
        .post(
            &format!("{edge}/v1/holds"),
            Some(&tok),
            None,
            &json!({"event_id": "ab", "quantity": 2}),
        )
        .await
        .unwrap();
    assert_eq!(hold.status.as_u16(), 201, "{}", hold.body);
    let done_abort = http
        .post(
            &format!("{edge}/v1/admin/moves/1/abort"),
            Some(&op),
            None,
            &json!({}),
        )
        .await
        .unwrap();
    assert_eq!(
        (done_abort.status.as_u16(), done_abort.code()),
        (409, Some("move_not_abortable"))
    );
}
