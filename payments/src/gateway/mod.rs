//! The payment gateway: the client trait every adapter implements, its
//! HTTP client ([`client`]), the fleet's shared access token ([`token`]),
//! signatures ([`sign`]). The mock provider (`seatfence gateway`) lives in
//! `seatfence-testkit`.
//!
//! Every side effect (execute, void, refund) carries `X-Fencing-Token:
//! {epoch}.{term}`; the gateway refuses a token lower than the highest it
//! has seen for that payment, so a deposed leader cannot capture or refund.

pub mod client;
pub mod sign;
pub mod token;

use futures::future::BoxFuture;
use seatfence_core::Fence;
use serde::{Deserialize, Serialize};

/// A payment to create. `idempotency_key` is stable per hold: creating
/// again with it returns the same payment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreatePayment {
    pub amount_cents: u64,
    pub currency: String,
    pub invoice: String,
    pub idempotency_key: String,
    pub return_url: String,
    pub webhook_url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedPayment {
    pub payment_id: String,
    pub signature: String,
    pub approve_url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PaymentStatus {
    Created,
    Approved,
    Completed,
    Failed,
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
    pub status: PaymentStatus,
    #[serde(default)]
    pub txn_id: Option<String>,
    #[serde(default)]
    pub invoice: Option<String>,
    /// The amount and currency the payment is for, when the gateway says.
    #[serde(default)]
    pub amount_cents: Option<u64>,
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    pub refund_id: String,
    pub status: String,
}

/// Why a gateway call failed. `Timeout` and `Unavailable` leave the
/// outcome unknown: callers must not treat them as "no".
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum GatewayError {
    #[error("gateway call timed out")]
    Timeout,
    #[error("gateway unavailable: {0}")]
    Unavailable(String),
    #[error("gateway refused the fencing token: a newer leader acted on this payment")]
    StaleFence,
    #[error("gateway has no access token yet")]
    NoToken,
    /// A void came too late: the payment was captured.
    #[error("the payment was captured before it could be voided")]
    AlreadyCaptured,
    #[error("gateway refused ({status} {code}): {message}")]
    Rejected {
        status: u16,
        code: String,
        message: String,
    },
    #[error("gateway answered oddly: {0}")]
    BadAnswer(String),
}

impl GatewayError {
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
    fn create(&self, req: CreatePayment) -> BoxFuture<'_, Result<CreatedPayment, GatewayError>>;
    /// Capture an approved payment; repeating it returns the same answer.
    fn execute<'a>(
        &'a self,
        payment_id: &'a str,
        fence: Fence,
    ) -> BoxFuture<'a, Result<PaymentState, GatewayError>>;
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
