//! `seatfence bench backup`: N events of S seats on a local one-region
//! cluster (3 nodes), holds running at `inflight` throughout; then
//! `seatfence backup` (the real command, with the operator certificate)
//! while they run, and `seatfence restore` into a second, new cluster
//! (started once the first is stopped).
//! Reports the backup's and the restore's time and bytes, and the holds'
//! p99 and rate before and during the backup.

use std::path::Path;
use std::process::Command as Proc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use hdrhistogram::Histogram;
use seatfence_core::inventory::{EventAction, EventCommand, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, UserId};
use seatfence_raft::network::tls::TlsConfig;
use seatfence_raft::ClusterClient;
use seatfence_testkit::cluster::{LocalCluster, OPERATOR_CERT};
use seatfence_testkit::progress::Ticker;
use serde::Serialize;
use serde_json::{json, Value};

use crate::raft::bench_dir;
use crate::world::World;

#[derive(Debug, Clone)]
pub struct BackupBenchArgs {
    pub events: usize,
    pub seats: u32,
    /// Holds in flight throughout.
    pub inflight: usize,
    /// Seconds of holds measured before the backup.
    pub before_secs: u64,
}

#[derive(Debug, Serialize)]
pub struct BackupBenchReport {
    pub events: usize,
    pub seats_per_event: u32,
    /// Creating the events (not part of the backup).
    pub create_secs: f64,
    pub backup_secs: f64,
    pub backup_bytes: u64,
    pub backup_records: u64,
    /// Backup bytes per second of backup.
    pub backup_mb_per_sec: f64,
    pub restore_secs: f64,
    pub restore_mb_per_sec: f64,
    /// Holds (`inflight` at once, over every event): p99 and rate over
    /// `before_secs` before the backup, and while it ran.
    pub hold_p99_before_ms: f64,
    pub hold_p99_during_ms: f64,
    pub holds_per_sec_before: f64,
    pub holds_per_sec_during: f64,
    pub holds_failed: u64,
}

impl std::fmt::Display for BackupBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench backup: {} events × {} seats; backup {:.1} s ({} bytes, {} records, {:.1} MB/s), \
             restore {:.1} s ({:.1} MB/s); holds p99 {:.1} ms during the backup ({:.1} ms before), \
             {:.0}/s during ({:.0}/s before), {} failed",
            r.events, r.seats_per_event, r.backup_secs, r.backup_bytes, r.backup_records,
            r.backup_mb_per_sec, r.restore_secs, r.restore_mb_per_sec, r.hold_p99_during_ms,
            r.hold_p99_before_ms, r.holds_per_sec_during, r.holds_per_sec_before, r.holds_failed
        )
    }
}

/// `seatfence ARGS…` with `cluster`'s nodes and operator certificate; its
/// `--json` output.
fn operator_cli(bin: &Path, cluster: &LocalCluster, args: &[&str]) -> anyhow::Result<Value> {
    let certs = cluster.certs_dir().context("a TLS cluster")?;
    let tls = TlsConfig::in_dir(&certs, &format!("operator-{OPERATOR_CERT}"));
    let mut cmd = Proc::new(bin);
    cmd.args(args).arg("--json");
    for a in cluster.addrs() {
        cmd.arg("--addr").arg(a);
    }
    for (flag, path) in [("--ca", tls.ca), ("--cert", tls.cert), ("--key", tls.key)] {
        cmd.arg(flag).arg(path.context("the operator's files")?);
    }
    let out = cmd.output().context("run seatfence")?;
    if !out.status.success() {
        bail!(
            "seatfence {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

pub async fn run_backup_bench(
    bin: &Path,
    args: &BackupBenchArgs,
) -> anyhow::Result<BackupBenchReport> {
    let (_guard, dir) = bench_dir()?;
    let world = World::start(
        LocalCluster::builder(&dir.join("old")).regions(1, 3),
        bin,
        Duration::from_secs(30),
    )
    .await?;
    let created = Arc::new(AtomicU64::new(0));
    let ticker = Ticker::start("bench backup", 0, {
        let created = created.clone();
        move || format!("created {} events", created.load(Ordering::Relaxed))
    });
    let t0 = Instant::now();
    let rows = args.seats.div_ceil(100).max(1);
    let groups: Vec<anyhow::Result<(EventId, GroupId)>> = futures::stream::iter(0..args.events)
        .map(|i| {
            let (world, created) = (&world, &created);
            async move {
                let id = format!("bk-{i}");
                let body = json!({"event_id": id, "name": id, "home_region": "us-east",
                    "sections": [{"name": "A", "rows": rows, "seats_per_row": args.seats.div_ceil(rows)}]});
                let edge = &world.edges[i % world.edges.len()];
                let r = world
                    .http
                    .post(&format!("{edge}/v1/events"), Some(&world.op), None, &body)
                    .await?;
                anyhow::ensure!(r.status.as_u16() == 201, "create {id}: {} {}", r.status, r.body);
                created.fetch_add(1, Ordering::Relaxed);
                let g = r.body["group_id"].as_u64().context("group_id")?;
                Ok((EventId(id), GroupId(g)))
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let groups = groups.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let create_secs = t0.elapsed().as_secs_f64();
    drop(ticker);

    let load = Load::start(world.cluster.client(), groups, args.inflight);
    tokio::time::sleep(Duration::from_secs(args.before_secs.max(1))).await;
    let (hold_p99_before_ms, holds_per_sec_before) = load.take();

    let backup = dir.join("backup");
    let b = backup.to_str().context("a UTF-8 path")?.to_string();
    let t1 = Instant::now();
    let taken = {
        let (bin, cluster) = (bin.to_path_buf(), &world.cluster);
        let args = ["backup", "--to", b.as_str()];
        // The command blocks: the holds keep running on this runtime.
        tokio::task::block_in_place(|| operator_cli(&bin, cluster, &args))?
    };
    let backup_secs = t1.elapsed().as_secs_f64();
    let (hold_p99_during_ms, holds_per_sec_during) = load.take();
    let holds_failed = load.stop().await;
    let backup_bytes = taken["bytes"].as_u64().unwrap_or(0);

    // The old cluster is gone before the new one starts (as on the day a
    // restore is needed; and two clusters of a big sale do not fit in
    // one machine's memory).
    let mut world = world;
    world.cluster.stop_all()?;
    let new = World::start(
        LocalCluster::builder(&dir.join("new")).regions(1, 3),
        bin,
        Duration::from_secs(30),
    )
    .await?;
    let t2 = Instant::now();
    tokio::task::block_in_place(|| {
        operator_cli(bin, &new.cluster, &["restore", "--from", b.as_str()])
    })?;
    let restore_secs = t2.elapsed().as_secs_f64();
    let mb = |secs: f64| backup_bytes as f64 / 1e6 / secs.max(1e-9);
    Ok(BackupBenchReport {
        events: args.events,
        seats_per_event: args.seats,
        create_secs,
        backup_secs,
        backup_bytes,
        backup_records: taken["records"].as_u64().unwrap_or(0),
        backup_mb_per_sec: mb(backup_secs),
        restore_secs,
        restore_mb_per_sec: mb(restore_secs),
        hold_p99_before_ms,
        hold_p99_during_ms,
        holds_per_sec_before,
        holds_per_sec_during,
        holds_failed,
    })
}

/// One-seat holds over every event in turn, `inflight` at once, written
/// through the cluster client as the edges would, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    hist: Arc<Mutex<(Histogram<u64>, Instant)>>,
    task: tokio::task::JoinHandle<u64>,
}

impl Load {
    fn start(client: ClusterClient, groups: Vec<(EventId, GroupId)>, inflight: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let hist = Arc::new(Mutex::new((
            Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds"),
            Instant::now(),
        )));
        let (s, h) = (stop.clone(), hist.clone());
        let task = tokio::spawn(async move {
            let mut failed = 0;
            let mut next = 0usize;
            let mut holds = futures::stream::iter(std::iter::from_fn(|| {
                next += 1;
                (!s.load(Ordering::Relaxed)).then(|| (next, groups[next % groups.len()].clone()))
            }))
            .map(|(n, (event_id, g))| {
                let (client, h) = (&client, &h);
                async move {
                    let cmd = Command::event(EventCommand {
                        event_id,
                        epoch: Epoch(1),
                        now_ms: now_ms(),
                        idempotency: None,
                        action: EventAction::Hold {
                            owner: UserId(format!("buyer-{}", n % 1000)),
                            pick: SeatPick::Quantity {
                                section: None,
                                quantity: 1,
                            },
                        },
                    });
                    let t = Instant::now();
                    let ok = client.write(g, &cmd).await.is_ok();
                    if ok {
                        let us = t.elapsed().as_micros() as u64;
                        let _ = h.lock().expect("histogram lock").0.record(us.max(1));
                    }
                    ok
                }
            })
            .buffer_unordered(inflight.max(1));
            while let Some(ok) = holds.next().await {
                if !ok {
                    failed += 1;
                }
            }
            failed
        });
        Load { stop, hist, task }
    }

    /// The p99 (ms) and rate (per s) since the last call; start afresh.
    fn take(&self) -> (f64, f64) {
        let mut g = self.hist.lock().expect("histogram lock");
        let (h, since) = &mut *g;
        let out = (
            h.value_at_quantile(0.99) as f64 / 1e3,
            h.len() as f64 / since.elapsed().as_secs_f64().max(1e-9),
        );
        h.reset();
        *since = Instant::now();
        out
    }

    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or(0)
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
