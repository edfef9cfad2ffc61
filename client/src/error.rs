//! The API's error codes as a type (docs/DESIGN.md §7, "Error codes"), and
//! what a call can fail with.

use std::time::Duration;

/// Every stable `error.code` the edge answers with; a code this client
/// does not know yet is [`ErrorCode::Other`], never a parse failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorCode {
    MalformedJson,
    UnknownField,
    InvalidField,
    BadBody,
    InvalidRequest,
    InvalidIdempotencyKey,
    IdempotencyKeyRequired,
    InvalidLimit,
    Unauthorized,
    InvalidSignature,
    Forbidden,
    TicketRequired,
    TicketInvalid,
    NotFound,
    EventNotFound,
    HoldNotFound,
    BookingNotFound,
    MethodNotAllowed,
    IdempotencyRequestInProgress,
    SeatsUnavailable,
    StaleEpoch,
    SaleNotOpen,
    SaleClosed,
    BuyerLimitReached,
    HoldNotCancellable,
    HoldNotBookable,
    PaymentDeadlinePassed,
    EventExists,
    MoveInProgress,
    BookingNotRefundable,
    NotAdmittedYet,
    TicketUsed,
    RequestTimeout,
    PayloadTooLarge,
    IdempotencyKeyReused,
    Overloaded,
    RateLimited,
    Internal,
    NoLeader,
    GroupUnavailable,
    StorageFull,
    GatewayUnavailable,
    /// A code this client does not name (a newer edge's).
    Other(String),
}

/// `(wire code, variant)`, one row per named code.
const CODES: &[(&str, ErrorCode)] = &[
    ("malformed_json", ErrorCode::MalformedJson),
    ("unknown_field", ErrorCode::UnknownField),
    ("invalid_field", ErrorCode::InvalidField),
    ("bad_body", ErrorCode::BadBody),
    ("invalid_request", ErrorCode::InvalidRequest),
    ("invalid_idempotency_key", ErrorCode::InvalidIdempotencyKey),
    (
        "idempotency_key_required",
        ErrorCode::IdempotencyKeyRequired,
    ),
    ("invalid_limit", ErrorCode::InvalidLimit),
    ("unauthorized", ErrorCode::Unauthorized),
    ("invalid_signature", ErrorCode::InvalidSignature),
    ("forbidden", ErrorCode::Forbidden),
    ("ticket_required", ErrorCode::TicketRequired),
    ("ticket_invalid", ErrorCode::TicketInvalid),
    ("not_found", ErrorCode::NotFound),
    ("event_not_found", ErrorCode::EventNotFound),
    ("hold_not_found", ErrorCode::HoldNotFound),
    ("booking_not_found", ErrorCode::BookingNotFound),
    ("method_not_allowed", ErrorCode::MethodNotAllowed),
    (
        "idempotency_request_in_progress",
        ErrorCode::IdempotencyRequestInProgress,
    ),
    ("seats_unavailable", ErrorCode::SeatsUnavailable),
    ("stale_epoch", ErrorCode::StaleEpoch),
    ("sale_not_open", ErrorCode::SaleNotOpen),
    ("sale_closed", ErrorCode::SaleClosed),
    ("buyer_limit_reached", ErrorCode::BuyerLimitReached),
    ("hold_not_cancellable", ErrorCode::HoldNotCancellable),
    ("hold_not_bookable", ErrorCode::HoldNotBookable),
    ("payment_deadline_passed", ErrorCode::PaymentDeadlinePassed),
    ("event_exists", ErrorCode::EventExists),
    ("move_in_progress", ErrorCode::MoveInProgress),
    ("booking_not_refundable", ErrorCode::BookingNotRefundable),
    ("not_admitted_yet", ErrorCode::NotAdmittedYet),
    ("ticket_used", ErrorCode::TicketUsed),
    ("request_timeout", ErrorCode::RequestTimeout),
    ("payload_too_large", ErrorCode::PayloadTooLarge),
    ("idempotency_key_reused", ErrorCode::IdempotencyKeyReused),
    ("overloaded", ErrorCode::Overloaded),
    ("rate_limited", ErrorCode::RateLimited),
    ("internal", ErrorCode::Internal),
    ("no_leader", ErrorCode::NoLeader),
    ("group_unavailable", ErrorCode::GroupUnavailable),
    ("storage_full", ErrorCode::StorageFull),
    ("gateway_unavailable", ErrorCode::GatewayUnavailable),
];

impl ErrorCode {
    /// The code as the edge writes it.
    pub fn parse(code: &str) -> ErrorCode {
        CODES
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| ErrorCode::Other(code.to_string()))
    }

    /// The wire code.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::Other(c) => c,
            named => CODES
                .iter()
                .find(|(_, v)| v == named)
                .map(|(c, _)| *c)
                .expect("every named code has a row"),
        }
    }

    /// Whether asking again (under the same idempotency key) may succeed:
    /// the edge or the group could not decide now. A definite "no" (a 4xx
    /// but these) is final: asking again gets the same answer.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ErrorCode::IdempotencyRequestInProgress
                | ErrorCode::RequestTimeout
                | ErrorCode::Overloaded
                | ErrorCode::RateLimited
                | ErrorCode::NoLeader
                | ErrorCode::GroupUnavailable
                | ErrorCode::StorageFull
                | ErrorCode::GatewayUnavailable
        )
    }

    /// Whether the edge that said it should be left for another region's
    /// for a while (it cannot reach a leader, or it is saturated).
    pub fn moves_region(&self) -> bool {
        matches!(self, ErrorCode::NoLeader | ErrorCode::Overloaded)
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The edge answered with an error: final unless
    /// [`ErrorCode::is_retryable`] (and then the call's deadline ran out).
    #[error("{status} {}: {message}", code.as_str())]
    Api {
        status: u16,
        code: ErrorCode,
        message: String,
        /// The whole error body (its extra fields: `unavailable`, ...).
        body: serde_json::Value,
    },
    /// No edge could be reached, or an answer was not the API's.
    #[error("transport: {0}")]
    Transport(String),
    /// The call's deadline passed before a final answer.
    #[error("no final answer within {deadline:?} ({attempts} attempts; last: {last})")]
    Deadline {
        deadline: Duration,
        attempts: u32,
        last: String,
    },
    /// An answer carried an older epoch of the event than one this client
    /// has seen: it came from a former owner and is not believed.
    #[error("event {event}: an answer at epoch {got}, below the epoch {seen} already seen")]
    StaleEpoch { event: String, seen: u64, got: u64 },
}

impl ClientError {
    /// The API's code, when the edge gave one.
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_only_undecided_answers_are_retried() {
        for (wire, code) in CODES {
            assert_eq!(&ErrorCode::parse(wire), code);
            assert_eq!(code.as_str(), *wire);
        }
        assert_eq!(
            ErrorCode::parse("brand_new"),
            ErrorCode::Other("brand_new".into())
        );
        assert!(ErrorCode::NoLeader.is_retryable());
        assert!(ErrorCode::Overloaded.is_retryable());
        for final_no in [
            "seats_unavailable",
            "stale_epoch",
            "idempotency_key_reused",
            "brand_new",
        ] {
            assert!(!ErrorCode::parse(final_no).is_retryable(), "{final_no}");
        }
    }
}
