//! `seatfence bench compare`: the flash sale's hold workload, same seed,
//! same concurrency, same seat-choice rule, against seatfence (3-voter
//! group, HTTP edges; optionally straight over gRPC), PostgreSQL and etcd,
//! one after the other on the same machine. `bench/compare.sh` installs and
//! starts PostgreSQL and a 3-member etcd on 127.0.0.1 and calls this.

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use super::backend::{Backend, Counts, GrpcBackend};
use super::sale::{Seatfence, EVENT};
use super::{run_workload, RunStats, Workload};

#[derive(Debug, Clone)]
pub struct CompareArgs {
    pub workload: Workload,
    /// PostgreSQL connection string (`host=127.0.0.1 port=… user=…`).
    pub pg: Option<String>,
    /// PostgreSQL sessions.
    pub pg_conns: usize,
    /// etcd client connections.
    pub etcd_conns: usize,
    /// etcd client endpoints (`http://127.0.0.1:2379`, …).
    pub etcd: Vec<String>,
    /// Also run seatfence straight to the leader over gRPC.
    pub grpc: bool,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub system: String,
    /// Granted holds/s until 90% of the seats were handed out (the rush).
    pub holds_per_sec: f64,
    /// Granted holds/s until every seat was handed out.
    pub holds_per_sec_to_capacity: f64,
    /// Every answered hold request (granted or conflict) per second, rush
    /// window included, until every seat was handed out.
    pub requests_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub granted_holds: u64,
    pub granted_seats: u64,
    pub conflicts: u64,
    pub errors: u64,
    pub all_taken_after_secs: Option<f64>,
    pub counts: Counts,
    pub oversold: bool,
    /// available + held + sold == capacity and held + sold == the seats
    /// clients were granted.
    pub counters_match: bool,
    #[serde(skip)]
    pub stats: RunStats,
}

#[derive(Debug, Serialize)]
pub struct CompareReport {
    pub rows: Vec<Row>,
    /// seatfence (HTTP) holds/s over each other system's.
    pub ratio_vs_etcd: Option<f64>,
    pub ratio_vs_postgres: Option<f64>,
    /// The same through `seatfence-client` (following leader hints).
    pub client_ratio_vs_etcd: Option<f64>,
    pub client_ratio_vs_postgres: Option<f64>,
    /// Systems not run, and why.
    pub skipped: Vec<(String, String)>,
    pub capacity: u32,
    pub buyers: u64,
    pub inflight: usize,
    pub offered_buyers_per_sec: Option<u32>,
    pub seed: u64,
}

impl std::fmt::Display for CompareReport {
    /// The side-by-side table.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.table())
    }
}

fn row(stats: RunStats, counts: Counts, capacity: u32) -> Row {
    let cap = u64::from(capacity);
    let taken = counts.held.saturating_add(counts.sold);
    Row {
        system: stats.system.clone(),
        holds_per_sec: stats.holds_per_sec,
        holds_per_sec_to_capacity: stats.holds_per_sec_to_capacity,
        requests_per_sec: stats.requests_per_sec,
        p50_ms: stats.p50_ms,
        p99_ms: stats.p99_ms,
        p999_ms: stats.p999_ms,
        granted_holds: stats.granted_holds,
        granted_seats: stats.granted_seats,
        conflicts: stats.conflicts,
        errors: stats.errors.values().sum(),
        all_taken_after_secs: stats.all_taken_after_secs,
        oversold: taken > cap || stats.granted_seats > cap,
        counters_match: counts.available.saturating_add(taken) == cap
            && taken == stats.granted_seats,
        counts,
        stats,
    }
}

fn holds_only(w: &Workload) -> Workload {
    Workload {
        book_share: 0.0,
        late_rate: 0,
        hold_ttl: std::time::Duration::from_secs(3600),
        ..w.clone()
    }
}

/// How a seatfence row reaches the cluster.
#[derive(Clone, Copy)]
enum Via {
    Http,
    Library,
    Grpc,
}

pub async fn run_compare(bin: &Path, args: &CompareArgs) -> anyhow::Result<CompareReport> {
    let w = holds_only(&args.workload);
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    // Raw HTTP to each buyer's edge, the client library following leader
    // hints, and (asked) straight to the leader over gRPC.
    let mut vias = vec![Via::Http, Via::Library];
    if args.grpc {
        vias.push(Via::Grpc);
    }
    for via in vias {
        // A fresh cluster per run, stopped before the next system runs.
        let (_guard, dir) = crate::raft::bench_dir()?;
        let sf = Seatfence::start(bin, &dir, w.capacity, w.hold_ttl, false).await?;
        let backend = match via {
            Via::Grpc => Backend::Grpc(Box::new(GrpcBackend {
                client: sf.cluster.client(),
                group: sf.group,
                event: EVENT.to_string(),
            })),
            Via::Http => Backend::Http(Box::new((*sf.http).clone())),
            Via::Library => Backend::Http(Box::new(sf.http.through_library())),
        };
        eprintln!("compare: {} …", backend.name());
        let stats = run_workload(Arc::new(backend), None, w.clone()).await;
        let counts = super::backend::http_counts(&sf.http).await?;
        rows.push(row(stats, counts, w.capacity));
    }
    match &args.pg {
        Some(url) => {
            let pg = super::pg::PgBackend::connect(url, args.pg_conns, EVENT, w.capacity).await?;
            let backend = Arc::new(Backend::Postgres(Box::new(pg)));
            eprintln!("compare: {} …", backend.name());
            let stats = run_workload(backend.clone(), None, w.clone()).await;
            rows.push(row(stats, backend.counts().await?, w.capacity));
        }
        None => skipped.push(("postgresql".into(), "no --pg given".into())),
    }
    if args.etcd.is_empty() {
        skipped.push(("etcd".into(), "no --etcd given".into()));
    } else {
        run_etcd(args, &w, &mut rows, &mut skipped).await?;
    }
    let ratio = |ours: &str, name: &str| {
        let ours = rows.iter().find(|r| r.system == ours)?.holds_per_sec;
        let other = rows.iter().find(|r| r.system == name)?.holds_per_sec;
        Some(ours / other.max(f64::MIN_POSITIVE))
    };
    Ok(CompareReport {
        ratio_vs_etcd: ratio("seatfence-http", "etcd"),
        ratio_vs_postgres: ratio("seatfence-http", "postgresql"),
        client_ratio_vs_etcd: ratio("seatfence-client", "etcd"),
        client_ratio_vs_postgres: ratio("seatfence-client", "postgresql"),
        rows,
        skipped,
        capacity: w.capacity,
        buyers: w.buyers,
        inflight: w.inflight,
        offered_buyers_per_sec: w.rate,
        seed: w.seed,
    })
}

#[cfg(feature = "etcd")]
async fn run_etcd(
    args: &CompareArgs,
    w: &Workload,
    rows: &mut Vec<Row>,
    _skipped: &mut [(String, String)],
) -> anyhow::Result<()> {
    let etcd =
        super::etcd::EtcdBackend::connect(&args.etcd, args.etcd_conns, EVENT, w.capacity).await?;
    let backend = Arc::new(Backend::Etcd(Box::new(etcd)));
    eprintln!("compare: {} …", backend.name());
    let stats = run_workload(backend.clone(), None, w.clone()).await;
    rows.push(row(stats, backend.counts().await?, w.capacity));
    Ok(())
}

#[cfg(not(feature = "etcd"))]
async fn run_etcd(
    _args: &CompareArgs,
    _w: &Workload,
    _rows: &mut Vec<Row>,
    skipped: &mut Vec<(String, String)>,
) -> anyhow::Result<()> {
    skipped.push((
        "etcd".into(),
        "this binary was built without `--features etcd` (bench/compare.sh builds it)".into(),
    ));
    Ok(())
}

impl CompareReport {
    /// The side-by-side table, as Markdown.
    fn table(&self) -> String {
        let mut s = String::from(
            "| system | holds/s (rush: to 90% of seats) | holds/s to all seats | answers/s | p50 ms | p99 ms | p999 ms | granted holds | seats taken | conflicts | errors | all taken after | oversold | counters match |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
        );
        for r in &self.rows {
            s.push_str(&format!(
                "| {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.system,
                r.holds_per_sec,
                r.holds_per_sec_to_capacity,
                r.requests_per_sec,
                r.p50_ms,
                r.p99_ms,
                r.p999_ms,
                r.granted_holds,
                r.granted_seats,
                r.conflicts,
                r.errors,
                r.all_taken_after_secs
                    .map(|s| format!("{s:.2} s"))
                    .unwrap_or_else(|| "—".into()),
                if r.oversold { "YES" } else { "no" },
                if r.counters_match { "yes" } else { "NO" },
            ));
        }
        for (ours, name, v) in [
            ("HTTP", "etcd", self.ratio_vs_etcd),
            ("HTTP", "PostgreSQL", self.ratio_vs_postgres),
            ("client", "etcd", self.client_ratio_vs_etcd),
            ("client", "PostgreSQL", self.client_ratio_vs_postgres),
        ] {
            if let Some(v) = v {
                s.push_str(&format!("\nseatfence ({ours}) / {name}: {v:.2}×"));
            }
        }
        for (name, why) in &self.skipped {
            s.push_str(&format!("\nskipped {name}: {why}"));
        }
        s.push('\n');
        s
    }
}
