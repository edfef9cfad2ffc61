//! `seatfence export` into a real PostgreSQL (started by the test in its
//! own data directory, on 127.0.0.1; Debian's `postgresql` package, which
//! `.ci/run` installs) from real nodes and a real mock gateway: a sale
//! with confirmed, expired, operator-refunded and late-payment-refunded
//! bookings ends with PostgreSQL's rows equal to the cluster's records,
//! while the exporter is SIGKILLed and restarted mid-stream: every change
//! once (the change log's keys), none missing (each event's numbers
//! contiguous up to the cluster's last).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::payments::{s, scenario, Env};
use common::*;
use seatfence_testkit::PgProc;
use serde_json::json;
use tokio_postgres::NoTls;

/// The exporter process, SIGKILLed when dropped (a failed test leaves none
/// behind).
struct Exporter(Child);

impl Exporter {
    fn kill(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn exporter(env: &Env, pg: &PgProc, log: &Path) -> Exporter {
    let edges = [env.edge(0), env.edge(1)];
    spawn_exporter(&edges, &token(&env.cluster, "ops", true), pg, log)
}

/// `seatfence export` reading from `edges` in pages of 3 changes.
fn spawn_exporter(edges: &[String], op: &str, pg: &PgProc, log: &Path) -> Exporter {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_seatfence"));
    cmd.args(["export", "--pg", &pg.url(), "--batch", "3", "--progress"]);
    cmd.args(["--metrics-addr", "127.0.0.1:0"]);
    for e in edges {
        cmd.args(["--edge", e]);
    }
    cmd.args(["--token", op])
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .map(Exporter)
        .expect("start the exporter")
}

async fn pg_client(pg: &PgProc) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::connect(&pg.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    c
}

/// `event_id → (changes in the log, highest seq)`.
async fn logged(pg: &tokio_postgres::Client) -> BTreeMap<String, (i64, i64)> {
    let rows = pg
        .query(
            "SELECT event_id, count(*), max(seq) FROM seatfence_changes GROUP BY event_id",
            &[],
        )
        .await
        .unwrap_or_default();
    rows.iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

/// Each event's last change number as the cluster has it.
async fn cluster_last(edge: &str, op: &str, events: &[&str]) -> BTreeMap<String, i64> {
    let http = seatfence_testkit::HttpClient::default();
    let mut last = BTreeMap::new();
    for event in events {
        let url = format!("{edge}/v1/admin/changes?event={event}&limit=5000");
        let a = http.get(&url, Some(op)).await.unwrap();
        let n = a.body["changes"]
            .as_array()
            .and_then(|c| c.last())
            .and_then(|c| c["seq"].as_i64())
            .unwrap_or(0);
        last.insert(event.to_string(), n);
    }
    last
}

/// Wait until PostgreSQL holds every event's changes up to `want`, then
/// check each event's are 1..=last, each once.
async fn caught_up(db: &tokio_postgres::Client, want: &BTreeMap<String, i64>) {
    let got = eventually("the exporter caught up", || async {
        let got = logged(db).await;
        let done = want
            .iter()
            .all(|(e, last)| got.get(e).is_some_and(|(_, max)| max >= last));
        done.then_some(got)
    })
    .await;
    for (event, (count, max)) in &got {
        assert_eq!(count, max, "{event}: changes 1..={max} each once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t88_postgres_equals_the_cluster_through_a_sigkilled_exporter() {
    let sc = scenario(&[
        ("sale", &["A1", "A2", "A3", "A4", "A5", "A6"], 600),
        ("quick", &["Q1"], 12),
        ("late", &["L1"], 4),
    ])
    .await;
    let env = &sc.env;
    let dir = tempfile::tempdir().unwrap();
    let pg = PgProc::start(dir.path()).expect("start PostgreSQL");
    let log = dir.path().join("export.log");
    let mut exp = exporter(env, &pg, &log);

    tracing::info!("--- a sale: confirmed, refunded by an operator, released, lapsed");
    let mut bookings = Vec::new();
    for (user, seat) in [("alice", "A1"), ("bob", "A2"), ("carl", "A3")] {
        let hold = env.hold(user, "sale", &[seat]).await;
        let b = env.book(user, s(&hold["hold_id"])).await;
        let redirect = env.browser(s(&b["approve_url"]), true).await;
        assert_eq!(env.get(&redirect).await.body["status"], "confirmed");
        bookings.push((user, s(&b["booking_id"]).to_string()));
    }
    tracing::info!("--- SIGKILL the exporter mid-stream, start it again");
    exp.kill();
    let refund = env
        .http
        .post(
            &format!("{}/v1/admin/bookings/{}/refund", env.edge(0), bookings[1].1),
            Some(&token(&env.cluster, "ops", true)),
            Some("t88-refund"),
            &json!({"reason": "goodwill", "release_seats": true}),
        )
        .await
        .unwrap();
    assert_eq!(refund.status.as_u16(), 200, "{}", refund.body);
    let mut exp = exporter(env, &pg, &log);
    // A cancelled payment: the reconciler releases it at its deadline.
    let hold = env.hold("dina", "quick", &["Q1"]).await;
    let b = env.book("dina", s(&hold["hold_id"])).await;
    env.browser(s(&b["approve_url"]), false).await;
    bookings.push(("dina", s(&b["booking_id"]).to_string()));

    tracing::info!("--- a capture after the release: refunded");
    env.faults(json!({"void": "ignore", "execute": "hold", "webhook": "drop"}))
        .await;
    let hold = env.hold("ivy", "late", &["L1"]).await;
    let b = env.book("ivy", s(&hold["hold_id"])).await;
    let redirect = env.browser(s(&b["approve_url"]), true).await;
    assert_eq!(env.get(&redirect).await.body["status"], "pending");
    let late = s(&b["booking_id"]).to_string();
    env.wait_status("ivy", &late, "expired").await;
    exp.kill();
    let mut exp = exporter(env, &pg, &log);
    env.faults(json!({"execute": "ok"})).await;
    env.wait_status("ivy", &late, "refunded").await;
    env.faults(json!({"void": "ok", "webhook": "deliver"}))
        .await;
    bookings.push(("ivy", late.clone()));
    env.wait_status("bob", &bookings[1].1, "refunded").await;
    env.wait_status("dina", &bookings[3].1, "expired").await;

    tracing::info!("--- PostgreSQL catches up: every change once, none missing");
    let db = pg_client(&pg).await;
    let op = token(&env.cluster, "ops", true);
    let want = cluster_last(&env.edge(0), &op, &["sale", "quick", "late"]).await;
    caught_up(&db, &want).await;

    tracing::info!("--- the rows equal the cluster's records");
    for (user, id) in &bookings {
        let cluster = env.booking(user, id).await.body;
        let row = db
            .query_one(
                "SELECT b.status, b.seats, b.amount_cents, p.status, p.txn_id,
                        r.status, r.reason, r.refund_id
                 FROM bookings b JOIN payments p ON p.payment_id = b.payment_id
                 LEFT JOIN refunds r ON r.booking_id = b.booking_id
                 WHERE b.booking_id = $1",
                &[id],
            )
            .await
            .unwrap_or_else(|e| panic!("booking {id} not exported: {e}"));
        let status: String = row.get(0);
        assert_eq!(status, s(&cluster["status"]), "{id}: {cluster}");
        let seats: Vec<String> = row.get(1);
        assert_eq!(json!(seats), cluster["seats"], "{id}");
        assert_eq!(json!(row.get::<_, i64>(2)), cluster["amount_cents"]);
        let txn: Option<String> = row.get(4);
        assert_eq!(json!(txn), cluster["txn_id"], "{id}");
        let pay: String = row.get(3);
        let refund: Option<String> = row.get(5);
        let refund_id: Option<String> = row.get(7);
        match s(&cluster["status"]) {
            "confirmed" => assert_eq!((pay.as_str(), refund), ("captured", None)),
            "expired" => assert_eq!((pay.as_str(), refund), ("voided", None)),
            "refunded" => {
                assert_eq!(
                    (pay.as_str(), refund.as_deref()),
                    ("captured", Some("refunded"))
                );
                assert_eq!(json!(refund_id), cluster["refund_id"]);
            }
            other => panic!("{id}: unexpected {other}"),
        }
    }
    let reason: String = db
        .query_one(
            "SELECT reason FROM refunds WHERE booking_id = $1",
            &[&bookings[1].1],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(reason, "goodwill");
    let events: Vec<(String, i64)> = db
        .query(
            "SELECT event_id, capacity FROM events ORDER BY event_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        events,
        [("late".into(), 1), ("quick".into(), 1), ("sale".into(), 6)]
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("exported"), "--progress prints pages: {text}");

    tracing::info!("--- /metrics counts what PostgreSQL holds");
    let url = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("metrics on "))
        .expect("the exporter names its metrics address");
    let metric = |body: &str, name: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in /metrics: {body}"))
    };
    // Rows and the counter agree once no page is between its commit and
    // the count (a hold may still expire meanwhile: ask again).
    let body = eventually("/metrics counts PostgreSQL's change rows", || async {
        let body = reqwest::get(url).await.ok()?.text().await.ok()?;
        let rows: i64 = db
            .query_one("SELECT count(*) FROM seatfence_changes", &[])
            .await
            .unwrap()
            .get(0);
        (metric(&body, "seatfence_export_changes_total") == rows as f64).then_some(body)
    })
    .await;
    assert!(
        metric(&body, "seatfence_export_pages_total") >= 1.0,
        "{body}"
    );
    let p99 = metric(&body, "seatfence_export_lag_seconds{quantile=\"0.99\"}");
    assert!(p99.is_finite() && p99 >= 0.0, "{body}");
    exp.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t88_an_event_moved_while_exporting_loses_no_change() {
    use common::moves::{all_edges, create, get_move, post_move, Traffic};
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = start_regions(dir.path(), 3, 3).await;
    let edges = all_edges(&cluster);
    let op = token(&cluster, "ops", true);
    let pg = PgProc::start(dir.path()).expect("start PostgreSQL");
    create(&cluster, "mv", "us-east", 2).await;
    // Read from one edge per region.
    let read_from = [edges[0].clone(), edges[4].clone(), edges[8].clone()];
    let _exp = spawn_exporter(&read_from, &op, &pg, &dir.path().join("export.log"));
    let traffic = Traffic::start(&cluster, "mv", 1);
    eventually("holds flowing", || async {
        (traffic.acked_count() >= 20).then_some(())
    })
    .await;
    tracing::info!("--- move us-east -> eu-west while the exporter runs");
    let m = post_move(&edges[1], &op, "mv", "eu-west").await;
    eventually("the move done", || async {
        let m = get_move(&edges[2], &op, &m["move_id"]).await?;
        assert_ne!(m["state"], "failed", "{m}");
        (m["state"] == "done").then_some(())
    })
    .await;
    let at_done = traffic.acked_count();
    eventually("holds flowing after the move", || async {
        (traffic.acked_count() >= at_done + 20).then_some(())
    })
    .await;
    traffic.finish().await;

    let db = pg_client(&pg).await;
    let want = cluster_last(&edges[5], &op, &["mv"]).await;
    caught_up(&db, &want).await;
    let row = db
        .query_one(
            "SELECT owner_region, epoch FROM events WHERE event_id = 'mv'",
            &[],
        )
        .await
        .unwrap();
    let (owner, epoch): (String, i64) = (row.get(0), row.get(1));
    assert_eq!((owner.as_str(), epoch), ("eu-west", 2));
    let moved: i64 = db
        .query_one(
            "SELECT count(*) FROM seatfence_changes WHERE event_id = 'mv' AND type = 'event.moved'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(moved, 1);
}
