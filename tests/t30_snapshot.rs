//! kill -9 a follower, write until the leader purges its log, restart the
//! follower: it catches up by snapshot and holds the same state.

mod common;

use common::*;
use seatfence_core::Command;
use seatfence_raft::RaftTuning;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t30_follower_catches_up_by_snapshot_after_purge() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let tuning = RaftTuning {
        snapshot_every: 300,
        logs_to_keep: 20,
        ..test_tuning()
    };
    let mut cluster = start(dir.path(), tuning).await;
    let g = new_group(&cluster).await;
    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let follower = cluster
        .nodes
        .iter()
        .map(|n| n.id())
        .find(|&id| id != leader)
        .unwrap();
    let client = cluster.client();
    client
        .write(
            g,
            &Command::Put {
                key: "before".into(),
                value: b"0".to_vec(),
            },
        )
        .await
        .unwrap();

    tracing::info!("--- kill -9 follower {follower}");
    let follower_addr = cluster.addr(follower).unwrap();
    let follower_last = client
        .status_with_digests_at(&follower_addr)
        .await
        .unwrap()
        .groups
        .iter()
        .find(|s| s.group_id == g.0)
        .unwrap()
        .last_log_index;
    cluster.kill(follower).unwrap();

    tracing::info!("--- write until the leader has purged past the follower's log");
    let leader_addr = cluster.addr(leader).unwrap();
    let mut keys = Vec::new();
    let mut i = 0;
    loop {
        for _ in 0..100 {
            let k = format!("k{i}");
            let v = format!("v{i}").into_bytes();
            client
                .write(
                    g,
                    &Command::Put {
                        key: k.clone(),
                        value: v.clone(),
                    },
                )
                .await
                .unwrap();
            keys.push((k, v));
            i += 1;
        }
        let s = client.status_with_digests_at(&leader_addr).await.unwrap();
        let gs = s.groups.iter().find(|s| s.group_id == g.0).unwrap();
        if gs.purged_index > follower_last + 10 {
            break;
        }
        assert!(i < 20_000, "leader never purged: {gs:?}");
    }

    tracing::info!("--- restart the follower");
    cluster.restart(follower).unwrap();
    let leader_digest = {
        let s = client.status_with_digests_at(&leader_addr).await.unwrap();
        s.groups
            .iter()
            .find(|s| s.group_id == g.0)
            .unwrap()
            .state_digest
    };
    let caught_up = eventually("follower matches the leader", || async {
        let s = client.status_with_digests_at(&follower_addr).await.ok()?;
        let gs = s.groups.iter().find(|s| s.group_id == g.0)?.clone();
        (gs.state_digest == leader_digest).then_some(gs)
    })
    .await;
    assert!(
        caught_up.snapshot_index > follower_last,
        "caught up by snapshot: {caught_up:?}"
    );
    assert_eq!(caught_up.key_count as usize, keys.len() + 1);
    assert_keys_on(&cluster, &follower_addr, g, &keys[keys.len() - 10..]).await;
}
