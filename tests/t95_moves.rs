//! An ownership move against real processes (3 regions × 3 nodes) under
//! continuous hold traffic from edges in every region, with `seatfence ctl
//! move --wait`: every acknowledged hold is present once, no seat is held
//! twice, the epoch rose by one, the leader and voters are in the target
//! region, every edge serves the new route, the old voters stop hosting the
//! group, and a writer still using the old epoch is refused every time. A
//! region-survival event keeps its voters and moves its leadership.

mod common;

use std::collections::BTreeSet;

use common::moves::*;
use common::*;
use seatfence_core::GroupId;
use seatfence_testkit::http_client::HttpClient;
use serde_json::json;

/// A JSON array of node ids as a set.
fn ids(v: &serde_json::Value) -> BTreeSet<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
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
    let voters = ids(&m["to_members"]);
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

    tracing::info!("--- a region-survival event: same voters, leadership into the target region");
    let c = create_event(
        &cluster,
        &edges[0],
        json!({"event_id": "rs", "name": "rs", "home_region": "us-east", "survival": "region",
               "sections": [{"name": "A", "rows": 2, "seats_per_row": 100}]}),
    )
    .await;
    let rs_group = c["group_id"].as_u64().unwrap();
    cluster
        .wait_leader(GroupId(rs_group), PATIENCE)
        .await
        .unwrap();
    let m = post_move(&edges[0], &op, "rs", "ap-south").await;
    let before = ids(&m["from_members"]);
    let after = ids(&m["to_members"]);
    assert_eq!(before, after, "{m}");
    let end = eventually("region-survival move done", || async {
        let m = get_move(&edges[0], &op, &m["move_id"]).await?;
        (m["state"] != "running").then_some(m)
    })
    .await;
    assert_eq!(end["state"], "done", "{end}");
    let leader = eventually("a leader", || leader_of(&cluster, rs_group)).await;
    assert!(
        region_nodes("ap-south").contains(&leader),
        "leader {leader} is not in ap-south"
    );
    let tok = token(&cluster, "rs-buyer", false);
    let ev = http
        .get(&format!("{}/v1/events/rs", edges[1]), Some(&tok))
        .await
        .unwrap();
    assert_eq!(
        (ev.body["epoch"].clone(), ev.body["owner_region"].clone()),
        (json!(2), json!("ap-south"))
    );
}
