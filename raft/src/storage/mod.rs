//! The storage boundary: the only module that knows about sled.
//!
//! One [`NodeDb`] (one `sled::Db`) per node process with three trees,
//! `log`, `meta` and `sm`, shared by every group: each group's keys carry
//! its id as an 8-byte prefix ([`space`]); its current snapshot is the
//! file `snapshots/g{gid}.snap`. Everything above this module sees only
//! [`LogStore`], [`StateMachineStore`] and [`NodeDb`].
//!
//! Durability rules kept here:
//! - an append's callback fires only after a flush that covers the entries;
//! - `save_vote` returns only after a flush;
//! - a state machine apply writes its records and the applied log id in one
//!   atomic sled batch; a snapshot install replaces the whole tree in one
//!   atomic batch, then flushes, so a half-installed snapshot never survives;
//! - a failed flush is final: no later flush runs, nothing is acknowledged,
//!   the node exits ([`health`]);
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
