//! The `seatfence` binary's library half: what the subcommands, the
//! integration tests and the benchmarks share.
//!
//! - [`cluster`]: starts a local cluster of real `seatfence node` processes
//!   (one data dir and port per node), kills (SIGKILL), stops (SIGTERM) and
//!   restarts them.
//! - [`bench`]: `seatfence bench raft`; [`bench_holds`]: `seatfence bench holds`;
//!   [`bench_payments`]: `seatfence bench payments`; [`bench_move`]:
//!   `seatfence bench move`.
//! - [`demo`]: `seatfence demo` and its `demo.json`.
//! - [`ctl`]: the event side of `seatfence ctl` (through an edge).
//! - [`http_client`]: a JSON client for the edge's API.

pub mod bench;
pub mod bench_holds;
pub mod bench_move;
pub mod bench_payments;
pub mod chaos;
pub mod cluster;
pub mod ctl;
pub mod demo;
pub mod flash;
pub mod http_client;
