//! The storage boundary: the only module that knows about sled.
//!
//! One [`NodeDb`] (one `sled::Db`) per node process; each group gets three
//! trees, `g{gid}/log`, `g{gid}/meta` and `g{gid}/sm`, plus `g{gid}/snap` for
//! its current snapshot. Everything above this module sees only
//! [`LogStore`], [`StateMachineStore`] and [`NodeDb`].
//!
//! Durability rules kept here:
//! - an append's callback fires only after a flush that covers the entries;
//! - `save_vote` returns only after a flush;
//! - a state machine apply writes its records and the applied log id in one
//!   atomic sled batch; a snapshot install replaces the whole tree in one
//!   atomic batch, then flushes, so a half-installed snapshot never survives.

mod db;
mod log_store;
mod state_machine;

pub use db::{FlushMode, NodeDb};
pub use log_store::LogStore;
pub use state_machine::{GroupState, StateMachineStore};

use std::io;

pub(crate) fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

pub fn encode<T: serde::Serialize>(v: &T) -> io::Result<Vec<u8>> {
    bincode::serialize(v).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub fn decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> io::Result<T> {
    bincode::deserialize(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Bincode, then LZ4: for the big values written on the hot path (log
/// entries, state machine deltas). They repeat much (ids, key prefixes);
/// compressed, sled copies, checksums and rewrites (when it consolidates a
/// page) about half the bytes. Measured in docs/PERFORMANCE.md.
pub(crate) fn encode_compressed<T: serde::Serialize>(v: &T) -> io::Result<Vec<u8>> {
    Ok(lz4_flex::compress_prepend_size(&encode(v)?))
}

pub(crate) fn decode_compressed<T: serde::de::DeserializeOwned>(b: &[u8]) -> io::Result<T> {
    let raw = lz4_flex::decompress_size_prepended(b)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    decode(&raw)
}
