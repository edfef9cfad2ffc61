//! When the disk misbehaves. A failed fsync is final: the node exits with
//! the reason, acknowledges nothing the flush covered, the cluster carries
//! on, and after a restart every acknowledged write is on every node. A
//! full disk (a tmpfs data dir filled past the reserve) refuses new writes
//! with `storage_full` and the metric, still answers reads, lets a full
//! follower lag without stopping the group, and takes writes again by
//! itself once space returns, with nothing acknowledged lost.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command as Cmd;

use common::*;
use seatfence_core::{Command, GroupId};
use seatfence_raft::storage::health::FAULT_FSYNC_FILE;
use seatfence_raft::{ClusterClient, RaftTuning};
use seatfence_testkit::cluster::LocalCluster;

type Acked = Vec<(String, Vec<u8>)>;

/// Write `k{i}`: `Some` (acknowledged: must survive) or the error's code.
async fn try_put(
    client: &ClusterClient,
    g: GroupId,
    i: usize,
) -> Result<(String, Vec<u8>), String> {
    let (key, value) = (format!("k{i}"), format!("v{i}").into_bytes());
    let cmd = Command::Put {
        key: key.clone(),
        value: value.clone(),
    };
    match client.write(g, &cmd).await {
        Ok(_) => Ok((key, value)),
        Err(e) => Err(format!("{}: {e}", e.code())),
    }
}

async fn put_all(
    client: &ClusterClient,
    g: GroupId,
    range: std::ops::Range<usize>,
    acked: &mut Acked,
) {
    for i in range {
        acked.push(
            try_put(client, g, i)
                .await
                .unwrap_or_else(|e| panic!("k{i}: {e}")),
        );
    }
}

fn index_of(cluster: &LocalCluster, id: u64) -> usize {
    cluster.nodes.iter().position(|n| n.id() == id).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t42_a_failed_fsync_stops_the_node_and_loses_nothing_acknowledged() {
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path(), test_tuning()).await;
    let g = new_group(&cluster).await;
    let client = cluster.client();
    let mut acked = Acked::new();
    put_all(&client, g, 0..20, &mut acked).await;

    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let fault = cluster.nodes[index_of(&cluster, leader)]
        .config
        .data_dir
        .join(FAULT_FSYNC_FILE);
    tracing::info!("--- node {leader}'s next fsync fails");
    std::fs::write(&fault, b"").unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut i = 20;
    let status = loop {
        if let Some(status) = cluster.exited(leader).unwrap() {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {leader} still runs after its flush failed:\n{}",
            cluster.log_tail(leader)
        );
        match try_put(&client, g, i).await {
            Ok(kv) => acked.push(kv),
            Err(e) => tracing::info!("k{i} not acknowledged: {e}"),
        }
        i += 1;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let log = cluster.log_tail(leader);
    assert!(!status.success(), "exit status {status}");
    assert!(
        log.contains("storage failed") && log.contains("injected fsync failure"),
        "the node says why it stopped:\n{log}"
    );

    tracing::info!("--- the other two carry on");
    put_all(&client, g, 1000..1020, &mut acked).await;

    tracing::info!("--- node {leader} restarts on what its disk holds");
    std::fs::remove_file(&fault).unwrap();
    cluster.restart(leader).unwrap();
    cluster.wait_ready(PATIENCE).await.unwrap();
    put_all(&client, g, 2000..2005, &mut acked).await;
    for n in &cluster.nodes {
        assert_keys_on(&cluster, n.addr(), g, &acked).await;
    }
}

/// tmpfs mounts, unmounted on drop (after the cluster that uses them).
struct Mounts(Vec<PathBuf>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for m in &self.0 {
            let _ = Cmd::new("umount").arg("-l").arg(m).status();
        }
    }
}

const TMPFS_MB: u64 = 256;
const RESERVE_MB: u64 = 64;

/// Fill `dir`'s filesystem until less than half the reserve is free.
fn fill(dir: &Path) -> PathBuf {
    let ballast = dir.join("ballast");
    let free = fs_free(dir);
    let mut f = std::fs::File::create(&ballast).unwrap();
    let chunk = vec![0u8; 1 << 20];
    let mut left = free.saturating_sub(RESERVE_MB / 2 * (1 << 20));
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    f.sync_all().unwrap();
    ballast
}

fn fs_free(dir: &Path) -> u64 {
    let out = Cmd::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

async fn metric(cluster: &LocalCluster, id: u64, name: &str) -> Option<f64> {
    let edge = cluster.nodes[index_of(cluster, id)].edge_url()?;
    let http = seatfence_testkit::http_client::HttpClient::default();
    let a = http.get(&format!("{edge}/metrics"), None).await.ok()?;
    let text = a.body.as_str()?.to_string();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t42_a_full_disk_refuses_writes_and_recovers_by_itself() {
    if !nix_is_root() {
        eprintln!("SKIPPED: mounting a small tmpfs data dir needs root (.ci/run runs as root)");
        return;
    }
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let tuning = RaftTuning {
        min_free_mb: RESERVE_MB,
        ..test_tuning()
    };
    let configs = LocalCluster::builder(dir.path())
        .tuning(tuning)
        .layout()
        .unwrap();
    let mut mounts = Mounts(Vec::new());
    for (_, c) in &configs {
        std::fs::create_dir_all(&c.data_dir).unwrap();
        let ok = Cmd::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_MB}m"), "tmpfs"])
            .arg(&c.data_dir)
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs on {}", c.data_dir.display());
        mounts.0.push(c.data_dir.clone());
    }
    let cluster = LocalCluster::launch(bin, configs, |_| None).unwrap();
    cluster.wait_ready(PATIENCE).await.unwrap();
    let g = new_group(&cluster).await;
    let client = cluster.client();
    let mut acked = Acked::new();
    put_all(&client, g, 0..20, &mut acked).await;

    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let leader_dir = cluster.nodes[index_of(&cluster, leader)]
        .config
        .data_dir
        .clone();
    tracing::info!("--- fill the leader's (node {leader}) disk");
    let ballast = fill(&leader_dir);
    // Until the watcher looks (every half second), writes may still land.
    let refused = loop {
        match try_put(&client, g, 100 + acked.len()).await {
            Ok(kv) => acked.push(kv),
            Err(e) if e.starts_with("storage_full") => break e,
            Err(e) => panic!("a full leader answers storage_full, not {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    tracing::info!("refused: {refused}");
    assert_eq!(
        metric(&cluster, leader, "seatfence_storage_full").await,
        Some(1.0)
    );
    // What it holds, it still serves.
    assert_keys_on(
        &cluster,
        cluster.nodes[index_of(&cluster, leader)].addr(),
        g,
        &acked,
    )
    .await;

    tracing::info!("--- space returns: writes resume by themselves");
    std::fs::remove_file(&ballast).unwrap();
    let resumed = eventually("writes are taken again", || async {
        try_put(&client, g, 200).await.ok()
    })
    .await;
    acked.push(resumed);
    put_all(&client, g, 300..310, &mut acked).await;
    assert_eq!(
        metric(&cluster, leader, "seatfence_storage_full").await,
        Some(0.0)
    );

    tracing::info!("--- a full follower lags; the group goes on without it");
    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let follower = cluster
        .nodes
        .iter()
        .map(|n| n.id())
        .find(|id| *id != leader)
        .unwrap();
    let follower_dir = cluster.nodes[index_of(&cluster, follower)]
        .config
        .data_dir
        .clone();
    let ballast = fill(&follower_dir);
    eventually("the follower says it is full", || async {
        (metric(&cluster, follower, "seatfence_storage_full").await == Some(1.0)).then_some(())
    })
    .await;
    put_all(&client, g, 400..430, &mut acked).await;
    let follower_addr = cluster.nodes[index_of(&cluster, follower)]
        .addr()
        .to_string();
    let last = &acked.last().unwrap().0;
    let r = client.read_at(&follower_addr, g, last).await;
    assert!(
        !matches!(&r, Ok(r) if r.found),
        "a full follower took new entries: {r:?}"
    );
    std::fs::remove_file(&ballast).unwrap();
    tracing::info!("--- its space returns: it catches up");
    for n in &cluster.nodes {
        assert_keys_on(&cluster, n.addr(), g, &acked).await;
    }
    drop(cluster);
    drop(mounts);
}

fn nix_is_root() -> bool {
    Cmd::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
