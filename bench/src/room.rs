//! `seatfence bench waiting-room`: a rush of buyers joining one event's
//! waiting room through the HTTP edges of three regions (one node each,
//! the event's group one voter per region), then its admission.
//!
//! Reports joins/s and join latency, the admission rate measured against
//! the room's `admit_per_sec` (two samples of the queue's length, seconds
//! apart), and the largest difference between one buyer's position as the
//! three regions' edges report it (the order is the group's, so 0). The
//! run fails when a join is refused or two buyers share a position.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::json;

use crate::holds::create_event;
use crate::raft::bench_dir;
use crate::world::World;
use seatfence_testkit::cluster::LocalCluster;
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::progress::Ticker;

const EVENT: &str = "bench-room";
/// Buyers whose positions are read through every region's edge.
const SAMPLED: u64 = 300;

#[derive(Debug, Clone)]
pub struct RoomBenchArgs {
    pub buyers: u64,
    pub inflight: usize,
    pub admit_per_sec: u32,
}

#[derive(Debug, Serialize)]
pub struct RoomBenchReport {
    pub buyers: u64,
    /// Joins answered 200 per second, over the join phase.
    pub joins_per_sec: f64,
    pub join_p50_ms: f64,
    pub join_p99_ms: f64,
    pub errors: u64,
    pub admit_per_sec: u32,
    /// Positions admitted per second between two samples of the queue.
    pub measured_admit_per_sec: f64,
    /// |measured − configured| / configured, in percent.
    pub admission_rate_error_pct: f64,
    /// The largest difference between one buyer's positions as the three
    /// regions' edges report them, over `sampled` buyers.
    pub max_position_jump_between_regions: u64,
    pub sampled: u64,
    pub inflight: usize,
    pub nodes: usize,
    pub join_secs: f64,
}

impl std::fmt::Display for RoomBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench waiting-room: {} buyers joined at {:.0} joins/s (p50 {:.2} ms, p99 {:.2} ms, {} errors, {} in flight, {:.1} s); admission {:.1}/s against {}/s ({:.2}% off); largest position jump between regions {} over {} buyers",
            r.buyers, r.joins_per_sec, r.join_p50_ms, r.join_p99_ms, r.errors, r.inflight, r.join_secs,
            r.measured_admit_per_sec, r.admit_per_sec, r.admission_rate_error_pct,
            r.max_position_jump_between_regions, r.sampled
        )
    }
}

struct Load {
    http: HttpClient,
    edges: Vec<String>,
    secret: String,
    buyers: u64,
    next: AtomicU64,
    errors: AtomicU64,
}

fn buyer(i: u64) -> String {
    format!("rush{i}")
}

/// Run the benchmark: the cluster, the event (its sale opens at once, so
/// joins are placed by arrival), the rush, the samples.
pub async fn run_room_bench(bin: &Path, args: &RoomBenchArgs) -> anyhow::Result<RoomBenchReport> {
    let (_guard, dir) = bench_dir()?;
    let builder = LocalCluster::builder(&dir).regions(3, 1);
    let w = World::start(builder, bin, Duration::from_secs(60)).await?;
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    // An opening in the past: a room admits from it, and joins get their
    // positions at once, in arrival order.
    let opens_at = seatfence_api::events::format_ms(now_ms.saturating_sub(1_000));
    create_event(
        &w.cluster,
        &w.http,
        &w.edges[0],
        &w.op,
        &json!({"event_id": EVENT, "name": "bench", "home_region": "us-east", "survival": "region",
                "sections": [{"name": "A", "rows": 10, "seats_per_row": 100}],
                "opens_at": opens_at,
                "waiting_room": {"admit_per_sec": args.admit_per_sec, "ticket_ttl_secs": 3600}}),
    )
    .await?;
    let load = Arc::new(Load {
        http: w.http.clone(),
        edges: w.edges.clone(),
        secret: w.secret.clone(),
        buyers: args.buyers,
        next: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    let _progress = Ticker::start("bench waiting-room", 0, {
        let load = load.clone();
        move || {
            format!(
                "joined {}",
                load.next.load(Ordering::Relaxed).min(load.buyers)
            )
        }
    });
    let start = Instant::now();
    let tasks: Vec<_> = (0..args.inflight.max(1))
        .map(|_| tokio::spawn(join_worker(load.clone())))
        .collect();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    for t in tasks {
        hist.add(t.await?)?;
    }
    let join_secs = start.elapsed().as_secs_f64();
    let errors = load.errors.load(Ordering::Relaxed);
    let joined = hist.len();

    let (measured, jump, sampled) = admission(&load, args).await?;
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    let configured = f64::from(args.admit_per_sec);
    Ok(RoomBenchReport {
        buyers: args.buyers,
        joins_per_sec: joined as f64 / join_secs.max(0.001),
        join_p50_ms: ms(0.5),
        join_p99_ms: ms(0.99),
        errors,
        admit_per_sec: args.admit_per_sec,
        measured_admit_per_sec: measured,
        admission_rate_error_pct: (measured - configured).abs() / configured * 100.0,
        max_position_jump_between_regions: jump,
        sampled,
        inflight: args.inflight,
        nodes: w.cluster.nodes.len(),
        join_secs,
    })
}

/// Join as the next buyer until every buyer joined; the latency of each
/// answered join.
async fn join_worker(load: Arc<Load>) -> Histogram<u64> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    loop {
        let i = load.next.fetch_add(1, Ordering::Relaxed);
        if i >= load.buyers {
            return hist;
        }
        let token = seatfence_api::auth::mint(&load.secret, &buyer(i), false, 3600);
        let url = format!(
            "{}/v1/events/{EVENT}/queue",
            load.edges[i as usize % load.edges.len()]
        );
        let t0 = Instant::now();
        match load.http.post(&url, Some(&token), None, &json!({})).await {
            Ok(a) if a.status.is_success() => {
                hist.saturating_record(t0.elapsed().as_micros() as u64);
            }
            _ => {
                load.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Where `i` stands through `edge`: `(position, queue_length)`.
async fn standing(load: &Load, edge: &str, i: u64) -> anyhow::Result<(u64, u64)> {
    let token = seatfence_api::auth::mint(&load.secret, &buyer(i), false, 3600);
    let a = load
        .http
        .get(&format!("{edge}/v1/events/{EVENT}/queue/me"), Some(&token))
        .await?;
    if !a.status.is_success() {
        bail!("poll of {} via {edge}: {} {}", buyer(i), a.status, a.body);
    }
    let position = a.body["position"].as_u64().context("position")?;
    let len = a.body["queue_length"].as_u64().context("queue_length")?;
    Ok((position, len))
}

/// The admission rate from two samples of the queue's length (while it
/// is not empty), and the largest position jump between regions.
async fn admission(load: &Load, args: &RoomBenchArgs) -> anyhow::Result<(f64, u64, u64)> {
    let last = load.buyers - 1;
    let (_, q0) = standing(load, &load.edges[0], last).await?;
    let t0 = Instant::now();
    // Long enough for ~2,000 admissions (at least 2 s), short enough that
    // the queue does not drain.
    let window = (2_000.0 / f64::from(args.admit_per_sec)).max(2.0);
    let window = window.min(q0 as f64 / f64::from(args.admit_per_sec) * 0.8);
    if window < 0.5 {
        bail!("the queue ({q0}) drains too fast at {}/s to measure: more buyers or a lower --admit-per-sec", args.admit_per_sec);
    }
    tokio::time::sleep(Duration::from_secs_f64(window)).await;
    let (_, q1) = standing(load, &load.edges[0], last).await?;
    let measured = (q0 - q1) as f64 / t0.elapsed().as_secs_f64();

    let step = (load.buyers / SAMPLED).max(1);
    let mut jump = 0;
    let mut seen = BTreeSet::new();
    let mut sampled = 0;
    for i in (0..load.buyers).step_by(step as usize) {
        let mut positions = Vec::new();
        for edge in &load.edges {
            positions.push(standing(load, edge, i).await?.0);
        }
        let (lo, hi) = (positions.iter().min(), positions.iter().max());
        jump = jump.max(hi.unwrap_or(&0) - lo.unwrap_or(&0));
        if !seen.insert(positions[0]) {
            bail!("position {} given twice", positions[0]);
        }
        sampled += 1;
    }
    Ok((measured, jump, sampled))
}
