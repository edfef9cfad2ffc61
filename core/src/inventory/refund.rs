//! An operator's refund of a confirmed booking (a cancelled show, a
//! goodwill gesture).
//!
//! ```text
//!  booking confirmed ─Refund{by, reason, release_seats}─▶ refund_pending,
//!    refund queued in the outbox (issued at the gateway with the fence of
//!    a committed RefundIntent, then OutboxDone ─▶ refunded)
//!    release_seats: the hold ends (released) and its seats go back on
//!    sale; otherwise they stay sold to nobody (the show is cancelled)
//!  any other status ─▶ BookingNotRefundable (nothing changes)
//! ```
//!
//! Keyed by the operator's Idempotency-Key like a hold: the same key again
//! answers the first outcome; another key for a booking already refunded
//! or refunding is refused, so a booking is refunded at most once.

use crate::record_key::RecordKey;

use super::{BookingStatus, HoldStatus, Inventory, OutboxKind, Outcome, RefundRequest};

/// Longest reason an operator may give.
pub const MAX_REASON_BYTES: usize = 1024;

impl Inventory {
    pub(super) fn operator_refund(
        &mut self,
        seq: u64,
        by: &str,
        reason: &str,
        release_seats: bool,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        if reason.len() > MAX_REASON_BYTES || by.len() > MAX_REASON_BYTES {
            return Outcome::InvalidRequest {
                reason: format!("a refund's reason is at most {MAX_REASON_BYTES} bytes"),
            };
        }
        let Some(b) = self.bookings.get(&seq) else {
            return Outcome::BookingNotFound;
        };
        if b.status != BookingStatus::Confirmed {
            return Outcome::BookingNotRefundable { status: b.status };
        }
        if release_seats {
            self.release(seq, HoldStatus::Released, changed);
        }
        let b = self.bookings.get_mut(&seq).expect("checked above");
        b.status = BookingStatus::RefundPending;
        b.refund = Some(RefundRequest {
            by: by.to_string(),
            reason: reason.to_string(),
            release_seats,
            at_ms: now,
        });
        b.updated_ms = now;
        changed.push(RecordKey::Booking(seq));
        self.queue(seq, OutboxKind::Refund, now, changed);
        self.booking_outcome(seq)
    }
}
