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
