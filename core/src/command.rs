//! Commands replicated through a group's log, and what applying one answers.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::directory::{EventRoute, NodeInfo, Placement};
use crate::ids::{EventId, GroupId, NodeId, RegionId};
use crate::inventory::{EventCommand, EventReply, Survival};

/// One replicated command. Plain groups take the key→value commands; group 0
/// (the directory) takes the directory commands. A command sent to the wrong
/// kind of group is rejected by `apply` with [`Response::WrongGroup`], the
/// same way on every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Set `key` to `value`.
    Put {
        /// The key→value table's key.
        key: String,
        /// The bytes to store under `key`.
        value: Vec<u8>,
    },
    /// Remove `key`.
    Delete {
        /// The key to remove; an absent key is not an error.
        key: String,
    },
    /// Directory: set a fleet-wide value (the shared gateway token),
    /// readable on every directory replica.
    PutShared {
        /// The fleet-wide key.
        key: String,
        /// The bytes to store under `key`.
        value: Vec<u8>,
    },
    /// Several commands applied in order as one entry. Made by a group's
    /// leader from commands it prepared, never sent by a client. Batches
    /// nest at most two deep (the batcher's entry holds a `WriteBatch`'s
    /// batch); decoding refuses deeper ones ([`two_levels`]).
    Batch(#[serde(deserialize_with = "two_levels")] Vec<Command>),
    /// Directory: add or update a node (id, region, gRPC address).
    RegisterNode(NodeInfo),
    /// A step of restoring a backup into a new cluster (see
    /// [`crate::restore`]): the directory's or an event group's.
    Restore(crate::restore::RestoreOp),
    /// Directory: raise the cluster's active data format to `version`
    /// (see [`crate::format`]); refused unless every live node reads it.
    /// The format never goes down.
    SetFormat {
        /// The format every node writes from now on.
        version: crate::format::Version,
    },
    /// Directory: create a group placed by `placement`. `group_id: None`
    /// allocates the next free id. Creating an id that exists returns it.
    CreateGroup {
        /// The id to create; `None` takes the next free one (never 0).
        group_id: Option<GroupId>,
        /// How the group's voters are chosen.
        placement: Placement,
    },
    /// Directory: record an event and place its group (a new group, placed
    /// by `survival`). Registering an id that exists returns its route.
    RegisterEvent {
        /// The event to register.
        event_id: EventId,
        /// The region that owns the event at epoch 1 (and places a zone-survival group).
        home_region: RegionId,
        /// How the event's group is placed.
        survival: Survival,
    },
    /// Directory: mark a node drained (it hands off every leadership it
    /// gets) or back in service.
    SetDrained {
        /// The node to mark.
        node: NodeId,
        /// `true`: drained; `false`: back in service.
        drained: bool,
    },
    /// Directory: append to the operators' audit trail (`seq` is assigned
    /// by `apply`; the one given is ignored).
    Audit(crate::audit::AuditEntry),
    /// Directory: start, advance, finish or abort an ownership move.
    /// `at_ms` is the proposer's clock, recorded only.
    Move {
        /// What to do with the move.
        op: crate::moves::MoveOp,
        /// The proposer's clock, in ms since the Unix epoch.
        at_ms: u64,
    },
    /// Directory: node lifecycle (states, decommission, replica repairs).
    /// `at_ms` is the proposer's clock, recorded only.
    Node {
        /// The lifecycle operation.
        op: crate::lifecycle::NodeOp,
        /// The proposer's clock, in ms since the Unix epoch.
        at_ms: u64,
    },
    /// Event groups: a seat inventory command. Boxed: it is the largest
    /// command by far (a payment attempt carries five strings), and every
    /// variant pays for the largest — in each log entry openraft holds, and
    /// in the 4,096-slot command ring it reserves per group. Build one with
    /// [`Command::event`].
    Event(Box<EventCommand>),
    /// Directory: set a fleet-wide value only if it is `expected` now
    /// (`None`: absent). A compare-and-set: of two writers that read the
    /// same value, one wins and the other is told [`Response::Changed`].
    /// A value already equal to `value` answers `Written` (so a re-sent
    /// command that took effect is not reported as lost).
    PutSharedIf {
        /// The fleet-wide key.
        key: String,
        /// The value `key` must hold now; `None`: it must be absent.
        expected: Option<Vec<u8>>,
        /// The bytes to store under `key`.
        value: Vec<u8>,
    },
    /// Directory: reserve (`answer.status == 0`) or complete the answer to
    /// `owner`'s request with Idempotency-Key `key`. Another request's
    /// record stays unless it lapsed (see `answers`); answers older than a
    /// day are forgotten, by `answer.at_ms`.
    RememberAnswer {
        /// The caller whose key it is (at most [`MAX_OWNER_BYTES`]).
        owner: String,
        /// The Idempotency-Key (at most [`MAX_OWNER_BYTES`]).
        key: String,
        /// The reservation (`status == 0`) or the final answer.
        answer: crate::answers::KeyedAnswer,
    },
    /// Directory: drop `request`'s reservation of `key` (its answer was
    /// not final: a retry should run again).
    ForgetAnswer {
        /// The caller whose key it is (at most [`MAX_OWNER_BYTES`]).
        owner: String,
        /// The Idempotency-Key (at most [`MAX_OWNER_BYTES`]).
        key: String,
        /// The request whose pending reservation to drop; any other record stays.
        request: String,
    },
}

/// The outcome of applying one [`Command`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// Nothing to report (blank and membership entries).
    None,
    /// A `Put`/`Delete` applied; `existed` says whether the key was present.
    Written {
        /// Whether the key held a value before.
        existed: bool,
    },
    /// The responses of a [`Command::Batch`], in order.
    Batch(#[serde(deserialize_with = "two_levels")] Vec<Response>),
    /// The command was refused before it changed anything: it breaks a
    /// bound every replica checks ([`Command::check_bounds`]).
    Invalid {
        /// The bound broken, for people.
        reason: String,
    },
    /// A `RegisterNode` added or updated the node.
    NodeRegistered {
        /// The node registered.
        node_id: NodeId,
    },
    /// A `RegisterNode` whose data-dir incarnation differs from the one
    /// the directory recorded for that node id: its data dir was wiped or
    /// replaced (or belongs to another node). Nothing changed; the node
    /// must not start (see `seatfence_raft::storage::ident`).
    IncarnationMismatch {
        /// The node that tried to register.
        node_id: NodeId,
        /// The incarnation the directory recorded.
        known: u64,
        /// The incarnation the node sent.
        claimed: u64,
    },
    /// A `RegisterNode` from a binary that does not read the cluster's
    /// active format, or a `SetFormat` some live node cannot read: nothing
    /// changed.
    FormatRefused {
        /// Why, for the operator.
        reason: String,
    },
    /// A restore step's outcome; `Err` changed nothing.
    Restore(Result<crate::restore::RestoreDone, String>),
    /// `SetFormat`: the cluster's active format now (never lowered).
    FormatSet {
        /// The active format.
        version: crate::format::Version,
    },
    /// A `RegisterNode` naming another region than the directory records
    /// for that node: a node keeps its region for life (placement and
    /// survival rest on it); nothing changed.
    RegionMismatch {
        /// The node that tried to register.
        node_id: NodeId,
        /// The region the directory recorded.
        known: RegionId,
        /// The region the node sent.
        claimed: RegionId,
    },
    /// A `CreateGroup` made the group, or found it existing.
    GroupCreated {
        /// The group's id.
        group_id: GroupId,
        /// Its voters; the first one initializes the group.
        members: Vec<NodeId>,
    },
    /// Placement could not find enough nodes.
    PlacementFailed {
        /// Why, for people.
        reason: String,
    },
    /// A directory command sent to a plain group, or the reverse.
    WrongGroup,
    /// A `RegisterEvent`'s route: the new one, or the existing event's.
    EventRegistered(EventRoute),
    /// An `Audit` was appended, or was already there under the same id.
    Audited {
        /// The entry's sequence number in the audit trail.
        seq: u64,
    },
    /// `was`: whether the node was drained before.
    DrainedSet {
        /// Whether the node was drained before this command.
        was: bool,
    },
    /// A move as it stands after a [`Command::Move`], or why it was refused.
    Move(Result<Box<crate::moves::MoveRecord>, crate::moves::MoveRefused>),
    /// The answer to a [`Command::Node`], or why it was refused.
    Node(Result<Box<crate::lifecycle::NodeOpDone>, crate::lifecycle::NodeRefused>),
    /// The answer to a [`Command::Event`].
    Event(EventReply),
    /// A [`Command::PutSharedIf`] found another value: nothing written.
    Changed,
    /// The answer recorded under a key (the first one).
    Answer(Box<crate::answers::KeyedAnswer>),
}

/// Longest owner or key a command may carry: record keys prefix an
/// owner's length in two bytes, and nothing legitimate comes near.
pub const MAX_OWNER_BYTES: usize = 1024;

thread_local! {
    /// How many batches the decoder of this thread is inside.
    static BATCH_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// How deep batches may nest: the batcher's entry (level 1) may hold the
/// batch of one `WriteBatch` (level 2).
pub const MAX_BATCH_DEPTH: u32 = 2;

/// Decode a batch's items, refusing batches nested deeper than
/// [`MAX_BATCH_DEPTH`]. Decoding is recursive, so without this one ~1 MB
/// message of nested batches would overflow the stack of whatever thread
/// decodes it (an RPC handler, the log reader).
fn two_levels<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            BATCH_DEPTH.with(|c| c.set(c.get().saturating_sub(1)));
        }
    }
    let depth = BATCH_DEPTH.with(|c| {
        let d = c.get();
        c.set(d + 1);
        d
    });
    let _leave = Leave;
    if depth >= MAX_BATCH_DEPTH {
        return Err(crate::format::refuse(
            "batches nest at most two deep (a batch of batches)",
        ));
    }
    Vec::<T>::deserialize(d)
}

impl Command {
    /// A seat inventory command for an event group.
    pub fn event(c: EventCommand) -> Command {
        Command::Event(Box::new(c))
    }

    /// Bounds every replica checks before applying a command (and a
    /// leader before proposing one), so that no input (a hostile sender, a
    /// bug) can reach a panic in `apply`, and none can grow the state by
    /// more than a bounded record: batches nest at most two deep, owners
    /// and keys of idempotency records fit their record keys, a hold's
    /// seat ids and section name are at most
    /// [`MAX_PICK_NAME_BYTES`](crate::inventory::MAX_PICK_NAME_BYTES) (a
    /// refusal naming them is kept under the key). A batch's own commands
    /// are checked as each applies. `Err`: why it is refused.
    pub fn check_bounds(&self) -> Result<(), String> {
        let long = |what: &str, s: &str| {
            (s.len() > MAX_OWNER_BYTES)
                .then(|| format!("{what} is {} bytes, over {MAX_OWNER_BYTES}", s.len()))
        };
        let problem = match self {
            // Its commands are checked one by one as they apply.
            Command::Batch(cmds) => cmds
                .iter()
                .any(|c| matches!(c, Command::Batch(inner) if inner.iter().any(|x| matches!(x, Command::Batch(_)))))
                .then(|| "batches nest at most two deep (a batch of batches)".to_string()),
            Command::Event(c) => {
                let keyed = c.idempotency.as_ref().and_then(|(owner, key)| {
                    long("the idempotency owner", &owner.0)
                        .or_else(|| long("the idempotency key", key))
                });
                keyed.or_else(|| match &c.action {
                    crate::inventory::EventAction::Hold { owner, pick }
                    | crate::inventory::EventAction::Room(crate::inventory::RoomAction::Hold {
                        owner,
                        pick,
                    }) => long("the owner", &owner.0).or_else(|| pick.check_bounds().err()),
                    crate::inventory::EventAction::Cancel { owner, .. } => {
                        long("the owner", &owner.0)
                    }
                    crate::inventory::EventAction::Room(
                        crate::inventory::RoomAction::Join { buyers, .. },
                    ) => (buyers.len() > crate::inventory::MAX_JOIN_BATCH)
                        .then(|| {
                            format!(
                                "a join batch of {} buyers, over {}",
                                buyers.len(),
                                crate::inventory::MAX_JOIN_BATCH
                            )
                        })
                        .or_else(|| buyers.iter().find_map(|b| long("a buyer", &b.0))),
                    _ => None,
                })
            }
            Command::RememberAnswer { owner, key, .. }
            | Command::ForgetAnswer { owner, key, .. } => {
                long("the owner", owner).or_else(|| long("the key", key))
            }
            _ => None,
        };
        problem.map_or(Ok(()), Err)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Put { key, value } => write!(f, "put {key} ({} bytes)", value.len()),
            Command::Delete { key } => write!(f, "delete {key}"),
            Command::Batch(cmds) => write!(f, "batch of {}", cmds.len()),
            Command::PutShared { key, .. } => write!(f, "put shared {key}"),
            Command::PutSharedIf { key, .. } => write!(f, "put shared {key} if unchanged"),
            Command::RememberAnswer { owner, key, .. } => write!(f, "remember {owner}/{key}"),
            Command::ForgetAnswer { owner, key, .. } => write!(f, "forget {owner}/{key}"),
            Command::RegisterNode(n) => write!(f, "register {} in {}", n.id, n.region),
            Command::SetFormat { version } => write!(f, "set data format v{version}"),
            Command::Restore(op) => write!(f, "restore step of backup {}", op.backup()),
            Command::CreateGroup { group_id, .. } => write!(f, "create group {group_id:?}"),
            Command::RegisterEvent { event_id, .. } => write!(f, "register event {event_id}"),
            Command::Audit(a) => write!(f, "audit {} {}", a.action, a.target),
            Command::SetDrained { node, drained } => write!(f, "set node {node} drained={drained}"),
            Command::Move { op, .. } => write!(f, "move {op:?}"),
            Command::Node { op, .. } => write!(f, "node {op:?}"),
            Command::Event(c) => write!(f, "event {} epoch {}", c.event_id, c.epoch),
        }
    }
}

impl fmt::Display for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod size {
    /// Every log entry openraft holds and every slot of the command ring
    /// it reserves per group (4,096) is as large as the largest command:
    /// keep it small (box big variants), so that ring stays under 1 MiB.
    #[test]
    fn a_command_stays_small() {
        let size = std::mem::size_of::<super::Command>();
        assert!(
            size <= 160,
            "Command is {size} bytes; box its largest variant"
        );
    }
}
