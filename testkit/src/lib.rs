//! seatfence-testkit: what the tests, the demo, the chaos drills and the
//! benchmarks stand on, kept out of the product crates.
//!
//! - [`cluster`]: [`LocalCluster`], real `seatfence node` processes on
//!   127.0.0.1 (one data dir and port per node), laid out by one builder;
//!   SIGKILL, SIGTERM, SIGSTOP/SIGCONT and restart; `layout.rs` writes
//!   each node's config and the cluster's certificates (mutual TLS).
//! - [`geo`]: [`Geo`], a round trip between every two regions, and the
//!   Raft timings derived from it (`--global`).
//! - [`links`]: [`links::LinkNet`], a delay-line TCP proxy on every directed
//!   link between nodes (the geography's latency, the drills' cuts).
//! - [`gateway_proc`]: [`GatewayProc`], the mock gateway as its own process.
//! - [`mock_gateway`]: the mock payment provider itself (`seatfence
//!   gateway`): approvals, captures at most once, fencing tokens, signed
//!   webhooks, fault switches.
//! - [`http_client`]: a JSON client for the edge's API.
//! - [`pg_proc`]: [`PgProc`], a throwaway PostgreSQL server (the export
//!   tests' sink).
//! - [`progress`]: a long operation's progress on stderr (`indicatif` on a
//!   terminal, a line every few seconds otherwise).
//!
//! No product crate depends on this one.

pub mod cluster;
pub mod gateway_proc;
pub mod geo;
pub mod http_client;
mod layout;
pub mod links;
pub mod mock_gateway;
pub mod pg_proc;
mod procs;
pub mod progress;

pub use cluster::{reap_all, ClusterBuilder, LocalCluster, NodeProc, REGIONS};
pub use gateway_proc::GatewayProc;
pub use geo::{Geo, GeoArgs};
pub use http_client::HttpClient;
pub use layout::start_links;
pub use pg_proc::PgProc;
