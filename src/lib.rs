//! The `seatfence` binary's library half: what the subcommands, the
//! integration tests and the benchmarks share.
//!
//! - [`cluster`]: starts a local cluster of real `seatfence node` processes
//!   (one data dir and port per node), kills (SIGKILL), stops (SIGTERM) and
//!   restarts them.
//! - [`bench`]: `seatfence bench raft`.

pub mod bench;
pub mod cluster;
