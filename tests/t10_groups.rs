//! Three nodes in three regions form the directory and 100 further groups;
//! writes to each group are readable on every replica.

mod common;

use common::*;
use seatfence_core::{Command, GroupId};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t10_hundred_groups_replicate_to_every_node() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let client = cluster.client();

    tracing::info!("--- create 100 groups through the directory");
    let mut groups = Vec::new();
    for _ in 0..100 {
        groups.push(new_group(&cluster).await);
    }
    let ids: std::collections::BTreeSet<_> = groups.iter().collect();
    assert_eq!(ids.len(), 100, "group ids are distinct");
    assert!(!groups.contains(&GroupId::DIRECTORY));

    tracing::info!("--- write one key per group");
    let mut writes = Vec::new();
    for g in &groups {
        let client = client.clone();
        let g = *g;
        writes.push(tokio::spawn(async move {
            let value = format!("value-of-{}", g.0).into_bytes();
            client
                .write(
                    g,
                    &Command::Put {
                        key: "k".into(),
                        value: value.clone(),
                    },
                )
                .await
                .unwrap_or_else(|e| panic!("write to {g}: {e}"));
            (g, value)
        }));
    }
    let mut written = Vec::new();
    for w in writes {
        written.push(w.await.unwrap());
    }

    tracing::info!("--- every replica of every group has its key");
    for n in &cluster.nodes {
        for (g, value) in &written {
            assert_keys_on(&cluster, n.addr(), *g, &[("k".to_string(), value.clone())]).await;
        }
        let status = client.status_at(n.addr()).await.unwrap();
        assert_eq!(
            status.groups.len(),
            101,
            "node {} hosts the directory and 100 groups",
            n.id()
        );
    }

    tracing::info!("--- leaders are spread over the nodes");
    let mut leaders = std::collections::BTreeMap::new();
    for n in &cluster.nodes {
        let s = client.status_at(n.addr()).await.unwrap();
        let led = s
            .groups
            .iter()
            .filter(|g| g.role == "leader" && g.group_id != 0)
            .count();
        leaders.insert(n.id(), led);
    }
    assert!(
        leaders.values().all(|&l| l >= 10),
        "leaders per node: {leaders:?}"
    );
}
