//! `seatfence bench holds --global`: what a buyer in each region sees when
//! the regions are far apart. Three regions of three nodes behind the link
//! proxies' latency matrix; in each region one event it owns (`zone`: its
//! three voters there) and one with a voter in every region (`region`).
//! Buyers in every region, through their own region's edges, hold seats
//! of each zone event, book held seats (the mock gateway beside the
//! cluster) and read availability of both; the report gives p50/p99 per
//! buyer region and owner region for holds, for bookings (`POST
//! /v1/bookings` of a fresh hold: the payment created at the gateway, the
//! booking pending), for reads of the zone events (answered by the owner),
//! and for reads of the region events answered locally (the default
//! staleness bound) and at the leader (`max_stale_ms=0`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::json;

use crate::holds::{create_event, seat_counts};
use crate::raft::bench_dir;
use crate::world::World;
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::progress::Ticker;
use seatfence_testkit::{GatewayProc, Geo, LocalCluster, REGIONS};

#[derive(Debug, Clone)]
pub struct GlobalArgs {
    pub duration: Duration,
    /// Seats of each zone event.
    pub seats: u32,
    /// Requests in flight, split evenly over the three buyer regions.
    pub inflight: usize,
    pub geo: Geo,
}

/// What one kind of request cost buyers of one region for events owned by
/// another (or the same).
#[derive(Debug, Serialize)]
pub struct Cell {
    pub buyer_region: String,
    pub owner_region: String,
    /// `hold` (zone event), `book` (a booking of a hold just taken in the
    /// zone event; the booking's latency only), `read_owner` (zone event: no replica in other
    /// regions), `read_local` (region event, default bound),
    /// `read_leader` (region event, `max_stale_ms=0`).
    pub kind: &'static str,
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Of the reads, the share a replica in the buyer's region answered
    /// (`served_by: replica`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_share: Option<f64>,
    /// The largest `stale_ms` a read answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_stale_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct GlobalReport {
    /// The latency matrix (`rtt_ms` per region pair, `jitter_ms`).
    pub geo: serde_json::Value,
    pub duration_secs: f64,
    pub inflight: usize,
    pub cells: Vec<Cell>,
    /// Where each region event's leader was at the end (it may be far
    /// from its home).
    pub region_event_leaders: BTreeMap<String, String>,
    pub granted: u64,
    pub capacity: u64,
    pub oversold: bool,
    /// available + held + sold == capacity, and held + sold at most
    /// granted (a booking left unpaid may be released by the reconciler).
    pub counters_match: bool,
    pub errors: u64,
}

impl std::fmt::Display for GlobalReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "bench holds --global ({} s, {} in flight): granted {}, oversold {}, counters_match {}, errors {}",
            self.duration_secs.round(),
            self.inflight,
            self.granted,
            self.oversold,
            self.counters_match,
            self.errors
        )?;
        writeln!(
            f,
            "{:<9} {:<9} {:<12} {:>6} {:>8} {:>8} {:>6} {:>6}",
            "buyer", "owner", "kind", "count", "p50 ms", "p99 ms", "local", "stale"
        )?;
        for c in &self.cells {
            writeln!(
                f,
                "{:<9} {:<9} {:<12} {:>6} {:>8.1} {:>8.1} {:>6} {:>6}",
                c.buyer_region,
                c.owner_region,
                c.kind,
                c.count,
                c.p50_ms,
                c.p99_ms,
                c.local_share
                    .map_or(String::new(), |s| format!("{:.0}%", s * 100.0)),
                c.max_stale_ms.map_or(String::new(), |s| s.to_string()),
            )?;
        }
        write!(f, "region events' leaders: {:?}", self.region_event_leaders)
    }
}

/// The kinds of request, in the order a worker takes them.
const KINDS: [&str; 5] = ["hold", "book", "read_owner", "read_local", "read_leader"];

/// Per (buyer region, owner region, kind): latencies (µs), replica answers,
/// the largest `stale_ms`.
type Tally = BTreeMap<(usize, usize, usize), (Histogram<u64>, u64, u64)>;

struct Load {
    http: HttpClient,
    /// The edges of each region (index into [`REGIONS`]).
    edges: Vec<Vec<String>>,
    tokens: Vec<String>,
    deadline: Instant,
    granted: AtomicU64,
    errors: AtomicU64,
}

fn zone_event(owner: usize) -> String {
    format!("zone-{}", REGIONS[owner])
}

fn region_event(owner: usize) -> String {
    format!("spread-{}", REGIONS[owner])
}

pub async fn run_global_bench(bin: &Path, args: &GlobalArgs) -> anyhow::Result<GlobalReport> {
    let (_guard, dir) = bench_dir()?;
    let gateway = GatewayProc::start(bin, &dir.join("gateway"), 5)?;
    let builder = LocalCluster::builder(&dir)
        .regions(3, 3)
        .payments(gateway.payments_config())
        .geo(Some(args.geo.clone()));
    let world = World::start(builder, bin, Duration::from_secs(90)).await?;
    let (capacity, spread) = create_events(&world, args.seats).await?;
    let mut edges = vec![Vec::new(); REGIONS.len()];
    for (_, region, url) in world.cluster.all_edges() {
        let i = REGIONS
            .iter()
            .position(|r| *r == region)
            .context("a node outside the three regions")?;
        edges[i].push(url);
    }
    let tokens = (0..1024)
        .map(|u| seatfence_api::auth::mint(&world.secret, &format!("buyer{u}"), false, 3600))
        .collect();
    let start = Instant::now();
    let load = Arc::new(Load {
        http: world.http.clone(),
        edges,
        tokens,
        deadline: start + args.duration,
        granted: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    let _progress = Ticker::start("bench holds --global", args.duration.as_secs(), {
        let load = load.clone();
        move || format!("granted {}", load.granted.load(Ordering::Relaxed))
    });
    let workers = args.inflight.max(REGIONS.len());
    let tasks: Vec<_> = (0..workers)
        .map(|t| tokio::spawn(worker(load.clone(), t)))
        .collect();
    let mut tally = Tally::new();
    for t in tasks {
        for (k, (h, local, stale)) in t.await? {
            let e = tally.entry(k).or_insert_with(|| (hist(), 0, 0));
            e.0.add(&h)?;
            e.1 += local;
            e.2 = e.2.max(stale);
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (mut available, mut held, mut sold) = (0u64, 0u64, 0u64);
    for owner in 0..REGIONS.len() {
        let (a, h, s) =
            seat_counts(&world.http, &world.edges[0], &world.op, &zone_event(owner)).await?;
        available = available.saturating_add(a);
        held = held.saturating_add(h);
        sold = sold.saturating_add(s);
    }
    let granted = load.granted.load(Ordering::Relaxed);
    let mut leaders = BTreeMap::new();
    for (event, group) in spread {
        let leader = world
            .cluster
            .wait_leader(group, Duration::from_secs(30))
            .await?;
        let at = world
            .cluster
            .nodes
            .iter()
            .find(|n| n.id() == leader)
            .map(|n| n.config.region.clone())
            .unwrap_or_default();
        leaders.insert(event, at);
    }
    Ok(GlobalReport {
        geo: args.geo.to_json(),
        duration_secs: elapsed,
        inflight: workers,
        cells: cells(&tally),
        region_event_leaders: leaders,
        granted,
        capacity,
        oversold: held + sold > capacity || granted > capacity,
        counters_match: available + held + sold == capacity && held + sold <= granted,
        errors: load.errors.load(Ordering::Relaxed),
    })
}

fn hist() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds")
}

/// Both events of every region: `(zone events' seats, each region event
/// and its group)`.
async fn create_events(
    world: &World,
    seats: u32,
) -> anyhow::Result<(u64, Vec<(String, seatfence_core::GroupId)>)> {
    let mut capacity = 0;
    let mut spread_groups = Vec::new();
    let rows = (seats / 100).max(1);
    for (owner, region) in REGIONS.iter().enumerate() {
        let edge = &world.edges[owner];
        let zone = json!({"event_id": zone_event(owner), "name": "bench", "home_region": region,
                          "sections": [{"name": "A", "rows": rows, "seats_per_row": 100}],
                          "hold_ttl_secs": 3600, "max_seats_per_buyer": 10000});
        capacity += create_event(&world.cluster, &world.http, edge, &world.op, &zone)
            .await?
            .0;
        let spread = json!({"event_id": region_event(owner), "name": "bench", "home_region": region,
                            "survival": "region",
                            "sections": [{"name": "A", "rows": 1, "seats_per_row": 100}],
                            "hold_ttl_secs": 3600});
        let (_, group) =
            create_event(&world.cluster, &world.http, edge, &world.op, &spread).await?;
        spread_groups.push((region_event(owner), group));
    }
    Ok((capacity, spread_groups))
}

/// Worker `t`: a buyer in region `t % 3`, through that region's edges in
/// turn, taking every (owner region, kind) in turn until the deadline.
async fn worker(load: Arc<Load>, t: usize) -> Tally {
    let mut tally = Tally::new();
    let buyer = t % REGIONS.len();
    let mut n = 0usize;
    while Instant::now() < load.deadline {
        let owner = n % REGIONS.len();
        let kind = (n / REGIONS.len()) % KINDS.len();
        let edges = &load.edges[buyer];
        let edge = &edges[(n / 12) % edges.len()];
        let token = &load.tokens[(t * 31 + n) % load.tokens.len()];
        n += 1;
        let mut t0 = Instant::now();
        let answer = match KINDS[kind] {
            "hold" => hold(&load, edge, token, owner, &format!("g{t}-{n}")).await,
            "book" => match hold(&load, edge, token, owner, &format!("b{t}-{n}")).await {
                Ok(h) if h.status.as_u16() == 201 => {
                    load.granted.fetch_add(1, Ordering::Relaxed);
                    t0 = Instant::now();
                    let body = json!({"hold_id": h.body["hold_id"]});
                    load.http
                        .post(&format!("{edge}/v1/bookings"), Some(token), None, &body)
                        .await
                }
                // Sold out, or a refusal: nothing to book.
                other => other,
            },
            k => {
                let (event, bound) = match k {
                    "read_owner" => (zone_event(owner), ""),
                    "read_local" => (region_event(owner), ""),
                    _ => (region_event(owner), "&max_stale_ms=0"),
                };
                let url = format!("{edge}/v1/events/{event}/availability?limit=0{bound}");
                load.http.get(&url, Some(token)).await
            }
        };
        let us = t0.elapsed().as_micros() as u64;
        let ok = match &answer {
            Ok(a) if KINDS[kind] == "hold" && a.status.as_u16() == 201 => {
                load.granted.fetch_add(1, Ordering::Relaxed);
                true
            }
            Ok(a) => matches!(a.status.as_u16(), 200 | 201 | 409),
            Err(_) => false,
        };
        if !ok {
            load.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let e = tally
            .entry((buyer, owner, kind))
            .or_insert_with(|| (hist(), 0, 0));
        e.0.saturating_record(us);
        if let Ok(a) = &answer {
            if a.body["served_by"] == "replica" {
                e.1 += 1;
            }
            e.2 = e.2.max(a.body["stale_ms"].as_u64().unwrap_or(0));
        }
    }
    tally
}

/// A single-seat hold of `owner`'s zone event through `edge`.
async fn hold(
    load: &Load,
    edge: &str,
    token: &str,
    owner: usize,
    key: &str,
) -> anyhow::Result<seatfence_testkit::http_client::HttpAnswer> {
    let body = json!({"event_id": zone_event(owner), "quantity": 1});
    load.http
        .post(&format!("{edge}/v1/holds"), Some(token), Some(key), &body)
        .await
}

fn cells(tally: &Tally) -> Vec<Cell> {
    tally
        .iter()
        .map(|((buyer, owner, kind), (h, local, stale))| {
            let read = KINDS[*kind].starts_with("read");
            Cell {
                buyer_region: REGIONS[*buyer].to_string(),
                owner_region: REGIONS[*owner].to_string(),
                kind: KINDS[*kind],
                count: h.len(),
                p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
                p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
                local_share: read.then(|| *local as f64 / h.len().max(1) as f64),
                max_stale_ms: read.then_some(*stale),
            }
        })
        .collect()
}
