//! The seat inventory of one event: what an event group replicates.
//!
//! ```text
//!  EventCommand{event_id, epoch, now_ms, idempotency, action}
//!    ─▶ epoch check (StaleEpoch{current, owner}) ─▶ expire due holds
//!    ─▶ idempotency lookup (owner, key, request hash) ─▶ action ─▶ record outcome
//! ```
//!
//! Records (each stored under its own key, see `RecordKey`): the [`Event`]
//! (settings, epoch, owner region, counters), one [`Seat`] per seat, every
//! [`Hold`], and an [`Operation`] per idempotency key. Derived [`Indexes`]
//! (free seats per section, hold deadlines, seats per buyer) are never
//! stored: they are rebuilt from the records after loading.
//!
//! Invariants `apply` keeps (checked by `core/tests/inventory_props.rs`):
//! a seat is held or sold by at most one hold, and that hold lists it;
//! `available + held + sold == capacity` and each counter equals the records;
//! a replayed idempotency key returns the first outcome.

mod apply;
mod booking;
mod changes;
mod command;
mod outbox;
mod outcome;
mod payment;
mod records;
mod refund;
mod release;
mod retention;
mod room;
mod spec;

pub use apply::{fnv as apply_fnv, request_hash};
pub use booking::{
    Booking, BookingStatus, ConfirmPath, OutboxItem, OutboxKind, PaymentAction, PaymentAttempt,
    RefundRequest, ReleaseReason, MAX_EXTENSIONS,
};
pub use changes::{
    BookingFacts, Change, ChangeKind, ChangePage, ChangeSubject, EventFacts,
    DEFAULT_CHANGES_RETENTION_MS, MAX_CHANGES_RETENTION_MS, MIN_CHANGES_RETENTION_MS,
};
pub(crate) use command::echo;
pub use command::{EventAction, EventCommand, SeatPick, MAX_ECHOED_SEATS, MAX_PICK_NAME_BYTES};
pub use outcome::{EventReply, Outcome};
pub use records::{Event, Hold, HoldStatus, OpKey, Operation, Seat, SeatState};
pub use retention::PruneKey;
pub use room::{
    Place, Room, RoomAction, RoomSettings, Segment, Standing, MAX_ADMIT_PER_SEC, MAX_JOIN_BATCH,
    MAX_SEGMENTS, MAX_TICKET_TTL_MS, MIN_SEGMENT_MS, MIN_TICKET_TTL_MS,
};
pub use spec::{
    EventSpec, Section, SpecError, Survival, DEFAULT_RETENTION_MS, MAX_CAPACITY, MAX_HOLD_TTL_MS,
    MAX_PRICE_CENTS, MAX_RETENTION_MS, MAX_SEATS_PER_HOLD_LIMIT, MIN_HOLD_TTL_MS, MIN_RETENTION_MS,
};

use serde::{Deserialize, Serialize};

use crate::ids::UserId;

/// Idempotency records of clients' keys are forgotten after this long,
/// unless the event keeps its finished records for another time.
pub const OPERATION_TTL_MS: u64 = DEFAULT_RETENTION_MS;

/// Webhook event ids are remembered this long (a provider redelivers for
/// a few days at most), then forgotten.
pub const INBOX_TTL_MS: u64 = 7 * 24 * 3600 * 1000;

/// Keys starting with this are the edge's own (given to requests that came
/// without one, so the edge's retries are safe). Clients may not use it.
pub const AUTO_KEY_PREFIX: &str = "~auto-";

/// The edge's own keys only guard its retries of one request, which end
/// within seconds: their records are forgotten after this long, so a flash
/// sale's millions of keyless requests do not pile up for a day.
pub const AUTO_OPERATION_TTL_MS: u64 = 10 * 60 * 1000;

/// Indexes derived from the records; rebuilt after loading, kept in step by
/// `apply`. Persistent sets, so cloning the state for a snapshot stays O(1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Indexes {
    /// Free seats per section, in layout order: `(ordinal, seat id)`.
    pub free: imbl::OrdMap<u32, imbl::OrdSet<(u32, String)>>,
    /// Deadlines of held holds without a payment, which `apply` expires:
    /// `(expires_at_ms, hold seq)`.
    pub deadlines: imbl::OrdSet<(u64, u64)>,
    /// Deadlines of held holds with a pending payment, which only the
    /// reconciler ends.
    pub pay_deadlines: imbl::OrdSet<(u64, u64)>,
    /// Released bookings whose payment is not known to be terminal yet
    /// (the reconciler watches them).
    pub unsettled: imbl::OrdSet<u64>,
    /// Outbox items not yet delivered whose booking is still kept (an
    /// item whose booking was pruned leaves with it: `outbox.rs`).
    pub outbox_pending: imbl::OrdSet<u64>,
    /// The same, by kind: emails and refunds queue apart, so neither
    /// waits behind the other.
    pub outbox_emails: imbl::OrdSet<u64>,
    /// Ids of the pending refund items (`outbox_emails` holds the emails).
    pub outbox_refunds: imbl::OrdSet<u64>,
    /// The same, by booking: `(booking seq, item id)`.
    pub outbox_of: imbl::OrdSet<(u64, u64)>,
    /// When each idempotency record lapses: `(forget_at_ms, key)`.
    pub op_times: imbl::OrdSet<(u64, OpKey)>,
    /// When each inbox entry was recorded: `(at_ms, provider event id)`.
    pub inbox_times: imbl::OrdSet<(u64, String)>,
    /// Seats in each buyer's live holds (only for events with a per-buyer
    /// limit).
    pub buyer_seats: imbl::OrdMap<UserId, u32>,
    /// Finished records and when `apply` removes them (`retention.rs`):
    /// `(prune_at_ms, what)`, and the same by what.
    pub prune_queue: imbl::OrdSet<(u64, PruneKey)>,
    /// Each queued record's `prune_at_ms`, by what: the reverse of `prune_queue`.
    pub prune_at: imbl::OrdMap<PruneKey, u64>,
    /// Waiting-room positions whose buyer held seats while admitted.
    pub used_positions: imbl::OrdSet<u64>,
}

/// One event's replicated inventory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    /// The event; `None` until it is created.
    pub(crate) event: Option<Event>,
    /// Seat records by seat id.
    pub(crate) seats: imbl::OrdMap<String, Seat>,
    /// Holds by seq.
    pub(crate) holds: imbl::OrdMap<u64, Hold>,
    /// Idempotency records by [`OpKey`].
    pub(crate) ops: imbl::OrdMap<OpKey, Operation>,
    /// Bookings by hold seq.
    pub(crate) bookings: imbl::OrdMap<u64, Booking>,
    /// Outbox items by id.
    pub(crate) outbox: imbl::OrdMap<u64, OutboxItem>,
    /// Provider event ids of webhooks already acted on, with when.
    pub(crate) inbox: imbl::OrdMap<String, u64>,
    /// The changefeed kept (`changes.rs`), by change seq.
    pub(crate) changes: imbl::OrdMap<u64, Change>,
    /// The waiting room, if the event has one (`room.rs`).
    pub(crate) room: Option<Room>,
    /// Places in the waiting room, by buyer.
    pub(crate) places: imbl::OrdMap<UserId, Place>,
    /// Derived indexes: never serialized, rebuilt by [`Inventory::rebuild_indexes`].
    #[serde(skip)]
    pub(crate) index: Indexes,
}

/// Read access to the records: they change only through [`Inventory::apply`]
/// (the fields are the crate's own), so every reader outside `core` sees
/// what apply left and none can change it.
impl Inventory {
    /// The event; `None` until it is created.
    pub fn event(&self) -> Option<&Event> {
        self.event.as_ref()
    }

    /// Seat records by seat id.
    pub fn seats(&self) -> &imbl::OrdMap<String, Seat> {
        &self.seats
    }

    /// Holds by seq.
    pub fn holds(&self) -> &imbl::OrdMap<u64, Hold> {
        &self.holds
    }

    /// Idempotency records by [`OpKey`].
    pub fn ops(&self) -> &imbl::OrdMap<OpKey, Operation> {
        &self.ops
    }

    /// Bookings by hold seq.
    pub fn bookings(&self) -> &imbl::OrdMap<u64, Booking> {
        &self.bookings
    }

    /// Outbox items by id.
    pub fn outbox(&self) -> &imbl::OrdMap<u64, OutboxItem> {
        &self.outbox
    }

    /// Provider event ids of webhooks already acted on, with when.
    pub fn inbox(&self) -> &imbl::OrdMap<String, u64> {
        &self.inbox
    }

    /// The changefeed kept, by change seq.
    pub fn changes(&self) -> &imbl::OrdMap<u64, Change> {
        &self.changes
    }

    /// The waiting room, if the event has one.
    pub fn room(&self) -> Option<&Room> {
        self.room.as_ref()
    }

    /// Places in the waiting room, by buyer.
    pub fn places(&self) -> &imbl::OrdMap<UserId, Place> {
        &self.places
    }

    /// The derived indexes (free seats, deadlines, unsettled bookings, the
    /// outbox's lanes...), as apply keeps them.
    pub fn index(&self) -> &Indexes {
        &self.index
    }
}

impl Inventory {
    /// Refunds in the outbox not yet issued at the gateway.
    pub fn refunds_pending(&self) -> usize {
        self.index.outbox_refunds.len()
    }

    /// Recompute every derived index from the records.
    pub fn rebuild_indexes(&mut self) {
        let mut ix = Indexes::default();
        for (id, seat) in &self.seats {
            if seat.state == SeatState::Available {
                ix.free
                    .entry(seat.section)
                    .or_default()
                    .insert((seat.ordinal, id.clone()));
            }
        }
        for h in self.holds.values() {
            if h.status == HoldStatus::Held {
                if self.bookings.contains_key(&h.seq) {
                    ix.pay_deadlines.insert((h.expires_at_ms, h.seq));
                } else {
                    ix.deadlines.insert((h.expires_at_ms, h.seq));
                }
            }
            if h.status.is_live() && self.counts_buyers() {
                *ix.buyer_seats.entry(h.owner.clone()).or_default() += h.seats.len() as u32;
            }
        }
        for b in self.bookings.values() {
            if b.unsettled() {
                ix.unsettled.insert(b.seq);
            }
        }
        for item in self.outbox.values() {
            if item.done_ms.is_none() && self.bookings.contains_key(&item.booking) {
                ix.index_pending(item);
            }
        }
        let retention = self.retention_ms();
        for (k, op) in &self.ops {
            ix.op_times
                .insert((k.forget_at(op.at_ms, retention), k.clone()));
        }
        for (id, at) in &self.inbox {
            ix.inbox_times.insert((*at, id.clone()));
        }
        for place in self.places.values().filter(|p| p.used()) {
            ix.used_positions.extend(place.position);
        }
        self.index = ix;
        let keys: Vec<PruneKey> = (self.holds.keys().map(|s| PruneKey::Hold(*s)))
            .chain(self.outbox.keys().map(|i| PruneKey::Outbox(*i)))
            .collect();
        for key in keys {
            self.refresh_prune(key);
        }
    }

    /// Whether seats per buyer are tracked: only for an event with a
    /// per-buyer limit (the lookup costs a string comparison per hold).
    pub fn counts_buyers(&self) -> bool {
        self.event
            .as_ref()
            .is_some_and(|e| e.max_seats_per_buyer.is_some())
    }

    /// Counts recomputed from the seat records: `(available, held, sold)`.
    pub fn count_seats(&self) -> (u64, u64, u64) {
        let mut c = (0, 0, 0);
        for s in self.seats.values() {
            match s.state {
                SeatState::Available => c.0 += 1,
                SeatState::Held(_) => c.1 += 1,
                SeatState::Sold(_) => c.2 += 1,
            }
        }
        c
    }

    /// Free seat ids in layout order, at most `limit`.
    pub fn free_seats(&self, limit: usize) -> Vec<String> {
        self.index
            .free
            .values()
            .flat_map(|s| s.iter().map(|(_, id)| id.clone()))
            .take(limit)
            .collect()
    }
}
