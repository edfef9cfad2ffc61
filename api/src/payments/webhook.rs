//! `POST /v1/payments/webhook`: the gateway's notification.
//!
//! The HMAC signature over the raw body is checked first (401 otherwise).
//! A correctly signed message is always answered 200 — also when it is
//! ignored or left to the reconciler — so the gateway stops redelivering.
//! It is only a hint: a decided booking answers its status; otherwise the
//! handler dedupes by provider event id (inbox), asks the gateway, compares the txn id and the amount and currency (the
//! message's where it gives them, and the gateway's, which must give
//! them: `amount::check`, the check of every confirm path), and only then
//! confirms.

use hyper::StatusCode;
use seatfence_core::inventory::{BookingStatus, ConfirmPath};
use seatfence_core::{BookingId, Query, QueryResult};
use seatfence_raft::Read;
use serde::Deserialize;
use serde_json::json;

use seatfence_payments::amount;
use seatfence_payments::gateway::{sign, PaymentState, PaymentStatus};
use seatfence_payments::PaymentError;

use crate::error::ApiError;
use crate::message::{Reply, Req};
use crate::Edge;

#[derive(Debug, Deserialize)]
struct Notification {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    payment_id: String,
    invoice: String,
    #[serde(default)]
    txn_id: Option<String>,
    #[serde(default)]
    amount_cents: Option<u64>,
    #[serde(default)]
    currency: Option<String>,
}

fn ok(result: &str) -> Result<Reply, ApiError> {
    Ok(Reply::json(StatusCode::OK, json!({"result": result})))
}

/// `POST /v1/payments/webhook`: verify the signature (401), then confirm the
/// booking only as the gateway's own answer allows; `{"result": ...}` says what was done.
pub async fn handle(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    let payments = edge.payments()?;
    let header = req.gateway_signature.as_deref();
    if !sign::verify_webhook(payments.config.webhook_secret.expose(), &req.body, header) {
        payments.metrics.inc(|m| &m.webhooks_rejected);
        return Err(ApiError::InvalidSignature(
            "X-Gateway-Signature does not match the body",
        ));
    }
    let Ok(n) = serde_json::from_slice::<Notification>(&req.body) else {
        tracing::warn!("signed webhook with an unreadable body: ignored");
        return ok("ignored");
    };
    let Some(id) = BookingId::parse(&n.invoice) else {
        return ok("ignored");
    };
    let Some(l) = payments.load_booking(id).await? else {
        return ok("ignored");
    };
    let Some(b) = l
        .booking
        .as_ref()
        .filter(|b| b.payment.payment_id == n.payment_id)
    else {
        return ok("ignored");
    };
    // A decided booking answers its status: nothing a message could say
    // changes it, so neither the inbox nor the gateway is asked.
    if matches!(
        b.status,
        BookingStatus::Confirmed | BookingStatus::Refunded | BookingStatus::RefundPending
    ) {
        return ok(b.status.as_str());
    }
    let (seen, _) = edge
        .commands
        .client
        .query_with(id.group, &Query::Inbox(n.id.clone()), Read::Lease)
        .await
        .map_err(|e| edge.commands.client_error(e))?;
    if seen == QueryResult::Inbox(true) {
        payments.metrics.inc(|m| &m.webhooks_duplicate);
        return ok("duplicate");
    }
    // The message is a hint: the gateway's own answer decides.
    let state = match payments.gateway.query(&n.payment_id).await {
        Ok(s) => s,
        Err(e) => {
            payments.metrics.inc(|m| &m.gateway_errors);
            tracing::warn!(booking = %id, kind = n.kind, "webhook: gateway query failed ({e}); left to the reconciler");
            return ok("deferred");
        }
    };
    // The message, where it names an amount or currency, must name the
    // booking's; the gateway's answer must name both (`Payments::confirm`
    // checks it, as on every confirm path): a payment for another sum, or
    // one that does not say what was taken, never confirms a booking.
    let told = PaymentState {
        amount_cents: n.amount_cents.or(Some(b.payment.amount_cents)),
        currency: n
            .currency
            .clone()
            .or_else(|| Some(b.payment.currency.clone())),
        ..state.clone()
    };
    if let Err(m) = amount::check(b, &told) {
        payments.metrics.inc(|m| &m.webhooks_rejected);
        payments.amount_alert(&l, ConfirmPath::Webhook, &m);
        return ok("amount_mismatch");
    }
    match (state.status, &state.txn_id) {
        (PaymentStatus::Completed, Some(txn)) if Some(txn) == n.txn_id.as_ref() => {
            match payments
                .confirm(&l, &state, ConfirmPath::Webhook, Some(n.id))
                .await
            {
                Ok(b) => ok(b.status.as_str()),
                Err(PaymentError::AmountMismatch { .. }) => {
                    payments.metrics.inc(|m| &m.webhooks_rejected);
                    ok("amount_mismatch")
                }
                Err(e) => Err(e.into()),
            }
        }
        (PaymentStatus::Completed, _) => {
            tracing::warn!(booking = %id, "webhook txn id differs from the gateway's: ignored");
            ok("ignored")
        }
        _ => ok("deferred"),
    }
}
