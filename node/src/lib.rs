//! seatfence-node: one `seatfence node` process, assembled as a library so
//! a test can start a node in-process.
//!
//! ```text
//!  NodeConfig (config.rs: [tls] [raft] [moves] [edge] [payments] [chaos])
//!   ─▶ Node::start (node.rs): open sled, reopen stored groups + the directory
//!        ─▶ gRPC over mutual TLS (certs.rs makes the certificates; the raft
//!           crate's gate authorizes): RaftService + NodeService, one Proposer;
//!           every channel the node dials goes through its own Dialer
//!        ─▶ admit.rs: a new data dir proves its node id is new to the
//!           cluster before any Raft message is taken (else: refuse to start)
//!        ─▶ (lowest initial member) initialize the directory
//!        ─▶ jobs.rs: register in the directory · follow retired nodes ·
//!                 follow a drill's skew file
//!        ─▶ regions: place_groups (host what the directory places here) ·
//!                    a drained node's hand-off
//!        ─▶ duties: the directory's (moves, lifecycle, balance, learners)
//!                   and the event groups' (EventDuties)
//!        ─▶ edge.rs: the HTTP edge and the payment side, when [edge] (and
//!                    [payments]) are configured
//!   ─▶ Node::stop: stop serving, wait for every task, shut every replica
//!      down, final flush
//! ```
//!
//! This crate decides nothing about seats, fences or moves: it wires the
//! crates that do, and owns only the node's lifecycle.

#![warn(missing_docs)]
mod admit;
pub mod certs;
pub mod config;
mod edge;
mod jobs;
mod node;

pub use config::{ChaosHooks, ConfigError, NodeConfig, Peer};
pub use node::{create_group, run, Node};
