//! `seatfence bench flash-sale` and `seatfence bench compare`: the
//! launch-day shape. One event, a burst of buyers each holding 1–4 seats
//! (all or none, retried with other seats on conflict), a share of them
//! booking and paying through the mock gateway, the rest letting their holds
//! expire; then a slower stream of late arrivals taking the seats that come
//! back, until every seat is sold.
//!
//! The workload is the same for every system (`Backend`): buyers are
//! numbered, and buyer `i`'s seat count, choices and decision to book come
//! from an RNG seeded with `(seed, i)`; which seats it actually gets depends
//! on what earlier buyers got, as on the day. `compare` runs the hold part
//! (no bookings, holds never expire) against seatfence, PostgreSQL and etcd
//! with the same seed and concurrency.

pub mod backend;
pub mod cli;
pub mod compare;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod pg;
pub mod plot;
pub mod sale;
pub mod view;

mod buyer;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use seatfence_testkit::progress::Progress;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use backend::Backend;
use buyer::buyer;
use view::SeatView;

/// One run's shape.
#[derive(Debug, Clone)]
pub struct Workload {
    pub capacity: u32,
    /// Buyers in the burst.
    pub buyers: u64,
    /// The whole run stops after this long, sold out or not.
    pub duration: Duration,
    /// Hold requests in flight at most.
    pub inflight: usize,
    /// Burst buyers arriving per second (open loop, latency measured from
    /// each buyer's arrival); `None`: as fast as `inflight` allows.
    pub rate: Option<u32>,
    /// Share of burst buyers who book and pay; 0 in a holds-only run.
    pub book_share: f64,
    /// Late arrivals per second after the burst (they always book); 0: none.
    pub late_rate: u32,
    /// The event's hold time-to-live (seats come back after it).
    pub hold_ttl: Duration,
    pub max_attempts: u32,
    /// Buyers pick among this many best free seats.
    pub window: usize,
    pub seed: u64,
    pub progress: bool,
}

/// Books and pays for a granted hold (seatfence over HTTP only).
pub type Payer = Arc<
    dyn Fn(u64, String) -> futures::future::BoxFuture<'static, anyhow::Result<()>> + Send + Sync,
>;

#[derive(Debug, Clone, Serialize)]
pub struct Bucket {
    pub at_secs: f64,
    pub holds: u64,
    pub conflicts: u64,
    pub errors: u64,
    pub sold_seats: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// What a run measured, at the client.
#[derive(Debug, Clone, Serialize)]
pub struct RunStats {
    pub system: String,
    /// Granted holds per second during the rush: from the start until the
    /// seats granted in holds first add up to 90% of capacity. (The last
    /// seats go slower on every system: hundreds of buyers contend for a
    /// few seats and most requests are conflicts; see
    /// `holds_per_sec_to_capacity`.)
    pub holds_per_sec: f64,
    pub rush_secs: Option<f64>,
    /// Granted holds per second until the seats granted first added up to
    /// capacity (or the burst's buyers were all served).
    pub holds_per_sec_to_capacity: f64,
    /// Every answered hold request (granted or conflict) per second, burst.
    pub requests_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub granted_holds: u64,
    pub granted_seats: u64,
    pub conflicts: u64,
    /// Buyers who saw no free seat (or gave up after `max_attempts`).
    pub turned_away: u64,
    pub errors: BTreeMap<String, u64>,
    pub bookings_confirmed: u64,
    pub booking_errors: u64,
    /// Seats in confirmed bookings, as the clients saw them.
    pub confirmed_seats: u64,
    pub burst_secs: f64,
    /// When the seats granted in holds first added up to capacity.
    pub all_taken_after_secs: Option<f64>,
    /// When the last seat was sold (bookings), or taken (holds only).
    pub sold_out_after_secs: Option<f64>,
    pub buyers_arrived: u64,
    pub duration_secs: f64,
    pub inflight: usize,
    pub offered_buyers_per_sec: Option<u32>,
    pub seed: u64,
    pub timeline: Vec<Bucket>,
}

const BUCKET_MS: u64 = 250;

fn hist(sigfig: u8) -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 120_000_000, sigfig).expect("valid bounds")
}

/// One `BUCKET_MS` slice of the run.
#[derive(Default)]
struct Slot {
    holds: u64,
    conflicts: u64,
    errors: u64,
    sold_seats: u64,
    latency: Option<Histogram<u64>>,
}

#[derive(Default)]
struct Totals {
    errors: BTreeMap<String, u64>,
    buckets: Vec<Slot>,
    all_taken_ms: Option<u64>,
    sold_out_ms: Option<u64>,
    burst_end_ms: Option<u64>,
    burst_holds: u64,
    rush: Option<(u64, u64)>,
    burst_answers: u64,
}

struct Run {
    backend: Arc<Backend>,
    payer: Option<Payer>,
    w: Workload,
    view: Mutex<SeatView>,
    hist: Mutex<Histogram<u64>>,
    totals: Mutex<Totals>,
    limiter: Semaphore,
    start: Instant,
    deadline: Instant,
    done: AtomicBool,
    granted_holds: AtomicU64,
    granted_seats: AtomicU64,
    confirmed_seats: AtomicU64,
    bookings: AtomicU64,
    booking_errors: AtomicU64,
    conflicts: AtomicU64,
    turned_away: AtomicU64,
    arrived: AtomicU64,
}

enum Tick {
    Answer { latency_us: u64, granted: bool },
    Error(String),
    Sold(u64),
}

impl Run {
    fn ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn over(&self) -> bool {
        self.done.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    fn record(&self, tick: Tick) {
        let ms = self.ms();
        let mut t = self.totals.lock().expect("totals lock");
        let b = (ms / BUCKET_MS) as usize;
        if t.buckets.len() <= b {
            t.buckets.resize_with(b + 1, Default::default);
        }
        let in_burst = t.burst_end_ms.is_none();
        let bucket = &mut t.buckets[b];
        match tick {
            Tick::Answer {
                latency_us,
                granted,
            } => {
                if granted {
                    bucket.holds += 1;
                } else {
                    bucket.conflicts += 1;
                }
                bucket
                    .latency
                    .get_or_insert_with(|| hist(2))
                    .saturating_record(latency_us);
                if in_burst {
                    t.burst_answers += 1;
                    t.burst_holds += u64::from(granted);
                }
            }
            Tick::Error(code) => {
                bucket.errors += 1;
                *t.errors.entry(code).or_default() += 1;
            }
            Tick::Sold(n) => bucket.sold_seats += n,
        }
    }

    /// A hold request was answered (granted, or refused for a conflict).
    fn answered(&self, latency_us: u64, granted: bool) {
        self.hist
            .lock()
            .expect("hist lock")
            .saturating_record(latency_us);
        self.record(Tick::Answer {
            latency_us,
            granted,
        });
    }

    fn end_burst(&self) {
        let ms = self.ms();
        let mut t = self.totals.lock().expect("totals lock");
        t.burst_end_ms.get_or_insert(ms);
    }

    /// Seats granted (holds only) or sold (with bookings) reached capacity.
    fn check_sold_out(&self) {
        let cap = u64::from(self.w.capacity);
        let done = if self.payer.is_some() {
            self.confirmed_seats.load(Ordering::Relaxed) >= cap
        } else {
            self.granted_seats.load(Ordering::Relaxed) >= cap
        };
        if done && !self.done.swap(true, Ordering::Relaxed) {
            let ms = self.ms();
            let mut t = self.totals.lock().expect("totals lock");
            t.sold_out_ms = Some(ms);
            t.burst_end_ms.get_or_insert(ms);
        }
    }

    /// Seats handed out in holds reached capacity for the first time: the
    /// end of the burst's measuring window.
    fn note_granted(&self, seats_granted: u64) {
        if seats_granted * 10 >= u64::from(self.w.capacity) * 9 {
            let ms = self.ms();
            let holds = self.granted_holds.load(Ordering::Relaxed);
            let mut t = self.totals.lock().expect("totals lock");
            t.rush.get_or_insert((ms, holds));
        }
        if seats_granted >= u64::from(self.w.capacity) {
            let ms = self.ms();
            let mut t = self.totals.lock().expect("totals lock");
            if t.all_taken_ms.is_none() {
                t.all_taken_ms = Some(ms);
                t.burst_end_ms.get_or_insert(ms);
            }
        }
    }
}

/// The sale's progress on stderr (`Progress`: a bar on a terminal, a line
/// every 2 s otherwise): seats taken (or confirmed, when buyers pay) of the
/// capacity, the hold rate and the buyers arrived.
fn spawn_progress(run: Arc<Run>, label: &'static str) -> Option<tokio::task::JoinHandle<()>> {
    if !run.w.progress {
        return None;
    }
    let cap = u64::from(run.w.capacity).max(1);
    let mut p = Progress::new(label, cap, " seats", Duration::from_secs(2));
    Some(tokio::spawn(async move {
        let mut last = (Instant::now(), 0u64);
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let done_seats = if run.payer.is_some() {
                run.confirmed_seats.load(Ordering::Relaxed)
            } else {
                run.granted_seats.load(Ordering::Relaxed)
            };
            let holds = run.granted_holds.load(Ordering::Relaxed);
            let rate = (holds - last.1) as f64 / last.0.elapsed().as_secs_f64();
            last = (Instant::now(), holds);
            p.update(
                done_seats,
                format!(
                    "{rate:.0} holds/s · {} buyers · {:.1} s",
                    run.arrived.load(Ordering::Relaxed),
                    run.start.elapsed().as_secs_f64()
                ),
            );
            if run.over() {
                return;
            }
        }
    }))
}

/// Run the workload against `backend`; `payer` books and pays (full
/// flash sale), without it holds are only taken (compare).
pub async fn run_workload(backend: Arc<Backend>, payer: Option<Payer>, w: Workload) -> RunStats {
    let start = Instant::now();
    let run = Arc::new(Run {
        view: Mutex::new(SeatView::new(w.capacity, w.window)),
        hist: Mutex::new(hist(3)),
        totals: Mutex::new(Totals::default()),
        limiter: Semaphore::new(w.inflight.max(1)),
        start,
        deadline: start + w.duration,
        done: AtomicBool::new(false),
        granted_holds: AtomicU64::new(0),
        granted_seats: AtomicU64::new(0),
        confirmed_seats: AtomicU64::new(0),
        bookings: AtomicU64::new(0),
        booking_errors: AtomicU64::new(0),
        conflicts: AtomicU64::new(0),
        turned_away: AtomicU64::new(0),
        arrived: AtomicU64::new(0),
        backend,
        payer,
        w,
    });
    let label = if run.payer.is_some() { "sold" } else { "held" };
    let progress = spawn_progress(run.clone(), label);
    let mut tasks = JoinSet::new();
    // The burst.
    match run.w.rate {
        None => {
            let next = Arc::new(AtomicU64::new(0));
            for _ in 0..run.w.inflight.max(1) {
                let (run, next) = (run.clone(), next.clone());
                tasks.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= run.w.buyers || run.over() {
                            return;
                        }
                        buyer(run.clone(), i, Instant::now(), false).await;
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
        }
        Some(rate) => {
            let rate = f64::from(rate.max(1));
            for i in 0..run.w.buyers {
                if run.over() {
                    break;
                }
                let arrival = start + Duration::from_secs_f64(i as f64 / rate);
                tokio::time::sleep_until(arrival.into()).await;
                tasks.spawn(buyer(run.clone(), i, arrival, false));
                while tasks.try_join_next().is_some() {}
            }
            while tasks.join_next().await.is_some() {}
        }
    }
    run.end_burst();
    // Late arrivals until sold out or the end of the run.
    if run.payer.is_some() && run.w.late_rate > 0 {
        let rate = f64::from(run.w.late_rate);
        let late_start = Instant::now();
        let mut i = run.w.buyers;
        while !run.over() {
            let arrival = late_start + Duration::from_secs_f64((i - run.w.buyers) as f64 / rate);
            tokio::time::sleep_until(arrival.into()).await;
            tasks.spawn(buyer(run.clone(), i, arrival, true));
            while tasks.try_join_next().is_some() {}
            i += 1;
        }
    }
    while tasks.join_next().await.is_some() {}
    run.done.store(true, Ordering::Relaxed);
    if let Some(p) = progress {
        let _ = p.await;
    }
    summarize(&run)
}

fn summarize(run: &Run) -> RunStats {
    let h = run.hist.lock().expect("hist lock");
    let t = run.totals.lock().expect("totals lock");
    let elapsed = run.start.elapsed().as_secs_f64();
    let burst_secs = t
        .burst_end_ms
        .map(|ms| ms as f64 / 1000.0)
        .unwrap_or(elapsed)
        .max(0.001);
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let timeline = t
        .buckets
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let q = |q: f64| {
                b.latency
                    .as_ref()
                    .map(|h| h.value_at_quantile(q) as f64 / 1000.0)
                    .unwrap_or(0.0)
            };
            Bucket {
                at_secs: (i as u64 * BUCKET_MS) as f64 / 1000.0,
                holds: b.holds,
                conflicts: b.conflicts,
                errors: b.errors,
                sold_seats: b.sold_seats,
                p50_ms: q(0.5),
                p99_ms: q(0.99),
            }
        })
        .collect();
    RunStats {
        system: run.backend.name().to_string(),
        holds_per_sec: match t.rush {
            Some((ms, holds)) => holds as f64 * 1000.0 / ms.max(1) as f64,
            None => t.burst_holds as f64 / burst_secs,
        },
        rush_secs: t.rush.map(|(ms, _)| ms as f64 / 1000.0),
        holds_per_sec_to_capacity: t.burst_holds as f64 / burst_secs,
        requests_per_sec: t.burst_answers as f64 / burst_secs,
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: h.max() as f64 / 1000.0,
        granted_holds: run.granted_holds.load(Ordering::Relaxed),
        granted_seats: run.granted_seats.load(Ordering::Relaxed),
        conflicts: run.conflicts.load(Ordering::Relaxed),
        turned_away: run.turned_away.load(Ordering::Relaxed),
        errors: t.errors.clone(),
        bookings_confirmed: run.bookings.load(Ordering::Relaxed),
        booking_errors: run.booking_errors.load(Ordering::Relaxed),
        confirmed_seats: run.confirmed_seats.load(Ordering::Relaxed),
        burst_secs,
        all_taken_after_secs: t.all_taken_ms.map(|ms| ms as f64 / 1000.0),
        sold_out_after_secs: t.sold_out_ms.map(|ms| ms as f64 / 1000.0),
        buyers_arrived: run.arrived.load(Ordering::Relaxed),
        duration_secs: elapsed,
        inflight: run.w.inflight,
        offered_buyers_per_sec: run.w.rate,
        seed: run.w.seed,
        timeline,
    }
}
