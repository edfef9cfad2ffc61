//! `seatfence`: one binary, thin. The work lives in the library crates.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use seatfence::ctl::{EdgeTarget, EventCmd};
use seatfence_core::{Command, GroupId, Placement};
use seatfence_node::{create_group, NodeConfig};
use seatfence_raft::ClusterClient;

// sled allocates and frees many small buffers per write; glibc malloc spent
// ~20% of a node's CPU on them (perf, bench raft at 256 in flight).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
        #[arg(long)]
        config: PathBuf,
    },
    /// Start a local cluster (3 regions × 3 nodes, each with an HTTP edge),
    /// create a sample event, write demo.json, print a walk-through, and
    /// serve until Ctrl-C.
    Demo {
        /// Where the nodes keep their data and demo.json (default:
        /// $TMPDIR/seatfence-demo, cleared first). An existing dir from an
        /// earlier demo is started again with its data.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Operator commands against a running cluster.
    Ctl {
        /// gRPC address of any node (status, put, get, create-group).
        #[arg(long, global = true, default_value = "127.0.0.1:7101")]
        addr: String,
        /// demo.json with edges and tokens (default: $TMPDIR/seatfence-demo/demo.json).
        #[arg(long, global = true)]
        demo: Option<PathBuf>,
        /// HTTP edge URL (default: the first edge in demo.json).
        #[arg(long, global = true)]
        edge: Option<String>,
        /// Bearer token (default: demo.json's operator token).
        #[arg(long, global = true)]
        token: Option<String>,
        #[command(subcommand)]
        cmd: Box<CtlCmd>,
    },
    /// The mock payment gateway (DESIGN.md §8): a real HTTP server with
    /// fault switches, for the demo, tests, drills and benchmarks.
    Gateway {
        #[arg(long, default_value = "127.0.0.1:7300")]
        listen: String,
        /// Base URL clients use (default: http://<listen>).
        #[arg(long)]
        public_url: Option<String>,
        /// Signs payments (callback signatures).
        #[arg(long, env = "SEATFENCE_GATEWAY_SIGNING_SECRET")]
        signing_secret: String,
        /// Signs webhook bodies; nodes need the same value.
        #[arg(long, env = "SEATFENCE_GATEWAY_WEBHOOK_SECRET")]
        webhook_secret: String,
        #[arg(long, default_value = "seatfence")]
        client_id: String,
        #[arg(long, env = "SEATFENCE_GATEWAY_CLIENT_SECRET")]
        client_secret: String,
        /// Lifetime of a granted token, in seconds.
        #[arg(long, default_value_t = 3600)]
        token_ttl_secs: u64,
        /// Token grants allowed per hour.
        #[arg(long, default_value_t = 5)]
        grants_per_hour: u32,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        cmd: seatfence_bench::BenchCmd,
    },
    /// Partition drills: faults, load, checkers, report (README "Chaos drills").
    Chaos {
        #[command(subcommand)]
        cmd: seatfence::chaos::ChaosCmd,
    },
}

#[derive(Subcommand)]
enum CtlCmd {
    /// Groups hosted by the node at --addr: role, term, leader, indexes.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Create a group placed by the directory.
    CreateGroup {
        #[arg(long, default_value_t = 3)]
        replicas: u8,
        /// Place all voters in this region ("zone survival").
        #[arg(long)]
        region: Option<String>,
    },
    /// Write a key in a group.
    Put {
        #[arg(long)]
        group: u64,
        key: String,
        value: String,
    },
    /// Read a key from the replica on the node at --addr.
    Get {
        #[arg(long)]
        group: u64,
        key: String,
    },
    #[command(flatten)]
    Events(EventCmd),
}

fn init_tracing() {
    tracing_subscriber::fmt()
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
    tracing_subscriber::fmt()
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Node { config } => {
            init_tracing();
            let text = std::fs::read_to_string(&config)
                .with_context(|| format!("read config {}", config.display()))?;
            let config = NodeConfig::from_toml(&text)
                .with_context(|| format!("invalid config {}", config_name(&config)))?;
            seatfence_node::run(config, terminated()).await
        }
        Cmd::Demo { data_dir } => seatfence::demo::run(data_dir, terminated()).await,
        Cmd::Gateway {
            listen,
            public_url,
            signing_secret,
            webhook_secret,
            client_id,
            client_secret,
            token_ttl_secs,
            grants_per_hour,
        } => {
            use seatfence_testkit::mock_gateway::{self as mock, Mock, MockConfig};
            anyhow::ensure!(
                signing_secret.len() >= 16 && webhook_secret.len() >= 16,
                "--signing-secret and --webhook-secret must be at least 16 bytes"
            );
            let listener = tokio::net::TcpListener::bind(&listen)
                .await
                .with_context(|| format!("bind gateway on {listen}"))?;
            let addr = listener.local_addr()?;
            let mock = Mock::new(MockConfig {
                public_url: public_url.unwrap_or_else(|| format!("http://{addr}")),
                signing_secret,
                webhook_secret,
                client_id,
                client_secret,
                token_ttl: Duration::from_secs(token_ttl_secs.max(1)),
                grants_per_hour,
            });
            tracing::info!(%addr, "mock gateway serving");
            tokio::select! {
                _ = mock::serve(mock, listener) => {}
                _ = terminated() => {}
            }
            Ok(())
        }
        Cmd::Ctl {
            addr,
            demo,
            edge,
            token,
            cmd,
        } => match *cmd {
            CtlCmd::Events(cmd) => {
                let demo = demo.unwrap_or_else(|| seatfence::demo::default_dir().join("demo.json"));
                seatfence::ctl::run(EdgeTarget { demo, edge, token }, cmd).await
            }
            cmd => ctl(addr, cmd).await,
        },
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

fn config_name(p: &std::path::Path) -> String {
    p.display().to_string()
}

async fn ctl(addr: String, cmd: CtlCmd) -> anyhow::Result<()> {
    let client = ClusterClient::new(vec![addr.clone()]);
    match cmd {
        CtlCmd::Status { json } => {
            let s = client.status_at(&addr).await?;
            if json {
                let groups: Vec<_> = s
                    .groups
                    .iter()
                    .map(|g| {
                        serde_json::json!({
                            "group_id": g.group_id, "role": g.role, "term": g.term, "leader": g.leader,
                            "last_log_index": g.last_log_index, "applied_index": g.applied_index,
                            "snapshot_index": g.snapshot_index, "purged_index": g.purged_index,
                            "voters": g.voters, "learners": g.learners, "keys": g.key_count,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({"node_id": s.node_id, "region": s.region, "groups": groups})
                );
            } else {
                println!("node {} ({})", s.node_id, s.region);
                println!(
                    "{:>6} {:>10} {:>6} {:>7} {:>9} {:>9} {:>9}  voters",
                    "group", "role", "term", "leader", "last_log", "applied", "snapshot"
                );
                for g in &s.groups {
                    println!(
                        "{:>6} {:>10} {:>6} {:>7} {:>9} {:>9} {:>9}  {:?}",
                        g.group_id,
                        g.role,
                        g.term,
                        g.leader.map(|l| l.to_string()).unwrap_or("-".into()),
                        g.last_log_index,
                        g.applied_index,
                        g.snapshot_index,
                        g.voters
                    );
                }
            }
        }
        CtlCmd::CreateGroup { replicas, region } => {
            let placement = match region {
                Some(r) => Placement::InRegion {
                    region: r.as_str().into(),
                    replicas,
                },
                None => Placement::Spread { replicas },
            };
            let (g, members) = create_group(&client, None, placement).await?;
            println!(
                "created group {} on nodes {:?}",
                g.0,
                members.iter().map(|m| m.0).collect::<Vec<_>>()
            );
        }
        CtlCmd::Put { group, key, value } => {
            let out = client
                .write(
                    GroupId(group),
                    &Command::Put {
                        key,
                        value: value.into_bytes(),
                    },
                )
                .await?;
            println!(
                "committed at index {} (term {}): {}",
                out.log_index, out.term, out.response
            );
        }
        CtlCmd::Events(_) => unreachable!("dispatched in main"),
        CtlCmd::Get { group, key } => {
            let r = client.read_at(&addr, GroupId(group), &key).await?;
            if r.found {
                println!(
                    "{} (applied index {})",
                    String::from_utf8_lossy(&r.value),
                    r.applied_index
                );
            } else {
                println!("(not found; applied index {})", r.applied_index);
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
