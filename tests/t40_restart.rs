//! kill -9 (and separately SIGTERM) all three nodes, start them again:
//! every acknowledged write survives, in every group. Snapshots are taken
//! every 50 entries, so recovery goes through snapshot files, the deltas
//! written after them, and purged logs.

mod common;

use common::*;
use seatfence_core::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t40_every_acknowledged_write_survives_full_restarts() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let tuning = seatfence_raft::RaftTuning {
        snapshot_every: 50,
        logs_to_keep: 10,
        ..test_tuning()
    };
    let mut cluster = start(dir.path(), tuning).await;
    let groups = [new_group(&cluster).await, new_group(&cluster).await];
    let client = cluster.client();
    let mut acked = Vec::new();
    write_keys(&client, &groups, 0..200, &mut acked).await;
    let ids: Vec<u64> = cluster.nodes.iter().map(|n| n.id()).collect();
    let status = client.status_at(cluster.nodes[0].addr()).await.unwrap();
    for g in groups {
        let gs = status.groups.iter().find(|s| s.group_id == g.0).unwrap();
        assert!(
            gs.snapshot_index > 0,
            "snapshots were taken before the kill: {gs:?}"
        );
    }

    tracing::info!("--- kill -9 every node, then start them again");
    for id in &ids {
        cluster.kill(*id).unwrap();
    }
    for id in &ids {
        cluster.restart(*id).unwrap();
    }
    for g in groups {
        cluster.wait_leader(g, PATIENCE).await.unwrap();
    }
    check_all(&cluster, &acked).await;

    tracing::info!("--- more writes, then SIGTERM every node and start them again");
    let client = cluster.client();
    write_keys(&client, &groups, 200..300, &mut acked).await;
    for id in &ids {
        cluster.stop(*id).unwrap();
    }
    for id in &ids {
        cluster.restart(*id).unwrap();
    }
    check_all(&cluster, &acked).await;
}

/// Write `k{i}` = `v{i}` for each `i`, alternating groups; record the acks.
async fn write_keys(
    client: &seatfence_raft::ClusterClient,
    groups: &[seatfence_core::GroupId],
    range: std::ops::Range<usize>,
    acked: &mut Vec<(seatfence_core::GroupId, String, Vec<u8>)>,
) {
    for i in range {
        let g = groups[i % groups.len()];
        let (key, value) = (format!("k{i}"), format!("v{i}").into_bytes());
        let cmd = Command::Put {
            key: key.clone(),
            value: value.clone(),
        };
        client.write(g, &cmd).await.unwrap();
        acked.push((g, key, value));
    }
}

async fn check_all(
    cluster: &seatfence_testkit::cluster::LocalCluster,
    acked: &[(seatfence_core::GroupId, String, Vec<u8>)],
) {
    for n in &cluster.nodes {
        for g in acked
            .iter()
            .map(|a| a.0)
            .collect::<std::collections::BTreeSet<_>>()
        {
            let keys: Vec<_> = acked
                .iter()
                .filter(|a| a.0 == g)
                .map(|a| (a.1.clone(), a.2.clone()))
                .collect();
            assert_keys_on(cluster, n.addr(), g, &keys).await;
        }
    }
}

/// A demo restart once hung for a user: after moves, aborts, transfers and
/// drains, the cluster restarted on its data and an edge was asked before
/// it served. Here: a cluster with that history restarts again and again
/// (SIGTERM and SIGKILL in turn); each time `wait_ready` must mean every
/// node and every edge serves, and a hold succeeds at every edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t40_a_cluster_restarts_after_moves_and_drains_again_and_again() {
    use common::moves::{get_move, post_move};
    use seatfence_testkit::http_client::HttpClient;
    use serde_json::json;

    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_regions(dir.path(), 3, 1).await;
    let op = token(&cluster, "ops", true);
    let http = HttpClient::default();
    let edges = |c: &seatfence_testkit::LocalCluster| c.edges().into_values().collect::<Vec<_>>();
    let edge = edges(&cluster)[0].clone();
    for (id, home) in [("rs-a", "us-east"), ("rs-b", "eu-west")] {
        create_event(
            &cluster,
            &edge,
            json!({"event_id": id, "name": id, "home_region": home, "survival": "region",
                   "sections": [{"name": "A", "rows": 10, "seats_per_row": 10}]}),
        )
        .await;
    }
    tracing::info!("--- history: moves, an abort, a drain and an undrain");
    for (event, to) in [
        ("rs-a", "ap-south"),
        ("rs-b", "us-east"),
        ("rs-a", "eu-west"),
    ] {
        let m = post_move(&edge, &op, event, to).await;
        eventually(&format!("move of {event} to {to} done"), || async {
            let m = get_move(&edge, &op, &m["move_id"]).await?;
            (m["state"] == "done").then_some(())
        })
        .await;
    }
    let m = post_move(&edge, &op, "rs-b", "ap-south").await;
    let abort = http
        .post(
            &format!("{edge}/v1/admin/moves/{}/abort", m["move_id"]),
            Some(&op),
            None,
            &json!({}),
        )
        .await
        .unwrap();
    tracing::info!("abort answered {} {}", abort.status, abort.body);
    for action in ["drain", "undrain"] {
        let a = http
            .post(
                &format!("{edge}/v1/admin/nodes/2/{action}"),
                Some(&op),
                None,
                &json!({}),
            )
            .await
            .unwrap();
        assert!(a.status.is_success(), "{action}: {}", a.body);
    }
    let ids: Vec<u64> = cluster.nodes.iter().map(|n| n.id()).collect();
    for round in 0..8 {
        tracing::info!("--- restart {round}");
        if round % 2 == 0 {
            cluster.stop_all().unwrap();
        } else {
            for id in &ids {
                cluster.kill(*id).unwrap();
            }
        }
        for id in &ids {
            cluster.restart(*id).unwrap();
        }
        cluster.wait_ready(PATIENCE).await.unwrap();
        // Ready means serving: every edge takes a write at once.
        for (i, e) in edges(&cluster).iter().enumerate() {
            let buyer = token(&cluster, &format!("b{round}-{i}"), false);
            let a = http
                .post(
                    &format!("{e}/v1/holds"),
                    Some(&buyer),
                    None,
                    &json!({"event_id": "rs-a", "quantity": 1}),
                )
                .await
                .unwrap_or_else(|err| panic!("edge {e} after restart {round}: {err}"));
            assert_eq!(
                a.status.as_u16(),
                201,
                "edge {e} after restart {round}: {}",
                a.body
            );
        }
    }
}
