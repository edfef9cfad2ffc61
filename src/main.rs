//! `seatfence`: one binary, thin. The work lives in the library crates.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use seatfence::bench::{run_raft_bench, RaftBenchArgs};
use seatfence::bench_holds::{run_holds_bench, HoldsBenchArgs, Via};
use seatfence::bench_move::{run_move_bench, MoveBenchArgs};
use seatfence::bench_payments::{run_payments_bench, PaymentsBenchArgs};
use seatfence::ctl::{EdgeTarget, EventCmd};
use seatfence_core::{Command, GroupId, Placement};
use seatfence_node::{create_group, NodeConfig};
use seatfence_raft::storage::FlushMode;
use seatfence_raft::{ClusterClient, RaftTuning};

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
        cmd: BenchCmd,
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

#[derive(Clone, Copy, ValueEnum)]
enum FlushArg {
    Inline,
    Shared,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// The launch-day flash sale on a local 3-node region with the mock
    /// gateway: a burst of buyers holding 1–4 seats, a share booking and
    /// paying, the rest letting holds expire, late arrivals after, until
    /// every seat is sold. Fails unless the sale is exact.
    FlashSale(seatfence::flash::cli::FlashSaleCli),
    /// The flash sale's hold workload against seatfence, PostgreSQL
    /// (`--pg`) and etcd (`--etcd`) one after the other; prints the
    /// side-by-side table (bench/compare.sh starts the servers).
    Compare(seatfence::flash::cli::CompareCli),
    /// Confirmed bookings/s and the latency of each step (hold, booking,
    /// callback) with the mock gateway: buyers go hold → book → approve →
    /// callback on a local 3-node cluster.
    Payments {
        #[arg(long, default_value_t = 10)]
        duration: u64,
        #[arg(long, default_value_t = 32)]
        inflight: usize,
        #[arg(long, default_value_t = 20_000)]
        seats: u32,
        #[arg(long)]
        json: bool,
    },
    /// Move a large event from us-east to eu-west (3 regions × 3 nodes)
    /// while buyers in every region hold seats: move time, the longest
    /// write pause, and whether the sale stayed exact.
    Move {
        #[arg(long, default_value_t = 20_000)]
        seats: u32,
        /// Concurrent hold requests.
        #[arg(long, default_value_t = 32)]
        inflight: usize,
        /// Seconds of load before the move, and after it is done.
        #[arg(long, default_value_t = 3)]
        before: u64,
        #[arg(long, default_value_t = 2)]
        after: u64,
        #[arg(long)]
        json: bool,
    },
    /// Committed writes/s and latency of a 3-voter group of real node processes.
    Raft {
        #[arg(long, default_value_t = 10)]
        duration: u64,
        #[arg(long, default_value_t = 64)]
        inflight: usize,
        /// Spread the writers over this many groups.
        #[arg(long, default_value_t = 1)]
        groups: usize,
        #[arg(long, default_value_t = 64)]
        value_bytes: usize,
        #[arg(long, value_enum, default_value = "shared")]
        flush: FlushArg,
        /// Log entries between snapshots on each node.
        #[arg(long, default_value_t = RaftTuning::default().snapshot_every)]
        snapshot_every: u64,
        /// Heartbeat interval (ms); elections time out after 4–8 heartbeats.
        #[arg(long, default_value_t = RaftTuning::default().heartbeat_ms)]
        heartbeat_ms: u64,
        #[arg(long)]
        json: bool,
    },
    /// Holds/s and latency on one hot event (20,000 seats by default) of a
    /// local 3-node cluster, single-seat holds from many users.
    Holds {
        #[arg(long, value_enum, default_value = "http")]
        via: ViaArg,
        #[arg(long, default_value_t = 10)]
        duration: u64,
        #[arg(long, default_value_t = 20_000)]
        seats: u32,
        #[arg(long, default_value_t = 10_000)]
        users: u32,
        /// Concurrent requests.
        #[arg(long, default_value_t = 256)]
        inflight: usize,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ViaArg {
    Http,
    Grpc,
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
        Cmd::Bench {
            cmd:
                BenchCmd::Holds {
                    via,
                    duration,
                    seats,
                    users,
                    inflight,
                    json,
                },
        } => {
            let args = HoldsBenchArgs {
                via: match via {
                    ViaArg::Http => Via::Http,
                    ViaArg::Grpc => Via::Grpc,
                },
                duration: Duration::from_secs(duration),
                seats,
                users,
                inflight,
            };
            let bin = std::env::current_exe().context("find own binary")?;
            let r = run_holds_bench(&bin, &args).await?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "bench holds via {:?}: {:.0} holds/s until sold out ({:.0} requests/s overall), p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms; capacity {}, granted {}, sold_or_held {}, oversold {}, counters_match {}, conflicts {}, errors {}, sold out after {:?} s, {} in flight, {:.1} s",
                    r.via, r.holds_per_sec, r.requests_per_sec, r.p50_ms, r.p99_ms, r.p999_ms, r.capacity, r.granted,
                    r.sold_or_held, r.oversold, r.counters_match, r.conflicts, r.errors, r.sold_out_after_secs, r.inflight, r.duration_secs
                );
            }
            if r.oversold || !r.counters_match {
                anyhow::bail!("sale did not stop exactly at capacity");
            }
            Ok(())
        }
        Cmd::Bench {
            cmd:
                BenchCmd::Move {
                    seats,
                    inflight,
                    before,
                    after,
                    json,
                },
        } => {
            let args = MoveBenchArgs {
                seats,
                inflight,
                before: Duration::from_secs(before),
                after: Duration::from_secs(after),
            };
            let bin = std::env::current_exe().context("find own binary")?;
            let r = run_move_bench(&bin, &args).await?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "bench move: {} seats {} -> {}: move {:.2} s (recorded {} ms, steps entered at {:?}), longest write gap {:.0} ms from +{:.0} ms (coordinator pause {:?} ms); answered holds/s before {:.0}, during {:.0}, after {:.0}; during the move p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; granted {}, errors {}, epoch {}, oversold {}, counters_match {}, {} in flight, {} nodes",
                    r.seats, r.from_region, r.to_region, r.move_secs, r.move_recorded_ms, r.steps_ms, r.longest_write_gap_ms, r.longest_gap_at_ms, r.coordinator_pause_ms,
                    r.rps_before, r.rps_during, r.rps_after, r.p50_during_ms, r.p99_during_ms, r.max_during_ms,
                    r.granted, r.errors, r.epoch_after, r.oversold, r.counters_match, r.inflight, r.nodes
                );
            }
            if r.oversold || !r.counters_match || r.epoch_after != 2 {
                anyhow::bail!("the move broke the sale: {r:?}");
            }
            Ok(())
        }
        Cmd::Bench {
            cmd: BenchCmd::FlashSale(cli),
        } => {
            let bin = std::env::current_exe().context("find own binary")?;
            seatfence::flash::cli::flash_sale(&bin, cli).await
        }
        Cmd::Bench {
            cmd: BenchCmd::Compare(cli),
        } => {
            let bin = std::env::current_exe().context("find own binary")?;
            seatfence::flash::cli::compare(&bin, cli).await
        }
        Cmd::Bench {
            cmd:
                BenchCmd::Payments {
                    duration,
                    inflight,
                    seats,
                    json,
                },
        } => {
            let args = PaymentsBenchArgs {
                duration: Duration::from_secs(duration),
                inflight,
                seats,
            };
            let bin = std::env::current_exe().context("find own binary")?;
            let r = run_payments_bench(&bin, &args).await?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "bench payments: {:.0} confirmed bookings/s; p50/p99 ms: hold {:.1}/{:.1}, booking {:.1}/{:.1}, callback {:.1}/{:.1}, hold→confirmed {:.1}/{:.1}; confirmed {}, sold {}, captures {}, capacity {}, oversold {}, counters_match {}, errors {}, {} in flight, {:.1} s",
                    r.bookings_per_sec, r.hold_p50_ms, r.hold_p99_ms, r.book_p50_ms, r.book_p99_ms, r.callback_p50_ms, r.callback_p99_ms,
                    r.total_p50_ms, r.total_p99_ms, r.confirmed, r.sold, r.captures, r.capacity, r.oversold, r.counters_match, r.errors, r.inflight, r.duration_secs
                );
            }
            if r.oversold || !r.counters_match {
                anyhow::bail!("seats sold, captures and confirmed bookings disagree");
            }
            Ok(())
        }
        Cmd::Bench {
            cmd:
                BenchCmd::Raft {
                    duration,
                    inflight,
                    groups,
                    value_bytes,
                    flush,
                    snapshot_every,
                    heartbeat_ms,
                    json,
                },
        } => {
            let args = RaftBenchArgs {
                duration: Duration::from_secs(duration),
                inflight,
                groups,
                value_bytes,
                flush: match flush {
                    FlushArg::Inline => FlushMode::Inline,
                    FlushArg::Shared => FlushMode::Shared,
                },
                snapshot_every,
                heartbeat_ms,
            };
            let bin = std::env::current_exe().context("find own binary")?;
            let r = run_raft_bench(&bin, &args).await?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "bench raft: {:.0} writes/s, p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms ({} writes, {} errors, {} in flight, {} group(s), flush {:?}, {:.1} s, data dirs {:?} MiB)",
                    r.writes_per_sec, r.p50_ms, r.p99_ms, r.p999_ms, r.writes, r.errors, r.inflight, r.groups, r.flush, r.duration_secs,
                    r.data_bytes_per_node.iter().map(|b| b / (1 << 20)).collect::<Vec<_>>()
                );
            }
            Ok(())
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
