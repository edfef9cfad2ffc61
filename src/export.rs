//! `seatfence export`: finds the cluster and its operator token the way
//! `seatfence ctl` does (`--demo`, `--edge`, `--token`) and runs the
//! exporter (`seatfence-export`) until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::demo::DemoFile;

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The PostgreSQL database to keep current (libpq string or URL, e.g.
    /// `host=127.0.0.1 port=5432 user=seatfence dbname=sales`).
    #[arg(long)]
    pub pg: String,
    /// demo.json with edges and tokens (default: $SEATFENCE_DEMO, else the
    /// default demo's).
    #[arg(long)]
    pub demo: Option<PathBuf>,
    /// An HTTP edge to read the changefeed from (repeatable; tried in
    /// turn; default: every edge in demo.json).
    #[arg(long)]
    pub edge: Vec<String>,
    /// An operator's bearer token (default: demo.json's operator token).
    #[arg(long)]
    pub token: Option<String>,
    /// Changes per page (one PostgreSQL transaction each).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub batch: u32,
    /// Print a line per committed page: changes, lag.
    #[arg(long)]
    pub progress: bool,
    /// Serve Prometheus metrics (changes exported, lag) here, e.g.
    /// 127.0.0.1:9187 (`:0`: any free port; the address is printed).
    #[arg(long)]
    pub metrics_addr: Option<SocketAddr>,
}

impl ExportArgs {
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) -> anyhow::Result<()> {
        let path = crate::demo::file_path(self.demo);
        let demo = DemoFile::load(&path);
        let edges = if self.edge.is_empty() {
            let d = demo.as_ref().map_err(|e| {
                anyhow::anyhow!("no edge: pass --edge URL or start the demo ({e:#})")
            })?;
            d.edges.values().cloned().collect()
        } else {
            self.edge
        };
        let token = match self.token {
            Some(t) => t,
            None => demo
                .as_ref()
                .map_err(|e| anyhow::anyhow!("no token: pass --token or start the demo ({e:#})"))?
                .tokens
                .get("operator")
                .cloned()
                .context("demo.json has no operator token")?,
        };
        let cfg = seatfence_export::ExportConfig {
            pg: self.pg,
            edges,
            token,
            batch: self.batch,
            progress: self.progress,
            metrics_addr: self.metrics_addr,
        };
        seatfence_export::run(cfg, stop).await
    }
}
