//! `seatfence bench …`: flags, and the one place a report is printed
//! (as JSON with `--json`, else as the report's own `Display`).

use std::path::Path;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use seatfence_raft::storage::FlushMode;
use seatfence_raft::RaftTuning;

use crate::create::{run_create_bench, CreateBenchArgs};
use crate::dormant::{run_dormant_bench, DormantBenchArgs};
use crate::failover::{run_failover_bench, FailoverBenchArgs};
use crate::holds::{run_holds_bench, HoldsBenchArgs, Via};
use crate::moves::{run_move_bench, MoveBenchArgs};
use crate::payments::{run_payments_bench, PaymentsBenchArgs};
use crate::raft::{run_raft_bench, RaftBenchArgs};
use crate::repair::{run_repair_bench, RepairBenchArgs};
use seatfence_testkit::GeoArgs;

#[derive(Clone, Copy, ValueEnum)]
pub enum FlushArg {
    Inline,
    Shared,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ViaArg {
    Http,
    /// HTTP/1.1 over TLS: every edge with `[edge.tls]`.
    Https,
    Grpc,
    /// The `seatfence-client` library, following leader hints.
    Client,
    /// The library with hints off.
    ClientNoHints,
}

#[derive(Subcommand)]
pub enum BenchCmd {
    /// The launch-day flash sale on a local 3-node region with the mock
    /// gateway: a burst of buyers holding 1–4 seats, a share booking and
    /// paying, the rest letting holds expire, late arrivals after, until
    /// every seat is sold. Fails unless the sale is exact.
    FlashSale(crate::flash::cli::FlashSaleCli),
    /// The flash sale's hold workload against seatfence, PostgreSQL
    /// (`--pg`) and etcd (`--etcd`) one after the other; prints the
    /// side-by-side table (bench/compare.sh starts the servers).
    Compare(crate::flash::cli::CompareCli),
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
        /// Buyers through `seatfence-client` (leader hints followed).
        #[arg(long)]
        client: bool,
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
        /// The region the event moves to from us-east (eu-west is 80 ms
        /// away under `--global`, ap-south 200 ms).
        #[arg(long, default_value = "eu-west")]
        to: String,
        #[command(flatten)]
        geo: GeoArgs,
        #[arg(long)]
        json: bool,
    },
    /// N groups of a local 3-node cluster asleep, their followers dormant
    /// (`--unload-after-ms` > 0) or not: each node's heap, and the first
    /// write to each group (its wake-up and any reopening). Run with 0 and
    /// with it on, side by side.
    Dormant {
        #[arg(long, default_value_t = 200)]
        groups: usize,
        /// `raft.sleep_after_ms` of the nodes.
        #[arg(long, default_value_t = 2_000)]
        sleep_after_ms: u64,
        /// `raft.unload_after_ms` of the nodes; 0: followers stay loaded.
        #[arg(long, default_value_t = 5_000)]
        unload_after_ms: u64,
        #[arg(long)]
        json: bool,
    },
    /// N groups led by one node of a local 3-node cluster, asleep, that
    /// node SIGKILLed: how long until each group commits a write again.
    Failover {
        #[arg(long, default_value_t = 100)]
        groups: usize,
        /// `raft.sleep_after_ms` of the nodes; 0: groups never sleep.
        #[arg(long, default_value_t = RaftTuning::default().sleep_after_ms)]
        sleep_after_ms: u64,
        #[command(flatten)]
        geo: GeoArgs,
        #[arg(long)]
        json: bool,
    },
    /// One region of four nodes, N groups, writes running; one node
    /// SIGKILLed for good: time until every group it was a voter of has
    /// three live voters again, and the writes' p99 meanwhile.
    Repair {
        #[arg(long, default_value_t = 100)]
        groups: usize,
        /// Silence before the node is dead (`moves.dead_after_ms`).
        #[arg(long, default_value_t = 3_000)]
        dead_after_ms: u64,
        /// Writes in flight throughout.
        #[arg(long, default_value_t = 32)]
        inflight: usize,
        #[arg(long)]
        json: bool,
    },
    /// N events of S seats on a local one-region cluster, holds running:
    /// `seatfence backup` while they run, then `seatfence restore` into a
    /// new cluster. Backup and restore time and bytes, and the holds' p99
    /// before and during the backup.
    Backup {
        #[arg(long, default_value_t = 1_000)]
        events: usize,
        /// Seats of each event (rows of 100).
        #[arg(long, default_value_t = 20_000)]
        seats: u32,
        /// Holds in flight throughout.
        #[arg(long, default_value_t = 32)]
        inflight: usize,
        /// Seconds of holds measured before the backup.
        #[arg(long, default_value_t = 5)]
        before_secs: u64,
        #[arg(long)]
        json: bool,
    },
    /// Events created per second through `POST /v1/events` on a local
    /// one-region cluster (3 nodes, every node an edge), `inflight` at once.
    CreateEvents {
        #[arg(long, default_value_t = 1_000)]
        events: usize,
        #[arg(long, default_value_t = 32)]
        inflight: usize,
        /// Seats of each event (one section, one row).
        #[arg(long, default_value_t = 100)]
        seats: u32,
        /// Every node takes payments through a mock gateway (as deployed):
        /// each event its reconciler and outbox lanes.
        #[arg(long)]
        payments: bool,
        /// After creating them, let every event fall asleep and report each
        /// node's CPU over this many seconds, and its RSS (0: skip).
        #[arg(long, default_value_t = 0)]
        idle_secs: u64,
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
        /// Groups created beside the busy ones and left idle after one write.
        #[arg(long, default_value_t = 0)]
        idle_groups: usize,
        /// `raft.sleep_after_ms` of the nodes; 0: groups never sleep.
        #[arg(long, default_value_t = RaftTuning::default().sleep_after_ms)]
        sleep_after_ms: u64,
        /// Seconds with no load over which each node's idle CPU is read from
        /// /proc, before the writes (0: skip).
        #[arg(long, default_value_t = 30)]
        idle_secs: u64,
        /// Cluster clients the writers are spread over (each its own
        /// connections and per-group queues, like that many edges).
        #[arg(long, default_value_t = 1)]
        clients: usize,
        /// `raft.max_pending_writes` of the nodes (0: no bound).
        #[arg(long, default_value_t = RaftTuning::default().max_pending_writes)]
        max_pending_writes: usize,
        /// `raft.max_pending_writes_per_group` of the nodes (0: no bound).
        #[arg(long, default_value_t = RaftTuning::default().max_pending_writes_per_group)]
        max_pending_writes_per_group: usize,
        #[arg(long)]
        json: bool,
    },
    /// Joins/s into one event's waiting room through three regions'
    /// edges, the admission rate against the room's, and whether every
    /// region's edge gives a buyer the same position.
    WaitingRoom {
        /// Buyers who join, once each.
        #[arg(long, default_value_t = 200_000)]
        buyers: u64,
        /// Concurrent joins.
        #[arg(long, default_value_t = 256)]
        inflight: usize,
        /// The room's admission rate.
        #[arg(long, default_value_t = 1_000)]
        admit_per_sec: u32,
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
        /// Events the same buyers and connections are spread over (round
        /// robin); `--seats` is split evenly between them.
        #[arg(long, default_value_t = 1)]
        events: u32,
        /// Buyers in every region holding, booking and reading events
        /// owned by each region, the regions far apart (`--rtt`,
        /// `--jitter` adjust the matrix): latency per buyer region and
        /// owner region, reads with and without local replicas. `--via`, `--users` and `--events` do
        /// not apply.
        #[command(flatten)]
        geo: GeoArgs,
        #[arg(long)]
        json: bool,
    },
}

/// Print `report` as JSON or as its `Display`.
fn emit<R: serde::Serialize + std::fmt::Display>(report: &R, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        println!("{report}");
    }
    Ok(())
}

/// Print `report` (as JSON or as its `Display`), then fail the run if the
/// report says the system broke a guarantee (`broken`: why).
fn finish<R: serde::Serialize + std::fmt::Display>(
    report: &R,
    json: bool,
    broken: Option<String>,
) -> anyhow::Result<()> {
    emit(report, json)?;
    match broken {
        Some(why) => anyhow::bail!(why),
        None => Ok(()),
    }
}

/// Run one benchmark with node processes started from `bin`: the product's
/// benches (through the edge or the node API) here, the consensus layer's in
/// [`run_raft`].
pub async fn run(bin: &Path, cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::FlashSale(cli) => crate::flash::cli::flash_sale(bin, cli).await,
        BenchCmd::Compare(cli) => crate::flash::cli::compare(bin, cli).await,
        BenchCmd::Holds {
            via,
            duration,
            seats,
            users,
            inflight,
            events,
            geo,
            json,
        } => {
            if let Some(geo) = geo.geo()? {
                let args = crate::global::GlobalArgs {
                    duration: Duration::from_secs(duration),
                    seats,
                    inflight,
                    geo,
                };
                let r = crate::global::run_global_bench(bin, &args).await?;
                let broken = (r.oversold || !r.counters_match)
                    .then(|| "sale did not stop exactly at capacity".to_string());
                return finish(&r, json, broken);
            }
            let args = HoldsBenchArgs {
                via: match via {
                    ViaArg::Http => Via::Http,
                    ViaArg::Https => Via::Https,
                    ViaArg::Grpc => Via::Grpc,
                    ViaArg::Client => Via::Client,
                    ViaArg::ClientNoHints => Via::ClientNoHints,
                },
                duration: Duration::from_secs(duration),
                seats,
                users,
                inflight,
                events: events.max(1),
            };
            let r = run_holds_bench(bin, &args).await?;
            let broken = (r.oversold || !r.counters_match)
                .then(|| "sale did not stop exactly at capacity".to_string());
            finish(&r, json, broken)
        }
        BenchCmd::WaitingRoom {
            buyers,
            inflight,
            admit_per_sec,
            json,
        } => {
            let args = crate::room::RoomBenchArgs {
                buyers: buyers.max(2),
                inflight,
                admit_per_sec: admit_per_sec.max(1),
            };
            let r = crate::room::run_room_bench(bin, &args).await?;
            let broken =
                (r.errors > 0).then(|| format!("{} joins were not answered 200", r.errors));
            finish(&r, json, broken)
        }
        BenchCmd::Move {
            seats,
            inflight,
            before,
            after,
            to,
            geo,
            json,
        } => {
            let args = MoveBenchArgs {
                seats,
                inflight,
                before: Duration::from_secs(before),
                after: Duration::from_secs(after),
                to,
                geo: geo.geo()?,
            };
            let r = run_move_bench(bin, &args).await?;
            let broken = (r.oversold || !r.counters_match || r.epoch_after != 2)
                .then(|| format!("the move broke the sale: {r:?}"));
            finish(&r, json, broken)
        }
        BenchCmd::Payments {
            duration,
            inflight,
            seats,
            client,
            json,
        } => {
            let args = PaymentsBenchArgs {
                duration: Duration::from_secs(duration),
                inflight,
                seats,
                client,
            };
            let r = run_payments_bench(bin, &args).await?;
            let broken = (r.oversold || !r.counters_match)
                .then(|| "seats sold, captures and confirmed bookings disagree".to_string());
            finish(&r, json, broken)
        }
        BenchCmd::CreateEvents {
            events,
            inflight,
            seats,
            payments,
            idle_secs,
            json,
        } => {
            let args = CreateBenchArgs {
                events,
                inflight,
                seats,
                payments,
                idle_secs,
            };
            let r = run_create_bench(bin, &args).await?;
            finish(
                &r,
                json,
                (r.errors > 0).then(|| format!("{} creates failed", r.errors)),
            )
        }
        raft => run_raft(bin, raft).await,
    }
}

/// The consensus layer's benches: groups that sleep, fail over, are
/// repaired, or take raw writes.
async fn run_raft(bin: &Path, cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Dormant {
            groups,
            sleep_after_ms,
            unload_after_ms,
            json,
        } => {
            let args = DormantBenchArgs {
                groups,
                sleep_after_ms,
                unload_after_ms,
            };
            let r = run_dormant_bench(bin, &args).await?;
            let broken = (r.failed > 0)
                .then(|| format!("{} writes failed after the groups slept", r.failed));
            finish(&r, json, broken)
        }
        BenchCmd::Failover {
            groups,
            sleep_after_ms,
            geo,
            json,
        } => {
            let args = FailoverBenchArgs {
                groups,
                sleep_after_ms,
                geo: geo.geo()?,
            };
            let r = run_failover_bench(bin, &args).await?;
            let broken = (r.not_resumed > 0)
                .then(|| format!("{} groups did not resume after the kill", r.not_resumed));
            finish(&r, json, broken)
        }
        BenchCmd::Backup {
            events,
            seats,
            inflight,
            before_secs,
            json,
        } => {
            let args = crate::backup::BackupBenchArgs {
                events,
                seats,
                inflight,
                before_secs,
            };
            let r = crate::backup::run_backup_bench(bin, &args).await?;
            let broken = (r.holds_failed > 0).then(|| format!("{} holds failed", r.holds_failed));
            finish(&r, json, broken)
        }
        BenchCmd::Repair {
            groups,
            dead_after_ms,
            inflight,
            json,
        } => {
            let args = RepairBenchArgs {
                groups,
                dead_after_ms,
                inflight,
            };
            let r = run_repair_bench(bin, &args).await?;
            let broken = (r.repaired < r.affected)
                .then(|| format!("{} groups were not repaired", r.affected - r.repaired));
            finish(&r, json, broken)
        }
        BenchCmd::Raft {
            duration,
            inflight,
            groups,
            value_bytes,
            flush,
            snapshot_every,
            heartbeat_ms,
            idle_groups,
            sleep_after_ms,
            idle_secs,
            clients,
            max_pending_writes,
            max_pending_writes_per_group,
            json,
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
                idle_groups,
                sleep_after_ms,
                idle_secs,
                clients,
                max_pending_writes,
                max_pending_writes_per_group,
            };
            emit(&run_raft_bench(bin, &args).await?, json)
        }
        _ => anyhow::bail!("not a consensus bench: `run` dispatches the product's"),
    }
}
