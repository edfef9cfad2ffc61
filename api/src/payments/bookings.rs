//! `POST /v1/bookings` and `GET /v1/bookings/{id}`.
//!
//! A booking is created by creating the payment at the gateway first, with
//! a key stable per hold, and then committing it; a failed create leaves no
//! booking and the hold unchanged, and a retry reuses the same payment.
//! With an `Idempotency-Key` the commit is keyed in the event's group: the
//! same key and body answer the first answer, another hold under the key
//! of the same event is 422 `idempotency_key_reused` (keys are scoped to
//! the event, like holds').

use hyper::StatusCode;
use seatfence_core::inventory::{Booking, HoldStatus, Outcome, PaymentAction, PaymentAttempt};
use seatfence_core::{BookingId, HoldId};
use serde::Deserialize;
use serde_json::{json, Value};

use seatfence_payments::gateway::{CreatePayment, GatewayError};
use seatfence_payments::{Loaded, Payments};

use super::fenced;
use crate::error::ApiError;
use crate::events::format_ms;
use crate::message::{Reply, Req};
use crate::Edge;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BookingBody {
    hold_id: String,
}

fn not_found() -> ApiError {
    ApiError::NotFound {
        code: "booking_not_found",
        what: "booking".into(),
    }
}

/// The JSON of a booking.
pub fn booking_json(l: &Loaded, b: &Booking) -> Value {
    json!({
        "booking_id": l.id.to_string(),
        "status": b.status.as_str(),
        "event_id": l.event_id.0,
        "hold_id": l.id.hold().to_string(),
        "seats": l.hold.seats,
        "payment_id": b.payment.payment_id,
        "approve_url": b.payment.approve_url,
        "amount_cents": b.payment.amount_cents,
        "currency": b.payment.currency,
        "expires_at": format_ms(l.hold.expires_at_ms),
        "extensions": l.hold.extensions,
        "txn_id": b.txn_id,
        "confirmed_via": b.confirmed_via.map(|v| v.as_str()),
        "refund_id": b.refund_id,
        "execute_intents": b.intents,
    })
}

fn gateway_error(e: GatewayError) -> ApiError {
    match e {
        GatewayError::Rejected { code, message, .. } => ApiError::Conflict {
            code: "gateway_rejected",
            message: format!("the gateway refused the payment: {code} {message}"),
            extra: json!({"gateway_code": code}),
        },
        other => ApiError::unavailable("gateway_unavailable", other.to_string()),
    }
}

/// `POST /v1/bookings {hold_id}` → 201 pending booking with `approve_url`.
pub async fn create(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    let caller = req.caller(edge)?;
    let payments = edge.payments()?;
    let idem = req.idempotency()?.map(|k| (caller.user.clone(), k));
    let body: BookingBody = req.json()?;
    let hold_not_found = || ApiError::NotFound {
        code: "hold_not_found",
        what: "hold".into(),
    };
    let hold = HoldId::parse(&body.hold_id).ok_or_else(hold_not_found)?;
    let id = BookingId {
        group: hold.group,
        seq: hold.seq,
    };
    let l = payments
        .load_booking(id)
        .await?
        .filter(|l| l.hold.owner == caller.user)
        .ok_or_else(hold_not_found)?;
    if let Some(b) = &l.booking {
        if idem.is_none() {
            // One booking per hold: a repeated request gets the same booking.
            return Ok(fenced(&l, reply(&l, b, StatusCode::CREATED).replayed(true)));
        }
        // Keyed: the same attach again (a no-op) answers from the key's record.
        let attach = PaymentAction::Attach {
            owner: caller.user,
            hold: id.seq,
            payment: b.payment.clone(),
        };
        return attached(payments, &l, idem, attach).await;
    }
    if l.hold.status != HoldStatus::Held {
        return Err(ApiError::from_outcome(
            Outcome::HoldNotBookable {
                status: l.hold.status,
            },
            &l.event_id,
        ));
    }
    if edge.clock.now_ms() >= l.hold.expires_at_ms {
        // About to expire: do not create a payment nobody may complete.
        return Err(ApiError::from_outcome(
            Outcome::PaymentDeadlinePassed,
            &l.event_id,
        ));
    }
    let (price, currency) = l
        .price
        .clone()
        .ok_or_else(|| ApiError::Internal("the event has no price".into()))?;
    let booking_id = id.to_string();
    let key = payments.booking_key(&l).ok_or_else(|| {
        ApiError::unavailable(
            "cluster_id_unknown",
            "this edge does not know the cluster's id yet (a restored event's payment keys name it)",
        )
    })?;
    let base = &payments.public_url;
    let created = payments
        .gateway
        .create(CreatePayment {
            amount_cents: price.saturating_mul(l.hold.seats.len() as u64),
            currency: currency.clone(),
            invoice: booking_id.clone(),
            idempotency_key: key.clone(),
            return_url: format!("{base}/v1/payments/callback?booking={booking_id}"),
            webhook_url: format!("{base}/v1/payments/webhook"),
        })
        .await
        .inspect_err(|_| payments.metrics.inc(|m| &m.gateway_errors))
        .map_err(gateway_error)?;
    let attach = PaymentAction::Attach {
        owner: caller.user,
        hold: id.seq,
        payment: PaymentAttempt {
            payment_id: created.payment_id,
            provider_key: key,
            signature: created.signature,
            approve_url: created.approve_url,
            amount_cents: price.saturating_mul(l.hold.seats.len() as u64),
            currency,
        },
    };
    let answer = attached(payments, &l, idem, attach).await;
    if answer.is_ok() {
        payments.metrics.inc(|m| &m.bookings_created);
    }
    answer
}

/// Commit `attach` (under the request's key, if any) and answer it.
async fn attached(
    payments: &Payments,
    l: &Loaded,
    key: Option<(seatfence_core::UserId, String)>,
    attach: PaymentAction,
) -> Result<Reply, ApiError> {
    let (r, _) = payments.keyed_command(&l.event_id, key, attach).await?;
    match r.outcome {
        Outcome::Booking(b) => Ok(reply(l, &b, StatusCode::CREATED)
            .header("x-seatfence-epoch", r.epoch.0)
            .header("x-seatfence-owner-region", &r.owner.0)
            .replayed(r.replayed)),
        other => Err(ApiError::from_outcome(other, &l.event_id).fenced(r.epoch.0, &r.owner.0)),
    }
}

fn reply(l: &Loaded, b: &Booking, status: StatusCode) -> Reply {
    Reply::json(status, booking_json(l, b))
        .header("location", format!("/v1/bookings/{}", l.id))
        .header("cache-control", "no-store")
}

/// `GET /v1/bookings/{id}` (owner only; 404 to anyone else).
pub async fn get(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    let caller = req.caller(edge)?;
    let id = BookingId::parse(id).ok_or_else(not_found)?;
    let l = seatfence_payments::load_booking(&edge.commands, id)
        .await?
        .filter(|l| l.hold.owner == caller.user)
        .ok_or_else(not_found)?;
    let b = l.booking.as_ref().ok_or_else(not_found)?;
    Ok(reply(&l, b, StatusCode::OK))
}
