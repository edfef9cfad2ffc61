//! `seatfence backup` and `seatfence restore` (README "Backup and
//! restore"): a consistent copy of the directory and every event group,
//! taken over the nodes' gRPC ports with an operator certificate while the
//! cluster sells ([`take`]); its check ([`verify`]); and its restore into
//! a new, empty cluster ([`restore`]). The files: [`file`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use seatfence_raft::network::tls::TlsConfig;
use seatfence_raft::ClusterClient;

pub mod file;
pub mod restore;
pub mod take;
pub mod verify;

/// Where the nodes are and the certificate to speak to them with.
#[derive(Args, Debug, Clone)]
pub struct NodeConn {
    /// gRPC address of a node (repeatable; default: every node in demo.json).
    #[arg(long)]
    pub addr: Vec<String>,
    /// demo.json (default: $SEATFENCE_DEMO, else the default demo's): its
    /// nodes and operator certificate.
    #[arg(long)]
    pub demo: Option<PathBuf>,
    /// The cluster CA (PEM).
    #[arg(long = "ca")]
    pub tls_ca: Option<PathBuf>,
    /// Your operator certificate (PEM; `seatfence cert operator`).
    #[arg(long = "cert")]
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long = "key")]
    pub tls_key: Option<PathBuf>,
    /// Talk plaintext gRPC to nodes run with `[tls] insecure = true`.
    #[arg(long)]
    pub insecure: bool,
}

impl NodeConn {
    /// A cluster client for these nodes, as this certificate, whose calls
    /// wait up to `deadline` for a group's leader.
    pub fn client(&self, deadline: Duration) -> anyhow::Result<ClusterClient> {
        let given_tls = self.insecure || self.tls_ca.is_some() || self.tls_cert.is_some();
        let demo = if self.addr.is_empty() || !given_tls {
            Some(crate::demo::DemoFile::load(&crate::demo::file_path(
                self.demo.clone(),
            ))?)
        } else {
            None
        };
        let seeds = match (&demo, self.addr.is_empty()) {
            (Some(d), true) => d.nodes.clone(),
            _ => self.addr.clone(),
        };
        anyhow::ensure!(!seeds.is_empty(), "no node: pass --addr HOST:PORT");
        let tls = if given_tls {
            TlsConfig {
                insecure: self.insecure,
                ca: self.tls_ca.clone(),
                cert: self.tls_cert.clone(),
                key: self.tls_key.clone(),
            }
        } else {
            demo.and_then(|d| d.tls).ok_or_else(|| {
                anyhow::anyhow!(
                    "no certificate: pass --ca, --cert and --key (or --insecure for plaintext nodes)"
                )
            })?
        };
        let tls = tls.load()?;
        let dialer = seatfence_raft::network::Dialer::new(tls.as_ref());
        Ok(ClusterClient::new(seeds, dialer).with_deadline(deadline))
    }
}

/// `seatfence backup`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BackupArgs {
    #[command(subcommand)]
    pub cmd: Option<BackupCmd>,
    /// The directory to write the backup to (new or empty).
    #[arg(long)]
    pub to: Option<PathBuf>,
    /// Groups read at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: u16,
    /// Print the manifest's summary as JSON (no progress bar).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: NodeConn,
}

/// `seatfence backup verify`.
#[derive(Subcommand, Debug)]
pub enum BackupCmd {
    /// Check a backup: the manifest, every file's SHA-256, size and record
    /// count, and that every record decodes. Exits 1 naming the first
    /// damaged file.
    Verify {
        /// The backup's directory.
        dir: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `seatfence restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup's directory (checked first, as `backup verify` does).
    #[arg(long)]
    pub from: PathBuf,
    /// Print the summary as JSON (no progress bar).
    #[arg(long)]
    pub json: bool,
    /// Give up this backup's restore, begun and never finished: nothing of
    /// it applies after this (audited; any operator certificate may abort,
    /// only the one that began it may go on). The cluster then takes new
    /// events; a restore needs a new, empty cluster again.
    #[arg(long)]
    pub abort: bool,
    #[command(flatten)]
    pub conn: NodeConn,
}

impl BackupArgs {
    pub async fn run(self) -> anyhow::Result<()> {
        match self.cmd {
            Some(BackupCmd::Verify { dir, json }) => verify::run(&dir, json),
            None => {
                let to = self.to.ok_or_else(|| {
                    anyhow::anyhow!("where to? pass --to DIR (or `backup verify DIR`)")
                })?;
                let client = self.conn.client(Duration::from_secs(30))?;
                take::run(&client, &to, usize::from(self.parallel), self.json).await
            }
        }
    }
}

impl RestoreArgs {
    pub async fn run(self) -> anyhow::Result<()> {
        let client = self.conn.client(Duration::from_secs(60))?;
        if self.abort {
            return restore::abort(&client, &self.from, self.json).await;
        }
        restore::run(&client, &self.from, self.json).await
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A progress bar on stderr, hidden when `quiet`.
pub(crate) fn bar(len: u64, what: &str, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{what} {{bar:30}} {{pos}}/{{len}} groups, {{msg}} ({{elapsed}})"
        ))
        .expect("a valid template"),
    );
    pb
}
