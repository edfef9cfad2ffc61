//! The one conversion between [`ProposeError`] and a tonic `Status`, both
//! ways: the gRPC adapters (`api.rs`, `network/service.rs`) answer with
//! [`to_status`], and `ClusterClient` reads a peer's answer back with
//! [`from_status`]. On the wire a status message is `"{code}: {message}"`,
//! `code` being [`ProposeError::code`].

use seatfence_core::GroupId;
use tonic::{Code, Status};

use crate::propose::ProposeError;

/// The status a gRPC caller gets for `e`. (`NotLeader` travels as a reply
/// of its own, with the hint, where the RPC has one.)
pub fn to_status(e: &ProposeError) -> Status {
    let code = match e {
        ProposeError::UnknownGroup(_) => Code::NotFound,
        ProposeError::NotLeader { .. } | ProposeError::Unavailable(_) => Code::Unavailable,
        ProposeError::MembershipFailed(_) => Code::Unavailable,
        ProposeError::OutcomeUnknown(_) => Code::Aborted,
        ProposeError::Malformed { .. } => Code::InvalidArgument,
        ProposeError::Refused(_) | ProposeError::NotAVoter { .. } => Code::FailedPrecondition,
        ProposeError::Internal(_) => Code::Internal,
        ProposeError::StorageFull(_) | ProposeError::Overloaded(_) => Code::ResourceExhausted,
    };
    Status::new(code, format!("{}: {e}", e.code()))
}

impl From<ProposeError> for Status {
    fn from(e: ProposeError) -> Status {
        to_status(&e)
    }
}

/// What a peer's `status` means for a call about `group`: its code read
/// back from the message, else from the gRPC code (a transport failure is
/// `Unavailable`).
pub fn from_status(group: GroupId, status: &Status) -> ProposeError {
    let msg = status.message();
    let (code, rest) = msg.split_once(": ").unwrap_or(("", msg));
    let rest = rest.to_string();
    match code {
        "unknown_group" => ProposeError::UnknownGroup(group),
        "not_leader" => ProposeError::NotLeader {
            group,
            leader: None,
        },
        "outcome_unknown" => ProposeError::OutcomeUnknown(rest),
        "group_unavailable" => ProposeError::Unavailable(rest),
        "malformed_command" => malformed("malformed_command", rest),
        "malformed_query" => malformed("malformed_query", rest),
        "bad_membership_op" => malformed("bad_membership_op", rest),
        "refused" => ProposeError::Refused(rest),
        "not_a_voter" => ProposeError::Refused(msg.to_string()),
        "membership_change_failed" => ProposeError::MembershipFailed(rest),
        "storage_full" => ProposeError::StorageFull(rest),
        "overloaded" => ProposeError::Overloaded(rest),
        _ => match status.code() {
            Code::NotFound => ProposeError::UnknownGroup(group),
            Code::Aborted => ProposeError::OutcomeUnknown(msg.to_string()),
            Code::InvalidArgument => malformed("malformed_command", msg.to_string()),
            // Refused by the node's gate: retrying cannot help.
            Code::FailedPrecondition | Code::PermissionDenied | Code::Unauthenticated => {
                ProposeError::Refused(msg.to_string())
            }
            Code::Internal | Code::Unknown | Code::DataLoss => {
                ProposeError::Internal(format!("{:?}: {msg}", status.code()))
            }
            _ => ProposeError::Unavailable(format!("{:?}: {msg}", status.code())),
        },
    }
}

fn malformed(code: &'static str, reason: String) -> ProposeError {
    ProposeError::Malformed { code, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_survives_the_wire() {
        let g = GroupId(7);
        for e in [
            ProposeError::UnknownGroup(g),
            ProposeError::OutcomeUnknown("leader changed".into()),
            ProposeError::Unavailable("shutting down".into()),
            malformed("malformed_query", "eof".into()),
            ProposeError::Refused("changing membership".into()),
            ProposeError::MembershipFailed("timeout".into()),
            ProposeError::StorageFull("below the reserve".into()),
            ProposeError::Overloaded("4096 writes pending".into()),
        ] {
            let back = from_status(g, &to_status(&e));
            assert_eq!(back, e, "{e:?} came back as {back:?}");
            assert_eq!(back.is_final(), e.is_final());
        }
        let voter = from_status(g, &to_status(&ProposeError::NotAVoter { group: g, to: 3 }));
        assert_eq!(voter.code(), "refused");
        assert!(voter.is_final());
    }

    #[test]
    fn a_bare_transport_status_is_retryable() {
        let e = from_status(GroupId(1), &Status::unavailable("connection refused"));
        assert_eq!(e.code(), "group_unavailable");
        assert!(!e.is_final());
        let e = from_status(GroupId(1), &Status::deadline_exceeded("slow"));
        assert!(!e.is_final());
    }
}
