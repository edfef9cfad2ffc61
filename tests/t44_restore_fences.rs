//! A restore on an operator's worst day (issue 59): a restored cluster
//! never hands out an id or a payment key of the old one, an operator's
//! certificate cannot write restore steps into a live sale, a restore
//! begun by one certificate is not continued by another (and any operator
//! may abort it), and a backup carries no secret.

mod common;

use std::path::Path;

use common::backup::{confirmed, operator_cli};
use common::moves::{all_edges, create};
use common::payments::Env;
use common::*;
use seatfence_core::restore::{RestoreDone, RestoreOp};
use seatfence_core::{Command, GroupId, Placement, RecordKey, RegionId, Response};
use seatfence_raft::network::tls::TlsConfig;
use seatfence_raft::network::Dialer;
use seatfence_raft::ClusterClient;
use seatfence_testkit::cluster::OPERATOR_CERT;
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::LocalCluster;
use serde_json::{json, Value};

/// A client of `cluster` speaking with operator certificate `name`
/// (made by the cluster's CA when it is not the cluster's own).
fn operator(cluster: &LocalCluster, name: &str) -> ClusterClient {
    let certs = cluster.certs_dir().expect("a TLS cluster");
    let stem = format!("operator-{name}");
    if !certs.join(format!("{stem}.pem")).exists() {
        seatfence_node::certs::make_operator(&certs, name, 1).expect("make the certificate");
    }
    let tls = TlsConfig::in_dir(&certs, &stem)
        .load()
        .expect("load")
        .expect("tls");
    ClusterClient::new(cluster.addrs(), Dialer::new(Some(&tls)))
        .with_deadline(std::time::Duration::from_secs(10))
}

/// Send one restore step: the group's answer, or the refusal's text.
async fn step(
    client: &ClusterClient,
    group: GroupId,
    op: RestoreOp,
) -> Result<RestoreDone, String> {
    match client.write(group, &Command::Restore(op)).await {
        Ok(c) => match c.response {
            Response::Restore(r) => r,
            other => Err(format!("answered {other:?}")),
        },
        Err(e) => Err(e.to_string()),
    }
}

async fn http_get(edge: &str, path: &str, token: &str) -> Value {
    let a = HttpClient::default()
        .get(&format!("{edge}{path}"), Some(token))
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 200, "{path}: {}", a.body);
    a.body
}

async fn post(edge: &str, path: &str, token: &str, body: &Value) -> (u16, Value) {
    let a = HttpClient::default()
        .post(&format!("{edge}{path}"), Some(token), None, body)
        .await
        .unwrap();
    (a.status.as_u16(), a.body)
}

fn placement() -> Placement {
    Placement::InRegion {
        region: RegionId::from("us-east"),
        replicas: 3,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t44_a_restored_cluster_never_hands_out_an_old_id_or_payment() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = Env::start(&dir.path().join("old")).await;
    let seats: Vec<String> = (1..=10).map(|i| format!("A-{i}")).collect();
    let seats: Vec<&str> = seats.iter().map(String::as_str).collect();
    env.event("bk", &seats, 3600).await;
    confirmed(&env, "ann", "A-1").await;
    let backup = dir.path().join("backup");
    let (ok, out, err) = operator_cli(&env.cluster, &["backup", "--to", backup.to_str().unwrap()]);
    assert!(ok, "backup failed:\n{out}\n{err}");

    tracing::info!("--- after the backup, X holds, books and pays in the old cluster");
    let xh = env.hold("xavier", "bk", &["A-2"]).await;
    let x_hold = xh["hold_id"].as_str().unwrap().to_string();
    let xb = env.book("xavier", &x_hold).await;
    let redirect = env.browser(xb["approve_url"].as_str().unwrap(), true).await;
    assert_eq!(env.get(&redirect).await.body["status"], "confirmed");
    let x_payment = xb["payment_id"].as_str().unwrap().to_string();
    let x_booking = xb["booking_id"].as_str().unwrap().to_string();
    env.cluster.stop_all().unwrap();

    tracing::info!("--- a new cluster on the same gateway takes the restore");
    let mut payments = env.gateway.payments_config();
    payments.reconcile_interval_ms = 300;
    payments.reconcile_margin_ms = 7_200_000;
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let new = LocalCluster::builder(&dir.path().join("new"))
        .regions(1, 3)
        .tuning(test_tuning())
        .payments(payments)
        .start(bin)
        .expect("start the new cluster");
    new.wait_ready(PATIENCE).await.expect("new cluster ready");
    let (ok, out, err) = operator_cli(&new, &["restore", "--from", backup.to_str().unwrap()]);
    assert!(ok, "restore failed:\n{out}\n{err}");

    tracing::info!("--- Y's hold and booking are new ids, with a payment of their own");
    let edge = all_edges(&new)[0].clone();
    let y = token(&new, "yara", false);
    let (status, yh) = post(
        &edge,
        "/v1/holds",
        &y,
        &json!({"event_id": "bk", "seats": ["A-2"]}),
    )
    .await;
    assert_eq!(status, 201, "{yh}");
    let y_hold = yh["hold_id"].as_str().unwrap().to_string();
    assert_ne!(
        y_hold, x_hold,
        "the restored cluster handed out X's hold id again"
    );
    let yb = eventually("Y's booking", || async {
        let (s, b) = post(&edge, "/v1/bookings", &y, &json!({"hold_id": y_hold})).await;
        (s == 201).then_some(b)
    })
    .await;
    assert_ne!(yb["booking_id"].as_str().unwrap(), x_booking, "{yb}");
    assert_ne!(
        yb["payment_id"].as_str().unwrap(),
        x_payment,
        "the gateway answered Y's booking with X's payment: {yb}"
    );
    assert_eq!(yb["status"], "pending", "{yb}");
    // The reconciler sweeps every 300 ms: X's approved, captured payment
    // never confirms Y's booking.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let id = yb["booking_id"].as_str().unwrap();
    let b = http_get(&edge, &format!("/v1/bookings/{id}"), &y).await;
    assert_eq!(b["status"], "pending", "{b}");
    assert_eq!(b["payment_id"], yb["payment_id"], "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t44_an_operator_certificate_cannot_write_restore_steps_into_a_live_sale() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let cluster = LocalCluster::builder(dir.path())
        .regions(1, 3)
        .tuning(test_tuning())
        .start(bin)
        .expect("start");
    cluster.wait_ready(PATIENCE).await.expect("ready");
    let (group, _) = create(&cluster, "live", "us-east", 1).await;
    let edge = all_edges(&cluster)[0].clone();
    let buyer = token(&cluster, "bea", false);
    let (s, h) = post(
        &edge,
        "/v1/holds",
        &buyer,
        &json!({"event_id": "live", "seats": ["A-1-1"]}),
    )
    .await;
    assert_eq!(s, 201, "{h}");
    let hold = h["hold_id"].as_str().unwrap().to_string();
    let ops = token(&cluster, "ops", true);
    let seats = |mut v: Value| {
        // How stale the answer was is not the sale's state.
        v.as_object_mut().unwrap().remove("stale_ms");
        v
    };
    let before = seats(http_get(&edge, "/v1/events/live/availability", &ops).await);
    let op = operator(&cluster, OPERATOR_CERT);
    let records = |backup: &str| RestoreOp::Records {
        backup: backup.into(),
        records: Vec::new(),
    };

    tracing::info!("--- records into the live group, and into the next group id");
    let r = step(&op, GroupId(group), records("x")).await;
    assert!(r.as_ref().unwrap_err().contains("restore_refused"), "{r:?}");
    let r = step(&op, GroupId(group + 1), records("x")).await;
    assert!(r.as_ref().unwrap_err().contains("restore_refused"), "{r:?}");
    let r = step(&op, GroupId(group), RestoreOp::Seal { backup: "x".into() }).await;
    assert!(r.as_ref().unwrap_err().contains("restore_refused"), "{r:?}");

    tracing::info!(
        "--- a restore of a live cluster, a group over a live one, a route over a live event"
    );
    let r = step(
        &op,
        GroupId::DIRECTORY,
        RestoreOp::Begin { backup: "x".into() },
    )
    .await;
    assert!(r.as_ref().unwrap_err().contains("not empty"), "{r:?}");
    let r = step(
        &op,
        GroupId::DIRECTORY,
        RestoreOp::Group {
            backup: "x".into(),
            group_id: GroupId(group),
            placement: placement(),
        },
    )
    .await;
    assert!(r.is_err(), "{r:?}");
    let route = seatfence_core::EventRoute {
        event_id: seatfence_core::EventId("live".into()),
        group: GroupId(group + 1),
        home_region: "us-east".into(),
        owner_region: "us-east".into(),
        epoch: seatfence_core::Epoch(u64::MAX / 2),
        survival: Default::default(),
        state: seatfence_core::RouteState::Active,
    };
    let r = step(
        &op,
        GroupId::DIRECTORY,
        RestoreOp::Route {
            backup: "x".into(),
            route,
        },
    )
    .await;
    assert!(r.is_err(), "{r:?}");
    let r = step(
        &op,
        GroupId::DIRECTORY,
        RestoreOp::BeginBy {
            backup: "x".into(),
            operator: "someone".into(),
        },
    )
    .await;
    assert!(r.as_ref().unwrap_err().contains("restore_refused"), "{r:?}");

    tracing::info!("--- nothing changed: the sale, the hold, the route; the next event sells");
    assert_eq!(
        seats(http_get(&edge, "/v1/events/live/availability", &ops).await),
        before
    );
    let h = http_get(&edge, &format!("/v1/holds/{hold}"), &buyer).await;
    assert_eq!(h["status"], "held", "{h}");
    let ev = http_get(&edge, "/v1/events/live", &ops).await;
    assert_eq!(ev["group_id"], group, "{ev}");
    let (next, _) = create(&cluster, "next", "us-east", 1).await;
    assert_eq!(next, group + 1);
    let (s, h) = post(
        &edge,
        "/v1/holds",
        &buyer,
        &json!({"event_id": "next", "seats": ["A-1-1"]}),
    )
    .await;
    assert_eq!(s, 201, "the next group id took no restore mark: {h}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t44_a_restore_is_continued_only_by_its_certificate_and_aborted_by_any() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let cluster = LocalCluster::builder(dir.path())
        .regions(1, 3)
        .tuning(test_tuning())
        .start(bin)
        .expect("start");
    cluster.wait_ready(PATIENCE).await.expect("ready");
    let edge = all_edges(&cluster)[0].clone();
    let ops = token(&cluster, "ops", true);
    let alice = operator(&cluster, OPERATOR_CERT);
    let mallory = operator(&cluster, "mallory");
    let begin = RestoreOp::Begin {
        backup: "b1".into(),
    };
    assert_eq!(
        step(&alice, GroupId::DIRECTORY, begin).await,
        Ok(RestoreDone::Ok)
    );

    tracing::info!("--- no event is created while the restore runs");
    let body = json!({"event_id": "e1", "name": "e1", "home_region": "us-east",
                      "sections": [{"name": "A", "rows": 1, "seats_per_row": 10}]});
    let (s, b) = post(&edge, "/v1/events", &ops, &body).await;
    assert_eq!(
        (s, b["error"]["code"].clone()),
        (409, json!("restore_running")),
        "{b}"
    );

    tracing::info!("--- another certificate cannot go on with it, but may abort it");
    let group = |id| RestoreOp::Group {
        backup: "b1".into(),
        group_id: GroupId(id),
        placement: placement(),
    };
    let r = step(&mallory, GroupId::DIRECTORY, group(5)).await;
    assert!(
        r.as_ref().unwrap_err().contains("begun by certificate"),
        "{r:?}"
    );
    let abort = RestoreOp::Abort {
        backup: "b1".into(),
    };
    assert_eq!(
        step(&mallory, GroupId::DIRECTORY, abort).await,
        Ok(RestoreDone::Ok)
    );
    let r = step(&alice, GroupId::DIRECTORY, group(5)).await;
    assert!(r.is_err(), "nothing of an aborted restore applies: {r:?}");

    tracing::info!("--- every step is in the audit trail, by its certificate");
    let audit = http_get(&edge, "/v1/admin/audit", &ops).await;
    let entries = audit["entries"].as_array().unwrap();
    let by = |action: &str| {
        entries
            .iter()
            .filter(|e| e["action"] == action)
            .map(|e| e["actor"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        by("restore_begin"),
        vec![format!("certificate:{OPERATOR_CERT}")],
        "{audit}"
    );
    assert_eq!(
        by("restore_abort"),
        vec!["certificate:mallory".to_string()],
        "{audit}"
    );

    tracing::info!("--- the cluster takes events again");
    let (s, b) = post(&edge, "/v1/events", &ops, &body).await;
    assert_eq!(s, 201, "{b}");
}

/// The records of a backup's file: (key, value) pairs.
fn read_records(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"SFBACK1\n");
    let mut at = 8;
    let mut field = || {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let v = bytes[at + 4..at + 4 + len].to_vec();
        at += 4 + len;
        (v, at >= bytes.len())
    };
    let mut out = Vec::new();
    loop {
        let (k, _) = field();
        let (v, end) = field();
        out.push((k, v));
        if end {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t44_a_backup_carries_no_secret() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let env = Env::start(&dir.path().join("c")).await;
    env.event("bk", &["A-1", "A-2"], 3600).await;
    confirmed(&env, "ann", "A-1").await;
    let addr = env.cluster.addrs()[0].clone();
    let secret = eventually("the fleet's gateway token in the directory", || async {
        let r = env
            .cluster
            .client()
            .read_at(&addr, GroupId::DIRECTORY, "gateway/token")
            .await
            .ok()?;
        let v: Value = serde_json::from_slice(&r.value).ok()?;
        let token = v["access_token"].as_str()?.to_string();
        (!token.is_empty()).then_some(token)
    })
    .await;
    let secret = secret.into_bytes();
    let backup = dir.path().join("backup");
    let (ok, out, err) = operator_cli(&env.cluster, &["backup", "--to", backup.to_str().unwrap()]);
    assert!(ok, "backup failed:\n{out}\n{err}");
    let mut kv = Vec::new();
    for e in std::fs::read_dir(backup.join("groups")).unwrap() {
        let path = e.unwrap().path();
        let raw = std::fs::read(&path).unwrap();
        assert!(
            !raw.windows(secret.len()).any(|w| w == secret.as_slice()),
            "{} holds the gateway's token",
            path.display()
        );
        for (k, _) in read_records(&path) {
            if let Some(RecordKey::Kv(name)) = RecordKey::decode(&k) {
                kv.push(name);
            }
        }
    }
    assert!(kv.iter().any(|k| k == "cluster_id"), "{kv:?}");
    assert!(!kv.iter().any(|k| k.starts_with("gateway/")), "{kv:?}");
    // The dump of every group was audited.
    let op = token(&env.cluster, "ops", true);
    let audit = http_get(&env.edge(0), "/v1/admin/audit", &op).await;
    let dumps = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "backup")
        .count();
    assert_eq!(dumps, 2, "the directory's dump and the event's: {audit}");
}
