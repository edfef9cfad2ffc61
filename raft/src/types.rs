//! The openraft type configuration shared by every group on every node.
//!
//! One configuration for all groups: the multi-raft router is generic over a
//! single `C`, so the directory and plain groups share `Command`/`Response`.

use std::io::Cursor;

use seatfence_core::{Command, Response};

openraft::declare_raft_types!(
    /// seatfence's Raft types: `u64` node ids and terms, `BasicNode` (gRPC
    /// address) as node info, and the standard leader id so that a term has
    /// at most one leader and the term is usable as a fencing value; tokio
    /// with the node's timer clock (`timer`), which a drill can run fast or
    /// slow.
    pub TypeConfig:
        D = Command,
        R = Response,
        NodeId = u64,
        Node = openraft::BasicNode,
        Term = u64,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
        AsyncRuntime = crate::timer::TimerRuntime,
);

/// What a snapshot travels as: the encoded state (a format envelope).
pub type SnapshotData = Cursor<Vec<u8>>;

/// One group's openraft instance, with its state machine store.
pub type Raft = openraft::Raft<TypeConfig, crate::storage::StateMachineStore>;
/// A log entry's id: its term (leader id) and index.
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
/// A replica's vote: the leader id it voted for, and whether it is committed.
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
/// A log entry: a [`Command`], a membership change, or a new leader's blank entry.
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
/// A snapshot's metadata: the last log id and the membership it includes.
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
/// A snapshot with its data ([`SnapshotData`]).
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;
/// A membership with the id of the log entry that set it.
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
/// openraft's metrics of one group's replica (not [`crate::metrics`]).
pub type RaftMetrics = openraft::RaftMetrics<TypeConfig>;
