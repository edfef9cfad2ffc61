//! Flags and output of `seatfence bench flash-sale` and `bench compare`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::compare::{run_compare, CompareArgs};
use super::sale::run_flash_sale;
use super::Workload;

/// The workload's shape, shared by both subcommands.
#[derive(Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Seats in the event.
    #[arg(long, default_value_t = 20_000)]
    pub seats: u32,
    /// Buyers in the burst.
    #[arg(long, default_value_t = 100_000)]
    pub buyers: u64,
    /// Stop after this many seconds, sold out or not.
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// Hold requests in flight at most.
    #[arg(long, default_value_t = 256)]
    pub inflight: usize,
    /// Burst buyers arriving per second (open loop; latency counted from
    /// each arrival). Without it buyers come as fast as `--inflight` allows.
    #[arg(long)]
    pub rate: Option<u32>,
    /// Buyers pick among this many best free seats (lower: more conflicts).
    #[arg(long, default_value_t = 4096)]
    pub window: usize,
    /// Hold attempts per buyer (other seats after a conflict).
    #[arg(long, default_value_t = 5)]
    pub max_attempts: u32,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write an SVG of throughput and latency over time here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// One JSON object on stdout instead of the text summary.
    #[arg(long)]
    pub json: bool,
    /// No progress bar on stderr.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Args, Debug, Clone)]
pub struct FlashSaleCli {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Share of burst buyers who book and pay (the rest let holds expire).
    #[arg(long, default_value_t = 0.5)]
    pub book_share: f64,
    /// Late arrivals per second after the burst; they always book.
    #[arg(long, default_value_t = 1000)]
    pub late_rate: u32,
    /// The event's hold time-to-live, seconds.
    #[arg(long, default_value_t = 5)]
    pub hold_ttl: u64,
    /// Run `seatfence export` into a throwaway PostgreSQL during the sale
    /// and report its lag (Debian's postgresql package needed).
    #[arg(long)]
    pub export: bool,
    /// Buyers through `seatfence-client` (every edge, leader hints
    /// followed) instead of raw HTTP to one edge each.
    #[arg(long)]
    pub client: bool,
}

#[derive(Args, Debug, Clone)]
pub struct CompareCli {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// PostgreSQL connection string, e.g. "host=127.0.0.1 port=55432 user=postgres".
    #[arg(long)]
    pub pg: Option<String>,
    /// PostgreSQL sessions; requests beyond them wait for a free one at
    /// the client. 32 served it best on 2 cores (256, one per request in
    /// flight: ~15% fewer holds/s, 2.5× the p99).
    #[arg(long, default_value_t = 32)]
    pub pg_conns: usize,
    /// etcd client connections (gRPC, requests multiplexed), used in turn.
    #[arg(long, default_value_t = 8)]
    pub etcd_conns: usize,
    /// etcd client endpoints, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// Also run seatfence straight to the leader over gRPC.
    #[arg(long)]
    pub grpc: bool,
}

impl WorkloadArgs {
    fn workload(&self, book_share: f64, late_rate: u32, hold_ttl: u64) -> Workload {
        Workload {
            capacity: self.seats.max(1),
            buyers: self.buyers,
            duration: Duration::from_secs(self.duration.max(1)),
            inflight: self.inflight.max(1),
            rate: self.rate,
            book_share,
            late_rate,
            hold_ttl: Duration::from_secs(hold_ttl.max(1)),
            max_attempts: self.max_attempts.max(1),
            window: self.window.max(1),
            seed: self.seed,
            progress: !self.quiet && !self.json,
        }
    }
}

fn write_plot(path: &Path, svg: String) -> anyhow::Result<()> {
    std::fs::write(path, svg).with_context(|| format!("write {}", path.display()))?;
    eprintln!("plot written to {}", path.display());
    Ok(())
}

/// Run the launch-day sale on seatfence; an error when it oversold or the
/// counters disagree with the records.
pub async fn flash_sale(bin: &Path, cli: FlashSaleCli) -> anyhow::Result<()> {
    let a = &cli.workload;
    let w = a.workload(cli.book_share, cli.late_rate, cli.hold_ttl);
    let r = run_flash_sale(bin, w, cli.export, cli.client).await?;
    if let Some(p) = &a.plot {
        write_plot(
            p,
            super::plot::svg(
                &format!(
                    "seatfence flash sale: {} seats, {} buyers, {} in flight, seed {}",
                    r.capacity, a.buyers, a.inflight, a.seed
                ),
                &[&r.run],
            ),
        )?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("{r}");
    }
    if r.oversold || !r.counters_match {
        anyhow::bail!(
            "the sale is not exact: sold {} of {}, counters_match {}",
            r.sold,
            r.capacity,
            r.counters_match
        );
    }
    Ok(())
}

/// Run the hold workload on every system given, print the table.
pub async fn compare(bin: &Path, cli: CompareCli) -> anyhow::Result<()> {
    let a = &cli.workload;
    let args = CompareArgs {
        workload: a.workload(0.0, 0, 3600),
        pg: cli.pg.clone(),
        pg_conns: cli.pg_conns,
        etcd_conns: cli.etcd_conns,
        etcd: cli.etcd.clone(),
        grpc: cli.grpc,
    };
    let r = run_compare(bin, &args).await?;
    if let Some(p) = &a.plot {
        let runs: Vec<_> = r.rows.iter().map(|row| &row.stats).collect();
        write_plot(
            p,
            super::plot::svg(
                &format!(
                    "holds: {} seats, {} buyers, {} in flight, seed {}",
                    r.capacity, r.buyers, r.inflight, r.seed
                ),
                &runs,
            ),
        )?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{r}");
    }
    if r.rows.iter().any(|row| row.oversold || !row.counters_match) {
        anyhow::bail!("a system oversold or its counters disagree with the clients");
    }
    Ok(())
}
