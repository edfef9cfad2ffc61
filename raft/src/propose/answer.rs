//! What a proposal answers: the committed result ([`Committed`],
//! [`CommittedBatch`], [`Answer`]) or a [`ProposeError`] with a stable code
//! and, for `not_leader`, a [`LeaderHint`].

use openraft::error::ForwardToLeader;
use seatfence_core::{GroupId, QueryResult, Response};

use crate::metrics::{RaftMetrics, METRICS};
use crate::types::TypeConfig;

/// A committed write: the state machine's answer and the entry that
/// carried it (`log_index` 0: answered by the leader without proposing).
#[derive(Debug, Clone)]
pub struct Committed {
    /// The state machine's answer (or the leader's, when it refused before proposing).
    pub response: Response,
    /// Index of the entry that carried the command; 0 when none did.
    pub log_index: u64,
    /// Term of that entry (the leader's current term when `log_index` is 0).
    pub term: u64,
}

/// A committed batch: one answer per command, in order.
#[derive(Debug, Clone)]
pub struct CommittedBatch {
    /// One answer per command, in the order sent.
    pub responses: Vec<Response>,
    /// Index of the entry that carried the batch; 0 when no command was proposed.
    pub log_index: u64,
    /// Term of that entry (the leader's current term when `log_index` is 0).
    pub term: u64,
}

/// An answered query and the replica state it was read from.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The query's answer.
    pub result: QueryResult,
    /// Index of the last entry the replica had applied (0: none yet).
    pub applied_index: u64,
    /// The replica's current term when it answered.
    pub term: u64,
}

/// Where a group's leader is, as a replica that is not it knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderHint {
    /// The leader's node id.
    pub node_id: u64,
    /// The leader's gRPC address.
    pub addr: String,
}

/// Why a proposal (or a read or membership change at the leader) was not
/// answered. Each variant has a stable [`code`](ProposeError::code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// This node hosts no replica of the group.
    #[error("group {0} is not hosted on this node")]
    UnknownGroup(GroupId),
    /// Ask the leader this replica knows, if any.
    #[error("not the leader of group {group}")]
    NotLeader {
        /// The group asked.
        group: GroupId,
        /// The leader this replica knows, if any.
        leader: Option<LeaderHint>,
    },
    /// The entry may or may not commit (discarded by a leader change after
    /// it was proposed): retry with the same idempotency key.
    #[error("{0}")]
    OutcomeUnknown(String),
    /// The group cannot serve now (shutting down, fatal Raft error).
    #[error("{0}")]
    Unavailable(String),
    /// The bytes of a command, query or membership op did not decode.
    #[error("{reason}")]
    Malformed {
        /// The stable code (`malformed_command`, `malformed_query`, `bad_membership_op`,
        /// `malformed_payload`, `batch_too_large`).
        code: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// Raft refused the request for a reason that a retry will not fix.
    #[error("{0}")]
    Refused(String),
    /// A leadership transfer named a node that is not a voter of the group.
    #[error("node {to} is not a voter of group {group}")]
    NotAVoter {
        /// The group asked.
        group: GroupId,
        /// The node the transfer named.
        to: u64,
    },
    /// A membership change failed (leadership moved meanwhile, a node is missing,
    /// or the voters were not the ones a compare-and-set expected).
    #[error("{0}")]
    MembershipFailed(String),
    /// A peer answered something this node cannot read.
    #[error("{0}")]
    Internal(String),
    /// The leader's disk is below its free-space reserve: it takes no new
    /// entries until space returns (`storage::health`).
    #[error("{0}")]
    StorageFull(String),
    /// The group or the node has as many writes pending as it takes
    /// (`batcher::WriteLimits`): nothing was proposed; retry shortly.
    #[error("{0}")]
    Overloaded(String),
}

impl ProposeError {
    /// The stable code, written in front of the message on the wire.
    pub fn code(&self) -> &'static str {
        match self {
            ProposeError::UnknownGroup(_) => "unknown_group",
            ProposeError::NotLeader { .. } => "not_leader",
            ProposeError::OutcomeUnknown(_) => "outcome_unknown",
            ProposeError::Unavailable(_) => "group_unavailable",
            ProposeError::Malformed { code, .. } => code,
            ProposeError::Refused(_) => "refused",
            ProposeError::NotAVoter { .. } => "not_a_voter",
            ProposeError::MembershipFailed(_) => "membership_change_failed",
            ProposeError::Internal(_) => "internal",
            ProposeError::StorageFull(_) => "storage_full",
            ProposeError::Overloaded(_) => "overloaded",
        }
    }

    /// Whether the client stops at this answer instead of looking for
    /// another leader: asking again elsewhere cannot help (an `overloaded`
    /// leader is the leader: its caller backs off and asks again later).
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            ProposeError::OutcomeUnknown(_)
                | ProposeError::Malformed { .. }
                | ProposeError::Refused(_)
                | ProposeError::NotAVoter { .. }
                | ProposeError::StorageFull(_)
                | ProposeError::Overloaded(_)
        )
    }

    pub(super) fn unavailable(e: impl std::fmt::Display) -> ProposeError {
        ProposeError::Unavailable(e.to_string())
    }

    pub(super) fn not_leader(group: GroupId, f: ForwardToLeader<TypeConfig>) -> ProposeError {
        RaftMetrics::inc(&METRICS.not_leader_answers);
        ProposeError::NotLeader {
            group,
            leader: match (f.leader_id, f.leader_node) {
                (Some(node_id), Some(node)) => Some(LeaderHint {
                    node_id,
                    addr: node.addr,
                }),
                _ => None,
            },
        }
    }
}
