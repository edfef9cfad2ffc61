//! [`StoreIdent`]: which node a data dir belongs to, and which life of it.
//!
//! Raft assumes a server keeps its state under its id: a vote it granted,
//! the entries it acknowledged. A node restarted under the same id on an
//! empty (replaced, wiped) data dir has forgotten both, and if it votes it
//! can elect a candidate that lacks a committed entry: the confirmed sale
//! is gone and the seat sells again. So every data dir carries an identity
//! written before anything else in it: the node id and a random
//! *incarnation*. The directory records each node's incarnation
//! (`NodeInfo::incarnation`) and refuses a registration under a known id
//! with another one (`Response::IncarnationMismatch`).
//!
//! A data dir whose identity was just written is *not admitted* yet: the
//! node must first learn that its id is new to the cluster (or that the
//! cluster itself is new) before it serves Raft at all; see
//! `seatfence_node`'s start. The admitted flag is stored, so a node that
//! crashes between writing its identity and being admitted asks again.
//! An identity naming another node id is refused at open: a data dir
//! copied from another node is that node's, not this one's.
//!
//! The identity also names the newest data format the data dir may hold
//! (`format`, see `seatfence_core::format`), and is itself written in that
//! format: a binary that does not read it refuses to start on the data
//! dir, before it reads anything else, and says which format it found. A
//! node raises it (flushed) before it writes anything in a new format.

use serde::{Deserialize, Serialize};

/// The data dir's identity (sled's default tree, key `store_ident`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreIdent {
    /// The node the data dir belongs to.
    pub node_id: u64,
    /// Random, drawn when the data dir was created; never 0.
    pub incarnation: u64,
    /// The node learned that its id was new to the cluster (or that it
    /// had data from before identities existed): it may vote.
    pub admitted: bool,
    /// The newest data format written in this data dir (or about to be).
    pub format: seatfence_core::format::Version,
}

/// What opening the identity found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentState {
    /// The data dir is empty (or was never admitted): the node must prove
    /// its id is new before it serves Raft.
    Fresh(StoreIdent),
    /// The data dir holds this node's admitted state.
    Known(StoreIdent),
}

impl IdentState {
    /// The identity found, admitted or not.
    pub fn ident(&self) -> StoreIdent {
        match self {
            IdentState::Fresh(i) | IdentState::Known(i) => *i,
        }
    }
}

pub(crate) const KEY: &[u8] = b"store_ident";

/// A new incarnation (never 0, which the directory reads as "unknown").
pub(crate) fn new_incarnation() -> u64 {
    loop {
        let i: u64 = rand::random();
        if i != 0 {
            return i;
        }
    }
}
