//! The `seatfence` binary's library half: what the subcommands, the
//! integration tests and the benchmarks share.
//!
//! - [`cluster`]: starts a local cluster of real `seatfence node` processes
//!   (one data dir and port per node), kills (SIGKILL), stops (SIGTERM),
//!   pauses (SIGSTOP) and restarts them; the chaos crate's supervisor.
//! - [`chaos`]: `seatfence chaos drill|check` (the chaos crate's drill).
//! - [`bench`]: `seatfence bench raft`; [`bench_holds`]: `seatfence bench holds`;
//!   [`bench_payments`]: `seatfence bench payments`; [`bench_move`]:
//!   `seatfence bench move`; [`flash`]: `bench flash-sale`, `bench compare`.
//! - [`demo`]: `seatfence demo` and its `demo.json`.
//! - [`ctl`]: the event side of `seatfence ctl` (through an edge).
//! - [`http_client`]: a JSON client for the edge's API.

pub mod bench;
pub mod bench_holds;
pub mod bench_move;
pub mod bench_payments;
pub mod ctl;
pub mod demo;
pub mod flash;

pub use seatfence_chaos::drill as chaos;
pub use seatfence_testkit::{cluster, http_client};
