//! A rolling upgrade onto a release with a new data format, with buyers
//! holding seats throughout (README "Upgrading").
//!
//! Three nodes run the release that reads data format v1. Raising the
//! cluster's format to v2 is refused, naming the nodes that cannot read it.
//! Each node in turn is stopped and started as the next release (the test
//! build with SEATFENCE_FORMAT_NEXT=1, which reads v2: every value then
//! carries a checksum). Until the operator raises the format every node
//! still writes v1; after it, every node writes v2. A node then put back on
//! the old release refuses to start, naming the format its data dir holds,
//! and starts again on the new one. Buyers hold seats the whole time: no
//! request is refused except retryably, and every acknowledged hold is
//! there at the end, no seat held twice.

mod common;

use common::moves::{all_edges, create, verify_holds, Traffic};
use common::*;
use seatfence_testkit::http_client::HttpClient;
use serde_json::{json, Value};

const NEXT: &str = "SEATFENCE_FORMAT_NEXT";

/// `GET /v1/admin/version` through `edge`, once it answers 200.
async fn version(edge: &str, op: &str) -> Value {
    let (edge, op) = (edge.to_string(), op.to_string());
    eventually(&format!("{edge} answers its version"), || {
        let (edge, op) = (edge.clone(), op.clone());
        async move {
            let a = HttpClient::default()
                .get(&format!("{edge}/v1/admin/version"), Some(&op))
                .await
                .ok()?;
            (a.status.as_u16() == 200).then_some(a.body)
        }
    })
    .await
}

/// The newest format the directory says node `id` reads.
fn reads(v: &Value, id: u64) -> u64 {
    v["cluster"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == id)
        .and_then(|n| n["format_max"].as_u64())
        .unwrap_or_else(|| panic!("node {id} in {v}"))
}

/// Wait until the buyers have `more` acknowledged holds beyond `now`.
async fn holds_go_on(traffic: &Traffic, more: usize) {
    let want = traffic.acked_count() + more;
    eventually(&format!("{want} acknowledged holds"), || async {
        (traffic.acked_count() >= want).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t44_a_rolling_upgrade_raises_the_data_format_with_buyers_holding() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_regions(dir.path(), 1, 3).await;
    let http = HttpClient::default();
    let op = token(&cluster, "ops", true);
    let edges = all_edges(&cluster);
    let (_, capacity) = create(&cluster, "upg", "us-east", 50).await;

    let v = version(&edges[0], &op).await;
    assert_eq!(v["cluster"]["format"], 1, "{v}");
    assert_eq!(v["binary"]["format_newest"], 1, "{v}");
    for id in 1..=3 {
        assert_eq!(reads(&v, id), 1, "{v}");
    }
    let refused = http
        .post(
            &format!("{}/v1/admin/version", edges[0]),
            Some(&op),
            None,
            &json!({"format": 2}),
        )
        .await
        .unwrap();
    assert_eq!(refused.status.as_u16(), 409, "{}", refused.body);
    assert_eq!(refused.code(), Some("format_refused"));
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("node 1 reads v1 at most"),
        "{}",
        refused.body
    );

    let traffic = Traffic::start(&cluster, "upg", 1);
    holds_go_on(&traffic, 5).await;
    for id in 1..=3u64 {
        tracing::info!("--- node {id} onto the release that reads v2");
        cluster.stop(id).unwrap();
        cluster.set_env(id, NEXT, Some("1")).unwrap();
        cluster.restart(id).unwrap();
        let edge = &edges[id as usize - 1];
        eventually(&format!("node {id} registered as reading v2"), || async {
            let v = version(edge, &op).await;
            (v["binary"]["format_newest"] == 2 && reads(&v, id) == 2).then_some(())
        })
        .await;
        holds_go_on(&traffic, 3).await;
    }
    for edge in &edges {
        let v = version(edge, &op).await;
        assert_eq!(
            v["binary"]["format_writing"], 1,
            "{edge} writes the new format before it was raised: {v}"
        );
    }

    tracing::info!("--- every node reads v2: raise the cluster's format");
    let raised = http
        .post(
            &format!("{}/v1/admin/version", edges[1]),
            Some(&op),
            None,
            &json!({"format": 2}),
        )
        .await
        .unwrap();
    assert_eq!(raised.status.as_u16(), 200, "{}", raised.body);
    assert_eq!(raised.body["cluster"]["format"], 2, "{}", raised.body);
    for edge in &edges {
        eventually(&format!("{edge} writes v2"), || async {
            let v = version(edge, &op).await;
            (v["binary"]["format_writing"] == 2).then_some(())
        })
        .await;
    }
    holds_go_on(&traffic, 5).await;
    let audit = http
        .get(&format!("{}/v1/admin/audit", edges[0]), Some(&op))
        .await
        .unwrap();
    let actions: Vec<&str> = audit.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "set-format")
        .map(|e| e["result"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions.len(),
        2,
        "the refusal and the raise: {}",
        audit.body
    );

    tracing::info!("--- node 3 back on the old release: it refuses to start");
    cluster.stop(3).unwrap();
    cluster.set_env(3, NEXT, None).unwrap();
    cluster.restart(3).unwrap();
    let status = eventually("node 3 exits on the old release", || {
        let status = cluster.exited(3).unwrap();
        async move { status }
    })
    .await;
    assert!(!status.success(), "node 3 exited with {status}");
    let log = cluster.log_tail(3);
    assert!(
        log.contains("data format v2 is newer than this binary reads (v1 at most)"),
        "node 3's log names the format its data dir holds:\n{log}"
    );
    cluster.set_env(3, NEXT, Some("1")).unwrap();
    cluster.restart(3).unwrap();
    let v = version(&edges[2], &op).await;
    assert_eq!(v["binary"]["format_writing"], 2, "{v}");
    holds_go_on(&traffic, 3).await;

    let (acked, unknown) = traffic.finish().await;
    verify_holds(&edges[0], "upg", &acked, unknown, capacity).await;
    cluster.stop_all().unwrap();
}
