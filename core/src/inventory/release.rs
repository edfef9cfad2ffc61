//! Ending a booking's wait (DESIGN.md §8): the reconciler's release, the
//! void intent that must come before an unpaid release, the watch that
//! settles a released booking, and the bounded extensions. Every action
//! here is conditional on the state it expects or keyed by what the
//! reconciler saw, so a re-sent command changes nothing.

use crate::record_key::RecordKey;

use super::booking::MAX_EXTENSIONS;
use super::{BookingStatus, HoldStatus, Inventory, Outcome, ReleaseReason};

impl Inventory {
    pub(super) fn release_payment(
        &mut self,
        seq: u64,
        payment_id: &str,
        reason: ReleaseReason,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        if let Err(o) = self.pending(seq, payment_id) {
            return o;
        }
        let deadline = self.holds[&seq].expires_at_ms;
        if reason == ReleaseReason::Unpaid && now < deadline {
            return Outcome::ReleaseRefused {
                reason: "an unpaid payment is released only after its deadline".into(),
            };
        }
        if reason == ReleaseReason::Unpaid && !self.bookings[&seq].voiding {
            return Outcome::ReleaseRefused {
                reason: "an unpaid payment is released only after a void intent".into(),
            };
        }
        self.index.pay_deadlines.remove(&(deadline, seq));
        self.release(seq, HoldStatus::Expired, changed);
        let b = self.bookings.get_mut(&seq).expect("checked above");
        b.status = BookingStatus::Expired;
        // The gateway just said failed or cancelled: terminal already. An
        // unpaid release rests on a void's answer: watched until a query
        // confirms it.
        b.settled = reason == ReleaseReason::PaymentFailed;
        b.updated_ms = now;
        changed.push(RecordKey::Booking(seq));
        if !b.settled {
            self.index.unsettled.insert(seq);
        }
        self.booking_outcome(seq)
    }

    /// The booking no longer needs watching.
    pub(super) fn settle_index(&mut self, seq: u64) {
        self.index.unsettled.remove(&seq);
        if let Some(b) = self.bookings.get_mut(&seq) {
            b.settled = true;
        }
    }

    pub(super) fn void_intent(
        &mut self,
        seq: u64,
        payment_id: &str,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        let b = match self.booking_for(seq, payment_id) {
            Ok(b) => b,
            Err(o) => return o,
        };
        let pending = b.status == BookingStatus::Pending;
        if !pending && !b.unsettled() {
            return self.booking_outcome(seq);
        }
        if pending && now < self.holds[&seq].expires_at_ms {
            return Outcome::ReleaseRefused {
                reason: "a pending payment is voided only after its deadline".into(),
            };
        }
        if !b.voiding {
            let b = self.bookings.get_mut(&seq).expect("checked above");
            b.voiding = true;
            b.updated_ms = now;
            changed.push(RecordKey::Booking(seq));
        }
        self.booking_outcome(seq)
    }

    pub(super) fn settle(
        &mut self,
        seq: u64,
        payment_id: &str,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        match self.booking_for(seq, payment_id) {
            Ok(b) if b.unsettled() => {}
            Ok(_) => return self.booking_outcome(seq),
            Err(o) => return o,
        }
        self.settle_index(seq);
        let b = self.bookings.get_mut(&seq).expect("checked above");
        b.updated_ms = now;
        changed.push(RecordKey::Booking(seq));
        self.booking_outcome(seq)
    }

    pub(super) fn extend(
        &mut self,
        seq: u64,
        payment_id: &str,
        by_ms: u64,
        attempt: u32,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        if let Err(o) = self.pending(seq, payment_id) {
            return o;
        }
        let hold = self.holds.get_mut(&seq).expect("a booking's hold exists");
        if hold.extensions > attempt {
            // This extension was applied already (a re-sent command).
            return Outcome::Extended {
                extensions: hold.extensions,
                expires_at_ms: hold.expires_at_ms,
            };
        }
        if hold.extensions >= MAX_EXTENSIONS {
            return Outcome::ExtensionsExhausted {
                extensions: hold.extensions,
            };
        }
        let old = hold.expires_at_ms;
        hold.extensions += 1;
        hold.expires_at_ms = old.saturating_add(by_ms.max(1));
        let (new, extensions) = (hold.expires_at_ms, hold.extensions);
        changed.push(RecordKey::Hold(seq));
        self.index.pay_deadlines.remove(&(old, seq));
        self.index.pay_deadlines.insert((new, seq));
        Outcome::Extended {
            extensions,
            expires_at_ms: new,
        }
    }

    /// Up to `limit` released bookings still unsettled, with their holds,
    /// starting after hold `after` and wrapping around: a reconciler that
    /// passes the last one it visited as `after` goes round all of them
    /// over its sweeps, however few it reaches in one.
    pub fn unsettled_after(&self, after: u64, limit: usize) -> Vec<(super::Hold, super::Booking)> {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let set = &self.index.unsettled;
        set.range((Excluded(after), Unbounded))
            .chain(set.range((Unbounded, Included(after))))
            .take(limit)
            .filter_map(|seq| {
                Some((
                    self.holds.get(seq)?.clone(),
                    self.bookings.get(seq)?.clone(),
                ))
            })
            .collect()
    }
}
