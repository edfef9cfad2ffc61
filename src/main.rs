//! `seatfence`: one binary, thin. The work lives in the library crates.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use seatfence_node::NodeConfig;

// sled allocates and frees many small buffers per write; glibc malloc spent
// ~20% of a node's CPU on them (perf, bench raft at 256 in flight).
// jemalloc, not mimalloc: mimalloc keeps a thread's freed pages until that
// thread frees or collects again, and over an hour's soak what it kept grew
// on some nodes while their heap stayed flat (docs/CHAOS.md); jemalloc's
// background threads hand unused pages back on a timer ([`MALLOC_CONF`]),
// whichever thread freed them. Counted: `seatfence_heap_bytes` tells the
// program's own memory from what the allocator keeps (a soak judges both).
#[global_allocator]
static GLOBAL: seatfence_raft::heap::Counted<tikv_jemallocator::Jemalloc> =
    seatfence_raft::heap::Counted(tikv_jemallocator::Jemalloc);

/// jemalloc's settings, read once when it starts (the `_RJEM_MALLOC_CONF`
/// environment variable overrides them): purge from background threads,
/// return dirty pages after 1 s unused (default 10 s) and lazily freed
/// ("muzzy") ones at once, and never back memory with transparent huge
/// pages (where the kernel's THP setting is `always`, every group's
/// reserved-but-unwritten openraft rings would be resident, ~2.6 MB a
/// group, as with mimalloc's huge pages).
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: ConfString =
    ConfString(c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,thp:never".as_ptr());

/// A pointer to a NUL-terminated string, as C's `const char *malloc_conf`.
#[repr(transparent)]
struct ConfString(*const std::ffi::c_char);
// SAFETY: it points to a static, immutable byte string.
unsafe impl Sync for ConfString {}

#[derive(Parser)]
#[command(
    name = "seatfence",
    version,
    about = "Sells scarce seats across regions, never one seat twice"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node (gRPC server, replicas, sled database).
    Node {
        /// The node's TOML config (README "Running a node").
        #[arg(long)]
        config: PathBuf,
        /// This node's data dir was lost and the directory still lists its
        /// id: come back on an empty one anyway. Every group it is a voter
        /// of demotes it to a learner, lets it catch up and makes it a
        /// voter again; until then it votes nowhere (README "A replacement
        /// machine").
        #[arg(long)]
        rejoin_empty: bool,
    },
    /// Start a local cluster (3 regions × 3 nodes, each with an HTTP edge),
    /// create a sample event, write demo.json, print a walk-through, and
    /// serve until Ctrl-C.
    Demo {
        /// Where the nodes keep their data and demo.json. Without it: a
        /// fresh demo in /tmp/seatfence-demo ($TMPDIR/seatfence-demo when
        /// TMPDIR is set), cleared first. With it: a directory an earlier
        /// demo used is started again with its data; a new or empty one
        /// gets a fresh demo.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Start the cluster without the sample event (to restore a backup
        /// into: README "Backup and restore").
        #[arg(long)]
        empty: bool,
        /// The regions far apart on this machine (README "Regions far apart").
        #[command(flatten)]
        geo: seatfence_testkit::GeoArgs,
    },
    /// Create the cluster CA and node and operator certificates (mutual TLS
    /// on every node's gRPC port).
    Cert {
        #[command(subcommand)]
        cmd: seatfence::cert::CertCmd,
    },
    /// Lay a cluster out on hosts: `cluster init --topology FILE --out DIR`
    /// (README "Deploying on hosts").
    Cluster {
        #[command(subcommand)]
        cmd: seatfence::cluster::ClusterCmd,
    },
    /// Operator commands against a running cluster.
    Ctl(Box<seatfence::ctl::CtlArgs>),
    /// This binary's release and data formats, and the cluster's (through
    /// an edge: --edge and --token, else demo.json's): its active data
    /// format and the newest each node reads. `--activate N` raises the
    /// cluster's format once every live node reads it (README "Upgrading").
    Version {
        /// Raise the cluster's data format to N (never lowered).
        #[arg(long, value_name = "N")]
        activate: Option<u64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// demo.json with the edges and the operator token.
        #[arg(long)]
        demo: Option<PathBuf>,
        /// An edge's URL.
        #[arg(long)]
        edge: Option<String>,
        /// An operator's bearer token.
        #[arg(long)]
        token: Option<String>,
    },
    /// A consistent copy of the directory and every event group, taken
    /// while the cluster sells (`--to DIR`); `backup verify DIR` checks one
    /// (README "Backup and restore").
    Backup(seatfence::backup::BackupArgs),
    /// Load a backup into a new, empty cluster (README "Backup and
    /// restore").
    Restore(seatfence::backup::RestoreArgs),
    /// The mock payment gateway (DESIGN.md §8): a real HTTP server with
    /// fault switches, for the demo, tests, drills and benchmarks.
    Gateway(seatfence_testkit::mock_gateway::GatewayArgs),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        cmd: seatfence_bench::BenchCmd,
    },
    /// Keep PostgreSQL tables (events, bookings, payments, refunds) current
    /// from the changefeed (README "Changefeed, export and operator
    /// refunds").
    Export(seatfence::export::ExportArgs),
    /// Partition drills: faults, load, checkers, report (README "Chaos drills").
    Chaos {
        #[command(subcommand)]
        cmd: seatfence::chaos::ChaosCmd,
    },
}

fn init_tracing() {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        // Colours only for a terminal: node logs usually go to files.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,openraft=warn,sled=warn,h2=warn,tower=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// The drill's own log: warnings only (its story is in history.jsonl and
/// the report; `SEATFENCE_CHAOS_LOG` overrides, e.g. `info`).
fn init_tracing_quiet() {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            std::env::var("SEATFENCE_CHAOS_LOG")
                .ok()
                .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
                .unwrap_or_else(|| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

async fn terminated() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

fn main() {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime");
    // A user's error is its message chain, never a backtrace (even with
    // RUST_BACKTRACE set); panics, which are bugs, keep theirs.
    if let Err(e) = runtime.block_on(run(cli)) {
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Node {
            config,
            rejoin_empty,
        } => {
            init_tracing();
            let text = std::fs::read_to_string(&config)
                .with_context(|| format!("read config {}", config.display()))?;
            let mut config = NodeConfig::from_toml(&text)
                .with_context(|| format!("invalid config {}", config.display()))?;
            config.rejoin_empty = rejoin_empty;
            // The node runs as a task on the workers, not on this thread,
            // which parks in `block_on` for the node's whole life (with
            // mimalloc, memory it allocated and workers freed waited for it
            // to collect: a restarted node kept ~100 MiB that way).
            match tokio::spawn(seatfence_node::run(config, terminated())).await {
                Ok(outcome) => outcome,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        Cmd::Demo {
            data_dir,
            empty,
            geo,
        } => match geo.geo() {
            Ok(geo) => seatfence::demo::run(data_dir, empty, geo, terminated()).await,
            Err(e) => Err(e),
        },
        Cmd::Gateway(args) => args.run(terminated()).await,
        Cmd::Ctl(args) => seatfence::ctl::run(*args).await,
        Cmd::Backup(args) => args.run().await,
        Cmd::Restore(args) => args.run().await,
        Cmd::Version {
            activate,
            json,
            demo,
            edge,
            token,
        } => {
            let demo = seatfence::demo::file_path(demo);
            if activate.is_none() && edge.is_none() && !demo.exists() {
                // No cluster to ask: this binary alone.
                if json {
                    let f = seatfence_core::format::newest();
                    let release = env!("CARGO_PKG_VERSION");
                    println!(
                        "{}",
                        serde_json::json!({"binary": {"release": release, "format_newest": f}})
                    );
                } else {
                    println!("{}", seatfence::ctl::binary_line());
                    println!("cluster: not asked (pass --edge URL and --token, or start the demo)");
                }
                return Ok(());
            }
            seatfence::ctl::run(seatfence::ctl::CtlArgs {
                addr: None,
                demo: Some(demo),
                edge,
                token,
                tls_ca: None,
                tls_cert: None,
                tls_key: None,
                insecure: false,
                cmd: seatfence::ctl::CtlCmd::Events(seatfence::ctl::EventCmd::Version {
                    activate,
                    json,
                }),
            })
            .await
        }
        Cmd::Cert { cmd } => seatfence::cert::run(cmd),
        Cmd::Cluster { cmd } => seatfence::cluster::run(cmd),
        Cmd::Export(args) => {
            init_tracing();
            args.run(terminated()).await
        }
        Cmd::Chaos { cmd } => {
            init_tracing_quiet();
            let bin = std::env::current_exe().context("find own binary")?;
            let code = seatfence::chaos::run(&bin, cmd).await;
            std::process::exit(code);
        }
        Cmd::Bench { cmd } => {
            let bin = std::env::current_exe().context("find own binary")?;
            seatfence_bench::run(&bin, cmd).await
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// clap's own consistency checks over every subcommand (two arguments
    /// with one id, as `ctl --key` and `ctl put KEY` once were, panic at
    /// parse time otherwise), and the command that panicked.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "seatfence",
            "ctl",
            "--key",
            "k.pem",
            "put",
            "--group",
            "1",
            "k",
            "v",
        ]);
        assert!(cli.is_ok(), "{:?}", cli.err());
    }
}
