//! `seatfence bench raft`: committed writes/s and latency of real node
//! processes on this machine.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use seatfence_core::{Command, Placement};
use seatfence_node::create_group;
use seatfence_raft::storage::FlushMode;
use seatfence_raft::RaftTuning;
use serde::Serialize;

use seatfence_testkit::cluster::LocalCluster;
use seatfence_testkit::progress::Ticker;

#[derive(Debug, Clone)]
pub struct RaftBenchArgs {
    pub duration: Duration,
    pub inflight: usize,
    pub groups: usize,
    pub value_bytes: usize,
    pub flush: FlushMode,
    pub snapshot_every: u64,
    /// Heartbeat interval; elections time out after 4–8 heartbeats.
    pub heartbeat_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct RaftBenchReport {
    pub writes_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub writes: u64,
    pub errors: u64,
    pub inflight: usize,
    pub groups: usize,
    pub voters_per_group: usize,
    pub value_bytes: usize,
    pub flush: FlushMode,
    pub heartbeat_ms: u64,
    pub duration_secs: f64,
    /// Bytes in each node's data dir (sled + snapshot files) after the run.
    pub data_bytes_per_node: Vec<u64>,
}

impl std::fmt::Display for RaftBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench raft: {:.0} writes/s, p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms ({} writes, {} errors, {} in flight, {} group(s), flush {:?}, {:.1} s, data dirs {:?} MiB)",
            r.writes_per_sec, r.p50_ms, r.p99_ms, r.p999_ms, r.writes, r.errors, r.inflight, r.groups, r.flush, r.duration_secs,
            r.data_bytes_per_node.iter().map(|b| b / (1 << 20)).collect::<Vec<_>>()
        )
    }
}

/// Start 3 node processes of `bin`, create the groups, drive writes.
pub async fn run_raft_bench(bin: &Path, args: &RaftBenchArgs) -> anyhow::Result<RaftBenchReport> {
    let (_guard, dir) = bench_dir()?;
    let tuning = RaftTuning {
        flush: args.flush,
        snapshot_every: args.snapshot_every,
        heartbeat_ms: args.heartbeat_ms,
        election_timeout_min_ms: args.heartbeat_ms * 4,
        election_timeout_max_ms: args.heartbeat_ms * 8,
        ..RaftTuning::default()
    };
    let cluster = LocalCluster::builder(&dir).tuning(tuning).start(bin)?;
    cluster.wait_ready(Duration::from_secs(30)).await?;
    let client = cluster.client();
    let mut groups = Vec::new();
    for _ in 0..args.groups.max(1) {
        let (g, _) = create_group(&client, None, Placement::Spread { replicas: 3 }).await?;
        groups.push(g);
    }
    // Warm up: one write per group also waits for every group's election.
    for g in &groups {
        client
            .write(
                *g,
                &Command::Put {
                    key: "warmup".into(),
                    value: vec![0],
                },
            )
            .await
            .with_context(|| format!("warm up {g}"))?;
    }

    let groups = Arc::new(groups);
    let value = vec![7u8; args.value_bytes];
    let _progress = Ticker::start("bench raft", args.duration.as_secs(), String::new);
    let start = Instant::now();
    let deadline = start + args.duration;
    let mut tasks = Vec::new();
    for t in 0..args.inflight.max(1) {
        let client = client.clone();
        let groups = groups.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
            let mut errors = 0u64;
            let group = groups[t % groups.len()];
            let mut seq = 0u64;
            while Instant::now() < deadline {
                let cmd = Command::Put {
                    key: format!("w{t}-{seq}"),
                    value: value.clone(),
                };
                seq += 1;
                let t0 = Instant::now();
                match client.write(group, &cmd).await {
                    Ok(_) => hist.saturating_record(t0.elapsed().as_micros() as u64),
                    Err(_) => errors += 1,
                }
            }
            (hist, errors)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let mut errors = 0;
    for t in tasks {
        let (h, e) = t.await?;
        hist.add(h)?;
        errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let data_bytes_per_node = cluster
        .nodes
        .iter()
        .map(|n| dir_bytes(&n.config.data_dir))
        .collect();
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Ok(RaftBenchReport {
        writes_per_sec: hist.len() as f64 / elapsed,
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: hist.max() as f64 / 1000.0,
        writes: hist.len(),
        errors,
        inflight: args.inflight,
        groups: groups.len(),
        voters_per_group: 3,
        value_bytes: args.value_bytes,
        flush: args.flush,
        heartbeat_ms: args.heartbeat_ms,
        duration_secs: elapsed,
        data_bytes_per_node,
    })
}

/// A fresh directory for a benchmark's cluster, removed when the guard
/// drops unless `SEATFENCE_BENCH_KEEP=1` (then kept for inspection).
pub fn bench_dir() -> anyhow::Result<(Option<tempfile::TempDir>, std::path::PathBuf)> {
    let dir = tempfile::Builder::new()
        .prefix("seatfence-bench-")
        .tempdir()
        .context("create bench dir")?;
    Ok(if std::env::var_os("SEATFENCE_BENCH_KEEP").is_some() {
        let kept = dir.keep();
        eprintln!("bench data and node logs kept in {}", kept.display());
        (None, kept)
    } else {
        let path = dir.path().to_path_buf();
        (Some(dir), path)
    })
}

/// Total size of the files under `dir` (0 for what cannot be read).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
