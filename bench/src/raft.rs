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
use seatfence_raft::{ClientError, ProposeError, RaftTuning};
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
    /// Groups created beside the busy ones and never written after their
    /// first write.
    pub idle_groups: usize,
    /// `raft.sleep_after_ms` of the nodes (0: groups never sleep).
    pub sleep_after_ms: u64,
    /// Seconds of no load over which idle CPU is measured (0: skip).
    pub idle_secs: u64,
    /// Independent cluster clients the writers are spread over (each with
    /// its own connections and per-group queues, like that many edges).
    pub clients: usize,
    /// `raft.max_pending_writes` of the nodes (0: no bound).
    pub max_pending_writes: usize,
    /// `raft.max_pending_writes_per_group` of the nodes (0: no bound).
    pub max_pending_writes_per_group: usize,
}

#[derive(Debug, Serialize)]
pub struct RaftBenchReport {
    pub writes_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub writes: u64,
    /// Failed writes other than `overloaded` refusals.
    pub errors: u64,
    /// Writes refused `overloaded` (the writer backed off and wrote again).
    pub refused: u64,
    /// Each node's bound on pending writes, and per group (0: none).
    pub max_pending_writes: usize,
    pub max_pending_writes_per_group: usize,
    pub inflight: usize,
    pub clients: usize,
    pub groups: usize,
    pub voters_per_group: usize,
    pub value_bytes: usize,
    pub flush: FlushMode,
    pub heartbeat_ms: u64,
    pub duration_secs: f64,
    /// Bytes in each node's data dir (sled + snapshot files) after the run.
    pub data_bytes_per_node: Vec<u64>,
    pub idle_groups: usize,
    pub sleep_after_ms: u64,
    /// Creating every group (busy and idle) and its first write, in seconds.
    pub create_secs: f64,
    /// Each node's CPU (% of one core, user + system from /proc) over
    /// `idle_secs` with no load, once idle groups had time to fall asleep.
    pub idle_cpu_pct_per_node: Vec<f64>,
    pub idle_secs: u64,
    /// Each node's resident memory after the idle measurement.
    pub rss_bytes_per_node: Vec<u64>,
}

impl std::fmt::Display for RaftBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench raft: {:.0} writes/s, p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms ({} writes, {} errors, {} refused overloaded, {} in flight, {} busy + {} idle group(s), sleep after {} ms, flush {:?}, {:.1} s, data dirs {:?} MiB); created in {:.1} s; idle CPU per node {:?} % of a core, RSS {:?} MiB",
            r.writes_per_sec, r.p50_ms, r.p99_ms, r.p999_ms, r.writes, r.errors, r.refused, r.inflight, r.groups, r.idle_groups, r.sleep_after_ms, r.flush, r.duration_secs,
            r.data_bytes_per_node.iter().map(|b| b / (1 << 20)).collect::<Vec<_>>(),
            r.create_secs,
            r.idle_cpu_pct_per_node.iter().map(|c| (c * 10.0).round() / 10.0).collect::<Vec<_>>(),
            r.rss_bytes_per_node.iter().map(|b| b / (1 << 20)).collect::<Vec<_>>(),
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
        sleep_after_ms: args.sleep_after_ms,
        max_pending_writes: args.max_pending_writes,
        max_pending_writes_per_group: args.max_pending_writes_per_group,
        ..RaftTuning::default()
    };
    tuning.check().map_err(anyhow::Error::msg)?;
    let cluster = LocalCluster::builder(&dir).tuning(tuning).start(bin)?;
    cluster.wait_ready(Duration::from_secs(30)).await?;
    let client = cluster.client();
    let created = Instant::now();
    let all = create_groups(&client, args.groups.max(1) + args.idle_groups).await?;
    let create_secs = created.elapsed().as_secs_f64();
    let groups = all[..args.groups.max(1)].to_vec();
    let (idle_cpu_pct_per_node, rss_bytes_per_node) = if args.idle_secs > 0 {
        // Long enough for every idle group to fall asleep first.
        tokio::time::sleep(Duration::from_millis(args.sleep_after_ms + 3_000)).await;
        idle_usage(&cluster, Duration::from_secs(args.idle_secs)).await
    } else {
        (Vec::new(), Vec::new())
    };

    let groups = Arc::new(groups);
    let value = vec![7u8; args.value_bytes];
    let _progress = Ticker::start("bench raft", args.duration.as_secs(), String::new);
    let start = Instant::now();
    let deadline = start + args.duration;
    let mut tasks = Vec::new();
    // The first client made the groups; the others are fresh.
    let clients: Vec<_> = std::iter::once(client)
        .chain((1..args.clients.max(1)).map(|_| cluster.client()))
        .collect();
    for t in 0..args.inflight.max(1) {
        let client = clients[t % clients.len()].clone();
        let groups = groups.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            // Latencies (µs) in a plain list, merged at the end: a histogram
            // per writer cost ~150 KiB each, 3.9 GB for 25,600 writers,
            // allocated inside the measured window.
            let mut latencies_us: Vec<u64> = Vec::new();
            let (mut errors, mut refused) = (0u64, 0u64);
            let group = groups[t % groups.len()];
            let mut seq = 0u64;
            // Backs off on `overloaded` as a well-behaved client would:
            // 10 ms doubling to 320 ms, each pause jittered.
            let mut backoff = Duration::ZERO;
            while Instant::now() < deadline {
                let cmd = Command::Put {
                    key: format!("w{t}-{seq}"),
                    value: value.clone(),
                };
                seq += 1;
                let t0 = Instant::now();
                match client.write(group, &cmd).await {
                    Ok(_) => {
                        latencies_us.push(t0.elapsed().as_micros() as u64);
                        backoff = Duration::ZERO;
                    }
                    Err(ClientError::Rejected(ProposeError::Overloaded(_))) => {
                        refused += 1;
                        backoff = (backoff * 2)
                            .clamp(Duration::from_millis(10), Duration::from_millis(320));
                        let jitter = rand::random::<f64>() + 0.5;
                        tokio::time::sleep(backoff.mul_f64(jitter)).await;
                    }
                    Err(_) => errors += 1,
                }
            }
            (latencies_us, errors, refused)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let (mut errors, mut refused) = (0, 0);
    for t in tasks {
        let (h, e, r) = t.await?;
        for us in h {
            hist.saturating_record(us);
        }
        errors += e;
        refused += r;
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
        refused,
        max_pending_writes: args.max_pending_writes,
        max_pending_writes_per_group: args.max_pending_writes_per_group,
        inflight: args.inflight,
        clients: args.clients.max(1),
        groups: groups.len(),
        voters_per_group: 3,
        value_bytes: args.value_bytes,
        flush: args.flush,
        heartbeat_ms: args.heartbeat_ms,
        duration_secs: elapsed,
        data_bytes_per_node,
        idle_groups: args.idle_groups,
        sleep_after_ms: args.sleep_after_ms,
        create_secs,
        idle_cpu_pct_per_node,
        idle_secs: args.idle_secs,
        rss_bytes_per_node,
    })
}

/// Create `n` groups of 3 voters, 32 at a time, each with one write (which
/// also waits for its first leader).
pub(crate) async fn create_groups(
    client: &seatfence_raft::ClusterClient,
    n: usize,
) -> anyhow::Result<Vec<seatfence_core::GroupId>> {
    use futures::StreamExt;
    let created: Vec<anyhow::Result<seatfence_core::GroupId>> = futures::stream::iter(0..n)
        .map(|_| async {
            let (g, _) = create_group(client, None, Placement::Spread { replicas: 3 }).await?;
            let warmup = Command::Put {
                key: "warmup".into(),
                value: vec![0],
            };
            client
                .write(g, &warmup)
                .await
                .with_context(|| format!("first write to {g}"))?;
            Ok(g)
        })
        .buffered(32)
        .collect()
        .await;
    created.into_iter().collect()
}

/// Each node's CPU over `over` (% of one core) and its RSS after, read
/// from /proc (empty where /proc cannot be read).
pub(crate) async fn idle_usage(cluster: &LocalCluster, over: Duration) -> (Vec<f64>, Vec<u64>) {
    let pids: Vec<u32> = cluster.nodes.iter().filter_map(|n| n.pid()).collect();
    let before: Vec<Option<u64>> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    let t0 = Instant::now();
    tokio::time::sleep(over).await;
    let secs = t0.elapsed().as_secs_f64();
    // USER_HZ is 100 on every Linux this runs on.
    let cpu = pids
        .iter()
        .zip(before)
        .filter_map(|(p, b)| Some((cpu_ticks(*p)? - b?) as f64 / 100.0 / secs * 100.0))
        .collect();
    let rss = pids.iter().filter_map(|p| rss_bytes(*p)).collect();
    (cpu, rss)
}

/// The nodes' CPU so far (utime + stime of every node process), in
/// seconds (USER_HZ 100); nodes whose /proc cannot be read count 0.
pub(crate) fn nodes_cpu_secs(cluster: &LocalCluster) -> f64 {
    let ticks: u64 = cluster
        .nodes
        .iter()
        .filter_map(|n| cpu_ticks(n.pid()?))
        .sum();
    ticks as f64 / 100.0
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// VmRSS of `pid`, in bytes.
fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
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
