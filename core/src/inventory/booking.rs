//! Bookings and payments inside `apply` (DESIGN.md §4, §8).
//!
//! ```text
//!  hold HELD ─AttachPayment─▶ booking pending (the hold no longer expires by itself)
//!     ─ExecuteIntent (once per requester; a new leader may take over)─▶ gateway execute
//!     ─Confirm(payment id, txn id)─▶ seats SOLD, hold BOOKED, booking confirmed, email queued
//!     ─VoidIntent (past the deadline)─▶ no execute is granted again ─▶ gateway void
//!     ─Release(payment id, reason)─▶ seats free, booking expired, unsettled (the reconciler only)
//!  expired, unsettled ─Settle─▶ settled (the gateway says it can never be captured)
//!  Confirm after a release ─▶ booking refund_pending, refund queued ─OutboxDone─▶ refunded
//! ```
//!
//! The rule is one-sided: several paths may confirm, only `Release` frees
//! a seat that has a payment, and it is guarded by the payment id and, for
//! an unpaid payment, by the deadline and a committed void intent (the
//! gateway is asked to void before the seats go back on sale). A released
//! booking stays *unsettled*, watched by the reconciler, until the gateway
//! says its payment is terminal; a capture that lands meanwhile becomes a
//! refund. Every transition is conditional on the state it expects or is
//! keyed by its requester, so a repeated or late command changes nothing.

use serde::{Deserialize, Serialize};

use crate::ids::UserId;

/// How many times the reconciler may push a deadline back when it cannot
/// learn a payment's state; after that it raises an alert and waits.
pub const MAX_EXTENSIONS: u32 = 3;

/// The payment a booking waits on, as the gateway created it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PaymentAttempt {
    /// The gateway's id of the payment.
    pub payment_id: String,
    /// The idempotency key the payment was created with (stable per hold).
    pub provider_key: String,
    /// The gateway's per-payment signature: callbacks must carry it.
    pub signature: String,
    /// Where the buyer approves the payment.
    pub approve_url: String,
    /// The sum asked, in the currency's minor unit (seat price × seats).
    pub amount_cents: u64,
    /// ISO 4217 code of `amount_cents`.
    pub currency: String,
}

/// Where a booking stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BookingStatus {
    /// Waiting on its payment; the hold still owns the seats.
    Pending,
    /// Paid: the hold is booked and its seats sold.
    Confirmed,
    /// Released unpaid: the seats went back on sale.
    Expired,
    /// Paid, and a refund is queued (a capture after the release, or an operator's refund).
    RefundPending,
    /// The refund was issued.
    Refunded,
}

impl BookingStatus {
    /// The lowercase name the API gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            BookingStatus::Pending => "pending",
            BookingStatus::Confirmed => "confirmed",
            BookingStatus::Expired => "expired",
            BookingStatus::RefundPending => "refund_pending",
            BookingStatus::Refunded => "refunded",
        }
    }
}

/// Which path confirmed a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConfirmPath {
    /// The buyer's return from the gateway, through the edge's callback.
    Callback,
    /// A signed webhook from the gateway.
    Webhook,
    /// The reconciler, asking the gateway itself.
    Reconciler,
}

impl ConfirmPath {
    /// The lowercase name the API gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfirmPath::Callback => "callback",
            ConfirmPath::Webhook => "webhook",
            ConfirmPath::Reconciler => "reconciler",
        }
    }
}

/// Why the reconciler releases a hold that has a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReleaseReason {
    /// The gateway says the payment failed or was cancelled.
    PaymentFailed,
    /// The deadline passed, a void intent was committed, and the gateway
    /// voided the payment (it can no longer be captured).
    Unpaid,
}

/// One booking: a hold with a payment. Its id is the hold's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Booking {
    /// Its hold's seq.
    pub seq: u64,
    /// The buyer, the hold's owner.
    pub owner: UserId,
    /// The payment it waits on.
    pub payment: PaymentAttempt,
    /// Where it stands.
    pub status: BookingStatus,
    /// When the payment was attached, on the event's clock (Unix ms).
    pub created_ms: u64,
    /// When it last changed, on the event's clock (Unix ms).
    pub updated_ms: u64,
    /// Execute intents committed (the callback's, then any takeovers).
    pub intents: u32,
    /// The gateway's transaction id of the capture, once confirmed.
    pub txn_id: Option<String>,
    /// Which path confirmed the payment, once confirmed.
    pub confirmed_via: Option<ConfirmPath>,
    /// The gateway's id of the refund, once refunded.
    pub refund_id: Option<String>,
    /// Who was granted the last execute intent: the same requester asking
    /// again (a re-sent command) gets the same grant, not a refusal.
    pub intent_by: Option<String>,
    /// A void intent was committed: no execute intent is granted any more
    /// and the reconciler asks the gateway to void the payment.
    pub voiding: bool,
    /// For an expired booking: the gateway has said its payment can never
    /// be captured (voided, failed, cancelled). Until then the reconciler
    /// keeps asking, and a capture it finds becomes a refund.
    pub settled: bool,
    /// An operator's refund of this booking (`RefundByOperator`).
    pub refund: Option<RefundRequest>,
}

/// An operator's refund: who, why, and whether the seats go back on sale.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RefundRequest {
    /// The operator's user id.
    pub by: String,
    /// Why, as the operator wrote it (at most 1024 bytes).
    pub reason: String,
    /// Whether the hold ended and its seats went back on sale.
    pub release_seats: bool,
    /// When it was committed, on the event's clock (Unix ms).
    pub at_ms: u64,
}

impl Booking {
    /// Released, but the payment's fate is not known yet.
    pub fn unsettled(&self) -> bool {
        self.status == BookingStatus::Expired && !self.settled
    }
}

/// What an outbox item delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OutboxKind {
    /// The buyer's confirmation email.
    ConfirmationEmail,
    /// A refund of the booking's payment at the gateway.
    Refund,
}

impl OutboxKind {
    /// Its short name in logs: `email` or `refund`.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxKind::ConfirmationEmail => "email",
            OutboxKind::Refund => "refund",
        }
    }
}

/// A side effect to deliver after a commit, until acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OutboxItem {
    /// Number within the event, from 1 in creation order.
    pub id: u64,
    /// The booking (hold seq) it belongs to.
    pub booking: u64,
    /// What it delivers.
    pub kind: OutboxKind,
    /// When it was queued, on the event's clock (Unix ms).
    pub created_ms: u64,
    /// When its delivery was acknowledged (Unix ms); `None` while pending.
    pub done_ms: Option<u64>,
}

/// Payment actions of [`super::EventAction`], applied by [`Inventory`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PaymentAction {
    /// Record the payment created for a held hold: the booking exists from
    /// here on. Repeating it with the same payment is a no-op.
    Attach {
        /// The hold's owner.
        owner: UserId,
        /// The hold's seq.
        hold: u64,
        /// The payment the gateway created.
        payment: PaymentAttempt,
    },
    /// Commit the intent to execute (capture) the payment. Granted once;
    /// `takeover` grants it again (a new leader finishing a payment); the
    /// same `requester` asking again gets its grant again. Never granted
    /// after a void intent.
    ExecuteIntent {
        /// The booking's hold seq.
        hold: u64,
        /// The booking's payment id: another is `PaymentMismatch`.
        payment_id: String,
        /// Grant it even though it was granted before.
        takeover: bool,
        /// Who asks: the same id again (a re-sent command) gets the same grant.
        requester: String,
    },
    /// The gateway says the payment completed: HELD → PAID, or
    /// refund_pending when the seats were already released.
    Confirm {
        /// The booking's hold seq.
        hold: u64,
        /// The booking's payment id: another is `PaymentMismatch`.
        payment_id: String,
        /// The gateway's transaction id of the capture.
        txn_id: String,
        /// Which path learned of the completion.
        via: ConfirmPath,
        /// The webhook's provider event id, remembered in the inbox.
        inbox: Option<String>,
    },
    /// The reconciler frees the seats of a payment that will not complete.
    Release {
        /// The booking's hold seq.
        hold: u64,
        /// The booking's payment id: another is `PaymentMismatch`.
        payment_id: String,
        /// Why: the payment failed, or it is unpaid past the deadline and voided.
        reason: ReleaseReason,
    },
    /// The reconciler could not learn the payment's state: push the
    /// deadline back (at most [`MAX_EXTENSIONS`] times). `attempt` is the
    /// extension count the reconciler saw: only that extension is applied,
    /// so a re-sent command counts once.
    Extend {
        /// The booking's hold seq.
        hold: u64,
        /// The booking's payment id: another is `PaymentMismatch`.
        payment_id: String,
        /// How far to push the deadline, in ms (at least 1).
        by_ms: u64,
        /// The hold's `extensions` as the reconciler saw it.
        attempt: u32,
    },
    /// An outbox item was delivered (`refund_id` for refunds).
    OutboxDone {
        /// The item's id.
        id: u64,
        /// The gateway's id of the refund, for a refund item.
        refund_id: Option<String>,
    },
    /// The reconciler is about to ask the gateway to void the payment
    /// (past the deadline, or a released booking still unsettled): from
    /// here on no execute intent is granted. The reply's fence goes with
    /// the void.
    VoidIntent {
        /// The booking's hold seq.
        hold: u64,
        /// The booking's payment id: another is `PaymentMismatch`.
        payment_id: String,
    },
    /// The gateway says a released booking's payment can never be captured.
    Settle {
        /// The booking's hold seq.
        hold: u64,
        /// The booking's payment id: another is `PaymentMismatch`.
        payment_id: String,
    },
    /// The outbox is about to refund item `id`: changes nothing; the
    /// commit's fence goes with the refund (a deposed leader's is older).
    RefundIntent {
        /// The outbox item's id.
        id: u64,
    },
    /// An operator refunds confirmed booking `hold` (`refund.rs`).
    Refund {
        /// The booking's hold seq.
        hold: u64,
        /// The operator's user id.
        by: String,
        /// Why, as the operator wrote it (at most 1024 bytes).
        reason: String,
        /// Whether the hold ends and its seats go back on sale.
        release_seats: bool,
    },
}
