//! The storage boundary: the only module that knows about sled and the
//! log's files.
//!
//! Per node process: one node-wide log ([`wal`]: every group's Raft
//! entries in segment files `wal/*.seg`, one write and one fsync per flush
//! round for all groups) and one [`NodeDb`] (one `sled::Db`) with two trees,
//! `meta` (votes, purge points, marks) and `sm` (seat state deltas), shared
//! by every group: each group's keys carry its id as an 8-byte prefix
//! ([`space`]); its current snapshot is the file `snapshots/g{gid}.snap`.
//! Everything above this module sees only [`LogStore`],
//! [`StateMachineStore`] and [`NodeDb`].
//!
//! Durability rules kept here:
//! - an append's callback fires only after the log's round that synced
//!   the entries;
//! - `save_vote` returns only after a sled flush;
//! - a state machine apply writes its records and the applied log id
//!   (unflushed: after a crash the log is replayed from the applied id
//!   sled kept; a state machine ahead of a log that lost an unsynced tail
//!   is fine, what it applied was committed); a snapshot install replaces
//!   the whole tree in one atomic batch, then flushes, so a half-installed
//!   snapshot never survives;
//! - sled writes that log entries must not outlive (a group's `created`
//!   mark, joining marks) are flushed before the log's next round; a
//!   joining mark is removed only after the entry that ends it is synced;
//! - a failed flush (sled's or the log's) is final: no later flush runs,
//!   nothing is acknowledged, the node exits ([`health`]);
//! - below the free-space reserve the node takes no new data, and takes it
//!   again by itself once space is back ([`health`]).

mod db;
pub mod health;
pub mod ident;
mod log_store;
mod space;
mod state_machine;
mod wal;

pub use db::{FlushMode, NodeDb, DEFAULT_CACHE_MB};
pub use ident::{IdentState, StoreIdent};
pub use log_store::LogStore;
pub use state_machine::{GroupState, StateMachineStore};

use std::io;

pub(crate) fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

pub(crate) use crate::codec::{decode, decode_compressed, encode, encode_compressed};
