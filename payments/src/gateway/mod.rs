//! The payment gateway: the client trait every adapter implements, its
//! HTTP client ([`client`]), the fleet's shared access token ([`token`]),
//! signatures ([`sign`]). The mock provider (`seatfence gateway`) lives in
//! `seatfence-testkit`.
//!
//! Every side effect (execute, void, refund) carries `X-Fencing-Token:
//! {epoch}.{term}`; the gateway refuses a token lower than the highest it
//! has seen for that payment, so a deposed leader cannot capture or refund.

pub mod client;
pub mod conformance;
pub mod sign;
pub mod token;

use futures::future::BoxFuture;
use seatfence_core::Fence;
use serde::{Deserialize, Serialize};

/// A payment to create. `idempotency_key` is stable per hold: creating
/// again with it returns the same payment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreatePayment {
    /// The sum to take, in cents (the seat price times the hold's seats).
    pub amount_cents: u64,
    /// ISO 4217 currency code of `amount_cents`.
    pub currency: String,
    /// Our reference for the payment: the booking id.
    pub invoice: String,
    /// The provider key of the hold's payment ([`provider_key`]).
    pub idempotency_key: String,
    /// Where the gateway sends the buyer's browser once approved (the edge's callback).
    pub return_url: String,
    /// Where the gateway posts its signed webhooks about the payment.
    pub webhook_url: String,
}

/// The gateway's answer to a create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedPayment {
    /// The gateway's id of the payment.
    pub payment_id: String,
    /// The gateway's signature of the payment; a callback must present it.
    pub signature: String,
    /// Where the buyer approves the payment.
    pub approve_url: String,
}

/// Where a payment stands at the gateway (lowercase on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PaymentStatus {
    /// Created, not yet approved by the buyer.
    Created,
    /// Approved by the buyer, not yet captured: an execute captures it.
    Approved,
    /// Captured: the money is taken.
    Completed,
    /// The gateway failed it; it will never complete.
    Failed,
    /// The buyer cancelled it; it will never complete.
    Cancelled,
    /// Voided by seatfence (`POST /v1/payments/{id}/void`): it can no
    /// longer be executed or captured.
    Voided,
}

impl PaymentStatus {
    /// Failed, cancelled or voided: it will never complete.
    pub fn is_dead(self) -> bool {
        matches!(
            self,
            PaymentStatus::Failed | PaymentStatus::Cancelled | PaymentStatus::Voided
        )
    }
}

/// What the gateway says about a payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentState {
    /// Where the payment stands.
    pub status: PaymentStatus,
    /// The gateway's transaction id of the capture, once completed.
    #[serde(default)]
    pub txn_id: Option<String>,
    /// The `invoice` the payment was created with, when the gateway says.
    #[serde(default)]
    pub invoice: Option<String>,
    /// The amount and currency the payment is for, when the gateway says.
    #[serde(default)]
    pub amount_cents: Option<u64>,
    /// ISO 4217 code of `amount_cents`, when the gateway says.
    #[serde(default)]
    pub currency: Option<String>,
}

impl PaymentState {
    /// Whether what the gateway reports agrees with the amount and currency
    /// the booking's payment was created for (an unreported field agrees).
    pub fn is_for(&self, amount_cents: u64, currency: &str) -> bool {
        self.amount_cents.is_none_or(|a| a == amount_cents)
            && self.currency.as_deref().is_none_or(|c| c == currency)
    }
}

/// The gateway's answer to a refund.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    /// The gateway's id of the refund (the same when repeated under its key).
    pub refund_id: String,
    /// The refund's status as the gateway names it (e.g. `refunded`).
    pub status: String,
}

/// Why a gateway call failed. `Timeout` and `Unavailable` leave the
/// outcome unknown: callers must not treat them as "no".
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum GatewayError {
    /// The call passed its deadline (`call_timeout_ms`); its outcome is unknown.
    #[error("gateway call timed out")]
    Timeout,
    /// The gateway could not be reached, answered 5xx, 429 or 401; the outcome is unknown.
    #[error("gateway unavailable: {0}")]
    Unavailable(String),
    /// The gateway has seen a higher fencing token for this payment (`stale_fencing_token`).
    #[error("gateway refused the fencing token: a newer leader acted on this payment")]
    StaleFence,
    /// This node holds no access token for the gateway yet; nothing was sent.
    #[error("gateway has no access token yet")]
    NoToken,
    /// A void came too late: the payment was captured.
    #[error("the payment was captured before it could be voided")]
    AlreadyCaptured,
    /// The gateway refused the call with any other non-success answer (a 4xx).
    #[error("gateway refused ({status} {code}): {message}")]
    Rejected {
        /// The HTTP status of the answer.
        status: u16,
        /// The gateway's `error.code` (empty when it gave none).
        code: String,
        /// The gateway's `error.message` (empty when it gave none).
        message: String,
    },
    /// A success answer whose body did not parse as expected.
    #[error("gateway answered oddly: {0}")]
    BadAnswer(String),
}

impl GatewayError {
    /// The error's stable snake_case code, e.g. `gateway_timeout`.
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::Timeout => "gateway_timeout",
            GatewayError::Unavailable(_) => "gateway_unavailable",
            GatewayError::StaleFence => "stale_fencing_token",
            GatewayError::NoToken => "gateway_no_token",
            GatewayError::AlreadyCaptured => "already_captured",
            GatewayError::Rejected { .. } => "gateway_rejected",
            GatewayError::BadAnswer(_) => "gateway_bad_answer",
        }
    }
}

/// A payment provider. Implemented by [`client::HttpGateway`] over HTTP.
pub trait Gateway: Send + Sync {
    /// Create a payment; creating again under the same `idempotency_key` returns the same one.
    fn create(&self, req: CreatePayment) -> BoxFuture<'_, Result<CreatedPayment, GatewayError>>;
    /// Capture an approved payment; repeating it returns the same answer.
    fn execute<'a>(
        &'a self,
        payment_id: &'a str,
        fence: Fence,
    ) -> BoxFuture<'a, Result<PaymentState, GatewayError>>;
    /// Where payment `payment_id` stands; no side effect, so it carries no fence.
    fn query<'a>(
        &'a self,
        payment_id: &'a str,
    ) -> BoxFuture<'a, Result<PaymentState, GatewayError>>;
    /// Make sure a payment is never captured: `voided` (or `failed` /
    /// `cancelled`) when it was not, [`GatewayError::AlreadyCaptured`]
    /// when it was. Repeating it returns the same answer.
    fn void<'a>(
        &'a self,
        payment_id: &'a str,
        fence: Fence,
    ) -> BoxFuture<'a, Result<PaymentState, GatewayError>>;
    /// Refund a captured payment under `idempotency_key`; repeating it returns the same refund.
    fn refund<'a>(
        &'a self,
        payment_id: &'a str,
        idempotency_key: &'a str,
        fence: Fence,
    ) -> BoxFuture<'a, Result<Refund, GatewayError>>;
}

/// The provider idempotency key of a hold's payment: stable, so a retried
/// booking creates no second payment.
pub fn provider_key(event_id: &str, booking_id: &str) -> String {
    format!("seatfence-{event_id}-{booking_id}")
}

/// The provider key of a booking made in this cluster: [`provider_key`]
/// for an event this cluster created; for an event restored from a
/// backup (`restored`), the key also names this cluster
/// (`seatfence-{cluster}-{event}-{booking}`), so a gateway shared with
/// the old cluster (or with another restore of the same backup) never
/// answers a new booking with a payment made for an old one. `None`: the
/// event is restored and this cluster's id is not known yet (no payment
/// may be created then).
pub fn booking_key(
    cluster_id: Option<&str>,
    restored: bool,
    event_id: &str,
    booking_id: &str,
) -> Option<String> {
    match (restored, cluster_id) {
        (false, _) => Some(provider_key(event_id, booking_id)),
        (true, Some(c)) if !c.is_empty() => Some(format!("seatfence-{c}-{event_id}-{booking_id}")),
        (true, _) => None,
    }
}
