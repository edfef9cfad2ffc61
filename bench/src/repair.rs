//! `seatfence bench repair`: one region of four nodes, N groups of three
//! voters, writes running; one node (not the directory's voter) SIGKILLed
//! for good. How long until every group it was a voter of has three live
//! voters again (death noticed after `dead_after_ms`, then the repair), and
//! what the running writes' latency was meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hdrhistogram::Histogram;
use seatfence_core::{Command, GroupId, NodeId, Query, QueryResult};
use seatfence_raft::ClusterClient;
use seatfence_regions::config::MovesConfig;
use seatfence_testkit::cluster::LocalCluster;
use serde::Serialize;

use crate::raft::{bench_dir, create_groups};

#[derive(Debug, Clone)]
pub struct RepairBenchArgs {
    pub groups: usize,
    /// `moves.dead_after_ms` of the nodes: silence before a node is dead.
    pub dead_after_ms: u64,
    /// Writes in flight throughout (the running sale).
    pub inflight: usize,
}

#[derive(Debug, Serialize)]
pub struct RepairBenchReport {
    pub groups: usize,
    /// Groups that had a voter on the killed node.
    pub affected: usize,
    /// Of those, groups with three live voters again within the bound.
    pub repaired: usize,
    pub dead_after_ms: u64,
    /// From the SIGKILL until the directory records each affected group's
    /// new voters (includes `dead_after_ms`).
    pub repair_secs_p50: f64,
    pub repair_secs_max: f64,
    /// The same, counted from the moment the node was declared dead.
    pub repair_after_dead_secs_max: f64,
    /// Writes to every group, `inflight` at once: p99 before the kill and
    /// from the kill until the last repair.
    pub write_p99_before_ms: f64,
    pub write_p99_ms: f64,
    pub writes_failed: u64,
}

impl std::fmt::Display for RepairBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench repair: {} of {} groups had a voter on the killed node, {} repaired; all within {:.1} s of the kill (p50 {:.1} s; dead after {} ms, so {:.1} s of repair); writes p99 {:.1} ms during (before: {:.1} ms), {} failed",
            r.affected, r.groups, r.repaired, r.repair_secs_max, r.repair_secs_p50, r.dead_after_ms,
            r.repair_after_dead_secs_max, r.write_p99_ms, r.write_p99_before_ms, r.writes_failed
        )
    }
}

/// How long the repair may take before the bench gives up.
const BOUND: Duration = Duration::from_secs(300);

pub async fn run_repair_bench(
    bin: &std::path::Path,
    args: &RepairBenchArgs,
) -> anyhow::Result<RepairBenchReport> {
    let (_guard, dir) = bench_dir()?;
    let moves = MovesConfig {
        lifecycle_every_ms: 200,
        suspect_after_ms: args.dead_after_ms.min(1_000),
        dead_after_ms: args.dead_after_ms,
        balance_every_ms: 0,
        rebalance_parallel: 0,
        ..MovesConfig::default()
    };
    // One directory voter (node 1) and three more nodes, all in one region.
    let mut cluster = LocalCluster::builder(&dir)
        .voters(1, 3)
        .moves(moves)
        .start(bin)?;
    cluster.wait_ready(Duration::from_secs(30)).await?;
    let client = cluster.client().with_deadline(Duration::from_secs(10));
    let groups = create_groups(&client, args.groups.max(1)).await?;
    let victim = NodeId(2);
    let d = directory(&client).await?;
    let affected: Vec<GroupId> = groups
        .iter()
        .copied()
        .filter(|g| d.groups.get(g).is_some_and(|i| i.members.contains(&victim)))
        .collect();

    let load = Load::start(client.clone(), groups.clone(), args.inflight);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let write_p99_before_ms = load.take_p99();

    cluster.kill(victim.0)?;
    let killed = Instant::now();
    let mut dead_at: Option<Duration> = None;
    let mut done: Vec<f64> = Vec::new();
    let mut pending = affected.clone();
    while !pending.is_empty() && killed.elapsed() < BOUND {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Ok(d) = directory(&client).await else {
            continue;
        };
        if dead_at.is_none() && d.node_state(victim).needs_repair() {
            dead_at = Some(killed.elapsed());
        }
        pending.retain(|g| {
            let whole = d
                .groups
                .get(g)
                .is_some_and(|i| i.members.len() == 3 && !i.members.contains(&victim))
                && !d.repairs.contains_key(g);
            if whole {
                done.push(killed.elapsed().as_secs_f64());
            }
            !whole
        });
    }
    let write_p99_ms = load.take_p99();
    let writes_failed = load.stop().await;
    done.sort_by(f64::total_cmp);
    let max = done.last().copied().unwrap_or(0.0);
    Ok(RepairBenchReport {
        groups: groups.len(),
        affected: affected.len(),
        repaired: done.len(),
        dead_after_ms: args.dead_after_ms,
        repair_secs_p50: done.get(done.len() / 2).copied().unwrap_or(0.0),
        repair_secs_max: max,
        repair_after_dead_secs_max: max - dead_at.map_or(0.0, |d| d.as_secs_f64()),
        write_p99_before_ms,
        write_p99_ms,
        writes_failed,
    })
}

async fn directory(client: &ClusterClient) -> anyhow::Result<seatfence_core::Directory> {
    match client
        .query(GroupId::DIRECTORY, &Query::Directory, true)
        .await?
        .0
    {
        QueryResult::Directory(d) => Ok(d),
        other => anyhow::bail!("directory answered {other:?}"),
    }
}

/// Writes to every group in turn, `inflight` at once, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    hist: Arc<Mutex<Histogram<u64>>>,
    task: tokio::task::JoinHandle<u64>,
}

impl Load {
    fn start(client: ClusterClient, groups: Vec<GroupId>, inflight: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let hist = Arc::new(Mutex::new(
            Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds"),
        ));
        let (s, h) = (stop.clone(), hist.clone());
        let task = tokio::spawn(async move {
            let mut failed = 0;
            let mut next = 0usize;
            let cmd = Command::Put {
                key: "sale".into(),
                value: vec![1; 64],
            };
            let mut writes = futures::stream::iter(std::iter::from_fn(|| {
                next += 1;
                (!s.load(Ordering::Relaxed)).then(|| groups[next % groups.len()])
            }))
            .map(|g| {
                let (client, cmd, h) = (&client, &cmd, &h);
                async move {
                    let t = Instant::now();
                    let ok = client.write(g, cmd).await.is_ok();
                    if ok {
                        let us = t.elapsed().as_micros() as u64;
                        let _ = h.lock().expect("histogram lock").record(us.max(1));
                    }
                    ok
                }
            })
            .buffer_unordered(inflight.max(1));
            while let Some(ok) = writes.next().await {
                if !ok {
                    failed += 1;
                }
            }
            failed
        });
        Load { stop, hist, task }
    }

    /// The p99 since the last call (ms), and start counting afresh.
    fn take_p99(&self) -> f64 {
        let mut h = self.hist.lock().expect("histogram lock");
        let p99 = h.value_at_quantile(0.99) as f64 / 1e3;
        h.reset();
        p99
    }

    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or(0)
    }
}
