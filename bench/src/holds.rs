//! `seatfence bench holds`: hot events on a local cluster (one by default,
//! `--events N` spreads the same buyers and connections over N), single-seat
//! holds from many users, through the HTTP edges or straight to the
//! leaders over gRPC. Reports holds/s, latency and whether every sale
//! stopped exactly at capacity.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::world::World;
use seatfence_testkit::progress::Ticker;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use seatfence_core::inventory::{EventAction, EventCommand, Outcome, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, Response, UserId};
use seatfence_raft::ClusterClient;
use serde::Serialize;
use serde_json::json;

use crate::raft::bench_dir;
use seatfence_testkit::cluster::LocalCluster;
use seatfence_testkit::http_client::HttpClient;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// Raw HTTP/1.1, each user to one edge (in turn): two of three holds
    /// take the extra hop to the leader.
    Http,
    /// [`Via::Http`] to edges serving HTTPS (`[edge.tls]`, certificates
    /// of the cluster's CA), each connection kept alive.
    Https,
    Grpc,
    /// `seatfence-client`, following the leader hint.
    Client,
    /// `seatfence-client` with hints off (each user to one edge, in turn).
    #[serde(rename = "client-no-hints")]
    ClientNoHints,
}

#[derive(Debug, Clone)]
pub struct HoldsBenchArgs {
    pub via: Via,
    pub duration: Duration,
    pub seats: u32,
    pub users: u32,
    pub inflight: usize,
    /// Events the load is spread over (at least one); `seats` is split
    /// evenly between them.
    pub events: u32,
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
    /// Events the load was spread over.
    pub events: u32,
    /// Of the commands the edges ran during the load, the share sent on
    /// to another node's leader (one more gRPC hop), from the nodes'
    /// `seatfence_commands_total{hop}`; `None` over gRPC.
    pub extra_hop_share: Option<f64>,
    /// The node processes' CPU (the edges and the group, not the load
    /// generator) per granted hold, in µs.
    pub node_cpu_us_per_granted: f64,
}

impl std::fmt::Display for HoldsBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench holds via {:?} over {} event(s): {:.0} holds/s until sold out ({:.0} requests/s overall), p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms; capacity {}, granted {}, sold_or_held {}, oversold {}, counters_match {}, conflicts {}, errors {}, sold out after {:?} s, {} in flight, {:.1} s",
            r.via, r.events, r.holds_per_sec, r.requests_per_sec, r.p50_ms, r.p99_ms, r.p999_ms, r.capacity, r.granted,
            r.sold_or_held, r.oversold, r.counters_match, r.conflicts, r.errors, r.sold_out_after_secs, r.inflight, r.duration_secs
        )?;
        write!(
            f,
            "; nodes' CPU {:.0} µs per granted hold",
            r.node_cpu_us_per_granted
        )?;
        if let Some(share) = r.extra_hop_share {
            write!(f, "; {:.1}% of commands took the extra hop", share * 100.0)?;
        }
        Ok(())
    }
}

const EVENT: &str = "bench-hot";

/// The id of event `i` of `n`: `bench-hot` alone, `bench-hot-<i>` of many.
fn event_id(i: u32, n: u32) -> String {
    if n <= 1 {
        EVENT.to_string()
    } else {
        format!("{EVENT}-{i}")
    }
}

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

/// Run the benchmark: a one-region cluster with the event, `args.inflight`
/// workers holding seats for `args.duration`, then the report.
pub async fn run_holds_bench(
    bin: &Path,
    args: &HoldsBenchArgs,
) -> anyhow::Result<HoldsBenchReport> {
    let (_guard, dir) = bench_dir()?;
    let s = setup(
        bin,
        &dir,
        args.seats,
        args.events.max(1),
        args.via == Via::Https,
    )
    .await?;
    let hops_before = hops(&s).await;
    let cpu_before = crate::raft::nodes_cpu_secs(&s.cluster);
    let load = Arc::new(Shared::new(&s, args));
    let _progress = Ticker::start("bench holds", args.duration.as_secs(), {
        let load = load.clone();
        move || format!("granted {}", load.granted.load(Ordering::Relaxed))
    });
    let tasks: Vec<_> = (0..args.inflight.max(1))
        .map(|t| tokio::spawn(hold_worker(load.clone(), t)))
        .collect();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    for t in tasks {
        hist.add(t.await?)?;
    }
    let elapsed = load.start.elapsed().as_secs_f64();
    let node_cpu = crate::raft::nodes_cpu_secs(&s.cluster) - cpu_before;
    let mut report = build_report(&s, &load, &hist, elapsed, args).await?;
    report.node_cpu_us_per_granted = 1e6 * node_cpu / (report.granted.max(1) as f64);
    if args.via != Via::Grpc {
        let (local, forwarded) = hops(&s).await;
        let (local, forwarded) = (local - hops_before.0, forwarded - hops_before.1);
        report.extra_hop_share = Some(forwarded / (local + forwarded).max(1.0));
    }
    Ok(report)
}

/// The benchmark's cluster, ready, with its event created and led.
struct Setup {
    cluster: LocalCluster,
    secret: String,
    /// Every node's edge, in node order.
    edges: Vec<String>,
    http: HttpClient,
    /// An operator's token.
    op: String,
    /// Every event's id and group, in order.
    events: Vec<(String, GroupId)>,
    /// The events' seats, together.
    capacity: u64,
}

/// Start the cluster in `dir` and create `events` events sharing `seats`
/// seats evenly (at least one each).
async fn setup(
    bin: &Path,
    dir: &Path,
    seats: u32,
    events: u32,
    https: bool,
) -> anyhow::Result<Setup> {
    // One region of three nodes: the event's group has its 3 voters there,
    // and every node is an edge (serving HTTPS when asked).
    let builder = LocalCluster::builder(dir).regions(1, 3).edge_tls(https);
    let World {
        cluster,
        secret,
        edges,
        http,
        op,
    } = World::start(builder, bin, Duration::from_secs(30)).await?;
    let each = (seats / events).max(1);
    // Created 16 at a time through every edge in turn: a thousand events
    // one by one would take longer than the run.
    let created: Vec<(String, u64, GroupId)> = futures::stream::iter(0..events)
        .map(|i| {
            let (cluster, http, op) = (&cluster, &http, &op);
            let edge = &edges[i as usize % edges.len()];
            async move {
                let id = event_id(i, events);
                let body = json!({"event_id": id, "name": "bench", "home_region": "us-east",
                                  "sections": sections(each),
                                  "hold_ttl_secs": 3600, "max_seats_per_hold": 8});
                let (seats, group) = create_event(cluster, http, edge, op, &body).await?;
                anyhow::Ok((id, seats, group))
            }
        })
        .buffered(16)
        .try_collect()
        .await?;
    let capacity = created.iter().map(|(_, seats, _)| seats).sum();
    let created = created.into_iter().map(|(id, _, g)| (id, g)).collect();
    Ok(Setup {
        cluster,
        secret,
        edges,
        http,
        op,
        events: created,
        capacity,
    })
}

/// Rows of 200 seats, and the remainder in a second section: exactly
/// `seats` seats.
fn sections(seats: u32) -> Vec<serde_json::Value> {
    let mut sections = Vec::new();
    if seats >= 200 {
        sections.push(json!({"name": "A", "rows": seats / 200, "seats_per_row": 200}));
    }
    if !seats.is_multiple_of(200) {
        sections.push(json!({"name": "B", "rows": 1, "seats_per_row": seats % 200}));
    }
    sections
}

/// The load, shared by its workers: how and where holds go, the users'
/// tokens, and what the workers counted.
struct Shared {
    via: Via,
    http: HttpClient,
    /// For holds over gRPC.
    client: ClusterClient,
    /// For holds through `seatfence-client`: one per user.
    clients: Vec<seatfence_client::Client>,
    edges: Vec<String>,
    /// The events' ids and groups (holds over gRPC go to a group's leader).
    events: Vec<(String, GroupId)>,
    /// A token per user.
    tokens: Vec<String>,
    /// Users the workers hold for, at least one.
    users: u32,
    /// When the load started, and when it stops.
    start: Instant,
    deadline: Instant,
    granted: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
    /// When the first hold was refused (ms after the start; 0: none was).
    sold_out_at_ms: AtomicU64,
}

impl Shared {
    /// The load of `args` on the cluster and event of `s`; it starts now.
    fn new(s: &Setup, args: &HoldsBenchArgs) -> Shared {
        let tokens: Vec<String> = (0..args.users)
            .map(|u| seatfence_api::auth::mint(&s.secret, &format!("buyer{u}"), false, 3600))
            .collect();
        let client = s.cluster.client();
        // A client per edge to start from (users in turn, like raw HTTP),
        // copied per user: hints are shared by a starting edge's users.
        let bases: Vec<seatfence_client::Client> = (0..s.edges.len())
            .map(|i| {
                let mut list: Vec<(String, String)> = s
                    .edges
                    .iter()
                    .map(|u| ("us-east".to_string(), u.clone()))
                    .collect();
                list.rotate_left(i);
                let edges = seatfence_client::edges::Edges::new("us-east", list);
                seatfence_client::Client::with_edges(edges, "")
                    .follow_hints(args.via == Via::Client)
            })
            .collect();
        let clients = match args.via {
            Via::Client | Via::ClientNoHints => tokens
                .iter()
                .enumerate()
                .map(|(u, t)| bases[u % bases.len()].as_user(t))
                .collect(),
            Via::Http | Via::Https | Via::Grpc => Vec::new(),
        };
        let start = Instant::now();
        Shared {
            via: args.via,
            http: s.http.clone(),
            client,
            clients,
            edges: s.edges.clone(),
            events: s.events.clone(),
            tokens,
            users: args.users.max(1),
            start,
            deadline: start + args.duration,
            granted: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            sold_out_at_ms: AtomicU64::new(0),
        }
    }
}

/// Worker `t` of the load: single-seat holds, each for the next of its
/// users in the next event (round robin, so every event gets an equal
/// share), until the deadline. Counts every outcome; returns the latency
/// of the answered requests (granted or refused).
async fn hold_worker(load: Arc<Shared>, t: usize) -> Histogram<u64> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let mut n = 0u64;
    while Instant::now() < load.deadline {
        let user = ((t as u64 * 7919 + n) % u64::from(load.users)) as usize;
        let event = &load.events[((t as u64 + n) % load.events.len() as u64) as usize];
        let key = format!("b{t}-{n}");
        n += 1;
        let t0 = Instant::now();
        let granted = match load.via {
            Via::Http | Via::Https => hold_http(&load, user, &event.0, &key).await,
            Via::Grpc => hold_grpc(&load, user, event, key).await,
            Via::Client | Via::ClientNoHints => hold_client(&load, user, &event.0, &key).await,
        };
        let us = t0.elapsed().as_micros() as u64;
        match granted {
            Some(true) => {
                hist.saturating_record(us);
                load.granted.fetch_add(1, Ordering::Relaxed);
            }
            Some(false) => {
                hist.saturating_record(us);
                let c = load.conflicts.fetch_add(1, Ordering::Relaxed);
                if c == 0 {
                    let ms = load.start.elapsed().as_millis() as u64;
                    load.sold_out_at_ms.store(ms, Ordering::Relaxed);
                }
            }
            None => {
                load.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    hist
}

/// One single-seat hold for `user` in `event` through an edge:
/// `Some(true)` granted, `Some(false)` refused (409), `None` any other
/// outcome.
async fn hold_http(load: &Shared, user: usize, event: &str, key: &str) -> Option<bool> {
    let url = format!("{}/v1/holds", load.edges[user % load.edges.len()]);
    let answer = load
        .http
        .post(
            &url,
            Some(&load.tokens[user]),
            Some(key),
            &json!({"event_id": event, "quantity": 1}),
        )
        .await;
    match answer {
        Ok(a) if a.status.as_u16() == 201 => Some(true),
        Ok(a) if a.status.as_u16() == 409 => Some(false),
        _ => None,
    }
}

/// [`hold_http`] through `seatfence-client` (its retries included).
async fn hold_client(load: &Shared, user: usize, event: &str, key: &str) -> Option<bool> {
    use seatfence_client::{ClientError, HoldRequest};
    let req = HoldRequest::quantity(event, None, 1).with_key(key);
    match load.clients[user].hold(&req).await {
        Ok(a) if a.status == 201 => Some(true),
        Err(ClientError::Api { status: 409, .. }) => Some(false),
        _ => None,
    }
}

/// The edges' commands so far, summed over the nodes: (run on a group led
/// there, sent on to another node's leader).
async fn hops(s: &Setup) -> (f64, f64) {
    let (mut local, mut forwarded) = (0.0, 0.0);
    for edge in &s.edges {
        let Ok(m) = s.http.get(&format!("{edge}/metrics"), None).await else {
            continue;
        };
        let text = m.body.as_str().unwrap_or_default();
        for line in text.lines() {
            let value = |prefix: &str| {
                line.strip_prefix(prefix)
                    .and_then(|v| v.trim().parse::<f64>().ok())
            };
            local += value("seatfence_commands_total{hop=\"local\"}").unwrap_or(0.0);
            forwarded += value("seatfence_commands_total{hop=\"forwarded\"}").unwrap_or(0.0);
        }
    }
    (local, forwarded)
}

/// One single-seat hold for `user` in `(event, group)` proposed straight
/// to the group's leader over gRPC: `Some(true)` held, `Some(false)` seats
/// unavailable, `None` any other outcome.
async fn hold_grpc(
    load: &Shared,
    user: usize,
    (event, group): &(String, GroupId),
    key: String,
) -> Option<bool> {
    let owner = UserId(format!("buyer{user}"));
    let cmd = Command::event(EventCommand {
        event_id: EventId(event.clone()),
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
    match load.client.write(*group, &cmd).await {
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

/// The report, `elapsed` seconds after the load's start: rates, latency
/// (`hist`), and whether the sale stopped exactly at capacity.
async fn build_report(
    s: &Setup,
    load: &Shared,
    hist: &Histogram<u64>,
    elapsed: f64,
    args: &HoldsBenchArgs,
) -> anyhow::Result<HoldsBenchReport> {
    let (mut available, mut held, mut sold) = (0u64, 0u64, 0u64);
    for (event, _) in &s.events {
        let (a, h, d) = seat_counts(&s.http, &s.edges[0], &s.op, event).await?;
        available = available.saturating_add(a);
        held = held.saturating_add(h);
        sold = sold.saturating_add(d);
    }
    let granted = load.granted.load(Ordering::Relaxed);
    let sold_or_held = held.saturating_add(sold);
    let sold_out_ms = load.sold_out_at_ms.load(Ordering::Relaxed);
    let sold_out = (sold_out_ms > 0).then_some(sold_out_ms as f64 / 1000.0);
    let grant_window = sold_out.unwrap_or(elapsed).max(0.001);
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    let capacity = s.capacity;
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
        conflicts: load.conflicts.load(Ordering::Relaxed),
        errors: load.errors.load(Ordering::Relaxed),
        sold_out_after_secs: sold_out,
        duration_secs: elapsed,
        inflight: args.inflight,
        users: args.users,
        nodes: s.cluster.nodes.len(),
        events: s.events.len() as u32,
        extra_hop_share: None,
        node_cpu_us_per_granted: 0.0,
    })
}
