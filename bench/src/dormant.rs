//! `seatfence bench dormant`: what dormant followers save and cost. N
//! groups on a local 3-node cluster fall asleep, and (with
//! `--unload-after-ms` > 0) their followers leave memory; then each node's
//! heap, and the first write to each group, one group at a time: its
//! latency is the wake-up, plus, when its followers are dormant, their
//! reopening from storage (the leader commits once one has appended). Run
//! it with `--unload-after-ms 0` and with it on, side by side.

use std::time::{Duration, Instant};

use seatfence_core::{Command, GroupId};
use seatfence_raft::RaftTuning;
use seatfence_testkit::cluster::LocalCluster;
use seatfence_testkit::http_client::HttpClient;
use serde::Serialize;

use crate::raft::{bench_dir, create_groups};

#[derive(Debug, Clone)]
pub struct DormantBenchArgs {
    pub groups: usize,
    /// `raft.sleep_after_ms` of the nodes.
    pub sleep_after_ms: u64,
    /// `raft.unload_after_ms` of the nodes (0: followers stay loaded).
    pub unload_after_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct DormantBenchReport {
    pub groups: usize,
    pub sleep_after_ms: u64,
    pub unload_after_ms: u64,
    /// Groups whose leader was asleep before the writes.
    pub asleep: usize,
    /// Replicas unloaded from memory before the writes (every node).
    pub dormant: usize,
    /// Each node's heap (`seatfence_heap_bytes`, MiB) while they slept,
    /// and after every group took its write; empty if the binary does not
    /// count its allocations.
    pub heap_asleep_mib: Vec<f64>,
    pub heap_after_mib: Vec<f64>,
    /// The first write to each group after it fell asleep.
    pub first_write_p50_ms: f64,
    pub first_write_p99_ms: f64,
    pub first_write_max_ms: f64,
    /// Writes that failed (each within the client's 10 s deadline).
    pub failed: usize,
}

impl std::fmt::Display for DormantBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        let mib = |v: &[f64]| {
            v.iter()
                .map(|m| format!("{m:.0}"))
                .collect::<Vec<_>>()
                .join("/")
        };
        write!(
            f,
            "bench dormant: {} groups (sleep {} ms, unload {} ms): {} asleep, {} replicas dormant; heap {} MiB per node asleep, {} after; first write p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} failed",
            r.groups,
            r.sleep_after_ms,
            r.unload_after_ms,
            r.asleep,
            r.dormant,
            mib(&r.heap_asleep_mib),
            mib(&r.heap_after_mib),
            r.first_write_p50_ms,
            r.first_write_p99_ms,
            r.first_write_max_ms,
            r.failed
        )
    }
}

pub async fn run_dormant_bench(
    bin: &std::path::Path,
    args: &DormantBenchArgs,
) -> anyhow::Result<DormantBenchReport> {
    anyhow::ensure!(args.sleep_after_ms > 0, "groups must sleep to go dormant");
    let (_guard, dir) = bench_dir()?;
    let tuning = RaftTuning {
        sleep_after_ms: args.sleep_after_ms,
        unload_after_ms: args.unload_after_ms,
        ..RaftTuning::default()
    };
    tuning.check().map_err(anyhow::Error::msg)?;
    let cluster = LocalCluster::builder(&dir).tuning(tuning).start(bin)?;
    cluster.wait_ready(Duration::from_secs(30)).await?;
    let client = cluster.client().with_deadline(Duration::from_secs(10));
    let groups = create_groups(&client, args.groups.max(1)).await?;

    // Every leader asleep and, with unloading on, both followers of each
    // group dormant; or as many as got there within the bound.
    let want_dormant = if args.unload_after_ms > 0 {
        2 * groups.len()
    } else {
        0
    };
    let bound = Duration::from_millis(args.sleep_after_ms + args.unload_after_ms + 60_000);
    let started = Instant::now();
    let (mut asleep, mut dormant) = (0, 0);
    while started.elapsed() < bound {
        (asleep, dormant) = census(&cluster, &client, &groups).await;
        if asleep >= groups.len() && dormant >= want_dormant {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let http = HttpClient::default();
    let heap_asleep_mib = heaps(&cluster, &http).await;

    let cmd = Command::Put {
        key: "after-sleep".into(),
        value: vec![1],
    };
    let mut ms = Vec::with_capacity(groups.len());
    let mut failed = 0;
    for g in &groups {
        let t0 = Instant::now();
        match client.write(*g, &cmd).await {
            Ok(_) => ms.push(t0.elapsed().as_secs_f64() * 1e3),
            Err(_) => failed += 1,
        }
    }
    let heap_after_mib = heaps(&cluster, &http).await;
    ms.sort_by(f64::total_cmp);
    let q = |p: f64| {
        ms.get(((ms.len().max(1) - 1) as f64 * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    Ok(DormantBenchReport {
        groups: groups.len(),
        sleep_after_ms: args.sleep_after_ms,
        unload_after_ms: args.unload_after_ms,
        asleep,
        dormant,
        heap_asleep_mib,
        heap_after_mib,
        first_write_p50_ms: q(0.5),
        first_write_p99_ms: q(0.99),
        first_write_max_ms: ms.last().copied().unwrap_or(0.0),
        failed,
    })
}

/// Of `groups`: how many have an asleep leader, and how many of their
/// replicas are dormant, over every node.
async fn census(
    cluster: &LocalCluster,
    client: &seatfence_raft::ClusterClient,
    groups: &[GroupId],
) -> (usize, usize) {
    let ours = |id: u64| groups.contains(&GroupId(id));
    let (mut asleep, mut dormant) = (0, 0);
    for addr in cluster.addrs() {
        let Ok(s) = client.status_at(&addr).await else {
            continue;
        };
        for g in s.groups.iter().filter(|g| ours(g.group_id)) {
            if g.dormant {
                dormant += 1;
            } else if g.role == "leader" && g.asleep {
                asleep += 1;
            }
        }
    }
    (asleep, dormant)
}

/// Each node's `seatfence_heap_bytes` in MiB (empty if any node does not
/// count its allocations or does not answer).
async fn heaps(cluster: &LocalCluster, http: &HttpClient) -> Vec<f64> {
    let mut out = Vec::new();
    for n in &cluster.nodes {
        let Some(edge) = n.edge_url() else {
            return Vec::new();
        };
        let Ok(a) = http.get(&format!("{edge}/metrics"), None).await else {
            return Vec::new();
        };
        let text = a.body.as_str().unwrap_or_default().to_string();
        let heap = text.lines().find_map(|l| {
            l.strip_prefix("seatfence_heap_bytes ")?
                .trim()
                .parse::<f64>()
                .ok()
        });
        match heap {
            Some(b) if b > 0.0 => out.push(b / 1048576.0),
            _ => return Vec::new(),
        }
    }
    out
}
