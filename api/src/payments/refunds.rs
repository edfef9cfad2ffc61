//! `POST /v1/admin/bookings/{id}/refund` (operators): refund a confirmed
//! booking (a cancelled show, a goodwill gesture).
//!
//! ```text
//!  operator, Idempotency-Key, {reason, release_seats}
//!    ─▶ commit Refund (the booking's group): confirmed ─▶ refund_pending,
//!       a refund queued in the outbox; release_seats: the seats go back
//!       on sale ─▶ 200 the booking
//!    ─▶ the outbox (group leader): RefundIntent committed ─▶ gateway
//!       refund with its fence ─▶ OutboxDone ─▶ refunded
//!  not confirmed ─▶ 409 booking_not_refundable; same key again ─▶ the
//!  same answer; another key ─▶ 409 (a booking is refunded once)
//! ```
//!
//! The route is audited (`refund`, the booking, the result), and both
//! transitions are in the changefeed (`booking.refund_pending`,
//! `booking.refunded`; `hold.released` when the seats return).

use hyper::StatusCode;
use seatfence_core::inventory::{EventAction, Outcome, PaymentAction};
use seatfence_core::BookingId;
use serde::Deserialize;
use serde_json::json;

use super::bookings::booking_json;
use crate::error::ApiError;
use crate::message::{Reply, Req};
use crate::Edge;

/// Longest reason accepted (the state machine refuses longer ones too).
const MAX_REASON: usize = 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RefundBody {
    reason: String,
    #[serde(default)]
    release_seats: bool,
}

fn not_found() -> ApiError {
    ApiError::NotFound {
        code: "booking_not_found",
        what: "booking".into(),
    }
}

/// `POST /v1/admin/bookings/{id}/refund`.
pub async fn refund(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    let caller = req.operator(edge)?;
    let key = req.idempotency()?.ok_or_else(|| {
        ApiError::bad(
            "idempotency_key_required",
            "a refund needs an Idempotency-Key: the same key again answers the same refund",
        )
    })?;
    let body: RefundBody = req.json()?;
    if body.reason.trim().is_empty() || body.reason.len() > MAX_REASON {
        return Err(ApiError::bad(
            "invalid_field",
            format!("reason must be 1-{MAX_REASON} bytes, not only spaces"),
        ));
    }
    let id = BookingId::parse(id).ok_or_else(not_found)?;
    let l = seatfence_payments::load_booking(&edge.commands, id)
        .await?
        .ok_or_else(not_found)?;
    if l.booking.is_none() {
        return Err(not_found());
    }
    let action = PaymentAction::Refund {
        hold: id.seq,
        by: caller.user.0.clone(),
        reason: body.reason,
        release_seats: body.release_seats,
    };
    let key = Some((caller.user.clone(), key));
    let (reply, _) = edge
        .commands
        .run(&l.event_id, key, EventAction::Payment(action))
        .await?;
    match reply.outcome {
        Outcome::Booking(b) => {
            let mut v = booking_json(&l, &b);
            v["refund"] = b.refund.as_ref().map_or(json!(null), |r| {
                json!({
                    "by": r.by,
                    "reason": r.reason,
                    "release_seats": r.release_seats,
                    "at": crate::events::format_ms(r.at_ms),
                })
            });
            Ok(Reply::json(StatusCode::OK, v)
                .header("cache-control", "no-store")
                .replayed(reply.replayed))
        }
        other => {
            Err(ApiError::from_outcome(other, &l.event_id).fenced(reply.epoch.0, &reply.owner.0))
        }
    }
}
