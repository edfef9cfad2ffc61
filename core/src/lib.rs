//! seatfence-core: the domain types every other crate shares, and the pure,
//! deterministic state machine each Raft group replicates.
//!
//! ```text
//!   Command ──▶ State::apply(&Command) ──▶ (Response, changed records)
//!                 (pure: no clock, no I/O, same result on every replica)
//! ```
//!
//! What lives here:
//! - [`ids`]: newtypes for node, group and region ids.
//! - [`command`]: the commands a group replicates and their responses.
//! - [`state`]: the replicated state (a key→value table for plain groups, the
//!   directory for group 0) and its `apply`.
//! - [`directory`]: the directory's records and the placement rule.
//! - [`inventory`]: one event's seats, holds and idempotency records, and
//!   its `apply` (fenced by the event's epoch).
//! - [`moves`]: ownership moves as the directory records them (steps,
//!   compare-and-set advances, abort before the membership change).
//! - [`query`]: reads of a group's state.
//! - [`answers`]: the directory's record of keyed operator requests;
//!   [`audit`]: the operators' audit trail in the directory.
//! - [`lifecycle`]: node states, repairs and rejoins as the directory
//!   records them; `rejoin`: a node back on an empty data dir.
//! - [`format`]: the versioned bytes of every value a node stores or sends
//!   (a version byte, then postcard), and the version this process writes.
//! - [`restore`]: the steps that load a backup into a new cluster.
//! - [`record_key`]: the names of stored records, by which every `apply`
//!   reports what it changed.
//!
//! This crate must never do I/O, read a clock or spawn tasks: the Raft layer
//! executes it, and every replica must compute the same result.

#![warn(missing_docs)]
pub mod answers;
pub mod audit;
pub mod command;
pub mod directory;
pub mod format;
pub mod ids;
pub mod inventory;
pub mod lifecycle;
pub mod moves;
pub mod query;
pub mod record_key;
mod rejoin;
pub mod restore;
pub mod state;

pub use answers::KeyedAnswer;
pub use audit::AuditEntry;
pub use command::{Command, Response};
pub use directory::{Directory, EventRoute, GroupInfo, NodeInfo, Placement, RouteState};
pub use ids::{BookingId, Epoch, EventId, Fence, GroupId, HoldId, NodeId, RegionId, UserId};
pub use lifecycle::{
    NodeOp, NodeOpDone, NodeRefused, NodeState, Rejoin, Repair, RepairReason, RepairStep,
};
pub use moves::{MoveOp, MoveRecord, MoveRefused, MoveState, MoveStep};
pub use query::{PaymentSummary, Query, QueryResult, ReplicaDump};
pub use state::{Applied, DirectoryState, EventState, RecordKey, State};
