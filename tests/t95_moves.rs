//! An ownership move against real processes (3 regions × 3 nodes) under
//! continuous hold traffic from edges in every region, with `seatfence ctl
//! move --wait`: every acknowledged hold is present once, no seat is held
//! twice, the epoch rose by one, the leader and voters are in the target
//! region, every edge serves the new route, the old voters stop hosting the
//! group, and a writer still using the old epoch is refused every time.

mod common;

use std::collections::BTreeSet;

use common::moves::*;
use common::*;
use seatfence::http_client::HttpClient;
use seatfence_core::GroupId;
use serde_json::json;

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
    let metrics = all_metrics(&edges).await;
    assert!(
        metrics.contains("seatfence_moves_total{result=\"completed\"} 1"),
        "one coordinator counted the move"
    );
}
