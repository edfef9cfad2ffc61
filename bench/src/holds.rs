//! `seatfence bench holds`: one hot event on a local cluster, single-seat
//! holds from many users, through the HTTP edges or straight to the
//! leader over gRPC. Reports holds/s, latency and whether the sale stopped
//! exactly at capacity.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use seatfence_core::inventory::{EventAction, EventCommand, Outcome, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, Response, UserId};
use serde::Serialize;
use serde_json::json;

use crate::raft::bench_dir;
use seatfence_testkit::cluster::LocalCluster;
use seatfence_testkit::http_client::HttpClient;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Http,
    Grpc,
}

#[derive(Debug, Clone)]
pub struct HoldsBenchArgs {
    pub via: Via,
    pub duration: Duration,
    pub seats: u32,
    pub users: u32,
    pub inflight: usize,
}

#[derive(Debug, Serialize)]
pub struct HoldsBenchReport {
    pub via: Via,
    /// Granted holds per second, until sold out (or the end of the run).
    pub holds_per_sec: f64,
    /// Every answered hold request (granted or 409) per second.
    pub requests_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub capacity: u64,
    /// Holds granted to clients.
    pub granted: u64,
    /// Seats held or sold at the end, from the event's records.
    pub sold_or_held: u64,
    pub oversold: bool,
    /// available + held + sold == capacity, and held + sold == granted.
    pub counters_match: bool,
    pub conflicts: u64,
    pub errors: u64,
    pub sold_out_after_secs: Option<f64>,
    pub duration_secs: f64,
    pub inflight: usize,
    pub users: u32,
    pub nodes: usize,
}

impl std::fmt::Display for HoldsBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench holds via {:?}: {:.0} holds/s until sold out ({:.0} requests/s overall), p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms; capacity {}, granted {}, sold_or_held {}, oversold {}, counters_match {}, conflicts {}, errors {}, sold out after {:?} s, {} in flight, {:.1} s",
            r.via, r.holds_per_sec, r.requests_per_sec, r.p50_ms, r.p99_ms, r.p999_ms, r.capacity, r.granted,
            r.sold_or_held, r.oversold, r.counters_match, r.conflicts, r.errors, r.sold_out_after_secs, r.inflight, r.duration_secs
        )
    }
}

struct Shared {
    granted: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
    sold_out_at_ms: AtomicU64,
}

const EVENT: &str = "bench-hot";

/// `(available, held, sold)` of `event` as an edge reports them
/// (`u64::MAX` for a missing count, so a check against it fails).
pub async fn seat_counts(
    http: &HttpClient,
    edge: &str,
    token: &str,
    event: &str,
) -> anyhow::Result<(u64, u64, u64)> {
    let av = http
        .get(
            &format!("{edge}/v1/events/{event}/availability?limit=0"),
            Some(token),
        )
        .await?;
    let num = |k: &str| av.body[k].as_u64().unwrap_or(u64::MAX);
    Ok((num("available"), num("held"), num("sold")))
}

/// Create a benchmark's event through `edge` as `operator` and wait until
/// its group has a leader: `(capacity, group)`.
pub async fn create_event(
    cluster: &LocalCluster,
    http: &HttpClient,
    edge: &str,
    operator: &str,
    body: &serde_json::Value,
) -> anyhow::Result<(u64, GroupId)> {
    let created = http
        .post(&format!("{edge}/v1/events"), Some(operator), None, body)
        .await?;
    if created.status.as_u16() != 201 {
        bail!("create event: {} {}", created.status, created.body);
    }
    let capacity = created.body["capacity"].as_u64().context("capacity")?;
    let group = GroupId(created.body["group_id"].as_u64().context("group_id")?);
    cluster.wait_leader(group, Duration::from_secs(30)).await?;
    Ok((capacity, group))
}

pub async fn run_holds_bench(
    bin: &Path,
    args: &HoldsBenchArgs,
) -> anyhow::Result<HoldsBenchReport> {
    let (_guard, dir) = bench_dir()?;
    // One region of three nodes: the event's group has its 3 voters there,
    // and every node is an edge.
    let cluster = LocalCluster::builder(&dir).regions(1, 3).start(bin)?;
    cluster.wait_ready(Duration::from_secs(30)).await?;
    let secret = cluster.jwt_secret().context("no edge secret")?;
    let edges: Vec<String> = cluster.nodes.iter().filter_map(|n| n.edge_url()).collect();
    let http = HttpClient::default();
    let op = seatfence_api::auth::mint(&secret, "bench-operator", true, 3600);
    // Rows of 200 seats, and the remainder in a second section: exactly
    // `--seats` seats.
    let seats = args.seats.max(1);
    let mut sections = Vec::new();
    if seats >= 200 {
        sections.push(json!({"name": "A", "rows": seats / 200, "seats_per_row": 200}));
    }
    if !seats.is_multiple_of(200) {
        sections.push(json!({"name": "B", "rows": 1, "seats_per_row": seats % 200}));
    }
    let (capacity, group) = create_event(
        &cluster,
        &http,
        &edges[0],
        &op,
        &json!({"event_id": EVENT, "name": "bench", "home_region": "us-east",
                "sections": sections,
                "hold_ttl_secs": 3600, "max_seats_per_hold": 8}),
    )
    .await?;

    let tokens: Arc<Vec<String>> = Arc::new(
        (0..args.users)
            .map(|u| seatfence_api::auth::mint(&secret, &format!("buyer{u}"), false, 3600))
            .collect(),
    );
    let shared = Arc::new(Shared {
        granted: AtomicU64::new(0),
        conflicts: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        sold_out_at_ms: AtomicU64::new(0),
    });
    let client = cluster.client();
    let edges = Arc::new(edges);
    let start = Instant::now();
    let deadline = start + args.duration;
    let mut tasks = Vec::new();
    for t in 0..args.inflight.max(1) {
        let (http, client, edges, tokens, shared) = (
            http.clone(),
            client.clone(),
            edges.clone(),
            tokens.clone(),
            shared.clone(),
        );
        let via = args.via;
        let users = args.users.max(1);
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
            let mut n = 0u64;
            while Instant::now() < deadline {
                let user = ((t as u64 * 7919 + n) % u64::from(users)) as usize;
                let key = format!("b{t}-{n}");
                n += 1;
                let t0 = Instant::now();
                let granted = match via {
                    Via::Http => {
                        let url = format!("{}/v1/holds", edges[user % edges.len()]);
                        match http
                            .post(
                                &url,
                                Some(&tokens[user]),
                                Some(&key),
                                &json!({"event_id": EVENT, "quantity": 1}),
                            )
                            .await
                        {
                            Ok(a) if a.status.as_u16() == 201 => Some(true),
                            Ok(a) if a.status.as_u16() == 409 => Some(false),
                            _ => None,
                        }
                    }
                    Via::Grpc => {
                        let owner = UserId(format!("buyer{user}"));
                        let cmd = Command::Event(EventCommand {
                            event_id: EventId(EVENT.into()),
                            epoch: Epoch(1),
                            now_ms: 0,
                            idempotency: Some((owner.clone(), key)),
                            action: EventAction::Hold {
                                owner,
                                pick: SeatPick::Quantity {
                                    section: None,
                                    quantity: 1,
                                },
                            },
                        });
                        match client.write(group, &cmd).await {
                            Ok(o) => match o.response {
                                Response::Event(r) => match r.outcome {
                                    Outcome::Held(_) => Some(true),
                                    Outcome::SeatsUnavailable { .. } => Some(false),
                                    _ => None,
                                },
                                _ => None,
                            },
                            Err(_) => None,
                        }
                    }
                };
                let us = t0.elapsed().as_micros() as u64;
                match granted {
                    Some(true) => {
                        hist.saturating_record(us);
                        shared.granted.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(false) => {
                        hist.saturating_record(us);
                        let c = shared.conflicts.fetch_add(1, Ordering::Relaxed);
                        if c == 0 {
                            shared
                                .sold_out_at_ms
                                .store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
                        }
                    }
                    None => {
                        shared.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            hist
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    for t in tasks {
        hist.add(t.await?)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (available, held, sold) = seat_counts(&http, &edges[0], &op, EVENT).await?;
    let granted = shared.granted.load(Ordering::Relaxed);
    let sold_or_held = held.saturating_add(sold);
    let sold_out_ms = shared.sold_out_at_ms.load(Ordering::Relaxed);
    let sold_out = (sold_out_ms > 0).then_some(sold_out_ms as f64 / 1000.0);
    let grant_window = sold_out.unwrap_or(elapsed).max(0.001);
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Ok(HoldsBenchReport {
        via: args.via,
        holds_per_sec: granted as f64 / grant_window,
        requests_per_sec: hist.len() as f64 / elapsed,
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        capacity,
        granted,
        sold_or_held,
        oversold: sold_or_held > capacity || granted > capacity,
        counters_match: available.saturating_add(sold_or_held) == capacity
            && sold_or_held == granted,
        conflicts: shared.conflicts.load(Ordering::Relaxed),
        errors: shared.errors.load(Ordering::Relaxed),
        sold_out_after_secs: sold_out,
        duration_secs: elapsed,
        inflight: args.inflight,
        users: args.users,
        nodes: cluster.nodes.len(),
    })
}
