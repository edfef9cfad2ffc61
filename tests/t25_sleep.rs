//! Sleeping groups: an idle group stops its timers on every replica and
//! holds no elections while it sleeps; a proposal and a linearizable read
//! (from a client that first asks the followers) wake it without an
//! election; a follower's node restarting catches up with no election;
//! when its leader's node is SIGKILLed while it sleeps, the survivors elect
//! a new leader (node liveness wakes one, its vote wakes the other) and
//! every acknowledged write survives; the killed node comes back (its
//! replica asleep from the start) and catches up without an election.
//! Followers asleep long enough leave memory (dormant): the group still
//! takes writes and reads on every replica with no election, and when the
//! leader's node dies the dormant followers come back and elect.

mod common;

use std::time::Duration;

use common::*;
use seatfence_core::{GroupId, Query};
use seatfence_proto::v1::GroupStatus;
use seatfence_raft::ClusterClient;
use seatfence_testkit::LocalCluster;

/// Sleep after 1 s idle (the shortest the config allows with the default
/// 800 ms election timeout), so the test waits little.
fn sleepy() -> seatfence_raft::RaftTuning {
    seatfence_raft::RaftTuning {
        sleep_after_ms: 1_000,
        ..test_tuning()
    }
}

/// `group`'s `Status` entry on each running node.
async fn statuses(cluster: &LocalCluster, group: GroupId) -> Vec<(u64, GroupStatus)> {
    let client = cluster.client();
    let mut out = Vec::new();
    for n in cluster.nodes.iter().filter(|n| n.is_running()) {
        if let Ok(s) = client.status_at(n.addr()).await {
            if let Some(g) = s.groups.into_iter().find(|g| g.group_id == group.0) {
                out.push((n.id(), g));
            }
        }
    }
    out
}

/// `(node, asleep, term, leader)` of `group` on each running node.
async fn views(cluster: &LocalCluster, group: GroupId) -> Vec<(u64, bool, u64, Option<u64>)> {
    let v = statuses(cluster, group).await;
    v.into_iter()
        .map(|(n, g)| (n, g.asleep, g.term, g.leader))
        .collect()
}

/// Wait until every running replica of `group` sleeps; the term it sleeps in.
async fn all_asleep(cluster: &LocalCluster, group: GroupId, replicas: usize) -> u64 {
    eventually(
        &format!("{group} asleep on {replicas} replicas"),
        || async {
            let v = views(cluster, group).await;
            let term = v.first()?.2;
            (v.len() == replicas && v.iter().all(|(_, asleep, t, _)| *asleep && *t == term))
                .then_some(term)
        },
    )
    .await
}

async fn linearizable_read(client: &ClusterClient, group: GroupId) {
    client
        .query(group, &Query::Event, true)
        .await
        .unwrap_or_else(|e| panic!("linearizable read of {group}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t25_idle_groups_sleep_wake_on_use_and_fail_over_asleep() {
    let _one = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path(), sleepy()).await;
    let g = new_group(&cluster).await;
    let client = cluster.client().with_deadline(Duration::from_secs(30));
    let mut acked = Vec::new();
    for i in 0..20 {
        let (k, v) = (format!("k{i}"), format!("v{i}").into_bytes());
        put(&client, g, &k, &v).await;
        acked.push((k, v));
    }
    let created_in = views(&cluster, g).await[0].2;

    tracing::info!("--- idle: every replica falls asleep, and stays in its term");
    let term = all_asleep(&cluster, g, 3).await;
    assert_eq!(term, created_in, "an election before the group slept");
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (node, asleep, t, _) in views(&cluster, g).await {
        assert!(asleep, "node {node} woke up with nothing to do");
        assert_eq!(t, term, "node {node}: an election while asleep");
    }

    tracing::info!(
        "--- a proposal and a read from a client that knows no leader wake it, no election"
    );
    // A fresh client asks the members in turn: the followers it reaches
    // first must answer with the leader, not wake up and campaign.
    let fresh = cluster.client().with_deadline(Duration::from_secs(30));
    put(&fresh, g, "after-sleep", b"1").await;
    acked.push(("after-sleep".into(), b"1".to_vec()));
    linearizable_read(&cluster.client(), g).await;
    assert_eq!(
        all_asleep(&cluster, g, 3).await,
        term,
        "an election on waking"
    );

    tracing::info!("--- a follower's node restarts: it catches up asleep, no election");
    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let follower = views(&cluster, g)
        .await
        .iter()
        .map(|v| v.0)
        .find(|n| *n != leader)
        .unwrap();
    cluster.kill(follower).unwrap();
    put(&client, g, "follower-down", b"2").await;
    acked.push(("follower-down".into(), b"2".to_vec()));
    cluster.restart(follower).unwrap();
    cluster.wait_ready(PATIENCE).await.unwrap();
    assert_keys_on(&cluster, &cluster.addr(follower).unwrap(), g, &acked).await;
    assert_eq!(
        all_asleep(&cluster, g, 3).await,
        term,
        "an election after the restart"
    );

    tracing::info!("--- SIGKILL the sleeping leader's node");
    let new_leader = kill_leader_and_write(&mut cluster, &client, g, leader, &mut acked).await;

    tracing::info!("--- the killed node comes back and catches up, no election");
    let term = views(&cluster, g).await[0].2;
    cluster.restart(leader).unwrap();
    cluster.wait_ready(PATIENCE).await.unwrap();
    assert_keys_on(&cluster, &cluster.addr(leader).unwrap(), g, &acked).await;
    // Back to sleep, all three, in the term of the failover.
    assert_eq!(
        all_asleep(&cluster, g, 3).await,
        term,
        "an election after the restart"
    );
    for (node, _, _, l) in views(&cluster, g).await {
        assert_eq!(l, Some(new_leader), "node {node} follows another leader");
    }
}

/// `(node, dormant, asleep, term)` of `group` on each running node.
async fn residency(cluster: &LocalCluster, group: GroupId) -> Vec<(u64, bool, bool, u64)> {
    let v = statuses(cluster, group).await;
    v.into_iter()
        .map(|(n, g)| (n, g.dormant, g.asleep, g.term))
        .collect()
}

/// Wait until `leader` sleeps in memory and every other replica of
/// `group` is dormant, all in one term; that term.
async fn followers_dormant(cluster: &LocalCluster, group: GroupId, leader: u64) -> u64 {
    eventually(
        &format!("{group}: followers of {leader} dormant"),
        || async {
            let v = residency(cluster, group).await;
            let term = v.first()?.3;
            let ok = v.len() == 3
                && v.iter().all(|(node, dormant, asleep, t)| {
                    *asleep && *t == term && *dormant == (*node != leader)
                });
            ok.then_some(term)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t25_sleeping_followers_unload_and_come_back() {
    let _one = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let tuning = seatfence_raft::RaftTuning {
        unload_after_ms: 1_000,
        ..sleepy()
    };
    let mut cluster = start(dir.path(), tuning).await;
    let g = new_group(&cluster).await;
    let client = cluster.client().with_deadline(Duration::from_secs(30));
    let mut acked = Vec::new();
    for i in 0..10 {
        let (k, v) = (format!("k{i}"), format!("v{i}").into_bytes());
        put(&client, g, &k, &v).await;
        acked.push((k, v));
    }
    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();

    tracing::info!("--- idle: the followers leave memory, the leader sleeps in it");
    let term = followers_dormant(&cluster, g, leader).await;

    tracing::info!(
        "--- a write through a client that asks the followers first, then replica reads"
    );
    let fresh = cluster.client().with_deadline(Duration::from_secs(30));
    put(&fresh, g, "after-unload", b"1").await;
    acked.push(("after-unload".into(), b"1".to_vec()));
    for n in [1, 2, 3] {
        assert_keys_on(&cluster, &cluster.addr(n).unwrap(), g, &acked).await;
    }
    assert_eq!(
        followers_dormant(&cluster, g, leader).await,
        term,
        "an election after the dormant followers came back"
    );

    tracing::info!("--- SIGKILL the leader's node: the dormant followers come back and elect");
    kill_leader_and_write(&mut cluster, &client, g, leader, &mut acked).await;
    let survivors: Vec<u64> = [1, 2, 3].into_iter().filter(|n| *n != leader).collect();
    for n in survivors {
        assert_keys_on(&cluster, &cluster.addr(n).unwrap(), g, &acked).await;
    }
}

/// SIGKILL `leader`'s node, wait for a new leader among the survivors,
/// write one more key through it and read every acked key there; the new
/// leader.
async fn kill_leader_and_write(
    cluster: &mut LocalCluster,
    client: &ClusterClient,
    g: GroupId,
    leader: u64,
    acked: &mut Vec<(String, Vec<u8>)>,
) -> u64 {
    cluster.kill(leader).unwrap();
    let new_leader = eventually("a new leader among the survivors", || async {
        match cluster.wait_leader(g, Duration::from_secs(1)).await {
            Ok(l) if l != leader => Some(l),
            _ => None,
        }
    })
    .await;
    put(client, g, "after-kill", b"k").await;
    acked.push(("after-kill".into(), b"k".to_vec()));
    assert_keys_on(cluster, &cluster.addr(new_leader).unwrap(), g, acked).await;
    new_leader
}

/// A hold in an event whose group fell asleep expires on time with nobody
/// using the group: the leader's dispatcher keeps the tick due it read in
/// this nap (it reads a sleeping group's state once per nap), and the tick
/// it proposes wakes the group. Checked without waking it first: the
/// group's applied index moves by itself, read through `Status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t25_a_hold_in_a_sleeping_event_expires_on_time() {
    let _one = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::builder(dir.path())
        .regions(1, 3)
        .tuning(sleepy())
        .start(std::path::Path::new(env!("CARGO_BIN_EXE_seatfence")))
        .expect("start cluster");
    cluster.wait_ready(PATIENCE).await.unwrap();
    let (region, edge) = cluster.edges().into_iter().next().unwrap();
    // Long enough for the group to fall asleep first on a slow machine.
    let ttl_secs = 20;
    let created = create_event(
        &cluster,
        &edge,
        serde_json::json!({"event_id": "nap", "name": "Nap", "home_region": region,
               "seats": ["N1", "N2"], "hold_ttl_secs": ttl_secs}),
    )
    .await;
    let g = GroupId(created["group_id"].as_u64().unwrap());
    let http = seatfence_testkit::http_client::HttpClient::default();
    let tok = token(&cluster, "nia", false);
    let held = http
        .post(
            &format!("{edge}/v1/holds"),
            Some(&tok),
            None,
            &serde_json::json!({"event_id": "nap", "seats": ["N1"]}),
        )
        .await
        .unwrap();
    assert_eq!(held.status.as_u16(), 201, "{}", held.body);
    let hold_id = held.body["hold_id"].as_str().unwrap().to_string();

    all_asleep(&cluster, g, 3).await;
    let applied = |v: Vec<(u64, GroupStatus)>| v.iter().map(|(_, s)| s.applied_index).max();
    let asleep_at = applied(statuses(&cluster, g).await).unwrap();
    let still = http
        .get(&format!("{edge}/v1/holds/{hold_id}"), Some(&tok))
        .await
        .unwrap();
    assert_eq!(
        still.body["status"], "held",
        "the group fell asleep only after the hold's TTL ({ttl_secs} s): {}",
        still.body
    );
    let _ = all_asleep(&cluster, g, 3).await;
    let asleep_at = asleep_at.max(applied(statuses(&cluster, g).await).unwrap());

    tracing::info!("--- nobody touches the group: its tick must come by itself");
    eventually(
        "the sleeping group's tick commits after the TTL",
        || async {
            let now = applied(statuses(&cluster, g).await)?;
            (now > asleep_at).then_some(())
        },
    )
    .await;
    eventually("the hold expired", || async {
        let a = http
            .get(&format!("{edge}/v1/holds/{hold_id}"), Some(&tok))
            .await
            .ok()?;
        (a.body["status"] == "expired").then_some(())
    })
    .await;
}
