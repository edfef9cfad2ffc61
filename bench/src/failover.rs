//! `seatfence bench failover`: N groups led by one node, asleep, that node
//! SIGKILLed; how long until each group commits a write again.

use std::time::{Duration, Instant};

use futures::StreamExt;
use seatfence_core::{Command, GroupId};
use seatfence_raft::RaftTuning;
use seatfence_testkit::cluster::LocalCluster;
use serde::Serialize;

use crate::raft::{bench_dir, create_groups};

#[derive(Debug, Clone)]
pub struct FailoverBenchArgs {
    pub groups: usize,
    /// `raft.sleep_after_ms` of the nodes (0: groups never sleep).
    pub sleep_after_ms: u64,
    /// The regions far apart (`--global`; the 3 nodes are one per region).
    pub geo: Option<seatfence_testkit::Geo>,
}

#[derive(Debug, Serialize)]
pub struct FailoverBenchReport {
    pub groups: usize,
    pub sleep_after_ms: u64,
    /// Groups asleep on the node that was killed, just before the kill.
    pub asleep_before_kill: usize,
    /// From the SIGKILL until each group committed a write again.
    pub resume_p50_ms: f64,
    pub resume_p99_ms: f64,
    pub resume_max_ms: f64,
    /// Groups that had not resumed within the bench's 120 s bound.
    pub not_resumed: usize,
}

impl std::fmt::Display for FailoverBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench failover: {} groups led by the killed node ({} asleep), writes again after p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; {} not resumed",
            r.groups, r.asleep_before_kill, r.resume_p50_ms, r.resume_p99_ms, r.resume_max_ms, r.not_resumed
        )
    }
}

/// How long a group may take to resume before the bench gives up on it.
const RESUME_BOUND: Duration = Duration::from_secs(120);

pub async fn run_failover_bench(
    bin: &std::path::Path,
    args: &FailoverBenchArgs,
) -> anyhow::Result<FailoverBenchReport> {
    let (_guard, dir) = bench_dir()?;
    let tuning = RaftTuning {
        sleep_after_ms: args.sleep_after_ms,
        ..RaftTuning::default()
    };
    tuning.check().map_err(anyhow::Error::msg)?;
    let mut cluster = LocalCluster::builder(&dir)
        .tuning(tuning)
        .geo(args.geo.clone())
        .start(bin)?;
    cluster.wait_ready(Duration::from_secs(30)).await?;
    let client = cluster.client().with_deadline(Duration::from_secs(10));
    let groups = create_groups(&client, args.groups.max(1)).await?;

    // Every group led by the victim (node 1), asked in rounds.
    let victim = 1;
    let addr = cluster.addr(victim)?;
    for _ in 0..20 {
        let led = led_by(&client, &addr).await;
        let others: Vec<GroupId> = groups
            .iter()
            .copied()
            .filter(|g| !led.contains(g))
            .collect();
        if others.is_empty() {
            break;
        }
        futures::stream::iter(others)
            .for_each_concurrent(32, |g| {
                let client = &client;
                async move {
                    let _ = client.transfer_leader(g, victim).await;
                }
            })
            .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Long enough for every group to fall asleep, then count them.
    let mut asleep_before_kill = 0;
    if args.sleep_after_ms > 0 {
        let deadline = Instant::now() + Duration::from_millis(args.sleep_after_ms + 30_000);
        while Instant::now() < deadline {
            asleep_before_kill = asleep_led(&client, &addr).await;
            if asleep_before_kill >= groups.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    cluster.kill(victim)?;
    let killed = Instant::now();
    let resumed: Vec<Option<Duration>> = futures::stream::iter(groups.iter().copied())
        .map(|g| {
            let client = &client;
            async move {
                let cmd = Command::Put {
                    key: "after-kill".into(),
                    value: vec![1],
                };
                while killed.elapsed() < RESUME_BOUND {
                    if client.write(g, &cmd).await.is_ok() {
                        return Some(killed.elapsed());
                    }
                }
                None
            }
        })
        // One writer per group: with fewer, the groups queued behind the
        // first writers started late and the loader's own queue showed up
        // as failover time (256 writers over 1,000 groups before).
        .buffer_unordered(groups.len().max(1))
        .collect()
        .await;
    let mut ms: Vec<f64> = resumed
        .iter()
        .flatten()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    ms.sort_by(f64::total_cmp);
    let q = |p: f64| {
        ms.get(((ms.len().max(1) - 1) as f64 * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    Ok(FailoverBenchReport {
        groups: groups.len(),
        sleep_after_ms: args.sleep_after_ms,
        asleep_before_kill,
        resume_p50_ms: q(0.5),
        resume_p99_ms: q(0.99),
        resume_max_ms: ms.last().copied().unwrap_or(0.0),
        not_resumed: resumed.iter().filter(|r| r.is_none()).count(),
    })
}

/// The groups the node at `addr` leads.
async fn led_by(client: &seatfence_raft::ClusterClient, addr: &str) -> Vec<GroupId> {
    match client.status_at(addr).await {
        Ok(s) => s
            .groups
            .iter()
            .filter(|g| g.role == "leader")
            .map(|g| GroupId(g.group_id))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Groups the node at `addr` leads and that sleep there.
async fn asleep_led(client: &seatfence_raft::ClusterClient, addr: &str) -> usize {
    match client.status_at(addr).await {
        Ok(s) => s
            .groups
            .iter()
            .filter(|g| g.group_id != 0 && g.role == "leader" && g.asleep)
            .count(),
        Err(_) => 0,
    }
}
