//! seatfence-bench: the benchmarks behind `seatfence bench …`, apart from
//! the product: no product crate depends on this one, so no product library
//! links the peer databases' clients (the `seatfence` binary does, for its
//! `bench` subcommand). Every benchmark starts real node
//! processes with `seatfence_testkit::LocalCluster`, drives them the way
//! users do, and fails when the sale was not exact: a figure from a broken
//! run is never reported as a result.
//!
//! - [`raft`]: `bench raft`, committed writes/s of a 3-voter group.
//! - [`holds`]: `bench holds`, holds/s on one hot event (HTTP or gRPC).
//! - [`payments`]: `bench payments`, confirmed bookings/s with the mock gateway.
//! - [`moves`]: `bench move`, an ownership move under load.
//! - [`room`]: `bench waiting-room`, joins/s into a waiting room and its
//!   admission rate.
//! - [`dormant`]: `bench dormant`, dormant followers' memory and wake-up.
//! - [`flash`]: `bench flash-sale` and `bench compare` (PostgreSQL, etcd;
//!   `bench/compare.sh` starts those servers).
//! - [`backup`]: `bench backup`, backup and restore time and bytes, and
//!   the holds' p99 during a backup.
//! - [`cli`]: the subcommands' flags; each report renders itself (`Display`).
//! - [`world`]: a benchmark's cluster, started and ready.

pub mod backup;
pub mod cli;
pub mod create;
pub mod dormant;
pub mod failover;
pub mod flash;
pub mod global;
pub mod holds;
pub mod moves;
pub mod payments;
pub mod raft;
pub mod repair;
pub mod room;
pub mod world;

pub use cli::{run, BenchCmd};
