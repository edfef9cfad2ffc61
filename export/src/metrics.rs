//! The exporter's figures: changes exported, and the lag from a change's
//! commit in its event's group to its row's commit in PostgreSQL, served
//! as Prometheus text on `/metrics`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// Lags kept for the quantiles: the most recent this many changes.
const WINDOW: usize = 1_000_000;

#[derive(Default)]
pub struct Metrics {
    total: AtomicU64,
    pages: AtomicU64,
    /// Seconds, newest last.
    lags: Mutex<VecDeque<f64>>,
    /// Unix ms of the last committed page, or of the last empty answer
    /// (caught up).
    last_ms: AtomicU64,
    /// The last answer had nothing new.
    idle: std::sync::atomic::AtomicBool,
}

/// The lag of a page's last change and the window's quantiles, in seconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lags {
    pub last: f64,
    pub p50: f64,
    pub p99: f64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A change's commit time (its `at`), in Unix ms.
fn at_ms(c: &Value) -> Option<u64> {
    let at = chrono::DateTime::parse_from_rfc3339(c["at"].as_str()?).ok()?;
    u64::try_from(at.timestamp_millis()).ok()
}

impl Metrics {
    pub fn set_total(&self, n: u64) {
        self.total.store(n, Relaxed);
    }

    pub fn total(&self) -> u64 {
        self.total.load(Relaxed)
    }

    pub fn caught_up(&self) {
        self.last_ms.store(now_ms(), Relaxed);
        self.idle.store(true, Relaxed);
    }

    /// Whether the last answer had nothing new.
    pub fn is_caught_up(&self) -> bool {
        self.idle.load(Relaxed)
    }

    /// A page committed now: record each change's lag.
    pub fn committed(&self, changes: &[Value]) -> Lags {
        let now = now_ms();
        self.total.fetch_add(changes.len() as u64, Relaxed);
        self.pages.fetch_add(1, Relaxed);
        self.last_ms.store(now, Relaxed);
        self.idle.store(false, Relaxed);
        let mut lags = self.lags.lock().expect("lags");
        let mut last = 0.0;
        for c in changes {
            if let Some(at) = at_ms(c) {
                last = now.saturating_sub(at) as f64 / 1000.0;
                lags.push_back(last);
            }
        }
        while lags.len() > WINDOW {
            lags.pop_front();
        }
        let (p50, p99) = quantiles(&lags);
        Lags { last, p50, p99 }
    }

    /// The lags recorded (oldest first), for a benchmark's own quantiles.
    pub fn lags(&self) -> Vec<f64> {
        self.lags.lock().expect("lags").iter().copied().collect()
    }

    pub fn render(&self) -> String {
        let (p50, p99) = quantiles(&self.lags.lock().expect("lags"));
        format!(
            "# HELP seatfence_export_changes_total Changes written to PostgreSQL.\n\
             # TYPE seatfence_export_changes_total counter\n\
             seatfence_export_changes_total {}\n\
             # HELP seatfence_export_pages_total Pages committed (one transaction each, with the cursor).\n\
             # TYPE seatfence_export_pages_total counter\n\
             seatfence_export_pages_total {}\n\
             # HELP seatfence_export_lag_seconds From a change's commit in its group to its row's commit, over the last {WINDOW} changes.\n\
             # TYPE seatfence_export_lag_seconds summary\n\
             seatfence_export_lag_seconds{{quantile=\"0.5\"}} {p50}\n\
             seatfence_export_lag_seconds{{quantile=\"0.99\"}} {p99}\n\
             # HELP seatfence_export_last_commit_seconds Unix time of the last page committed or of the last answer with nothing new.\n\
             # TYPE seatfence_export_last_commit_seconds gauge\n\
             seatfence_export_last_commit_seconds {}\n",
            self.total(),
            self.pages.load(Relaxed),
            self.last_ms.load(Relaxed) as f64 / 1000.0,
        )
    }
}

fn quantiles(lags: &VecDeque<f64>) -> (f64, f64) {
    if lags.is_empty() {
        return (0.0, 0.0);
    }
    let mut v: Vec<f64> = lags.iter().copied().collect();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Serve `/metrics` on `addr`; returns the bound address.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let m = metrics.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |_req| {
                    let body = m.render();
                    async move {
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(bound)
}
