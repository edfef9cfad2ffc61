//! seatfence-raft: the consensus core. Many Raft groups per node (openraft
//! 0.10 multi-raft), their log and state in one sled database per node, and
//! the gRPC transport between nodes.
//!
//! ```text
//!            NodeService (api.rs)          RaftService (network/service.rs)
//!   client ──Write──▶ propose ──▶ Raft ──append──▶ PeerPool ──gRPC──▶ peer's Raft
//!                                   │                               │
//!                            LogStore (sled g{gid}/log)      same, on the peer
//!                                   ▼
//!                StateMachineStore: seatfence_core::State::apply (g{gid}/sm)
//! ```
//!
//! - [`types`]: the openraft type configuration (standard leader ids: one
//!   leader per term, so the term is a fencing value).
//! - [`storage`]: the only module that touches sled.
//! - [`network`]: the gRPC transport, one channel per peer for all groups.
//! - [`registry`]: the replicas hosted on this node.
//! - [`api`], [`client`]: the node's own API and a client for it;
//!   [`batcher`] packs concurrent proposals into one entry.
//! - [`membership`]: membership changes at a group's leader (moves).
//! - [`node`], [`config`]: the `seatfence node` process.
//!
//! This crate must never acknowledge a write before it is durable on a
//! majority, and never let one group's traffic block another's.

pub mod api;
pub mod batcher;
pub mod client;
pub mod clock;
pub mod codec;
pub mod config;
pub mod membership;
pub mod metrics;
pub mod network;
pub mod propose;
pub mod registry;
pub mod status;
pub mod storage;
pub mod types;

pub use client::{ClientError, ClusterClient};
pub use config::RaftTuning;
pub use propose::{Committed, ProposeError, Proposer};
