//! kill -9 the leader of a group under write load: a new leader is elected
//! and every write acknowledged before the kill is present afterwards.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use seatfence_core::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t20_leader_killed_under_load_loses_no_acknowledged_write() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path(), test_tuning()).await;
    let g = new_group(&cluster).await;
    let old_leader = cluster.wait_leader(g, PATIENCE).await.unwrap();

    tracing::info!("--- write load from 8 clients");
    let acked = Arc::new(Mutex::new(Vec::<(String, Vec<u8>)>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..8 {
        let client = cluster.client().with_deadline(Duration::from_secs(30));
        let acked = acked.clone();
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = format!("w{w}-{i}");
                let value = format!("v{w}-{i}").into_bytes();
                if client
                    .write(
                        g,
                        &Command::Put {
                            key: key.clone(),
                            value: value.clone(),
                        },
                    )
                    .await
                    .is_ok()
                {
                    acked.lock().unwrap().push((key, value));
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    tracing::info!("--- kill -9 leader {old_leader}");
    let acked_before_kill = acked.lock().unwrap().clone();
    assert!(
        acked_before_kill.len() > 50,
        "load was running: {} acks",
        acked_before_kill.len()
    );
    cluster.kill(old_leader).unwrap();

    let new_leader = eventually("a new leader", || async {
        match cluster.wait_leader(g, Duration::from_secs(1)).await {
            Ok(l) if l != old_leader => Some(l),
            _ => None,
        }
    })
    .await;
    tracing::info!("--- new leader {new_leader}; writes continue");
    let n = acked.lock().unwrap().len();
    eventually("writes acknowledged by the new leader", || async {
        (acked.lock().unwrap().len() > n + 50).then_some(())
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }

    tracing::info!("--- every acknowledged write is on both live replicas");
    let all = acked.lock().unwrap().clone();
    for node in cluster.nodes.iter().filter(|n| n.is_running()) {
        assert_keys_on(&cluster, node.addr(), g, &all).await;
    }

    tracing::info!("--- the killed node comes back and catches up");
    cluster.restart(old_leader).unwrap();
    let addr = cluster.addr(old_leader).unwrap();
    assert_keys_on(&cluster, &addr, g, &acked_before_kill).await;
}
