//! `seatfence bench payments`: buyers on a local cluster with the mock
//! gateway, each going hold → booking → approve at the gateway → callback
//! (execute intent, capture, confirm). Reports confirmed bookings/s, the
//! latency of each step, and whether seats sold, captures and confirmed
//! bookings agree exactly.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::world::World;
use seatfence_testkit::progress::Ticker;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{json, Value};

use crate::raft::bench_dir;
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::{GatewayProc, LocalCluster};
use tokio::task::JoinHandle;

#[derive(Debug, Clone)]
pub struct PaymentsBenchArgs {
    pub duration: Duration,
    pub inflight: usize,
    pub seats: u32,
    /// Buyers go through `seatfence-client` (every edge, leader hints
    /// followed) instead of raw HTTP to one edge each.
    pub client: bool,
}

#[derive(Debug, Serialize)]
pub struct PaymentsBenchReport {
    pub bookings_per_sec: f64,
    /// Latency of each step (ms): POST /v1/holds, POST /v1/bookings (gateway
    /// create + commit), the callback (intent, capture, confirm).
    pub hold_p50_ms: f64,
    pub hold_p99_ms: f64,
    pub book_p50_ms: f64,
    pub book_p99_ms: f64,
    pub callback_p50_ms: f64,
    pub callback_p99_ms: f64,
    /// Hold to confirmed, one buyer.
    pub total_p50_ms: f64,
    pub total_p99_ms: f64,
    pub confirmed: u64,
    pub sold: u64,
    pub captures: u64,
    pub capacity: u64,
    pub oversold: bool,
    /// sold == confirmed == captures and available + held + sold == capacity.
    pub counters_match: bool,
    pub errors: u64,
    pub duration_secs: f64,
    pub inflight: usize,
    /// Confirmation emails in the nodes' mail dirs when the run ended (the
    /// outbox's work done within the run; `confirmed - emails` is its lag).
    pub emails: u64,
    /// Whether the buyers went through `seatfence-client`.
    pub client: bool,
}

impl std::fmt::Display for PaymentsBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        write!(
            f,
            "bench payments: {:.0} confirmed bookings/s; p50/p99 ms: hold {:.1}/{:.1}, booking {:.1}/{:.1}, callback {:.1}/{:.1}, hold→confirmed {:.1}/{:.1}; confirmed {}, sold {}, captures {}, capacity {}, oversold {}, counters_match {}, errors {}, {} in flight, {:.1} s, {} emails sent",
            r.bookings_per_sec, r.hold_p50_ms, r.hold_p99_ms, r.book_p50_ms, r.book_p99_ms, r.callback_p50_ms, r.callback_p99_ms,
            r.total_p50_ms, r.total_p99_ms, r.confirmed, r.sold, r.captures, r.capacity, r.oversold, r.counters_match, r.errors, r.inflight, r.duration_secs, r.emails
        )
    }
}

const EVENT: &str = "bench-pay";

struct Hists {
    hold: Histogram<u64>,
    book: Histogram<u64>,
    callback: Histogram<u64>,
    total: Histogram<u64>,
}

impl Hists {
    fn new() -> Hists {
        let h = || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
        Hists {
            hold: h(),
            book: h(),
            callback: h(),
            total: h(),
        }
    }

    fn add(&mut self, o: &Hists) -> anyhow::Result<()> {
        self.hold.add(&o.hold)?;
        self.book.add(&o.book)?;
        self.callback.add(&o.callback)?;
        self.total.add(&o.total)?;
        Ok(())
    }
}

/// Book a granted hold and pay for it as its buyer: `POST /v1/bookings`,
/// approve at the mock gateway, follow the callback redirect until the
/// booking is confirmed. Returns how long the booking call and the callback
/// took.
pub async fn pay(
    http: &HttpClient,
    edge: &str,
    token: &str,
    hold_id: &str,
) -> anyhow::Result<(Duration, Duration)> {
    let t1 = Instant::now();
    let booking = loop {
        let b = http
            .post(
                &format!("{edge}/v1/bookings"),
                Some(token),
                None,
                &json!({"hold_id": hold_id}),
            )
            .await?;
        match b.status.as_u16() {
            201 => break b.body,
            // The fleet's first gateway token is still being granted.
            503 if b.code() == Some("gateway_unavailable") => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            s => bail!("booking: {s} {}", b.body),
        }
    };
    let book = t1.elapsed();
    let approve = booking["approve_url"].as_str().context("approve_url")?;
    let r = http.post(approve, None, None, &json!({})).await?;
    let redirect = r.body["redirect"].as_str().context("redirect")?.to_string();
    let t2 = Instant::now();
    let cb = http.get(&redirect, None).await?;
    if cb.body["status"] != "confirmed" {
        bail!("callback: {} {}", cb.status, cb.body);
    }
    Ok((book, t2.elapsed()))
}

/// [`buy`] through `seatfence-client`: the hold, the booking and the
/// callback each where the leader hint points.
async fn buy_with_client(
    http: &HttpClient,
    client: &seatfence_client::Client,
    h: &mut Hists,
) -> anyhow::Result<bool> {
    use seatfence_client::{ClientError, ErrorCode, HoldRequest};
    let t0 = Instant::now();
    let hold = match client.hold(&HoldRequest::quantity(EVENT, None, 1)).await {
        Ok(a) => a,
        Err(ClientError::Api {
            code: ErrorCode::SeatsUnavailable,
            ..
        }) => return Ok(false),
        Err(e) => bail!("hold: {e}"),
    };
    h.hold.saturating_record(t0.elapsed().as_micros() as u64);
    let hold_id = hold.body["hold_id"].as_str().context("hold_id")?;
    let t1 = Instant::now();
    // The client retries `gateway_unavailable` (the fleet's first gateway
    // token still being granted) within its deadline.
    let booking = client.book(hold_id).await.context("booking")?;
    h.book.saturating_record(t1.elapsed().as_micros() as u64);
    let approve = booking.body["approve_url"]
        .as_str()
        .context("approve_url")?;
    let r = http.post(approve, None, None, &json!({})).await?;
    let redirect = r.body["redirect"].as_str().context("redirect")?;
    let t2 = Instant::now();
    let cb = client
        .payment_callback(redirect)
        .await
        .context("callback")?;
    if cb.body["status"] != "confirmed" {
        bail!("callback: {} {}", cb.status, cb.body);
    }
    h.callback
        .saturating_record(t2.elapsed().as_micros() as u64);
    h.total.saturating_record(t0.elapsed().as_micros() as u64);
    Ok(true)
}

/// One buyer's purchase; `Ok(false)` when the event is sold out.
async fn buy(http: &HttpClient, edge: &str, token: &str, h: &mut Hists) -> anyhow::Result<bool> {
    let t0 = Instant::now();
    let hold = http
        .post(
            &format!("{edge}/v1/holds"),
            Some(token),
            None,
            &json!({"event_id": EVENT, "quantity": 1}),
        )
        .await?;
    match hold.status.as_u16() {
        201 => {}
        409 => return Ok(false),
        s => bail!("hold: {s} {}", hold.body),
    }
    h.hold.saturating_record(t0.elapsed().as_micros() as u64);
    let hold_id = hold.body["hold_id"].as_str().context("hold_id")?;
    let (book, callback) = pay(http, edge, token, hold_id).await?;
    h.book.saturating_record(book.as_micros() as u64);
    h.callback.saturating_record(callback.as_micros() as u64);
    h.total.saturating_record(t0.elapsed().as_micros() as u64);
    Ok(true)
}

/// How the buyers fared, counted as they go.
#[derive(Default)]
struct Counts {
    confirmed: AtomicU64,
    errors: AtomicU64,
}

/// What the run left, read once every buyer stopped.
struct EndState {
    /// Confirmation emails delivered (see `count_emails`).
    emails: u64,
    available: u64,
    held: u64,
    sold: u64,
    /// The gateway's captures (`u64::MAX` when its stats do not say).
    captures: u64,
}

pub async fn run_payments_bench(
    bin: &Path,
    args: &PaymentsBenchArgs,
) -> anyhow::Result<PaymentsBenchReport> {
    let (_guard, dir) = bench_dir()?;
    let gateway = GatewayProc::start(bin, &dir.join("gateway"), 5)?;
    let builder = LocalCluster::builder(&dir)
        .regions(1, 3)
        .payments(gateway.payments_config());
    // `_cluster` keeps the nodes running until the report is made.
    let World {
        cluster: _cluster,
        secret,
        edges,
        http,
        op,
    } = World::start(builder, bin, Duration::from_secs(30)).await?;
    let capacity = create_event(&http, &edges[0], &op, args.seats).await?;
    let counts = Arc::new(Counts::default());
    let _progress = Ticker::start("bench payments", args.duration.as_secs(), {
        let counts = counts.clone();
        move || format!("confirmed {}", counts.confirmed.load(Ordering::Relaxed))
    });
    let start = Instant::now();
    let client = args.client.then(|| {
        let list = edges.iter().map(|u| ("us-east".to_string(), u.clone()));
        seatfence_client::Client::with_edges(
            seatfence_client::edges::Edges::new("us-east", list),
            "",
        )
    });
    let tasks = spawn_buyers(
        &http,
        &edges,
        &secret,
        args.inflight.max(1),
        start + args.duration,
        &counts,
        client.as_ref(),
    );
    let mut h = Hists::new();
    for t in tasks {
        h.add(&t.await?)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let end = read_end_state(&dir, &http, &edges[0], &op, &gateway).await?;
    Ok(report(args, &h, elapsed, &counts, capacity, end))
}

/// Create the bench's event, with `seats` seats (at least one), through
/// `edge` as the operator `op`; its capacity.
async fn create_event(http: &HttpClient, edge: &str, op: &str, seats: u32) -> anyhow::Result<u64> {
    let seats: Vec<String> = (1..=seats.max(1)).map(|i| format!("S{i}")).collect();
    let created = http
        .post(
            &format!("{edge}/v1/events"),
            Some(op),
            None,
            &json!({"event_id": EVENT, "name": "bench", "home_region": "us-east",
                    "seats": seats, "hold_ttl_secs": 600}),
        )
        .await?;
    if created.status.as_u16() != 201 {
        bail!("create event: {} {}", created.status, created.body);
    }
    created.body["capacity"].as_u64().context("capacity")
}

/// Start `inflight` buyer loops (`buy_until`) that run until `deadline`,
/// spread over `edges`.
fn spawn_buyers(
    http: &HttpClient,
    edges: &[String],
    secret: &str,
    inflight: usize,
    deadline: Instant,
    counts: &Arc<Counts>,
    client: Option<&seatfence_client::Client>,
) -> Vec<JoinHandle<Hists>> {
    (0..inflight)
        .map(|t| {
            tokio::spawn(buy_until(
                http.clone(),
                edges[t % edges.len()].clone(),
                (secret.to_owned(), client.cloned()),
                t,
                deadline,
                counts.clone(),
            ))
        })
        .collect()
}

/// Buyer loop `t`: purchases at `edge` until `deadline` or the event sells
/// out, counted in `counts`; the latencies of its purchases.
async fn buy_until(
    http: HttpClient,
    edge: String,
    (secret, client): (String, Option<seatfence_client::Client>),
    t: usize,
    deadline: Instant,
    counts: Arc<Counts>,
) -> Hists {
    let mut h = Hists::new();
    let mut n = 0u64;
    while Instant::now() < deadline {
        // A new buyer each time (one buyer is rate-limited per second).
        n += 1;
        let token = seatfence_api::auth::mint(&secret, &format!("buyer{t}-{n}"), false, 3600);
        let bought = match &client {
            Some(c) => buy_with_client(&http, &c.as_user(&token), &mut h).await,
            None => buy(&http, &edge, &token, &mut h).await,
        };
        match bought {
            Ok(true) => {
                counts.confirmed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => break,
            Err(e) => {
                if counts.errors.fetch_add(1, Ordering::Relaxed) < 5 {
                    eprintln!("bench payments: {e:#}");
                }
            }
        }
    }
    h
}

/// Read what the run left: the emails delivered under `dir`, the event's
/// seats (through `edge`, as the operator `op`) and the gateway's captures.
async fn read_end_state(
    dir: &Path,
    http: &HttpClient,
    edge: &str,
    op: &str,
    gateway: &GatewayProc,
) -> anyhow::Result<EndState> {
    let emails = count_emails(dir);
    let (available, held, sold) = crate::holds::seat_counts(http, edge, op, EVENT).await?;
    let stats: Value = http
        .get(&format!("{}/_stats", gateway.url), None)
        .await?
        .body;
    Ok(EndState {
        emails,
        available,
        held,
        sold,
        captures: stats["captures"].as_u64().unwrap_or(u64::MAX),
    })
}

/// The report of a run of `elapsed` seconds: each step's latency (`h`), and
/// whether the confirmed bookings (`counts`), the seats sold of `capacity`
/// and the captures (`end`) agree.
fn report(
    args: &PaymentsBenchArgs,
    h: &Hists,
    elapsed: f64,
    counts: &Counts,
    capacity: u64,
    end: EndState,
) -> PaymentsBenchReport {
    let EndState {
        emails,
        available,
        held,
        sold,
        captures,
    } = end;
    let confirmed = counts.confirmed.load(Ordering::Relaxed);
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    PaymentsBenchReport {
        bookings_per_sec: confirmed as f64 / elapsed,
        hold_p50_ms: ms(&h.hold, 0.5),
        hold_p99_ms: ms(&h.hold, 0.99),
        book_p50_ms: ms(&h.book, 0.5),
        book_p99_ms: ms(&h.book, 0.99),
        callback_p50_ms: ms(&h.callback, 0.5),
        callback_p99_ms: ms(&h.callback, 0.99),
        total_p50_ms: ms(&h.total, 0.5),
        total_p99_ms: ms(&h.total, 0.99),
        confirmed,
        sold,
        captures,
        capacity,
        oversold: sold.saturating_add(held) > capacity,
        counters_match: sold == confirmed
            && captures == confirmed
            && available.saturating_add(held).saturating_add(sold) == capacity,
        errors: counts.errors.load(Ordering::Relaxed),
        duration_secs: elapsed,
        inflight: args.inflight,
        emails,
        client: args.client,
    }
}

/// `.eml` files under `dir` (every node's mail dir; temporary files, whose
/// names start with a dot, are not delivered yet).
fn count_emails(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                count_emails(&path)
            } else {
                u64::from(name.ends_with(".eml") && !name.starts_with('.'))
            }
        })
        .sum()
}
