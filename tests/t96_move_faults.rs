//! Ownership moves under faults (3 regions × 3 nodes, each step slowed to
//! 1.5 s so the test can act in the middle): the coordinator (the
//! directory's leader) and the event group's leader SIGKILLed at every step,
//! one move per step, each completing with the guarantees of `t95`; the old
//! region cut off (every node paused) right after the membership change,
//! its replicas accepting no write when they come back; an abort before the
//! membership change leaving the event where it was.

mod common;

use std::path::Path;
use std::time::Duration;

use common::moves::*;
use common::*;
use seatfence_core::GroupId;
use seatfence_testkit::cluster::LocalCluster;
use seatfence_testkit::http_client::HttpClient;
use serde_json::json;

/// A 3 regions × 3 nodes cluster whose moves pause 1.5 s after each step,
/// and an operator token. `SEATFENCE_KEEP_TEST_DIR=1` keeps the nodes'
/// data and logs after a failure.
struct Slow {
    cluster: LocalCluster,
    op: String,
    _dir: Option<tempfile::TempDir>,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

async fn slow_cluster() -> Slow {
    let serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let (dir, path) = if std::env::var_os("SEATFENCE_KEEP_TEST_DIR").is_some() {
        let p = dir.keep();
        eprintln!("test data in {}", p.display());
        (None, p)
    } else {
        let p = dir.path().to_path_buf();
        (Some(dir), p)
    };
    let cluster = start_slow_moves(&path).await;
    let op = token(&cluster, "ops", true);
    Slow {
        cluster,
        op,
        _dir: dir,
        _serial: serial,
    }
}

async fn start_slow_moves(dir: &Path) -> LocalCluster {
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let moves = seatfence_regions::config::MovesConfig {
        step_delay_ms: 1500,
        retired_grace_ms: 2000,
        balance_every_ms: 0,
        rebalance_parallel: 0,
        ..Default::default()
    };
    let cluster = LocalCluster::builder(dir)
        .regions(3, 3)
        .tuning(test_tuning())
        .moves(moves)
        .start(bin)
        .expect("start cluster");
    cluster.wait_ready(PATIENCE).await.unwrap();
    cluster
}

const STEPS: [&str; 5] = [
    "add_learners",
    "change_membership",
    "transfer_leader",
    "bump_epoch",
    "update_directory",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t96_kill_coordinator_and_leader_at_every_step() {
    let mut w = slow_cluster().await;
    for (i, step) in STEPS.iter().enumerate() {
        kill_at_step(&mut w.cluster, &w.op, i, step).await;
    }
}

/// Move event `k{i}` us-east → eu-west under hold traffic; when the move
/// reaches `step`, SIGKILL the coordinator (the directory's leader), then
/// the group's leader, restart them; the move completes with the
/// guarantees of `t95`.
async fn kill_at_step(cluster: &mut LocalCluster, op: &str, i: usize, step: &str) {
    let op = op.to_string();
    let event = format!("k{i}");
    tracing::info!("--- step {step}: kill the coordinator, then the group's leader");
    let (gid, capacity) = create(cluster, &event, "us-east", 10).await;
    cluster.wait_leader(GroupId(gid), PATIENCE).await.unwrap();
    let traffic = Traffic::start(cluster, &event, 1);
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
    let coordinator = leader_of(cluster, 0).await.expect("directory leader");
    cluster.kill(coordinator).unwrap();
    let group_leader = eventually("group leader", || leader_of(cluster, gid)).await;
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
    verify_moved(cluster, &event, gid, "eu-west", "us-east").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t96_a_move_finishes_with_the_old_region_cut_off() {
    let mut w = slow_cluster().await;
    let (cluster, op) = (&mut w.cluster, &w.op);
    tracing::info!("--- the old region cut off right after the membership change");
    let (gid, capacity) = create(cluster, "cut", "us-east", 10).await;
    cluster.wait_leader(GroupId(gid), PATIENCE).await.unwrap();
    let traffic = Traffic::start(cluster, "cut", 1);
    eventually("holds flowing", || async {
        (traffic.acked_count() >= 10).then_some(())
    })
    .await;
    let edge = cluster.nodes[2].edge_url().unwrap();
    let m = post_move(&edge, op, "cut", "eu-west").await;
    let id = m["move_id"].clone();
    eventually("move past the membership change", || async {
        let m = get_move(&edge, op, &id).await?;
        (m["step"] == "transfer_leader").then_some(())
    })
    .await;
    let old = region_nodes("us-east");
    for n in &old {
        cluster.pause(*n).unwrap();
    }
    let end = eventually("move finished without the old region", || async {
        let m = get_move(&edge, op, &id).await?;
        (m["state"] != "running").then_some(m)
    })
    .await;
    assert_eq!(end["state"], "done", "{end}");
    for n in &old {
        cluster.resume(*n).unwrap();
    }
    assert_old_replicas_take_no_write(cluster, gid, &old).await;
    let before = traffic.acked_count();
    eventually("holds flowing after the move", || async {
        (traffic.acked_count() >= before + 10).then_some(())
    })
    .await;
    let (acked, unknown) = traffic.finish().await;
    verify_holds(&edge, "cut", &acked, unknown, capacity).await;
    verify_moved(cluster, "cut", gid, "eu-west", "us-east").await;
}

/// The old region's replicas, back from the pause before they learn
/// anything, take no write, whatever epoch it carries.
async fn assert_old_replicas_take_no_write(cluster: &LocalCluster, gid: u64, old: &[u64]) {
    let old = old.to_vec();
    // At once, before they learn anything: the old replicas take no write,
    // whatever epoch it carries.
    let client = cluster.client();
    for n in &old {
        for epoch in [1, 2] {
            let cmd = seatfence_core::Command::event(seatfence_core::inventory::EventCommand {
                event_id: seatfence_core::EventId("cut".into()),
                epoch: seatfence_core::Epoch(epoch),
                now_ms: 0,
                idempotency: None,
                action: seatfence_core::inventory::EventAction::Hold {
                    owner: seatfence_core::UserId("zombie".into()),
                    pick: seatfence_core::inventory::SeatPick::Quantity {
                        section: None,
                        quantity: 1,
                    },
                },
            });
            let mut req = tonic::Request::new(seatfence_proto::v1::WriteRequest {
                group_id: gid,
                command: seatfence_raft::codec::encode(&cmd).unwrap(),
                expected_term: None,
            });
            req.set_timeout(Duration::from_secs(3));
            let addr = cluster.addr(*n).unwrap();
            let reply = client.node(&addr).unwrap().write(req).await;
            if let Ok(r) = reply {
                if let Some(seatfence_proto::v1::write_reply::Result::Committed(c)) =
                    r.into_inner().result
                {
                    let resp: seatfence_core::Response =
                        seatfence_raft::codec::decode(&c.response).unwrap();
                    assert!(
                        !matches!(
                            &resp,
                            seatfence_core::Response::Event(e)
                                if matches!(e.outcome, seatfence_core::inventory::Outcome::Held(_))
                        ),
                        "old node {n} committed a hold at epoch {epoch}: {resp:?}"
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t96_an_abort_before_the_membership_change_leaves_the_event_in_place() {
    let w = slow_cluster().await;
    let (cluster, op) = (&w.cluster, &w.op);
    tracing::info!("--- a move that completes, so one move is past any abort");
    let (done_gid, _) = create(cluster, "done", "us-east", 10).await;
    cluster
        .wait_leader(GroupId(done_gid), PATIENCE)
        .await
        .unwrap();
    let edge = cluster.nodes[2].edge_url().unwrap();
    let done = post_move(&edge, op, "done", "eu-west").await;
    let done_id = done["move_id"].clone();
    let end = eventually("the first move finished", || async {
        let m = get_move(&edge, op, &done_id).await?;
        (m["state"] != "running").then_some(m)
    })
    .await;
    assert_eq!(end["state"], "done", "{end}");

    tracing::info!("--- abort before the membership change: the event stays where it was");
    let (gid, _) = create(cluster, "ab", "us-east", 10).await;
    cluster.wait_leader(GroupId(gid), PATIENCE).await.unwrap();
    let edge = cluster.nodes[2].edge_url().unwrap();
    let m = post_move(&edge, op, "ab", "ap-south").await;
    let http = HttpClient::default();
    let a = http
        .post(
            &format!("{edge}/v1/admin/moves/{}/abort", m["move_id"]),
            Some(op),
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
    let leader = eventually("a leader", || leader_of(cluster, gid)).await;
    let st = client
        .membership(
            GroupId(gid),
            &seatfence_raft::membership::MembershipOp::Status,
        )
        .await
        .unwrap();
    assert!(st.learners.is_empty(), "learners removed: {st:?}");
    assert!(region_nodes("us-east").contains(&leader));
    let tok = token(cluster, "late", false);
    // Right after the abort the group may be between leaders (a 503): the
    // event's answer is what matters once it answers.
    let ev = eventually("the event answers", || async {
        let ev = http
            .get(&format!("{edge}/v1/events/ab"), Some(&tok))
            .await
            .ok()?;
        (ev.status.as_u16() == 200).then_some(ev)
    })
    .await;
    assert_eq!(
        (ev.body["epoch"].clone(), ev.body["owner_region"].clone()),
        (json!(1), json!("us-east")),
        "{}",
        ev.body
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
            &format!("{edge}/v1/admin/moves/{done_id}/abort"),
            Some(op),
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
