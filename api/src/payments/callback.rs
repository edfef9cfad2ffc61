//! `GET /v1/payments/callback?booking=..&paymentID=..&status=..&signature=..`:
//! the buyer's browser back from the gateway.
//!
//! Only a payment id we recorded, with the signature the gateway gave us
//! for it, is acted on; `status` is ignored (anyone can type it). Before
//! the hold's deadline the callback commits an execute intent and captures
//! once; it never releases anything. A forged or unknown callback gets a
//! 4xx JSON error, never a redirect.

use std::time::{Duration, Instant};

use hyper::StatusCode;
use seatfence_core::inventory::{BookingStatus, ConfirmPath};
use seatfence_core::BookingId;
use serde_json::json;

use crate::error::ApiError;
use seatfence_payments::gateway::sign;
use seatfence_payments::Payments;

use super::fenced;
use crate::message::{Reply, Req};
use crate::Edge;

fn rejected(payments: &Payments, code: &'static str, message: &str) -> ApiError {
    payments.metrics.inc(|m| &m.callbacks_rejected);
    ApiError::bad(code, message.to_string())
}

/// `GET /v1/payments/callback`: for a recorded payment with its signature, take
/// the payment before the deadline and answer the booking's status (200).
pub async fn handle(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    let payments = edge.payments()?;
    let param = |name| req.query_param(name).filter(|v| !v.is_empty());
    let (Some(booking), Some(payment_id), Some(signature)) =
        (param("booking"), param("paymentID"), param("signature"))
    else {
        return Err(rejected(
            payments,
            "invalid_callback",
            "booking, paymentID and signature are required",
        ));
    };
    let unknown = || {
        payments.metrics.inc(|m| &m.callbacks_rejected);
        ApiError::NotFound {
            code: "payment_not_found",
            what: "payment".into(),
        }
    };
    let id = BookingId::parse(booking).ok_or_else(unknown)?;
    let l = seatfence_payments::load_booking_for_stranger(&edge.commands, id)
        .await?
        .ok_or_else(unknown)?;
    let b = l.booking.as_ref().ok_or_else(unknown)?;
    if b.payment.payment_id != payment_id {
        return Err(unknown());
    }
    if !sign::same(&b.payment.signature, signature) {
        payments.metrics.inc(|m| &m.callbacks_rejected);
        return Err(ApiError::InvalidSignature(
            "the callback's signature is not this payment's",
        ));
    }
    let answer = |status: BookingStatus| {
        fenced(
            &l,
            Reply::json(
                StatusCode::OK,
                json!({"booking_id": id.to_string(), "status": status.as_str()}),
            )
            .header("cache-control", "no-store"),
        )
    };
    if b.status != BookingStatus::Pending {
        // Decided already: a repeated callback changes nothing.
        return Ok(answer(b.status));
    }
    let now = edge.clock.now_ms();
    if now >= l.hold.expires_at_ms {
        return Err(ApiError::Conflict {
            code: "payment_deadline_passed",
            message: "the hold's deadline has passed: the payment will not be taken".into(),
            extra: json!({"booking_id": id.to_string()}),
        });
    }
    let booking = payments
        .execute_and_confirm(&l, false, ConfirmPath::Callback)
        .await?;
    if booking.status != BookingStatus::Pending {
        return Ok(answer(booking.status));
    }
    // Undecided: another path may be executing this payment right now.
    // Give it about one gateway call to finish so the buyer sees the result.
    let patience = Duration::from_millis(payments.config.call_timeout_ms + 1_000);
    let start = Instant::now();
    let mut status = booking.status;
    while status == BookingStatus::Pending && start.elapsed() < patience {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(b) = payments.load_booking(id).await?.and_then(|l| l.booking) {
            status = b.status;
        }
    }
    Ok(answer(status))
}
