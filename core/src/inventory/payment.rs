//! Applying a [`PaymentAction`] to the inventory: attaching a payment to a
//! hold, the execute intent, confirming (any of the three paths), settling,
//! and queueing and finishing outbox items. The records are `booking.rs`'s.

use crate::ids::UserId;
use crate::record_key::RecordKey;

use super::{
    BookingStatus, ConfirmPath, HoldStatus, Inventory, OutboxItem, Outcome, PaymentAction,
    PaymentAttempt, SeatState,
};

impl Inventory {
    pub(super) fn payment(
        &mut self,
        action: &PaymentAction,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        match action {
            PaymentAction::Attach {
                owner,
                hold,
                payment,
            } => self.attach(owner, *hold, payment, now, changed),
            PaymentAction::ExecuteIntent {
                hold,
                payment_id,
                takeover,
                requester,
            } => self.execute_intent(*hold, payment_id, *takeover, requester, now, changed),
            PaymentAction::Confirm {
                hold,
                payment_id,
                txn_id,
                via,
                inbox,
            } => self.confirm(
                *hold,
                payment_id,
                txn_id,
                *via,
                inbox.as_deref(),
                now,
                changed,
            ),
            PaymentAction::Release {
                hold,
                payment_id,
                reason,
            } => self.release_payment(*hold, payment_id, *reason, now, changed),
            PaymentAction::Extend {
                hold,
                payment_id,
                by_ms,
                attempt,
            } => self.extend(*hold, payment_id, *by_ms, *attempt, changed),
            PaymentAction::OutboxDone { id, refund_id } => {
                self.outbox_done(*id, refund_id.as_deref(), now, changed)
            }
            PaymentAction::VoidIntent { hold, payment_id } => {
                self.void_intent(*hold, payment_id, now, changed)
            }
            PaymentAction::Settle { hold, payment_id } => {
                self.settle(*hold, payment_id, now, changed)
            }
            PaymentAction::Refund {
                hold,
                by,
                reason,
                release_seats,
            } => self.operator_refund(*hold, by, reason, *release_seats, now, changed),
            PaymentAction::RefundIntent { id } => match self.outbox.get(id) {
                None => Outcome::OutboxItemNotFound,
                Some(item) if item.done_ms.is_some() => Outcome::OutboxDone,
                Some(item) => match self.bookings.get(&item.booking) {
                    Some(b) => Outcome::Booking(Box::new(b.clone())),
                    None => Outcome::BookingNotFound,
                },
            },
        }
    }

    pub(super) fn booking_outcome(&self, seq: u64) -> Outcome {
        Outcome::Booking(Box::new(self.bookings[&seq].clone()))
    }

    /// The booking of `hold` if its payment is `payment_id`.
    pub(super) fn booking_for(
        &self,
        hold: u64,
        payment_id: &str,
    ) -> Result<&super::Booking, Outcome> {
        match self.bookings.get(&hold) {
            None => Err(Outcome::BookingNotFound),
            Some(b) if b.payment.payment_id != payment_id => Err(Outcome::PaymentMismatch),
            Some(b) => Ok(b),
        }
    }

    /// `Ok` if the booking of `hold` waits on `payment_id`; else the
    /// answer: the mismatch, or the booking as it stands (decided already).
    pub(super) fn pending(&self, hold: u64, payment_id: &str) -> Result<(), Outcome> {
        match self.booking_for(hold, payment_id)? {
            b if b.status == BookingStatus::Pending => Ok(()),
            _ => Err(self.booking_outcome(hold)),
        }
    }

    fn attach(
        &mut self,
        owner: &UserId,
        seq: u64,
        payment: &PaymentAttempt,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        let Some(hold) = self.holds.get(&seq).filter(|h| &h.owner == owner) else {
            return Outcome::HoldNotFound;
        };
        if let Some(b) = self.bookings.get(&seq) {
            return if b.payment.payment_id == payment.payment_id {
                self.booking_outcome(seq)
            } else {
                Outcome::PaymentMismatch
            };
        }
        if hold.status != HoldStatus::Held {
            return Outcome::HoldNotBookable {
                status: hold.status,
            };
        }
        if now >= hold.expires_at_ms {
            // Not reached: `apply` expires due holds before any action.
            return Outcome::PaymentDeadlinePassed;
        }
        let deadline = hold.expires_at_ms;
        // From here on only the reconciler ends this hold.
        self.index.deadlines.remove(&(deadline, seq));
        self.index.pay_deadlines.insert((deadline, seq));
        self.bookings.insert(
            seq,
            super::Booking {
                seq,
                owner: owner.clone(),
                payment: payment.clone(),
                status: BookingStatus::Pending,
                created_ms: now,
                updated_ms: now,
                intents: 0,
                txn_id: None,
                confirmed_via: None,
                refund_id: None,
                intent_by: None,
                voiding: false,
                settled: false,
                refund: None,
            },
        );
        changed.push(RecordKey::Booking(seq));
        self.booking_outcome(seq)
    }

    fn execute_intent(
        &mut self,
        seq: u64,
        payment_id: &str,
        takeover: bool,
        requester: &str,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        let b = match self.booking_for(seq, payment_id) {
            Ok(b) => b,
            Err(o) => return o,
        };
        if b.status != BookingStatus::Pending || b.voiding {
            return Outcome::ExecuteIntent {
                granted: false,
                booking: Box::new(b.clone()),
            };
        }
        if b.intent_by.as_deref() == Some(requester) {
            // The same request again (a re-sent command): the same grant.
            return Outcome::ExecuteIntent {
                granted: true,
                booking: Box::new(b.clone()),
            };
        }
        if now >= self.holds[&seq].expires_at_ms {
            return Outcome::PaymentDeadlinePassed;
        }
        let granted = b.intents == 0 || takeover;
        if granted {
            let b = self.bookings.get_mut(&seq).expect("checked above");
            b.intents += 1;
            b.intent_by = Some(requester.to_string());
            b.updated_ms = now;
            changed.push(RecordKey::Booking(seq));
        }
        Outcome::ExecuteIntent {
            granted,
            booking: Box::new(self.bookings[&seq].clone()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn confirm(
        &mut self,
        seq: u64,
        payment_id: &str,
        txn_id: &str,
        via: ConfirmPath,
        inbox: Option<&str>,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        let status = match self.booking_for(seq, payment_id) {
            Ok(b) => b.status,
            Err(o) => return o,
        };
        if let Some(id) = inbox {
            if !self.inbox.contains_key(id) {
                self.inbox.insert(id.to_string(), now);
                self.index.inbox_times.insert((now, id.to_string()));
                changed.push(RecordKey::Inbox(id.to_string()));
            }
        }
        match status {
            BookingStatus::Pending => {
                let hold = self.holds.get_mut(&seq).expect("a booking's hold exists");
                debug_assert_eq!(hold.status, HoldStatus::Held);
                hold.status = HoldStatus::Booked;
                let (seats, deadline) = (hold.seats.clone(), hold.expires_at_ms);
                changed.push(RecordKey::Hold(seq));
                self.index.pay_deadlines.remove(&(deadline, seq));
                for id in &seats {
                    let seat = self.seats.get_mut(id).expect("a hold's seats exist");
                    debug_assert_eq!(seat.state, SeatState::Held(seq));
                    seat.state = SeatState::Sold(seq);
                    changed.push(RecordKey::Seat(id.clone()));
                }
                let n = seats.len() as u64;
                let ev = self.event_mut(changed);
                ev.held -= n;
                ev.sold += n;
                self.set_paid(seq, txn_id, via, BookingStatus::Confirmed, now, changed);
                self.queue(seq, super::OutboxKind::ConfirmationEmail, now, changed);
            }
            BookingStatus::Expired => {
                // Late success: the seats may be sold again; give the money back.
                self.set_paid(seq, txn_id, via, BookingStatus::RefundPending, now, changed);
                self.settle_index(seq);
                self.queue(seq, super::OutboxKind::Refund, now, changed);
            }
            BookingStatus::Confirmed | BookingStatus::RefundPending | BookingStatus::Refunded => {}
        }
        Outcome::Confirmed {
            changed: status != self.bookings[&seq].status,
            booking: Box::new(self.bookings[&seq].clone()),
        }
    }

    fn set_paid(
        &mut self,
        seq: u64,
        txn_id: &str,
        via: ConfirmPath,
        status: BookingStatus,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) {
        let b = self.bookings.get_mut(&seq).expect("caller checked");
        b.status = status;
        b.txn_id = Some(txn_id.to_string());
        b.confirmed_via = Some(via);
        b.updated_ms = now;
        changed.push(RecordKey::Booking(seq));
    }

    pub(super) fn queue(
        &mut self,
        booking: u64,
        kind: super::OutboxKind,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) {
        let ev = self.event_mut(changed);
        let id = ev.next_outbox_id;
        ev.next_outbox_id += 1;
        let item = OutboxItem {
            id,
            booking,
            kind,
            created_ms: now,
            done_ms: None,
        };
        self.index.index_pending(&item);
        self.outbox.insert(id, item);
        changed.push(RecordKey::Outbox(id));
    }

    fn outbox_done(
        &mut self,
        id: u64,
        refund_id: Option<&str>,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        let Some(item) = self.outbox.get_mut(&id) else {
            return Outcome::OutboxItemNotFound;
        };
        if item.done_ms.is_some() {
            return Outcome::OutboxDone;
        }
        item.done_ms = Some(now);
        let (booking, kind) = (item.booking, item.kind);
        let item = item.clone();
        self.index.unindex_pending(&item);
        changed.push(RecordKey::Outbox(id));
        if kind == super::OutboxKind::Refund {
            if let Some(b) = self.bookings.get_mut(&booking) {
                if b.status == BookingStatus::RefundPending {
                    b.status = BookingStatus::Refunded;
                    b.refund_id = refund_id.map(str::to_string);
                    b.updated_ms = now;
                    changed.push(RecordKey::Booking(booking));
                }
            }
        }
        Outcome::OutboxDone
    }
}
