//! `seatfence bench move`: move a large event between regions while buyers
//! in every region keep holding seats. Reports how long the move took and
//! the longest write pause the buyers saw (the longest gap between two
//! answered hold requests while the move ran), and checks that the sale
//! stayed exact: every granted hold counted once, nothing oversold.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{json, Value};

use crate::holds::seat_counts;
use crate::raft::bench_dir;
use crate::world::World;
use seatfence_testkit::cluster::LocalCluster;
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::progress::Ticker;

#[derive(Debug, Clone)]
pub struct MoveBenchArgs {
    pub seats: u32,
    pub inflight: usize,
    /// Load before the move starts, and after it is done.
    pub before: Duration,
    pub after: Duration,
    /// The region the event moves to (from us-east).
    pub to: String,
    /// The regions far apart (`--global`), or together.
    pub geo: Option<seatfence_testkit::Geo>,
}

#[derive(Debug, Serialize)]
pub struct MoveBenchReport {
    pub seats: u64,
    pub from_region: String,
    pub to_region: String,
    /// The latency matrix the cluster ran under (`--global`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geo: Option<Value>,
    /// POST of the move to the first read that says `done` (client view).
    pub move_secs: f64,
    /// Start to done as the directory recorded it.
    pub move_recorded_ms: u64,
    /// Leader transfer start to epoch bump committed, as the coordinator
    /// measured it.
    pub coordinator_pause_ms: Option<u64>,
    /// When each step was entered, ms after the start (directory record).
    pub steps_ms: Vec<(String, u64)>,
    /// The longest gap between two answered hold requests while the move
    /// ran (the write pause buyers saw), in ms.
    pub longest_write_gap_ms: f64,
    /// Where that gap started, ms after the move's start.
    pub longest_gap_at_ms: f64,
    /// Answered hold requests per second before, during and after the move.
    pub rps_before: f64,
    pub rps_during: f64,
    pub rps_after: f64,
    /// Hold latency during the move.
    pub p50_during_ms: f64,
    pub p99_during_ms: f64,
    pub max_during_ms: f64,
    pub granted: u64,
    pub errors: u64,
    pub epoch_after: u64,
    pub oversold: bool,
    pub counters_match: bool,
    pub inflight: usize,
    pub nodes: usize,
}

impl std::fmt::Display for MoveBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench move: {} seats {} -> {}: move {:.2} s (recorded {} ms, steps entered at {:?}), longest write gap {:.0} ms from +{:.0} ms (coordinator pause {:?} ms); answered holds/s before {:.0}, during {:.0}, after {:.0}; during the move p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; granted {}, errors {}, epoch {}, oversold {}, counters_match {}, {} in flight, {} nodes",
            r.seats, r.from_region, r.to_region, r.move_secs, r.move_recorded_ms, r.steps_ms, r.longest_write_gap_ms, r.longest_gap_at_ms, r.coordinator_pause_ms,
            r.rps_before, r.rps_during, r.rps_after, r.p50_during_ms, r.p99_during_ms, r.max_during_ms,
            r.granted, r.errors, r.epoch_after, r.oversold, r.counters_match, r.inflight, r.nodes
        )
    }
}

const EVENT: &str = "bench-move";

/// Buyers the load holds seats for (each with a token).
const USERS: u64 = 4096;

/// One answered hold: when it was answered (µs since the start) and how
/// long it took.
type Answer = (u64, u64);

/// Run the benchmark: the cluster and event, `args.before` of load, the
/// move under load, `args.after` more, then the report.
pub async fn run_move_bench(bin: &Path, args: &MoveBenchArgs) -> anyhow::Result<MoveBenchReport> {
    let (_guard, dir) = bench_dir()?;
    let s = setup(bin, &dir, args.seats, args.geo.clone()).await?;
    let load = Arc::new(Load::new(s.http.clone(), s.edges.clone(), &s.secret));
    // The load runs before + the move + after; the bar counts the first two.
    let planned = (args.before + args.after).as_secs();
    let _progress = Ticker::start("bench move", planned, String::new);
    let tasks: Vec<_> = (0..args.inflight.max(1))
        .map(|t| tokio::spawn(hold_worker(load.clone(), t)))
        .collect();
    tokio::time::sleep(args.before).await;
    let moved = move_event(&s.http, &load, &s.op, &args.to).await?;
    tokio::time::sleep(args.after).await;
    load.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    let end = load.start.elapsed();
    build_report(&s, &load, moved, end, args).await
}

/// The benchmark's cluster (3 regions × 3 nodes), ready, with its event
/// created and led.
struct Setup {
    cluster: LocalCluster,
    secret: String,
    /// Every node's edge, in node order.
    edges: Vec<String>,
    http: HttpClient,
    /// An operator's token.
    op: String,
    /// The event's seats.
    capacity: u64,
}

/// Start the cluster in `dir` and create the event, owned by us-east: rows
/// of 200 seats, at least one (`seats` rounded down to whole rows).
async fn setup(
    bin: &Path,
    dir: &Path,
    seats: u32,
    geo: Option<seatfence_testkit::Geo>,
) -> anyhow::Result<Setup> {
    let builder = LocalCluster::builder(dir).regions(3, 3).geo(geo);
    let World {
        cluster,
        secret,
        edges,
        http,
        op,
    } = World::start(builder, bin, Duration::from_secs(60)).await?;
    let seats = seats.max(200);
    let created = http
        .post(
            &format!("{}/v1/events", edges[0]),
            Some(&op),
            None,
            &json!({"event_id": EVENT, "name": "bench move", "home_region": "us-east",
                    "sections": [{"name": "A", "rows": seats / 200, "seats_per_row": 200}],
                    "hold_ttl_secs": 3600}),
        )
        .await?;
    if created.status.as_u16() != 201 {
        bail!("create event: {} {}", created.status, created.body);
    }
    let capacity = created.body["capacity"].as_u64().context("capacity")?;
    let group = seatfence_core::GroupId(created.body["group_id"].as_u64().context("group")?);
    cluster.wait_leader(group, Duration::from_secs(30)).await?;
    Ok(Setup {
        cluster,
        secret,
        edges,
        http,
        op,
        capacity,
    })
}

/// The buyers' load, shared by its workers.
struct Load {
    http: HttpClient,
    /// Every node's edge: each worker sends through all of them in turn.
    edges: Vec<String>,
    /// A token per user.
    tokens: Vec<String>,
    /// Set when the workers are to stop.
    stop: AtomicBool,
    /// Holds granted.
    granted: AtomicU64,
    /// Hold requests without an answer (retried).
    errors: AtomicU64,
    answers: Mutex<Vec<Answer>>,
    /// What the answers' times count from.
    start: Instant,
}

impl Load {
    /// A load through `edges` with a token per user (signed with
    /// `secret`); its clock starts now.
    fn new(http: HttpClient, edges: Vec<String>, secret: &str) -> Load {
        let tokens: Vec<String> = (0..USERS)
            .map(|u| seatfence_api::auth::mint(secret, &format!("mover{u}"), false, 3600))
            .collect();
        Load {
            http,
            edges,
            tokens,
            stop: AtomicBool::new(false),
            granted: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            answers: Mutex::new(Vec::new()),
            start: Instant::now(),
        }
    }
}

/// Worker `t` of the load: one single-seat hold after another, each for
/// the next of its users, until the load stops. A hold is answered when it
/// is granted (201) or refused (409); anything else counts as an error and
/// is retried with the same idempotency key through the next edge (50
/// tries at most).
async fn hold_worker(load: Arc<Load>, t: usize) {
    let Load {
        http,
        edges,
        tokens,
        stop,
        granted,
        errors,
        answers,
        start,
    } = &*load;
    let mut n = 0u64;
    // Each worker sends through the edges of every region in turn.
    while !stop.load(Ordering::Relaxed) {
        let user = (t as u64 * 7919 + n) % USERS;
        let key = format!("m{t}-{n}");
        n += 1;
        let body = json!({"event_id": EVENT, "quantity": 1});
        // An unknown outcome is retried with the same key.
        for attempt in 0..50 {
            let url = format!("{}/v1/holds", edges[(t + attempt) % edges.len()]);
            let t0 = Instant::now();
            let a = http
                .post(&url, Some(&tokens[user as usize]), Some(&key), &body)
                .await;
            let code = a.as_ref().map(|a| a.status.as_u16()).unwrap_or(0);
            if code == 201 || code == 409 {
                if code == 201 {
                    granted.fetch_add(1, Ordering::Relaxed);
                }
                let at = start.elapsed().as_micros() as u64;
                answers
                    .lock()
                    .expect("lock")
                    .push((at, t0.elapsed().as_micros() as u64));
                break;
            }
            errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A finished move, as the client saw it.
struct Moved {
    /// When the move was posted, since the load's start.
    start: Duration,
    /// When it was first read as no longer running, since the load's start.
    end: Duration,
    /// The move's record then.
    done: Value,
}

/// Move the event to `to` (asked through the third node's edge) and
/// poll the move until it is no longer running (120 s at most). An error
/// unless it ended done.
async fn move_event(http: &HttpClient, load: &Load, op: &str, to: &str) -> anyhow::Result<Moved> {
    let (edges, start) = (&load.edges, load.start);
    let move_start = start.elapsed();
    let m = http
        .post(
            &format!("{}/v1/admin/events/{EVENT}/move", edges[2]),
            Some(op),
            None,
            &json!({"to_region": to}),
        )
        .await?;
    if m.status.as_u16() != 202 {
        bail!("start move: {} {}", m.status, m.body);
    }
    let id = m.body["move_id"].clone();
    let done = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let r = http
            .get(&format!("{}/v1/admin/moves/{id}", edges[2]), Some(op))
            .await?;
        if r.status.is_success() && r.body["state"] != "running" {
            break r.body;
        }
        if start.elapsed() - move_start > Duration::from_secs(120) {
            bail!("move still running after 120 s: {}", r.body);
        }
    };
    let move_end = start.elapsed();
    if done["state"] != "done" {
        bail!("move ended {}", done);
    }
    Ok(Moved {
        start: move_start,
        end: move_end,
        done,
    })
}

/// The report once the load stopped at `end`: the move's times (client
/// view and the directory's record), what the buyers saw before, during
/// and after it, and whether the sale stayed exact.
async fn build_report(
    s: &Setup,
    load: &Load,
    moved: Moved,
    end: Duration,
    args: &MoveBenchArgs,
) -> anyhow::Result<MoveBenchReport> {
    let inflight = args.inflight;
    let mut answers = load.answers.lock().expect("lock").clone();
    answers.sort_unstable();
    let ms = moved.start.as_micros() as u64;
    let me = moved.end.as_micros() as u64;
    let rate = |from: u64, to: u64| {
        let n = answers
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .count();
        n as f64 / ((to.saturating_sub(from)) as f64 / 1e6).max(1e-3)
    };
    let (longest, longest_at) = longest_gap(&answers, ms, me);
    let hist = latency_during(&answers, ms, me);
    let (available, held, sold) = seat_counts(&s.http, &load.edges[4], &s.op, EVENT).await?;
    let granted = load.granted.load(Ordering::Relaxed);
    let ev = s
        .http
        .get(&format!("{}/v1/events/{EVENT}", load.edges[0]), Some(&s.op))
        .await?;
    let (done, capacity) = (&moved.done, s.capacity);
    Ok(MoveBenchReport {
        seats: capacity,
        from_region: "us-east".into(),
        to_region: args.to.clone(),
        geo: args.geo.as_ref().map(|g| g.to_json()),
        move_secs: (moved.end - moved.start).as_secs_f64(),
        move_recorded_ms: done["duration_ms"].as_u64().unwrap_or(0),
        coordinator_pause_ms: done["pause_ms"].as_u64(),
        steps_ms: steps_ms(done),
        longest_write_gap_ms: longest as f64 / 1000.0,
        longest_gap_at_ms: longest_at as f64 / 1000.0,
        rps_before: rate(0, ms),
        rps_during: rate(ms, me),
        rps_after: rate(me, end.as_micros() as u64),
        p50_during_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_during_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
        max_during_ms: hist.max() as f64 / 1000.0,
        granted,
        errors: load.errors.load(Ordering::Relaxed),
        epoch_after: ev.body["epoch"].as_u64().unwrap_or(0),
        oversold: held.saturating_add(sold) > capacity,
        counters_match: available.saturating_add(held).saturating_add(sold) == capacity
            && held + sold == granted,
        inflight,
        nodes: s.cluster.nodes.len(),
    })
}

/// The longest gap between consecutive `answers` (sorted) that overlaps
/// the move `[ms, me]` (µs since the start): `(gap, where it started after
/// ms)`, in µs.
fn longest_gap(answers: &[Answer], ms: u64, me: u64) -> (u64, u64) {
    let (mut longest, mut longest_at) = (0u64, 0u64);
    for w in answers.windows(2) {
        let (a, b) = (w[0].0, w[1].0);
        if b >= ms && a <= me && b - a > longest {
            longest = b - a;
            longest_at = a.saturating_sub(ms);
        }
    }
    (longest, longest_at)
}

/// Latency (µs) of the hold requests that were in flight at any point of
/// the move `[ms, me]` (µs since the start).
fn latency_during(answers: &[Answer], ms: u64, me: u64) -> Histogram<u64> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    for (at, took) in answers {
        // Requests that were in flight at any point of the move.
        if *at >= ms && at.saturating_sub(*took) <= me {
            hist.saturating_record(*took);
        }
    }
    hist
}

/// When the move entered each step, ms after its start, from its record's
/// history.
fn steps_ms(done: &Value) -> Vec<(String, u64)> {
    done["history"]
        .as_array()
        .map(|h| {
            let t0 = done["started_ms"].as_u64().unwrap_or(0);
            h.iter()
                .map(|s| {
                    (
                        s["step"].as_str().unwrap_or("?").to_string(),
                        s["at_ms"].as_u64().unwrap_or(0).saturating_sub(t0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
