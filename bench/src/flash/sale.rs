//! Seatfence for a flash sale: a local region of three node processes (the
//! event's 3-voter group, durability on), every node an HTTP edge, and the
//! mock gateway as its own process; the full launch-day run and its checks.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use seatfence_core::GroupId;
use serde::Serialize;
use serde_json::json;

use super::backend::{http_counts, Backend, Counts, HttpBackend};
use super::{run_workload, Payer, RunStats, Workload};
use crate::world::World;
use seatfence_testkit::{GatewayProc, LocalCluster};

pub const EVENT: &str = "flash-sale";

/// A running seatfence for one event; dropping it stops every process.
pub struct Seatfence {
    pub cluster: LocalCluster,
    pub gateway: Option<GatewayProc>,
    pub http: Arc<HttpBackend>,
    pub group: GroupId,
    pub capacity: u64,
}

impl Seatfence {
    /// Start the processes under `dir` and create the event: seats `S1` …
    /// `S{capacity}`, at most 4 per hold, holds lapsing after `hold_ttl`.
    pub async fn start(
        bin: &Path,
        dir: &Path,
        capacity: u32,
        hold_ttl: Duration,
        with_gateway: bool,
    ) -> anyhow::Result<Seatfence> {
        let gateway = if with_gateway {
            Some(GatewayProc::start(bin, &dir.join("gateway"), 5)?)
        } else {
            None
        };
        let mut builder = LocalCluster::builder(dir).regions(1, 3);
        if let Some(g) = &gateway {
            builder = builder.payments(g.payments_config());
        }
        let World {
            cluster,
            secret,
            edges,
            http,
            op: operator,
        } = World::start(builder, bin, Duration::from_secs(30)).await?;
        let seats: Vec<String> = (0..capacity.max(1))
            .map(super::backend::seat_name)
            .collect();
        let (capacity, group) = crate::holds::create_event(
            &cluster,
            &http,
            &edges[0],
            &operator,
            &json!({"event_id": EVENT, "name": "launch day", "home_region": "us-east",
                    "seats": seats, "max_seats_per_hold": 4,
                    "hold_ttl_secs": hold_ttl.as_secs().max(1)}),
        )
        .await?;
        Ok(Seatfence {
            gateway,
            http: Arc::new(HttpBackend {
                http,
                edges: Arc::new(edges),
                secret,
                operator,
                event: EVENT.to_string(),
                client: None,
            }),
            group,
            capacity,
            cluster,
        })
    }

    /// Raw HTTP to each buyer's edge, or through `seatfence-client`.
    fn backend(&self, client: bool) -> HttpBackend {
        match client {
            true => self.http.through_library(),
            false => (*self.http).clone(),
        }
    }

    /// Books and pays as the buyer who holds the hold: at the buyer's
    /// edge, or through the backend's client (where the hint points).
    fn payer(b: &HttpBackend) -> Payer {
        let b = Arc::new(b.clone());
        Arc::new(move |buyer, hold_id| {
            let b = b.clone();
            Box::pin(async move {
                let token = b.token(buyer);
                match &b.client {
                    Some(c) => pay_with_client(&b, &c.as_user(&token), &hold_id).await,
                    None => crate::payments::pay(&b.http, b.edge(buyer), &token, &hold_id)
                        .await
                        .map(|_| ()),
                }
            })
        })
    }
}

/// Book `hold_id` and pay as the gateway's buyer would, through `client`.
async fn pay_with_client(
    b: &HttpBackend,
    client: &seatfence_client::Client,
    hold_id: &str,
) -> anyhow::Result<()> {
    let booking = client.book(hold_id).await?;
    let approve = booking.body["approve_url"]
        .as_str()
        .context("approve_url")?;
    let r = b.http.post(approve, None, None, &json!({})).await?;
    let redirect = r.body["redirect"].as_str().context("redirect")?;
    let cb = client.payment_callback(redirect).await?;
    anyhow::ensure!(cb.body["status"] == "confirmed", "callback: {}", cb.body);
    Ok(())
}

#[derive(Debug, Serialize)]
pub struct FlashSaleReport {
    pub holds_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub capacity: u64,
    /// Seats sold, from the event's records.
    pub sold: u64,
    /// Seats still held at the end (from the records).
    pub held: u64,
    pub oversold: bool,
    /// available + held + sold == capacity, sold == the seats of the
    /// bookings buyers saw confirmed, captures == confirmed bookings.
    pub counters_match: bool,
    pub sold_out: bool,
    pub sold_out_after_secs: Option<f64>,
    pub captures: u64,
    pub counts: Counts,
    /// `--export`: the exporter's lag and changes.
    pub export: Option<ExportReport>,
    /// Everything the clients measured, with the timeline.
    pub run: RunStats,
}

/// What `seatfence export` did during the sale.
#[derive(Debug, Serialize)]
pub struct ExportReport {
    /// Changes written to PostgreSQL by the end (caught up).
    pub changes: u64,
    /// From a change's commit in the group to its row's commit.
    pub lag_p50_ms: f64,
    pub lag_p99_ms: f64,
    pub lag_max_ms: f64,
    /// Seconds after the sale's end until the exporter had nothing new.
    pub catch_up_secs: f64,
}

impl std::fmt::Display for FlashSaleReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (r, s) = (self, &self.run);
        writeln!(
            f,
            "bench flash-sale: {:.0} holds/s admitted in the rush (until 90% of the seats were handed out, {}), {:.0} until all were ({:.2} s, {:.0} answers/s); hold latency p50 {:.1} ms, p99 {:.1} ms, p999 {:.1} ms, max {:.1} ms",
            r.holds_per_sec,
            s.rush_secs.map(|t| format!("{t:.2} s")).unwrap_or_else(|| "never".into()),
            s.holds_per_sec_to_capacity, s.burst_secs, s.requests_per_sec, r.p50_ms, r.p99_ms, r.p999_ms, s.max_ms
        )?;
        writeln!(
            f,
            "  capacity {}, sold {}, held at the end {}, oversold {}, counters_match {}, sold out {} after {}",
            r.capacity,
            r.sold,
            r.held,
            r.oversold,
            r.counters_match,
            r.sold_out,
            s.sold_out_after_secs
                .map(|t| format!("{t:.2} s"))
                .unwrap_or_else(|| "—".into())
        )?;
        if let Some(e) = &self.export {
            writeln!(
                f,
                "  export: {} changes to PostgreSQL, lag p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, caught up {:.1} s after the sale",
                e.changes, e.lag_p50_ms, e.lag_p99_ms, e.lag_max_ms, e.catch_up_secs
            )?;
        }
        write!(
            f,
            "  {} buyers arrived, {} holds granted ({} seats), {} conflicts, {} turned away, {} bookings confirmed ({} captures), {} booking errors, errors by code {:?}, {} in flight, {:.1} s",
            s.buyers_arrived, s.granted_holds, s.granted_seats, s.conflicts, s.turned_away,
            s.bookings_confirmed, r.captures, s.booking_errors, s.errors, s.inflight, s.duration_secs
        )
    }
}

/// The launch-day run on seatfence: burst, bookings, expiries, late
/// arrivals, until sold out or `w.duration`.
pub async fn run_flash_sale(
    bin: &Path,
    w: Workload,
    export: bool,
    client: bool,
) -> anyhow::Result<FlashSaleReport> {
    let (_guard, dir) = crate::raft::bench_dir()?;
    let sf = Seatfence::start(bin, &dir, w.capacity, w.hold_ttl, true).await?;
    let w = Workload {
        capacity: sf.capacity as u32,
        ..w
    };
    let exporter = match export {
        true => Some(Exporter::start(&dir, &sf).await?),
        false => None,
    };
    let backend = sf.backend(client);
    let payer = Seatfence::payer(&backend);
    let stats = run_workload(Arc::new(Backend::Http(Box::new(backend))), Some(payer), w).await;
    let export = match exporter {
        Some(e) => Some(e.finish().await?),
        None => None,
    };
    let counts = http_counts(&sf.http).await?;
    let gateway = sf.gateway.as_ref().context("gateway")?;
    let g = sf
        .http
        .http
        .get(&format!("{}/_stats", gateway.url), None)
        .await?;
    let captures = g.body["captures"].as_u64().unwrap_or(u64::MAX);
    let capacity = sf.capacity;
    Ok(FlashSaleReport {
        holds_per_sec: stats.holds_per_sec,
        p50_ms: stats.p50_ms,
        p99_ms: stats.p99_ms,
        p999_ms: stats.p999_ms,
        capacity,
        sold: counts.sold,
        held: counts.held,
        oversold: counts.sold > capacity || counts.sold.saturating_add(counts.held) > capacity,
        counters_match: counts
            .available
            .saturating_add(counts.held)
            .saturating_add(counts.sold)
            == capacity
            && counts.sold == stats.confirmed_seats
            && captures == stats.bookings_confirmed,
        sold_out: counts.sold == capacity,
        sold_out_after_secs: stats.sold_out_after_secs,
        captures,
        counts,
        export,
        run: stats,
    })
}

/// `seatfence export` in this process, into a PostgreSQL of its own.
struct Exporter {
    _pg: seatfence_testkit::PgProc,
    metrics: Arc<seatfence_export::metrics::Metrics>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Exporter {
    async fn start(dir: &Path, sf: &Seatfence) -> anyhow::Result<Exporter> {
        let pg = seatfence_testkit::PgProc::start(&dir.join("export"))?;
        let cfg = seatfence_export::ExportConfig {
            pg: pg.url(),
            edges: sf.http.edges.to_vec(),
            token: sf.http.operator.clone(),
            batch: 1000,
            progress: false,
            metrics_addr: None,
        };
        let metrics = Arc::new(seatfence_export::metrics::Metrics::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(seatfence_export::run_with(cfg, metrics.clone(), async {
            let _ = stopped.await;
        }));
        Ok(Exporter {
            _pg: pg,
            metrics,
            stop,
            task,
        })
    }

    /// Wait until the exporter has nothing new (at most a minute), stop it.
    async fn finish(self) -> anyhow::Result<ExportReport> {
        let ended = std::time::Instant::now();
        while !self.metrics.is_caught_up() && ended.elapsed() < Duration::from_secs(60) {
            if self.task.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let catch_up_secs = ended.elapsed().as_secs_f64();
        let _ = self.stop.send(());
        self.task.await.context("the exporter")??;
        let mut lags = self.metrics.lags();
        lags.sort_by(f64::total_cmp);
        let at = |q: f64| {
            lags.get(((lags.len().max(1) - 1) as f64 * q).round() as usize)
                .copied()
                .unwrap_or(0.0)
                * 1000.0
        };
        Ok(ExportReport {
            changes: self.metrics.total(),
            lag_p50_ms: at(0.5),
            lag_p99_ms: at(0.99),
            lag_max_ms: at(1.0),
            catch_up_secs,
        })
    }
}
