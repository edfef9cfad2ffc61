//! The `seatfence` binary's library half: the subcommands that are not a
//! crate of their own.
//!
//! - [`demo`]: `seatfence demo` and its `demo.json`.
//! - [`ctl`]: `seatfence ctl` (node commands over gRPC, event and operator
//!   commands through an edge).
//! - [`backup`]: `seatfence backup` (and `backup verify`) and `seatfence
//!   restore`.
//! - [`cert`]: `seatfence cert` (the cluster CA and its certificates).
//! - [`cluster`]: `seatfence cluster init` (a cluster's files from a
//!   topology file).
//! - [`export`]: `seatfence export`'s arguments (the exporter itself is
//!   `seatfence-export`).
//!
//! It must never do work a library crate owns. Everything else is a crate: `seatfence node` is `seatfence-node`,
//! `seatfence bench` is `seatfence-bench`, `seatfence chaos` is
//! `seatfence-chaos`, `seatfence gateway` is the mock in `seatfence-testkit`.

pub mod backup;
pub mod cert;
pub mod cluster;
pub mod ctl;
pub mod demo;
pub mod export;

pub use seatfence_chaos::drill as chaos;
