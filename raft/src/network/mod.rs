//! Raft transport over gRPC, shared by all groups of a node.
//!
//! ```text
//!  group g's replication task ──GroupNetworkAdapter(pool, target, g)──▶ PeerPool
//!      ──one cached tonic Channel per peer──▶ RaftService on the target
//!      ──registry.get(g)──▶ that group's Raft
//! ```
//! Openraft's request/reply types travel as bincode inside the proto
//! messages; snapshots travel as a stream of chunks.

mod pool;
mod service;
pub mod via;

pub use pool::{NetworkFactory, PeerPool};
pub use service::RaftGrpc;

/// Largest gRPC message a node accepts (append batches, snapshot chunks).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Snapshot chunk size on the wire.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;
