//! seatfence-raft: the consensus core. Many Raft groups per node (openraft
//! 0.10 multi-raft), their log and state in one sled database per node, and
//! the gRPC transport between nodes.
//!
//! ```text
//!   in-process caller ─────────────────┐  (ClusterClient::with_local, this node leads)
//!   peer ──gRPC NodeService (api.rs)───┤  decode · status.rs maps errors
//!                                      ▼
//!            Proposer (propose.rs): typed Command → Result<Committed, ProposeError>
//!              ─▶ Batcher ─▶ Raft ──append──▶ PeerPool ──gRPC RaftService──▶ peer's Raft
//!                              │                                            │
//!                       LogStore (sled g{gid}/log)                    same, on the peer
//!                              ▼
//!           StateMachineStore: seatfence_core::State::apply (g{gid}/sm)
//! ```
//!
//! - [`types`]: the openraft type configuration (standard leader ids: one
//!   leader per term, so the term is a fencing value).
//! - [`storage`]: the only module that touches sled.
//! - [`network`]: the gRPC transport, one channel per peer for all groups.
//! - [`registry`]: the replicas hosted on this node; [`joining`]: a
//!   replica added as a learner does not campaign on a membership it
//!   replays from the group's past.
//! - [`propose`]: the typed propose path at a group's leader (`Proposer`,
//!   `ProposeError`); [`batcher`] packs concurrent proposals into one entry.
//! - [`api`]: the gRPC `NodeService`, a thin adapter over `Proposer`;
//!   [`status`]: the one conversion between `ProposeError` and a gRPC
//!   status; [`codec`]: the one binary codec.
//! - [`client`]: `ClusterClient`, finding a group's leader from anywhere.
//! - [`membership`]: membership changes at a group's leader (moves).
//! - [`sleep`]: idle groups stop their timers; node-level liveness pings
//!   stand in for their heartbeats.
//! - [`config`]: the `[raft]` section; [`clock`], [`metrics`]; [`secret`]:
//!   a config secret (`env:`/`file:` references, never logged).
//! - [`timer`]: openraft's timers at a drill's rate; [`heap`]: the global
//!   allocator's byte count and pretouch switch. The two process-wide
//!   settings left, by nature: openraft's runtime is a type, not a value,
//!   so its timers cannot be told apart per node, and a process has one
//!   global allocator. A node process sets them from its own config; a
//!   drill runs one node per process; in-process tests set neither.
//!
//! The node's assembly lives in `seatfence-node`; routing, placement, moves
//! and leadership transfer in `seatfence-regions`.
//!
//! This crate must never acknowledge a write before it is durable on a
//! majority, and never let one group's traffic block another's.

#![warn(missing_docs)]
pub mod api;
pub mod batcher;
pub mod client;
pub mod clock;
pub mod codec;
pub mod config;
pub mod dump;
pub mod heap;
pub mod joining;
pub mod membership;
pub mod metrics;
pub mod network;
pub mod operator;
pub mod propose;
pub mod registry;
pub mod secret;
pub mod sleep;
pub mod status;
pub mod storage;
pub mod timer;
pub mod types;

pub use client::{ClientError, ClusterClient};
pub use config::RaftTuning;
pub use propose::{Committed, ProposeError, Proposer, Read};
