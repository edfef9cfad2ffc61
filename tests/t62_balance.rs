//! The leader balancer: six groups all handed to node 1 while node 3 is
//! stopped and behind (past the catch-up slack) spread over nodes 1 and 2
//! (three each; node 3 gets none); once node 3 runs again and catches up,
//! two each. Node 2 drained: nodes 1 and 3 lead three each (the drained
//! node's own hand-off and the balancer); the drain undone: two each.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use seatfence_core::{Command, GroupId, NodeId};
use seatfence_regions::config::MovesConfig;
use seatfence_testkit::LocalCluster;

/// How many of `groups` each running node leads, from the nodes' status.
async fn led(cluster: &LocalCluster, groups: &[GroupId]) -> BTreeMap<u64, usize> {
    let client = cluster.client();
    let mut out = BTreeMap::new();
    for n in cluster.nodes.iter().filter(|n| n.is_running()) {
        let Ok(s) = client.status_at(n.addr()).await else {
            continue;
        };
        let count = s
            .groups
            .iter()
            .filter(|g| groups.iter().any(|x| x.0 == g.group_id) && g.role == "leader")
            .count();
        out.insert(n.id(), count);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t62_balancer_spreads_leaders_around_a_stopped_voter_and_back() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let mut cluster = LocalCluster::builder(dir.path())
        .tuning(test_tuning())
        .moves(MovesConfig {
            balance_every_ms: 500,
            catch_up_slack: 5,
            ..MovesConfig::default()
        })
        .start(bin)
        .expect("start cluster");
    cluster.wait_ready(PATIENCE).await.unwrap();
    let client = cluster.client();
    let mut groups = Vec::new();
    for _ in 0..6 {
        let g = new_group(&cluster).await;
        put(&client, g, "warm", b"v").await;
        groups.push(g);
    }

    tracing::info!("--- node 3 stops and falls behind; every group is handed to node 1");
    cluster.pause(3).unwrap();
    for g in &groups {
        for i in 0..10 {
            put(&client, *g, &format!("k{i}"), b"v").await;
        }
        // The balancer may already take some back: retry until node 1
        // has led each once.
        eventually(&format!("node 1 leads {g}"), || async {
            let _ = client.transfer_leader(*g, 1).await;
            let s = client
                .status_at(cluster.addr(1).unwrap().as_str())
                .await
                .ok()?;
            s.groups
                .iter()
                .any(|x| x.group_id == g.0 && x.role == "leader")
                .then_some(())
        })
        .await;
    }
    // Balanced, and stable: three each now and still two seconds later. A
    // hand-off the balancer planned from a view older than the last of
    // the test's own transfers may still land once after the first 3/3
    // (the next round undoes it), so stability is asked of the settled
    // spread, not of the first one seen.
    let spread = eventually("three groups each on nodes 1 and 2, stable", || async {
        let three_each = |c: &BTreeMap<u64, usize>| c.get(&1) == Some(&3) && c.get(&2) == Some(&3);
        let c = led(&cluster, &groups).await;
        if !three_each(&c) {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let later = led(&cluster, &groups).await;
        (later == c).then_some(c)
    })
    .await;
    tracing::info!(?spread, "while node 3 lags");

    tracing::info!("--- node 3 runs again, catches up and gets its share");
    cluster.resume(3).unwrap();
    eventually("two groups per node", || async {
        let c = led(&cluster, &groups).await;
        (c.len() == 3 && c.values().all(|n| *n == 2)).then_some(())
    })
    .await;

    tracing::info!("--- node 2 drained: its groups go to 1 and 3; undrained: two each again");
    let drain = |drained: bool| Command::SetDrained {
        node: NodeId(2),
        drained,
    };
    client
        .write(GroupId::DIRECTORY, &drain(true))
        .await
        .unwrap();
    eventually("node 2 leads nothing, 1 and 3 three each", || async {
        let c = led(&cluster, &groups).await;
        (c.get(&2) == Some(&0) && c.get(&1) == Some(&3) && c.get(&3) == Some(&3)).then_some(())
    })
    .await;
    client
        .write(GroupId::DIRECTORY, &drain(false))
        .await
        .unwrap();
    eventually("two groups per node after the drain is undone", || async {
        let c = led(&cluster, &groups).await;
        (c.len() == 3 && c.values().all(|n| *n == 2)).then_some(())
    })
    .await;
    for g in &groups {
        put(&client, *g, "after", b"v").await;
    }
}
