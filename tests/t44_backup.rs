//! Backup during a sale, and restore into a new cluster (README "Backup
//! and restore").
//!
//! The old cluster has an event with two confirmed bookings, one booking
//! whose payment is pending and one plain hold, and a second event that
//! buyers hold seats of while `seatfence backup` runs (with the operator's
//! certificate). The backup verifies; a copy with one flipped byte is
//! refused by `backup verify` and by `restore`, both naming the file. A new
//! cluster (sharing the gateway) takes the restore: every booking and hold
//! acknowledged before the backup began is there, the pending payment,
//! approved at the gateway after the old cluster died, is confirmed by the
//! new cluster's reconciler, no seat is sold twice and the counters equal the records;
//! the epochs were raised by 2^32, so a zombie write with the old epoch is
//! refused; the changefeed resumes from a cursor of the old cluster; new
//! holds sell; and a second restore is refused.

mod common;

use std::path::Path;

use common::backup::{confirmed, damaged_copy, operator_cli, verify};
use common::moves::{all_edges, create, Acked, Traffic};
use common::payments::Env;
use common::*;
use seatfence_core::inventory::{EventAction, EventCommand, Outcome, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, Response, UserId};
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::LocalCluster;
use serde_json::{json, Value};

async fn get(edge: &str, path: &str, token: &str) -> Value {
    let a = HttpClient::default()
        .get(&format!("{edge}{path}"), Some(token))
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 200, "{path}: {}", a.body);
    a.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t44_a_backup_taken_during_a_sale_restores_into_a_new_cluster() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = Env::start(&dir.path().join("old")).await;
    let seats: Vec<String> = (1..=20).map(|i| format!("A-{i}")).collect();
    let seats: Vec<&str> = seats.iter().map(String::as_str).collect();
    env.event("bk", &seats, 3600).await;
    let alice = confirmed(&env, "alice", "A-1").await;
    let bob = confirmed(&env, "bob", "A-2").await;
    let h = env.hold("carol", "bk", &["A-3"]).await;
    let pending = env.book("carol", h["hold_id"].as_str().unwrap()).await;
    let dave = env.hold("dave", "bk", &["A-4"]).await;
    let dave = dave["hold_id"].as_str().unwrap().to_string();
    let (_, capacity) = create(&env.cluster, "sale", "us-east", 10).await;
    let op_old = token(&env.cluster, "ops", true);
    let old_edge = env.edge(0);
    let old_epoch = get(&old_edge, "/v1/events/bk", &op_old).await["epoch"]
        .as_u64()
        .unwrap();
    let cursor = get(&old_edge, "/v1/admin/changes", &op_old).await["next_cursor"]
        .as_str()
        .unwrap()
        .to_string();

    tracing::info!("--- buyers hold seats of `sale` while the backup runs");
    let traffic = Traffic::start(&env.cluster, "sale", 1);
    eventually("the sale's first holds", || async {
        (traffic.acked_count() >= 5).then_some(())
    })
    .await;
    let before: Vec<Acked> = traffic.acked_now();
    let backup = dir.path().join("backup");
    let (ok, out, err) = operator_cli(
        &env.cluster,
        &["backup", "--to", backup.to_str().unwrap(), "--json"],
    );
    assert!(ok, "backup failed:\n{out}\n{err}");
    let summary: Value = serde_json::from_str(out.trim()).expect("--json");
    assert_eq!(
        summary["groups"], 3,
        "the directory and two events: {summary}"
    );
    // Holds after the backup: the old cluster's changefeed runs past it.
    let after_backup = traffic.acked_count() + 3;
    eventually("holds after the backup", || async {
        (traffic.acked_count() >= after_backup).then_some(())
    })
    .await;
    let (acked, _) = traffic.finish().await;
    assert!(acked.len() >= before.len());
    let mut late = cursor.clone();
    loop {
        let page = get(
            &old_edge,
            &format!("/v1/admin/changes?after={late}&limit=5000"),
            &op_old,
        )
        .await;
        let next = page["next_cursor"].as_str().unwrap().to_string();
        if page["changes"].as_array().unwrap().is_empty() {
            break;
        }
        late = next;
    }
    // The old cluster is gone (the operator's worst day); its gateway stays.
    env.cluster.stop_all().unwrap();

    let (ok, out, err) = verify(&backup);
    assert!(ok && out.contains(": ok"), "verify:\n{out}\n{err}");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(backup.join("manifest.json")).unwrap())
            .unwrap();
    let bk_file = manifest["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["event_id"] == "bk")
        .unwrap()["file"]
        .as_str()
        .unwrap()
        .to_string();
    let bad = dir.path().join("damaged");
    damaged_copy(&backup, &bad, &bk_file);
    let (ok, _, err) = verify(&bad);
    assert!(
        !ok && err.contains(&bk_file),
        "verify names the damaged file:\n{err}"
    );

    tracing::info!("--- a new cluster, sharing the gateway, takes the restore");
    let mut payments = env.gateway.payments_config();
    payments.reconcile_interval_ms = 300;
    // Every pending payment is asked about at once (the holds last an hour).
    payments.reconcile_margin_ms = 7_200_000;
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let new = LocalCluster::builder(&dir.path().join("new"))
        .regions(1, 3)
        .tuning(test_tuning())
        .payments(payments)
        .start(bin)
        .expect("start the new cluster");
    new.wait_ready(PATIENCE).await.expect("new cluster ready");
    let (ok, _, err) = operator_cli(&new, &["restore", "--from", bad.to_str().unwrap()]);
    assert!(
        !ok && err.contains(&bk_file),
        "restore refuses the damaged file:\n{err}"
    );
    let (ok, out, err) = operator_cli(
        &new,
        &["restore", "--from", backup.to_str().unwrap(), "--json"],
    );
    assert!(ok, "restore failed:\n{out}\n{err}");
    let restored: Value = serde_json::from_str(out.trim()).expect("--json");
    assert_eq!(
        restored["events"].as_array().unwrap().len(),
        2,
        "{restored}"
    );

    let edge = all_edges(&new)[0].clone();
    let op = token(&new, "ops", true);
    let ev = get(&edge, "/v1/events/bk", &op).await;
    assert_eq!(ev["epoch"], old_epoch + (1u64 << 32), "{ev}");
    for (user, id) in [("alice", &alice), ("bob", &bob)] {
        let b = get(
            &edge,
            &format!("/v1/bookings/{id}"),
            &token(&new, user, false),
        )
        .await;
        assert_eq!(b["status"], "confirmed", "{b}");
    }
    let h = get(
        &edge,
        &format!("/v1/holds/{dave}"),
        &token(&new, "dave", false),
    )
    .await;
    assert_eq!(h["status"], "held", "{h}");
    for a in &before {
        let h = get(
            &edge,
            &format!("/v1/holds/{}", a.hold_id),
            &token(&new, &a.user, false),
        )
        .await;
        assert_eq!(h["seats"], json!([a.seat]), "{h}");
    }

    tracing::info!("--- carol's payment, approved now, is confirmed by the new cluster");
    env.browser(pending["approve_url"].as_str().unwrap(), true)
        .await;
    let carol = token(&new, "carol", false);
    let id = pending["booking_id"].as_str().unwrap().to_string();
    eventually("carol's booking confirmed by the reconciler", || async {
        let b = HttpClient::default()
            .get(&format!("{edge}/v1/bookings/{id}"), Some(&carol))
            .await
            .ok()?;
        (b.body["status"] == "confirmed").then_some(())
    })
    .await;

    tracing::info!("--- counters equal the records; no seat sold twice");
    for (event, cap) in [("bk", 20), ("sale", capacity)] {
        let av = get(&edge, &format!("/v1/events/{event}/availability"), &op).await;
        let n = |k: &str| av[k].as_u64().unwrap();
        assert_eq!(n("available") + n("held") + n("sold"), cap, "{av}");
    }
    let av = get(&edge, "/v1/events/bk/availability", &op).await;
    assert_eq!(
        (av["sold"].clone(), av["held"].clone()),
        (json!(3), json!(1)),
        "{av}"
    );
    let rival = HttpClient::default()
        .post(
            &format!("{edge}/v1/holds"),
            Some(&token(&new, "eve", false)),
            None,
            &json!({"event_id": "bk", "seats": ["A-1"]}),
        )
        .await
        .unwrap();
    assert_eq!(rival.status.as_u16(), 409, "{}", rival.body);
    let fresh = HttpClient::default()
        .post(
            &format!("{edge}/v1/holds"),
            Some(&token(&new, "eve", false)),
            None,
            &json!({"event_id": "bk", "seats": ["A-9"]}),
        )
        .await
        .unwrap();
    assert_eq!(fresh.status.as_u16(), 201, "{}", fresh.body);

    tracing::info!("--- a zombie write with the old cluster's epoch is refused");
    let group = GroupId(ev["group_id"].as_u64().unwrap());
    let zombie = Command::event(EventCommand {
        event_id: EventId("bk".into()),
        epoch: Epoch(old_epoch),
        now_ms: now_ms(),
        idempotency: None,
        action: EventAction::Hold {
            owner: UserId("zombie".into()),
            pick: SeatPick::Quantity {
                section: None,
                quantity: 1,
            },
        },
    });
    match new
        .client()
        .write(group, &zombie)
        .await
        .expect("write")
        .response
    {
        Response::Event(r) => assert!(
            matches!(r.outcome, Outcome::StaleEpoch { current, .. } if current.0 == old_epoch + (1 << 32)),
            "{:?}",
            r.outcome
        ),
        other => panic!("{other:?}"),
    }

    tracing::info!("--- the changefeed resumes from the old cluster's cursor");
    let changes = get(
        &edge,
        &format!("/v1/admin/changes?after={cursor}&limit=5000"),
        &op,
    )
    .await;
    let sale_holds = changes["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["event_id"] == "sale" && c["type"] == "hold.created")
        .count();
    assert!(
        sale_holds >= before.len(),
        "{sale_holds} holds of the sale in {changes}"
    );

    tracing::info!("--- a cursor past the backup (the old cluster's later changes) is 410");
    let gone = HttpClient::default()
        .get(&format!("{edge}/v1/admin/changes?after={late}"), Some(&op))
        .await
        .unwrap();
    assert_eq!(gone.status.as_u16(), 410, "{}", gone.body);
    assert_eq!(gone.code(), Some("cursor_expired"));
    assert!(
        gone.body["error"]["events"]
            .as_array()
            .unwrap()
            .contains(&json!("sale")),
        "{}",
        gone.body
    );
    let resume = gone.body["error"]["oldest_cursor"].as_str().unwrap();
    get(&edge, &format!("/v1/admin/changes?after={resume}"), &op).await;

    tracing::info!("--- a second restore is refused");
    let (ok, _, err) = operator_cli(&new, &["restore", "--from", backup.to_str().unwrap()]);
    assert!(!ok && err.contains("restored here already"), "{err}");
}
