//! Raft transport over gRPC, shared by all groups of a node.
//!
//! ```text
//!  group g's replication task ──GroupNetworkAdapter(pool, target, g)──▶ PeerPool
//!      ──the peer's Coalescer: one Batch RPC carries many groups' messages──▶
//!      RaftService::batch on the target ──registry.get(g)──▶ that group's Raft
//! ```
//! Openraft's request/reply types travel in `seatfence_core::format`'s
//! versioned envelope inside the proto
//! messages; snapshots travel as a stream of chunks on their own RPC.

mod coalesce;
pub mod dial;
pub mod gate;
mod pool;
mod service;
pub mod snapshot_in;
pub mod tls;

pub use coalesce::{IN_FLIGHT, MAX_PACK};
pub use dial::Dialer;
pub use pool::{NetworkFactory, PeerPool};
pub use service::{RaftGrpc, MAX_BATCH_MESSAGES};

/// Largest gRPC message a node accepts (append batches, snapshot chunks).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Snapshot chunk size on the wire.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;
