//! [`ApiError`]: every way a request can fail, mapped to HTTP in one place
//! (`status`, `code`, extra fields, `Retry-After`), with the mapping of
//! every refused inventory outcome (`ApiError::from_outcome`).

use hyper::StatusCode;
use seatfence_core::inventory::Outcome;
use seatfence_core::EventId;
use seatfence_payments::PaymentError;
use seatfence_regions::CommandError;
use serde_json::{json, Value};

mod text;

pub use text::{excerpt, redact_addresses, MESSAGE_MAX};

/// Every way a request can fail; each variant maps to one HTTP status and
/// error `code` (see [`ApiError::status`], [`ApiError::code`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// The bearer token is missing, invalid or expired: 401 with
    /// `WWW-Authenticate: Bearer`.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// An operator-only endpoint called with a non-operator token: 403.
    #[error("this endpoint needs an operator token")]
    Forbidden,
    /// A waiting room's refusal of a hold (`ticket_required`,
    /// `ticket_invalid`): 403.
    #[error("{message}")]
    Admission {
        /// Machine-readable error code, e.g. `ticket_required`.
        code: &'static str,
        /// Human-readable explanation for the client.
        message: String,
    },
    /// A payment signal whose signature does not verify.
    #[error("{0}")]
    InvalidSignature(&'static str),
    /// A named resource (event, hold, booking, move) does not exist: 404.
    #[error("{what} not found")]
    NotFound {
        /// Machine-readable error code, e.g. `event_not_found`.
        code: &'static str,
        /// What was not found, e.g. `event e1`; the message is `{what} not found`.
        what: String,
    },
    /// No route matches the path (carried here): 404 `not_found`.
    #[error("no route for {0}")]
    NoRoute(String),
    /// A route matches the path but not the method: 405 with an `Allow` header.
    #[error("method not allowed (allowed: {allow})")]
    MethodNotAllowed {
        /// The methods the path allows, as the `Allow` header's value.
        allow: String,
    },
    /// The request is malformed or a field is invalid: 400.
    #[error("{message}")]
    BadRequest {
        /// Machine-readable error code, e.g. `invalid_field`.
        code: &'static str,
        /// Human-readable explanation for the client.
        message: String,
    },
    /// The body is over `MAX_BODY_BYTES`: 413, and the
    /// connection is closed.
    #[error("request body is over {limit} bytes")]
    PayloadTooLarge {
        /// The largest body accepted, in bytes.
        limit: usize,
    },
    /// The body did not arrive within the body timeout: 408, and the
    /// connection is closed.
    #[error("the request body did not arrive within {ms} ms")]
    RequestTimeout {
        /// The body timeout that ran out, in ms.
        ms: u64,
    },
    /// The request conflicts with the current state (a refused inventory
    /// outcome, a stale epoch, a gateway rejection): 409.
    #[error("{message}")]
    Conflict {
        /// Machine-readable error code, e.g. `seats_unavailable`.
        code: &'static str,
        /// Human-readable explanation for the client.
        message: String,
        /// A JSON object whose fields are merged into the error object.
        extra: Value,
    },
    /// What was asked for is no longer kept (a changefeed cursor older
    /// than the retention): 410, with `extra` in the error object.
    #[error("{message}")]
    Gone {
        /// Machine-readable error code.
        code: &'static str,
        /// Human-readable explanation for the client.
        message: String,
        /// A JSON object whose fields are merged into the error object.
        extra: Value,
    },
    /// An `Idempotency-Key` already used with a different request: 422.
    #[error("this Idempotency-Key was used with another request")]
    IdempotencyKeyReused,
    /// The caller or the edge is over a limit (rate, in-flight slots, queue
    /// joins): 429 with `Retry-After: 1`.
    #[error("{message}")]
    TooManyRequests {
        /// Machine-readable error code, e.g. `rate_limited`, `overloaded`.
        code: &'static str,
        /// Human-readable explanation for the client.
        message: String,
    },
    /// The request cannot be served now (no leader, gateway down, payments not
    /// configured, a timed-out join): 503 with `Retry-After: 1`.
    #[error("{message}")]
    Unavailable {
        /// Machine-readable error code, e.g. `no_leader`.
        code: &'static str,
        /// Human-readable explanation; logged, and sent with addresses redacted.
        message: String,
    },
    /// A feature this server does not provide: 501.
    #[error("{0}")]
    NotImplemented(&'static str),
    /// An unexpected server-side failure: 500; the message is logged and
    /// sent with addresses redacted.
    #[error("internal error: {0}")]
    Internal(String),
    /// A refusal decided by the event's group: answered like `inner`, with
    /// the fence headers of the group's reply.
    #[error("{inner}")]
    Fenced {
        /// The refusal itself, which decides status, code and body.
        inner: Box<ApiError>,
        /// The event's epoch, sent as `X-Seatfence-Epoch`.
        epoch: u64,
        /// The region owning the event, sent as `X-Seatfence-Owner-Region`.
        owner_region: String,
    },
}

impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> ApiError {
        match e {
            CommandError::EventNotFound(id) => ApiError::NotFound {
                code: "event_not_found",
                what: format!("event {id}"),
            },
            CommandError::Internal(m) => ApiError::Internal(m),
            CommandError::Overloaded(message) => ApiError::TooManyRequests {
                code: "overloaded",
                message,
            },
            e @ (CommandError::NoLeader(_)
            | CommandError::StorageFull(_)
            | CommandError::Unavailable(_)) => ApiError::unavailable(e.code(), e.to_string()),
        }
    }
}

impl From<PaymentError> for ApiError {
    fn from(e: PaymentError) -> ApiError {
        match e {
            PaymentError::Command(e) => e.into(),
            PaymentError::BookingNotFound => ApiError::NotFound {
                code: "booking_not_found",
                what: "booking".into(),
            },
            PaymentError::AmountMismatch { booking } => ApiError::Conflict {
                code: "amount_mismatch",
                message: "the gateway reports another amount or currency for this payment (or none): it does not confirm the booking; operators are alerted".into(),
                extra: json!({"booking_id": booking.to_string()}),
            },
            PaymentError::Refused { outcome, event_id } => ApiError::from_outcome(outcome, &event_id),
        }
    }
}

impl ApiError {
    /// The HTTP answer for an inventory outcome that is not a success.
    pub fn from_outcome(o: Outcome, event_id: &EventId) -> ApiError {
        let code = o.error_code().unwrap_or("internal");
        match o {
            Outcome::SeatsUnavailable { .. }
            | Outcome::StaleEpoch { .. }
            | Outcome::SaleNotOpen
            | Outcome::SaleClosed
            | Outcome::BuyerLimitReached { .. }
            | Outcome::HoldNotCancellable { .. }
            | Outcome::HoldNotBookable { .. } => hold_refusal(o, code),
            Outcome::PaymentDeadlinePassed
            | Outcome::PaymentMismatch
            | Outcome::ReleaseRefused { .. }
            | Outcome::BookingNotRefundable { .. }
            | Outcome::ExtensionsExhausted { .. } => payment_refusal(o, code),
            Outcome::BookingNotFound
            | Outcome::OutboxItemNotFound
            | Outcome::EventExists
            | Outcome::IdempotencyKeyReused
            | Outcome::EventNotFound
            | Outcome::HoldNotFound => record_refusal(o, code, event_id),
            Outcome::UnknownSeats { .. }
            | Outcome::UnknownSection { .. }
            | Outcome::TooManySeats { .. }
            | Outcome::InvalidRequest { .. }
            | Outcome::InvalidEvent(_) => invalid_request(o, code),
            Outcome::TicketRequired
            | Outcome::TicketInvalid
            | Outcome::NotAdmittedYet
            | Outcome::TicketUsed { .. }
            | Outcome::NoWaitingRoom
            | Outcome::OpensAtRequired => room_refusal(o, code, event_id),
            other => unexpected(other),
        }
    }

    /// A 400 [`ApiError::BadRequest`] with `code` and `message`.
    pub fn bad(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            code,
            message: message.into(),
        }
    }

    /// A 503 [`ApiError::Unavailable`] with `code` and `message`.
    pub fn unavailable(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::Unavailable {
            code,
            message: message.into(),
        }
    }

    /// Attach the event's fence (`X-Seatfence-Epoch`, `-Owner-Region`).
    pub fn fenced(self, epoch: u64, owner_region: &str) -> ApiError {
        ApiError::Fenced {
            inner: Box::new(self),
            epoch,
            owner_region: owner_region.to_string(),
        }
    }

    /// Extra response headers.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = Vec::new();
        if let Some(s) = self.retry_after() {
            h.push(("retry-after", s.to_string()));
        }
        if let ApiError::Fenced {
            epoch,
            owner_region,
            ..
        } = self
        {
            h.push(("x-seatfence-epoch", epoch.to_string()));
            h.push(("x-seatfence-owner-region", owner_region.clone()));
        }
        match self.unfenced() {
            ApiError::MethodNotAllowed { allow } => h.push(("allow", allow.clone())),
            ApiError::Unauthorized(_) => h.push(("www-authenticate", "Bearer".into())),
            _ => {}
        }
        if matches!(
            self.unfenced(),
            ApiError::PayloadTooLarge { .. } | ApiError::RequestTimeout { .. }
        ) {
            h.push(("connection", "close".into()));
        }
        h
    }

    fn unfenced(&self) -> &ApiError {
        match self {
            ApiError::Fenced { inner, .. } => inner.unfenced(),
            other => other,
        }
    }

    /// The HTTP status; a fenced error answers with its inner error's.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Fenced { inner, .. } => inner.status(),
            ApiError::Unauthorized(_) | ApiError::InvalidSignature(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden | ApiError::Admission { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } | ApiError::NoRoute(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Gone { .. } => StatusCode::GONE,
            ApiError::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The machine-readable error code sent as `error.code`; a fenced
    /// error answers with its inner error's.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Fenced { inner, .. } => inner.code(),
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::InvalidSignature(_) => "invalid_signature",
            ApiError::Forbidden => "forbidden",
            ApiError::Admission { code, .. } => code,
            ApiError::NotFound { code, .. } => code,
            ApiError::NoRoute(_) => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::BadRequest { code, .. } => code,
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::RequestTimeout { .. } => "request_timeout",
            ApiError::Conflict { code, .. } | ApiError::Gone { code, .. } => code,
            ApiError::IdempotencyKeyReused => "idempotency_key_reused",
            ApiError::TooManyRequests { code, .. } => code,
            ApiError::Unavailable { code, .. } => code,
            ApiError::NotImplemented(_) => "not_implemented",
            ApiError::Internal(_) => "internal",
        }
    }

    /// Seconds a client should wait before retrying, when it should.
    pub fn retry_after(&self) -> Option<u64> {
        matches!(
            self.unfenced(),
            ApiError::TooManyRequests { .. } | ApiError::Unavailable { .. }
        )
        .then_some(1)
    }

    /// The JSON body: `{"error":{"code","message",...extra}}`. The message
    /// is cut to [`MESSAGE_MAX`] characters: it may echo what the client
    /// sent (an id of any length). A server-side failure's message names no
    /// address (of a node, a peer or the gateway): the log has them.
    pub fn body(&self) -> Value {
        let message = match self.unfenced() {
            ApiError::Unavailable { .. } | ApiError::Internal(_) => {
                redact_addresses(&self.to_string())
            }
            _ => self.to_string(),
        };
        let mut err = json!({"code": self.code(), "message": excerpt(&message, MESSAGE_MAX)});
        if let ApiError::Conflict { extra, .. } | ApiError::Gone { extra, .. } = self.unfenced() {
            if let (Some(e), Some(x)) = (err.as_object_mut(), extra.as_object()) {
                for (k, v) in x {
                    e.insert(k.clone(), v.clone());
                }
            }
        }
        json!({ "error": err })
    }

    /// Server-side failures are logged once, here; client errors are not.
    pub fn log(&self, request_id: &str) {
        match self.unfenced() {
            ApiError::Internal(m) => tracing::error!(code = self.code(), request_id, "{m}"),
            ApiError::Unavailable { message, .. } => {
                tracing::warn!(code = self.code(), request_id, "{message}")
            }
            other => tracing::debug!(code = other.code(), request_id, "refused"),
        }
    }
}

/// A 409 [`ApiError::Conflict`] with `code`, `message` and `extra`.
fn conflict(code: &'static str, message: String, extra: Value) -> ApiError {
    ApiError::Conflict {
        code,
        message,
        extra,
    }
}

/// The answer for an outcome `from_outcome` has no mapping for.
fn unexpected(other: Outcome) -> ApiError {
    ApiError::Internal(format!("unexpected outcome {other:?}"))
}

// Each family below is total, so that an outcome routed to the wrong one
// still gets `from_outcome`'s answer for an unmapped outcome, not a panic.

/// Refused holds: seats, the fence, the sale window, the buyer's limit, a
/// hold's status.
fn hold_refusal(o: Outcome, code: &'static str) -> ApiError {
    match o {
        Outcome::SeatsUnavailable {
            unavailable,
            available,
        } => conflict(
            code,
            if unavailable.is_empty() {
                format!("not enough free seats: {available} left where asked")
            } else {
                // The group does not say whose holds they are (its recorded
                // answers have no room for it yet): say what a buyer who
                // asks again for their own seats needs to know.
                format!(
                    "held or sold: {} (a seat in a hold of yours counts too: holding it again \
                     does not extend your hold)",
                    unavailable.join(", ")
                )
            },
            json!({"unavailable": unavailable, "available": available}),
        ),
        Outcome::StaleEpoch { current, owner } => conflict(
            code,
            format!("stale epoch: the event is at epoch {current}, owned by {owner}"),
            json!({"current_epoch": current.0, "owner_region": owner.0}),
        ),
        Outcome::SaleNotOpen => conflict(code, "the sale has not opened yet".into(), json!({})),
        Outcome::SaleClosed => conflict(code, "the sale is closed".into(), json!({})),
        Outcome::BuyerLimitReached { limit } => conflict(
            code,
            format!("a buyer may hold or buy at most {limit} seats of this event"),
            json!({"limit": limit}),
        ),
        Outcome::HoldNotCancellable { status } => conflict(
            code,
            format!(
                "this hold has a payment and cannot be cancelled (hold {})",
                status.as_str()
            ),
            json!({"status": status.as_str()}),
        ),
        Outcome::HoldNotBookable { status } => conflict(
            code,
            format!("a {} hold cannot be booked", status.as_str()),
            json!({"status": status.as_str()}),
        ),
        other => unexpected(other),
    }
}

/// Refused payments, releases, refunds and deadline extensions.
fn payment_refusal(o: Outcome, code: &'static str) -> ApiError {
    match o {
        Outcome::PaymentDeadlinePassed => conflict(
            code,
            "the hold's deadline has passed: no payment is taken".into(),
            json!({}),
        ),
        Outcome::PaymentMismatch => conflict(
            code,
            "the payment id is not this booking's".into(),
            json!({}),
        ),
        Outcome::ReleaseRefused { reason } => conflict(code, reason, json!({})),
        Outcome::BookingNotRefundable { status } => conflict(
            code,
            format!(
                "only a confirmed booking can be refunded (this one is {})",
                status.as_str()
            ),
            json!({"status": status.as_str()}),
        ),
        Outcome::ExtensionsExhausted { extensions } => conflict(
            code,
            format!("the deadline was already extended {extensions} times"),
            json!({"extensions": extensions}),
        ),
        other => unexpected(other),
    }
}

/// A record that is missing, or already there: events, holds, bookings,
/// idempotency keys.
fn record_refusal(o: Outcome, code: &'static str, event_id: &EventId) -> ApiError {
    match o {
        Outcome::BookingNotFound | Outcome::OutboxItemNotFound => ApiError::NotFound {
            code,
            what: "booking".into(),
        },
        Outcome::EventExists => conflict(code, format!("event {event_id} exists"), json!({})),
        Outcome::IdempotencyKeyReused => ApiError::IdempotencyKeyReused,
        Outcome::EventNotFound => ApiError::NotFound {
            code,
            what: format!("event {event_id}"),
        },
        Outcome::HoldNotFound => ApiError::NotFound {
            code,
            what: "hold".into(),
        },
        other => unexpected(other),
    }
}

/// A request the group found malformed: unknown seats or section, too many
/// seats, an invalid field or event spec.
fn invalid_request(o: Outcome, code: &'static str) -> ApiError {
    match o {
        // The group names at most `MAX_ECHOED_SEATS` of them.
        Outcome::UnknownSeats { seats } => {
            let max = seatfence_core::inventory::MAX_ECHOED_SEATS;
            let more = if seats.len() >= max {
                format!(" (at most {max} named)")
            } else {
                String::new()
            };
            ApiError::bad(code, format!("no such seats{more}: {}", seats.join(", ")))
        }
        Outcome::UnknownSection { section } => {
            ApiError::bad(code, format!("no such section: {section}"))
        }
        Outcome::TooManySeats { max } => {
            ApiError::bad(code, format!("at most {max} seats per hold"))
        }
        Outcome::InvalidRequest { reason } => ApiError::bad(code, reason),
        Outcome::InvalidEvent(e) => ApiError::bad(code, e.to_string()),
        other => unexpected(other),
    }
}

/// The waiting room's refusals: no ticket, a bad or used-up one, not
/// admitted yet, or no room to join.
fn room_refusal(o: Outcome, code: &'static str, event_id: &EventId) -> ApiError {
    match o {
        Outcome::TicketRequired => ApiError::Admission {
            code,
            message: format!(
                "event {event_id} has a waiting room: join its queue (POST /v1/events/{event_id}/queue) and send the ticket you get once admitted as the Admission-Ticket header"
            ),
        },
        Outcome::TicketInvalid => ApiError::Admission {
            code,
            message: "the admission ticket is not this buyer's for this event, or its time ran out: join the queue again".into(),
        },
        Outcome::NotAdmittedYet => conflict(
            code,
            "still waiting in the queue: poll GET /v1/events/{id}/queue/me".into(),
            json!({}),
        ),
        Outcome::TicketUsed { limit, held } => conflict(
            code,
            format!(
                "this admission ticket has held {held} of the {limit} seats one ticket may hold (cancelled holds count): a hold past that is refused until the ticket lapses and the buyer joins the queue again"
            ),
            json!({"limit": limit, "seats_held": held}),
        ),
        Outcome::NoWaitingRoom => {
            conflict(code, format!("event {event_id} has no waiting room"), json!({}))
        }
        Outcome::OpensAtRequired => conflict(
            code,
            format!("event {event_id} has no opens_at: a waiting room admits from the opening"),
            json!({}),
        ),
        other => unexpected(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_bodies_name_no_address() {
        let e = ApiError::unavailable(
            "group_unavailable",
            "transport error: tcp connect error 127.0.0.1:7101 (http://10.0.0.7:7300/v1), node [::1]:9000.",
        );
        let body = e.body().to_string();
        for leak in ["127.0.0.1", "7101", "10.0.0.7", "::1"] {
            assert!(!body.contains(leak), "{body}");
        }
        assert!(
            body.contains("transport error: tcp connect error [address]"),
            "{body}"
        );
        // Client errors keep what they say (no address in them anyway).
        let e = ApiError::unavailable("no_leader", "no leader for group 7 within 5s");
        assert!(e.body().to_string().contains("group 7 within 5s"));
    }

    /// A leader over its pending-writes bound refused before proposing:
    /// the buyer is told to come back, as for an edge's own admission.
    #[test]
    fn an_overloaded_leader_is_429_overloaded_with_retry_after() {
        let e = ApiError::from(CommandError::Overloaded(
            "group 7 has 4096 writes pending (at most 4096): retry shortly".into(),
        ));
        assert_eq!(e.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.code(), "overloaded");
        assert_eq!(e.retry_after(), Some(1));
    }
}
