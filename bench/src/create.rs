//! `seatfence bench create-events`: how fast operators can put events on
//! sale. N events created through `POST /v1/events` on a local one-region
//! cluster (3 nodes, every node an edge), `inflight` requests at once
//! spread over the edges; an event counts once the API answered 201 (the
//! directory entry, the group placed on its voters and started, and a
//! first leader: the edge answers after the event's first write).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use hdrhistogram::Histogram;
use seatfence_raft::RaftTuning;
use seatfence_testkit::cluster::LocalCluster;
use seatfence_testkit::progress::Ticker;
use seatfence_testkit::GatewayProc;
use serde::Serialize;
use serde_json::json;

use crate::raft::{bench_dir, idle_usage};
use crate::world::World;

#[derive(Debug, Clone)]
pub struct CreateBenchArgs {
    pub events: usize,
    pub inflight: usize,
    pub seats: u32,
    /// Nodes take payments through a mock gateway.
    pub payments: bool,
    /// Seconds of idle CPU measured once every event sleeps (0: none).
    pub idle_secs: u64,
}

#[derive(Debug, Serialize)]
pub struct CreateBenchReport {
    /// Events answered 201 per second, over the whole run.
    pub events_per_sec: f64,
    pub created: u64,
    /// Requests answered with anything but 201 (each one is a failure).
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub inflight: usize,
    pub seats_per_event: u32,
    pub nodes: usize,
    pub duration_secs: f64,
    pub payments: bool,
    /// Each node's CPU (% of a core) over `idle_secs` once every event
    /// slept (empty with `--idle-secs 0`).
    pub idle_cpu_pct_per_node: Vec<f64>,
    /// Each node's RSS at the end of that window.
    pub rss_bytes_per_node: Vec<u64>,
    pub idle_secs: u64,
}

impl std::fmt::Display for CreateBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench create-events: {:.1} events/s ({} created, {} errors), p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} in flight, {} seats each, {:.1} s",
            r.events_per_sec, r.created, r.errors, r.p50_ms, r.p99_ms, r.max_ms, r.inflight, r.seats_per_event, r.duration_secs
        )?;
        if r.idle_secs > 0 {
            let cpu: Vec<String> = r
                .idle_cpu_pct_per_node
                .iter()
                .map(|c| format!("{c:.1}%"))
                .collect();
            let rss: Vec<String> = r
                .rss_bytes_per_node
                .iter()
                .map(|b| format!("{} MiB", b >> 20))
                .collect();
            write!(
                f,
                "; idle over {} s{}: CPU {} of a core, RSS {} per node",
                r.idle_secs,
                if r.payments { " (payments on)" } else { "" },
                cpu.join(" / "),
                rss.join(" / ")
            )?;
        }
        Ok(())
    }
}

pub async fn run_create_bench(
    bin: &Path,
    args: &CreateBenchArgs,
) -> anyhow::Result<CreateBenchReport> {
    let (_guard, dir) = bench_dir()?;
    let mut builder = LocalCluster::builder(&dir).regions(1, 3);
    let gateway = match args.payments {
        true => Some(GatewayProc::start(bin, &dir.join("gateway"), 5)?),
        false => None,
    };
    if let Some(g) = &gateway {
        builder = builder.payments(g.payments_config());
    }
    let world = World::start(builder, bin, Duration::from_secs(30)).await?;
    let created = Arc::new(AtomicU64::new(0));
    let _progress = Ticker::start("bench create-events", 0, {
        let created = created.clone();
        move || format!("created {}", created.load(Ordering::Relaxed))
    });
    let start = Instant::now();
    let results: Vec<(bool, u64)> = futures::stream::iter(0..args.events)
        .map(|i| {
            let (world, created) = (&world, &created);
            async move {
                let edge = &world.edges[i % world.edges.len()];
                let body = json!({
                    "event_id": format!("bench-create-{i}"),
                    "name": format!("Event {i}"),
                    "home_region": "us-east",
                    "sections": [{"name": "A", "rows": 1, "seats_per_row": args.seats.max(1)}],
                });
                let t0 = Instant::now();
                let ok = match world
                    .http
                    .post(&format!("{edge}/v1/events"), Some(&world.op), None, &body)
                    .await
                {
                    Ok(r) if r.status.as_u16() == 201 => true,
                    Ok(r) => {
                        eprintln!("bench create-events: event {i}: {} {}", r.status, r.body);
                        false
                    }
                    Err(e) => {
                        eprintln!("bench create-events: event {i}: {e:#}");
                        false
                    }
                };
                if ok {
                    created.fetch_add(1, Ordering::Relaxed);
                }
                (ok, t0.elapsed().as_micros() as u64)
            }
        })
        .buffer_unordered(args.inflight.max(1))
        .collect()
        .await;
    let elapsed = start.elapsed().as_secs_f64();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let mut errors = 0;
    for (ok, us) in &results {
        if *ok {
            hist.saturating_record(*us);
        } else {
            errors += 1;
        }
    }
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    let (idle_cpu_pct_per_node, rss_bytes_per_node) = match args.idle_secs {
        0 => (Vec::new(), Vec::new()),
        secs => {
            // Every event asleep (and a first round of outbox passes run).
            let sleep_after = RaftTuning::default().sleep_after_ms;
            tokio::time::sleep(Duration::from_millis(sleep_after + 3_000)).await;
            idle_usage(&world.cluster, Duration::from_secs(secs)).await
        }
    };
    Ok(CreateBenchReport {
        events_per_sec: hist.len() as f64 / elapsed,
        created: hist.len(),
        errors,
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        max_ms: hist.max() as f64 / 1000.0,
        inflight: args.inflight,
        seats_per_event: args.seats,
        nodes: world.edges.len(),
        duration_secs: elapsed,
        payments: args.payments,
        idle_cpu_pct_per_node,
        rss_bytes_per_node,
        idle_secs: args.idle_secs,
    })
}
