//! The changefeed: every business change an event group commits, as an
//! ordered, replicated record.
//!
//! ```text
//!  apply(command) ─▶ records it changed ─▶ compare each with its copy from
//!    before the command ─▶ Change{seq, at_ms, kind, subject} per transition
//!    (seq: the event's next, never reused) ─▶ stored as its own record
//!  every command: changes older than the event's changes retention leave
//! ```
//!
//! A change is derived from the records, not written by each code path, so
//! no transition can be missed: a hold that appears is `hold.created`, one
//! whose status becomes released or expired is `hold.released` /
//! `hold.expired`; a booking that appears is `booking.created`, one whose
//! status changes is `booking.<status>`; the event's creation, its
//! operator open/close override and its epoch bump (a move) are
//! `event.created`, `event.opened` / `event.closed`, `event.moved`.
//! Records leaving by retention are not business changes and make none.
//!
//! Why a reader sees every change once, in order, from any replica:
//! `apply` is deterministic, so every replica holds the same changes under
//! the same numbers (a prefix of them while it lags); the numbers are
//! assigned in log order and stored with the event (`next_change_seq`), so
//! they survive snapshots, restarts, leader changes and moves (a move keeps
//! the group, it changes its members). Changes leave only by age, oldest
//! first, so what a replica holds is always one contiguous range.

use serde::{Deserialize, Serialize};

use crate::ids::{Epoch, RegionId, UserId};
use crate::record_key::RecordKey;

use super::{Booking, BookingStatus, ConfirmPath, Event, Hold, HoldStatus, Inventory};

/// Changes are kept three days unless the event says otherwise: a sink that
/// was down for a day still resumes from its cursor.
pub const DEFAULT_CHANGES_RETENTION_MS: u64 = 3 * 24 * 3600 * 1000;
/// The shortest changes retention an event may ask for.
pub const MIN_CHANGES_RETENTION_MS: u64 = 60 * 1000;
/// The longest: thirty days.
pub const MAX_CHANGES_RETENTION_MS: u64 = 30 * 24 * 3600 * 1000;

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ChangeKind {
    /// `event.created`: the event was created.
    EventCreated,
    /// `event.opened`: an operator forced the sale open.
    EventOpened,
    /// `event.closed`: an operator forced the sale closed.
    EventClosed,
    /// `event.moved`: the epoch was bumped, with a new owner region.
    EventMoved,
    /// `hold.created`: a hold was made.
    HoldCreated,
    /// `hold.released`: cancelled, or its seats returned by an operator's refund.
    HoldReleased,
    /// `hold.expired`: unpaid at its deadline, or released by the reconciler.
    HoldExpired,
    /// `booking.created`: a payment was attached to a hold.
    BookingCreated,
    /// `booking.confirmed`: paid; the seats are sold.
    BookingConfirmed,
    /// `booking.expired`: released unpaid; the seats are back on sale.
    BookingExpired,
    /// `booking.refund_pending`: paid, and a refund is queued.
    BookingRefundPending,
    /// `booking.refunded`: the refund was issued.
    BookingRefunded,
}

impl ChangeKind {
    /// The name the API gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::EventCreated => "event.created",
            ChangeKind::EventOpened => "event.opened",
            ChangeKind::EventClosed => "event.closed",
            ChangeKind::EventMoved => "event.moved",
            ChangeKind::HoldCreated => "hold.created",
            ChangeKind::HoldReleased => "hold.released",
            ChangeKind::HoldExpired => "hold.expired",
            ChangeKind::BookingCreated => "booking.created",
            ChangeKind::BookingConfirmed => "booking.confirmed",
            ChangeKind::BookingExpired => "booking.expired",
            ChangeKind::BookingRefundPending => "booking.refund_pending",
            ChangeKind::BookingRefunded => "booking.refunded",
        }
    }

    fn of_booking(status: BookingStatus) -> ChangeKind {
        match status {
            BookingStatus::Pending => ChangeKind::BookingCreated,
            BookingStatus::Confirmed => ChangeKind::BookingConfirmed,
            BookingStatus::Expired => ChangeKind::BookingExpired,
            BookingStatus::RefundPending => ChangeKind::BookingRefundPending,
            BookingStatus::Refunded => ChangeKind::BookingRefunded,
        }
    }
}

/// The event as a change shows it (after the change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventFacts {
    /// Display name.
    pub name: String,
    /// The region it was created in.
    pub home_region: RegionId,
    /// The region that owns it.
    pub owner: RegionId,
    /// Its ownership fence.
    pub epoch: Epoch,
    /// Total seats.
    pub capacity: u64,
    /// Price of one seat, in the currency's minor unit.
    pub price_cents: u64,
    /// ISO 4217 code of `price_cents`.
    pub currency: String,
    /// When the sale window opens, in Unix ms; `None`: at creation.
    pub opens_at_ms: Option<u64>,
    /// When the sale window closes, in Unix ms; `None`: never.
    pub closes_at_ms: Option<u64>,
    /// The operator's override of the window, if any.
    pub forced_open: Option<bool>,
}

/// A booking as a change shows it (after the change): what finance needs,
/// without the payment's callback signature or approval link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookingFacts {
    /// Its hold's seq.
    pub seq: u64,
    /// The buyer.
    pub owner: UserId,
    /// Where it stands.
    pub status: BookingStatus,
    /// Its hold's seat ids.
    pub seats: Vec<String>,
    /// The gateway's id of the payment.
    pub payment_id: String,
    /// The sum asked, in the currency's minor unit.
    pub amount_cents: u64,
    /// ISO 4217 code of `amount_cents`.
    pub currency: String,
    /// When the payment was attached, on the event's clock (Unix ms).
    pub created_ms: u64,
    /// When the booking last changed, on the event's clock (Unix ms).
    pub updated_ms: u64,
    /// The gateway's transaction id of the capture, once paid.
    pub txn_id: Option<String>,
    /// Which path confirmed the payment, once paid.
    pub confirmed_via: Option<ConfirmPath>,
    /// The gateway's id of the refund, once refunded.
    pub refund_id: Option<String>,
    /// An operator's refund: who asked, why, and whether the seats went
    /// back on sale. `None` for a late payment's refund.
    pub refund: Option<super::RefundRequest>,
}

/// The record a change is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeSubject {
    /// The event, for an `event.*` change.
    Event(EventFacts),
    /// The hold, for a `hold.*` change.
    Hold(Hold),
    /// The booking, for a `booking.*` change.
    Booking(BookingFacts),
}

/// One business change of an event, numbered in commit order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// 1, 2, 3, … within the event: no gaps, never reused.
    pub seq: u64,
    /// The event's clock when the command applied (the leader's, never
    /// running backwards).
    pub at_ms: u64,
    /// What changed.
    pub kind: ChangeKind,
    /// The record it is about, as it stands after the change.
    pub subject: ChangeSubject,
}

/// What the records a command may change looked like before it. Cloning
/// the persistent maps costs a reference count each.
pub(super) struct Before {
    event: Option<(Epoch, Option<bool>)>,
    holds: imbl::OrdMap<u64, Hold>,
    bookings: imbl::OrdMap<u64, Booking>,
}

/// A page of one event's changes, and the range this replica keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangePage {
    /// The event's id; `None` when this replica has no event.
    pub event_id: Option<crate::ids::EventId>,
    /// The oldest change kept (`next_seq` when none is).
    pub oldest_seq: u64,
    /// The number the next change will get.
    pub next_seq: u64,
    /// Changes after the asked-for `after`, in order, at most the limit.
    pub changes: Vec<Change>,
    /// The event was restored from a backup (`seatfence restore`) whose
    /// changefeed ended at this change: a reader past it whose cursor this
    /// cluster did not write read the old cluster's later changes, which
    /// are not here (set by `State::query`).
    pub restored_through: Option<u64>,
}

impl Inventory {
    pub(super) fn before(&self) -> Before {
        Before {
            event: self.event.as_ref().map(|e| (e.epoch, e.forced_open)),
            holds: self.holds.clone(),
            bookings: self.bookings.clone(),
        }
    }

    /// How long this event keeps its changes.
    pub fn changes_retention_ms(&self) -> u64 {
        self.event
            .as_ref()
            .map_or(DEFAULT_CHANGES_RETENTION_MS, |e| e.changes_retention_ms)
    }

    /// Record the business changes between `before` and now, made by the
    /// records in `changed[first..]`, at the event's clock.
    pub(super) fn record_changes(
        &mut self,
        before: &Before,
        first: usize,
        changed: &mut Vec<RecordKey>,
    ) {
        let Some(ev) = &self.event else { return };
        let mut found: Vec<(ChangeKind, ChangeSubject)> = Vec::new();
        event_changes(ev, before, &mut found);
        // Holds and bookings only, each once (a mass expiry touches
        // thousands of records).
        let mut seen = std::collections::BTreeSet::new();
        for key in &changed[first..] {
            let id = match key {
                RecordKey::Hold(seq) => (0u8, *seq),
                RecordKey::Booking(seq) => (1u8, *seq),
                _ => continue,
            };
            if !seen.insert(id) {
                continue;
            }
            let change = match key {
                RecordKey::Hold(seq) => self.hold_change(before, seq),
                RecordKey::Booking(seq) => self.booking_change(before, seq),
                _ => continue,
            };
            if let Some(change) = change {
                found.push(change);
            }
        }
        if found.is_empty() {
            return;
        }
        let at_ms = ev.clock_ms;
        self.store_changes(at_ms, found, changed);
    }

    /// The change hold `seq` made since `before`, if it made one.
    fn hold_change(&self, before: &Before, seq: &u64) -> Option<(ChangeKind, ChangeSubject)> {
        let now = self.holds.get(seq)?;
        let was = before.holds.get(seq).map(|h| h.status);
        let kind = match (was, now.status) {
            (None, _) => ChangeKind::HoldCreated,
            (Some(w), n) if w == n => return None,
            (_, HoldStatus::Released) => ChangeKind::HoldReleased,
            (_, HoldStatus::Expired) => ChangeKind::HoldExpired,
            // Held → booked: the booking's confirmation says it.
            _ => return None,
        };
        Some((kind, ChangeSubject::Hold(now.clone())))
    }

    /// The change booking `seq` made since `before`, if it made one.
    fn booking_change(&self, before: &Before, seq: &u64) -> Option<(ChangeKind, ChangeSubject)> {
        let now = self.bookings.get(seq)?;
        let was = before.bookings.get(seq).map(|b| b.status);
        if was == Some(now.status) {
            return None;
        }
        let kind = match was {
            None => ChangeKind::BookingCreated,
            Some(_) => ChangeKind::of_booking(now.status),
        };
        let seats = self
            .holds
            .get(seq)
            .map(|h| h.seats.clone())
            .unwrap_or_default();
        Some((kind, ChangeSubject::Booking(booking_facts(now, seats))))
    }

    /// Number `found` from the event's next change seq on and store each,
    /// stamped `at_ms`.
    fn store_changes(
        &mut self,
        at_ms: u64,
        found: Vec<(ChangeKind, ChangeSubject)>,
        changed: &mut Vec<RecordKey>,
    ) {
        let ev = self.event_mut(changed);
        let first_seq = ev.next_change_seq;
        ev.next_change_seq += found.len() as u64;
        for (seq, (kind, subject)) in (first_seq..).zip(found) {
            self.changes.insert(
                seq,
                Change {
                    seq,
                    at_ms,
                    kind,
                    subject,
                },
            );
            changed.push(RecordKey::Change(seq));
        }
    }

    /// Remove the changes older than the changes retention at `now`.
    pub(super) fn prune_changes(&mut self, now: u64, changed: &mut Vec<RecordKey>) {
        let keep = self.changes_retention_ms();
        while let Some((seq, at_ms)) = self.changes.get_min().map(|(s, c)| (*s, c.at_ms)) {
            if at_ms.saturating_add(keep) > now {
                break;
            }
            self.changes.remove(&seq);
            changed.push(RecordKey::Change(seq));
        }
    }

    /// When the oldest change leaves (for an idle event's cleanup tick).
    pub(super) fn next_change_prune_ms(&self) -> Option<u64> {
        let (_, c) = self.changes.get_min()?;
        Some(c.at_ms.saturating_add(self.changes_retention_ms()))
    }

    /// Up to `limit` changes after `after`, with the range kept.
    pub fn change_page(&self, after: u64, limit: usize) -> ChangePage {
        let next_seq = self.event.as_ref().map_or(1, |e| e.next_change_seq);
        ChangePage {
            event_id: self.event.as_ref().map(|e| e.event_id.clone()),
            oldest_seq: self.changes.get_min().map_or(next_seq, |(s, _)| *s),
            next_seq,
            changes: self
                .changes
                .range(after.saturating_add(1)..)
                .take(limit)
                .map(|(_, c)| c.clone())
                .collect(),
            restored_through: None,
        }
    }
}

/// The event's own changes since `before`: its creation, an operator's
/// open/close override, a move.
fn event_changes(ev: &Event, before: &Before, found: &mut Vec<(ChangeKind, ChangeSubject)>) {
    match before.event {
        None => found.push((ChangeKind::EventCreated, event_subject(ev))),
        Some((epoch, forced)) => {
            if forced != ev.forced_open {
                let kind = match ev.forced_open {
                    Some(false) => ChangeKind::EventClosed,
                    _ => ChangeKind::EventOpened,
                };
                found.push((kind, event_subject(ev)));
            }
            if epoch != ev.epoch {
                found.push((ChangeKind::EventMoved, event_subject(ev)));
            }
        }
    }
}

/// The event as an `event.*` change shows it.
fn event_subject(ev: &Event) -> ChangeSubject {
    ChangeSubject::Event(EventFacts {
        name: ev.name.clone(),
        home_region: ev.home_region.clone(),
        owner: ev.owner.clone(),
        epoch: ev.epoch,
        capacity: ev.capacity,
        price_cents: ev.price_cents,
        currency: ev.currency.clone(),
        opens_at_ms: ev.opens_at_ms,
        closes_at_ms: ev.closes_at_ms,
        forced_open: ev.forced_open,
    })
}

fn booking_facts(b: &Booking, seats: Vec<String>) -> BookingFacts {
    BookingFacts {
        seq: b.seq,
        owner: b.owner.clone(),
        status: b.status,
        seats,
        payment_id: b.payment.payment_id.clone(),
        amount_cents: b.payment.amount_cents,
        currency: b.payment.currency.clone(),
        created_ms: b.created_ms,
        updated_ms: b.updated_ms,
        txn_id: b.txn_id.clone(),
        confirmed_via: b.confirmed_via,
        refund_id: b.refund_id.clone(),
        refund: b.refund.clone(),
    }
}
