//! `seatfence export`: keeps PostgreSQL tables current from the
//! changefeed (`GET /v1/admin/changes`).
//!
//! ```text
//!  start: connect, take the database's run lock (one exporter per
//!         database), migrate (schema.rs), read the stored cursor
//!  loop:  GET /v1/admin/changes?after=CURSOR&limit=N&wait_secs=10
//!           (an edge that fails: the next one, backing off)
//!         one transaction: the page's rows + the next cursor (sink.rs)
//!         lag = commit time of the row − the change's commit time
//!  410 cursor_expired: stop with the oldest cursor named, never skip
//! ```
//!
//! - `schema.rs`: versioned migrations.
//! - `sink.rs`: the tables' upserts, the change log and the cursor.
//! - `metrics.rs`: lag and counts on `/metrics`, and `--progress` lines.

pub mod metrics;
pub mod schema;
pub mod sink;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;
use tokio_postgres::{Client, NoTls};

use metrics::Metrics;

/// What `seatfence export` was asked to do.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    /// libpq connection string or URL of the sink.
    pub pg: String,
    /// Edges to read from, tried in turn.
    pub edges: Vec<String>,
    /// An operator's bearer token.
    pub token: String,
    /// Changes per page (1–5000).
    pub batch: u32,
    /// Print a line per committed page.
    pub progress: bool,
    /// Serve `/metrics` here (`127.0.0.1:0` picks a port; printed).
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// How long a page request may wait for news at the edge.
const WAIT_SECS: u64 = 10;

/// Run until `stop` resolves or a fault it must not paper over (a cursor
/// past the retention, a refused token, a schema error).
pub async fn run(
    cfg: ExportConfig,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    run_with(cfg, Arc::new(Metrics::default()), stop).await
}

/// [`run`], recording into `metrics` (a benchmark reads them).
pub async fn run_with(
    cfg: ExportConfig,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    if cfg.edges.is_empty() {
        bail!("no edge to read the changefeed from");
    }
    if let Some(addr) = cfg.metrics_addr {
        let bound = metrics::serve(addr, metrics.clone()).await?;
        eprintln!("metrics on http://{bound}/metrics");
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(WAIT_SECS + 20))
        .build()?;
    tokio::pin!(stop);
    let mut edge = 0usize;
    let mut backoff = Backoff::default();
    'connect: loop {
        let mut pg = tokio::select! {
            _ = &mut stop => return Ok(()),
            pg = connect(&cfg.pg) => match pg {
                Ok(pg) => pg,
                Err(e) if e.downcast_ref::<Busy>().is_some() => return Err(e),
                Err(e) => {
                    tracing::warn!("PostgreSQL: {e:#}");
                    backoff.wait().await;
                    continue 'connect;
                }
            },
        };
        let version = schema::migrate(&mut pg)
            .await
            .context("migrate the schema")?;
        let (mut cursor, total) = match sink::load_cursor(&pg).await? {
            Some((c, n)) => (Some(c), n),
            None => (None, 0),
        };
        metrics.set_total(total as u64);
        eprintln!(
            "exporting to PostgreSQL (schema version {version}) from {}, cursor {}",
            cfg.edges.join(", "),
            cursor.as_deref().unwrap_or("(the oldest change kept)")
        );
        loop {
            let page = tokio::select! {
                _ = &mut stop => return Ok(()),
                page = fetch(&http, &cfg, &cfg.edges[edge], cursor.as_deref()) => page,
            };
            let (changes, next) = match page {
                Ok(Fetched::Page { changes, next }) => (changes, next),
                Ok(Fetched::Refused(status)) => bail!(
                    "the edge refused the token ({status}): the changefeed needs an operator token"
                ),
                Ok(Fetched::Expired(body)) => bail!(
                    "the changefeed no longer keeps changes after the stored cursor ({}): nothing was skipped; to resume from the oldest kept, accepting the loss, store its oldest_cursor {} in seatfence_export.cursor",
                    body["error"]["events"],
                    body["error"]["oldest_cursor"]
                ),
                Err(e) => {
                    tracing::warn!(edge = %cfg.edges[edge], "changefeed: {e:#}");
                    edge = (edge + 1) % cfg.edges.len();
                    backoff.wait().await;
                    continue;
                }
            };
            backoff = Backoff::default();
            if changes.is_empty() && cursor.as_deref() == Some(next.as_str()) {
                metrics.caught_up();
                continue;
            }
            if let Err(e) = sink::apply_page(&mut pg, &changes, &next).await {
                // The commit may or may not have happened: start over from
                // the cursor the database holds.
                tracing::warn!("PostgreSQL: {e:#}; reconnecting");
                if pg.is_closed() || is_connection_error(&e) {
                    backoff.wait().await;
                    continue 'connect;
                }
                return Err(e.context("apply a page of changes"));
            }
            let lags = metrics.committed(&changes);
            if cfg.progress && !changes.is_empty() {
                println!(
                    "exported {} changes ({} in all), lag {:.3} s (p50 {:.3} s, p99 {:.3} s)",
                    changes.len(),
                    metrics.total(),
                    lags.last,
                    lags.p50,
                    lags.p99
                );
            }
            cursor = Some(next);
        }
    }
}

/// Connect, and take the database's run lock for this session.
async fn connect(url: &str) -> anyhow::Result<Client> {
    let (pg, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .context("connect")?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::warn!("PostgreSQL connection: {e}");
        }
    });
    let locked: bool = pg
        .query_one("SELECT pg_try_advisory_lock($1)", &[&schema::RUN_LOCK])
        .await?
        .get(0);
    if !locked {
        return Err(Busy.into());
    }
    Ok(pg)
}

/// A lost connection or a server going away (SQLSTATE classes 08, 57P):
/// reconnect. Anything else (a constraint, a type) is a fault to report.
fn is_connection_error(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<tokio_postgres::Error>().is_some_and(|e| {
            e.is_closed()
                || e.as_db_error().is_some_and(|d| {
                    let code = d.code().code();
                    code.starts_with("08") || code.starts_with("57P")
                })
                || std::error::Error::source(e)
                    .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
        })
    })
}

/// Another exporter holds the database's run lock.
#[derive(Debug)]
struct Busy;

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("another seatfence export is writing to this database")
    }
}

impl std::error::Error for Busy {}

enum Fetched {
    Page {
        changes: Vec<Value>,
        next: String,
    },
    /// 410: the error body.
    Expired(Value),
    /// 401 or 403: the token.
    Refused(u16),
}

async fn fetch(
    http: &reqwest::Client,
    cfg: &ExportConfig,
    edge: &str,
    cursor: Option<&str>,
) -> anyhow::Result<Fetched> {
    let mut url = format!(
        "{}/v1/admin/changes?limit={}&wait_secs={WAIT_SECS}",
        edge.trim_end_matches('/'),
        cfg.batch
    );
    if let Some(c) = cursor {
        url.push_str("&after=");
        url.push_str(c);
    }
    let resp = http.get(&url).bearer_auth(&cfg.token).send().await?;
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.context("the edge's answer")?;
    match status {
        200 => {}
        410 => return Ok(Fetched::Expired(body)),
        401 | 403 => return Ok(Fetched::Refused(status)),
        s => bail!("{s}: {body}"),
    }
    let changes = body["changes"]
        .as_array()
        .context("no changes in the answer")?
        .clone();
    let next = body["next_cursor"]
        .as_str()
        .context("no next_cursor in the answer")?
        .to_string();
    Ok(Fetched::Page { changes, next })
}

/// 250 ms, doubling up to 10 s.
#[derive(Default)]
struct Backoff(u32);

impl Backoff {
    async fn wait(&mut self) {
        let ms = (250u64 << self.0.min(6)).min(10_000);
        self.0 += 1;
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}
