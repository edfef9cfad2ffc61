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
mod outbox;
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

use crate::ids::{Epoch, EventId, RegionId, UserId};

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

/// A command for an event group. The edge fills `epoch` from its route
/// cache; the leader stamps `now_ms` just before proposing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventCommand {
    pub event_id: EventId,
    pub epoch: Epoch,
    pub now_ms: u64,
    /// `(owner, Idempotency-Key)`: a replay returns the recorded outcome.
    pub idempotency: Option<(UserId, String)>,
    pub action: EventAction,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventAction {
    /// Create the event (epoch 1, owner = home region). Repeating the same
    /// spec answers `Created` again; another spec is `EventExists`.
    Create(Box<EventSpec>),
    /// Hold seats for `owner`, all or none.
    Hold { owner: UserId, pick: SeatPick },
    /// Cancel a hold (its owner only, before payment).
    Cancel { owner: UserId, hold: u64 },
    /// Operator override of the sale window.
    SetOpen { open: bool },
    /// Advance the clock: expires due holds.
    Tick,
    /// Bookings and payments (see `booking.rs`).
    Payment(PaymentAction),
    /// Ownership move, step 5: the new owner region's leader raises the
    /// epoch by one. The command carries the current epoch (so a repeat
    /// after success is a `StaleEpoch` naming the new one); `epoch` must be
    /// exactly one above it. From here on, every command stamped with the
    /// old epoch is refused on every replica.
    BumpEpoch { epoch: Epoch, owner: RegionId },
    /// The waiting room (see `room.rs`).
    Room(RoomAction),
}

/// Which seats a hold asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SeatPick {
    Seats(Vec<String>),
    /// Any `quantity` free seats, from `section` or from any section.
    Quantity {
        section: Option<String>,
        quantity: u32,
    },
}

/// Longest seat id or section name a hold may name, in bytes: twice the
/// longest an event can have (seat ids are at most 32 bytes, section names
/// 16, so generated ids at most 30), so no real one comes near. A longer
/// one is refused before anything applies ([`SeatPick::check_bounds`], run
/// by every replica in `Command::check_bounds` and first by the edge).
pub const MAX_PICK_NAME_BYTES: usize = 64;

/// How many unknown seats an [`Outcome::UnknownSeats`] names (the first,
/// in the order asked, each at most [`MAX_PICK_NAME_BYTES`]): a keyed
/// refusal is kept under its idempotency key, so its size must not follow
/// the request's.
pub const MAX_ECHOED_SEATS: usize = 8;

impl SeatPick {
    /// Bounds of what a hold may name: every seat id and the section name
    /// at most [`MAX_PICK_NAME_BYTES`]. `Err`: why not (naming the field,
    /// never echoing it). How many seats is the event's to decide
    /// (`too_many_seats`).
    pub fn check_bounds(&self) -> Result<(), String> {
        let long = |what: String, s: &str| {
            (s.len() > MAX_PICK_NAME_BYTES)
                .then(|| format!("{what} is {} bytes, over {MAX_PICK_NAME_BYTES}", s.len()))
        };
        let problem = match self {
            SeatPick::Seats(list) => list
                .iter()
                .enumerate()
                .find_map(|(i, s)| long(format!("seats[{i}]"), s)),
            SeatPick::Quantity {
                section: Some(s), ..
            } => long("section".into(), s),
            SeatPick::Quantity { section: None, .. } => None,
        };
        problem.map_or(Ok(()), Err)
    }
}

/// `s` cut to at most `max` bytes, at a character boundary: what a refusal
/// echoes of a name the client sent.
pub(crate) fn echo(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// An event's settings, fence and counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub event_id: EventId,
    pub name: String,
    pub home_region: RegionId,
    pub owner: RegionId,
    pub epoch: Epoch,
    /// Section names in layout order (`""` for explicit seats).
    pub sections: Vec<String>,
    pub hold_ttl_ms: u64,
    pub max_seats_per_hold: u32,
    pub max_seats_per_buyer: Option<u32>,
    pub opens_at_ms: Option<u64>,
    pub closes_at_ms: Option<u64>,
    pub survival: Survival,
    /// Operator override of the window (`POST .../open|close`).
    pub forced_open: Option<bool>,
    pub capacity: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
    /// Hash of the creating spec: a repeated create must match it.
    pub spec_hash: u64,
    pub next_hold_seq: u64,
    pub next_outbox_id: u64,
    pub price_cents: u64,
    pub currency: String,
    /// How long finished records are kept (the spec's `retention_ms`).
    pub retention_ms: u64,
    /// The highest `now_ms` applied: time never runs backwards in `apply`,
    /// whatever the clocks of successive leaders say.
    pub clock_ms: u64,
    /// How long changes are kept (the spec's `changes_retention_ms`).
    pub changes_retention_ms: u64,
    /// The number the next change gets (`changes.rs`): 1 for the first.
    pub next_change_seq: u64,
}

impl Event {
    /// Whether holds are accepted at `now_ms`: the operator's override,
    /// else the `opens_at`/`closes_at` window. `Err` is the refusal.
    pub fn sale_open(&self, now_ms: u64) -> Result<(), Outcome> {
        match self.forced_open {
            Some(true) => Ok(()),
            Some(false) => Err(Outcome::SaleClosed),
            None if self.opens_at_ms.is_some_and(|t| now_ms < t) => Err(Outcome::SaleNotOpen),
            None if self.closes_at_ms.is_some_and(|t| now_ms >= t) => Err(Outcome::SaleClosed),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeatState {
    Available,
    Held(u64),
    Sold(u64),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seat {
    /// Position in the layout (free seats are handed out in this order).
    pub ordinal: u32,
    pub section: u32,
    pub state: SeatState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HoldStatus {
    Held,
    Booked,
    Released,
    Expired,
}

impl HoldStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldStatus::Held => "held",
            HoldStatus::Booked => "booked",
            HoldStatus::Released => "released",
            HoldStatus::Expired => "expired",
        }
    }

    /// Whether the hold still owns its seats.
    pub fn is_live(self) -> bool {
        matches!(self, HoldStatus::Held | HoldStatus::Booked)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hold {
    pub seq: u64,
    pub owner: UserId,
    pub seats: Vec<String>,
    pub created_ms: u64,
    pub expires_at_ms: u64,
    pub status: HoldStatus,
    /// Times the reconciler pushed the deadline back (payment unknown).
    pub extensions: u32,
}

/// The recorded outcome of one idempotent request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    pub request_hash: u64,
    pub at_ms: u64,
    pub outcome: Outcome,
}

/// What an event command did. Every replica computes the same one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    Created {
        capacity: u64,
    },
    Held(Hold),
    Cancelled(Hold),
    OpenSet {
        open: bool,
    },
    Ticked {
        expired: u32,
    },
    EpochBumped {
        epoch: Epoch,
        owner: RegionId,
    },
    /// The command's epoch is not the event's: re-route with `current`.
    StaleEpoch {
        current: Epoch,
        owner: RegionId,
    },
    EventNotFound,
    EventExists,
    InvalidEvent(SpecError),
    HoldNotFound,
    /// A hold that has a booking cannot be cancelled by its owner.
    HoldNotCancellable {
        status: HoldStatus,
    },
    SeatsUnavailable {
        unavailable: Vec<String>,
        available: u64,
    },
    /// At most [`MAX_ECHOED_SEATS`] of the unknown seats (the first asked).
    UnknownSeats {
        seats: Vec<String>,
    },
    /// The section asked for, cut to [`MAX_PICK_NAME_BYTES`].
    UnknownSection {
        section: String,
    },
    TooManySeats {
        max: u32,
    },
    InvalidRequest {
        reason: String,
    },
    SaleNotOpen,
    SaleClosed,
    BuyerLimitReached {
        limit: u32,
    },
    IdempotencyKeyReused,
    /// A booking as it stands after the command.
    Booking(Box<Booking>),
    /// The answer to a confirm: `changed` when this command moved the
    /// booking (to confirmed, or to refund_pending after a release).
    Confirmed {
        changed: bool,
        booking: Box<Booking>,
    },
    ExecuteIntent {
        granted: bool,
        booking: Box<Booking>,
    },
    Extended {
        extensions: u32,
        expires_at_ms: u64,
    },
    ExtensionsExhausted {
        extensions: u32,
    },
    OutboxDone,
    BookingNotFound,
    /// The payment id is not the booking's.
    PaymentMismatch,
    /// Only a held hold can be booked.
    HoldNotBookable {
        status: HoldStatus,
    },
    /// The hold's deadline has passed: no payment is taken any more.
    PaymentDeadlinePassed,
    ReleaseRefused {
        reason: String,
    },
    OutboxItemNotFound,
    /// Only a confirmed booking can be refunded by an operator.
    BookingNotRefundable {
        status: BookingStatus,
    },
    /// The room's settings as they now stand.
    RoomSet(RoomSettings),
    /// Each buyer of a join batch, in order, and where it stands.
    Joined(Vec<(UserId, Standing)>),
    /// The event has no enabled waiting room.
    NoWaitingRoom,
    /// An enabled waiting room needs the event's `opens_at`.
    OpensAtRequired,
    /// A hold in an event with a room, by a buyer who is not in its queue.
    TicketRequired,
    /// A hold by a buyer whose admission lapsed.
    TicketInvalid,
    /// A hold by a buyer still waiting in the queue.
    NotAdmittedYet,
    /// A hold through a ticket that has already held `held` of the `limit`
    /// seats one ticket may hold (the per-buyer limit, else the per-hold
    /// one), so this one would go over.
    TicketUsed {
        limit: u32,
        held: u32,
    },
}

impl Outcome {
    /// A stable code for rejections, `None` for success.
    pub fn error_code(&self) -> Option<&'static str> {
        Some(match self {
            Outcome::Created { .. }
            | Outcome::Held(_)
            | Outcome::Cancelled(_)
            | Outcome::OpenSet { .. }
            | Outcome::Ticked { .. }
            | Outcome::EpochBumped { .. }
            | Outcome::Booking(_)
            | Outcome::Confirmed { .. }
            | Outcome::ExecuteIntent { .. }
            | Outcome::Extended { .. }
            | Outcome::OutboxDone
            | Outcome::RoomSet(_)
            | Outcome::Joined(_) => return None,
            Outcome::StaleEpoch { .. } => "stale_epoch",
            Outcome::EventNotFound => "event_not_found",
            Outcome::EventExists => "event_exists",
            Outcome::InvalidEvent(e) => e.code(),
            Outcome::HoldNotFound => "hold_not_found",
            Outcome::HoldNotCancellable { .. } => "hold_not_cancellable",
            Outcome::SeatsUnavailable { .. } => "seats_unavailable",
            Outcome::UnknownSeats { .. } => "unknown_seats",
            Outcome::UnknownSection { .. } => "unknown_section",
            Outcome::TooManySeats { .. } => "too_many_seats",
            Outcome::InvalidRequest { .. } => "invalid_request",
            Outcome::SaleNotOpen => "sale_not_open",
            Outcome::SaleClosed => "sale_closed",
            Outcome::BuyerLimitReached { .. } => "buyer_limit_reached",
            Outcome::IdempotencyKeyReused => "idempotency_key_reused",
            Outcome::ExtensionsExhausted { .. } => "extensions_exhausted",
            Outcome::BookingNotFound => "booking_not_found",
            Outcome::PaymentMismatch => "payment_mismatch",
            Outcome::HoldNotBookable { .. } => "hold_not_bookable",
            Outcome::PaymentDeadlinePassed => "payment_deadline_passed",
            Outcome::ReleaseRefused { .. } => "release_refused",
            Outcome::OutboxItemNotFound => "outbox_item_not_found",
            Outcome::BookingNotRefundable { .. } => "booking_not_refundable",
            Outcome::NoWaitingRoom => "no_waiting_room",
            Outcome::OpensAtRequired => "opens_at_required",
            Outcome::TicketRequired => "ticket_required",
            Outcome::TicketInvalid => "ticket_invalid",
            Outcome::NotAdmittedYet => "not_admitted_yet",
            Outcome::TicketUsed { .. } => "ticket_used",
        })
    }
}

/// The answer to an event command, stamped with the event's epoch and
/// owner as this replica saw them (`Epoch(0)` when the event is unknown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventReply {
    /// The answer repeats a recorded one (same Idempotency-Key): nothing
    /// was done this time.
    pub replayed: bool,
    pub epoch: Epoch,
    pub owner: RegionId,
    pub outcome: Outcome,
}

/// The key of an idempotency record: `(owner, key)`, ordered by a hash of
/// both first so a lookup among many records rarely compares strings
/// (they share long prefixes such as `buyer…`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpKey {
    pub hash: u64,
    pub owner: UserId,
    pub key: String,
}

impl OpKey {
    /// When a record made at `at_ms` under this key is forgotten, for an
    /// event keeping finished records `retention_ms`.
    pub fn forget_at(&self, at_ms: u64, retention_ms: u64) -> u64 {
        let ttl = if self.key.starts_with(AUTO_KEY_PREFIX) {
            AUTO_OPERATION_TTL_MS.min(retention_ms)
        } else {
            retention_ms
        };
        at_ms.saturating_add(ttl)
    }

    pub fn new(owner: UserId, key: String) -> OpKey {
        let mut bytes = Vec::with_capacity(owner.0.len() + key.len() + 1);
        bytes.extend_from_slice(owner.0.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(key.as_bytes());
        OpKey {
            hash: apply::fnv(&bytes),
            owner,
            key,
        }
    }
}

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
    pub prune_at: imbl::OrdMap<PruneKey, u64>,
    /// Waiting-room positions whose buyer held seats while admitted.
    pub used_positions: imbl::OrdSet<u64>,
}

/// One event's replicated inventory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub event: Option<Event>,
    pub seats: imbl::OrdMap<String, Seat>,
    pub holds: imbl::OrdMap<u64, Hold>,
    /// Idempotency records by [`OpKey`].
    pub ops: imbl::OrdMap<OpKey, Operation>,
    /// Bookings by hold seq.
    pub bookings: imbl::OrdMap<u64, Booking>,
    pub outbox: imbl::OrdMap<u64, OutboxItem>,
    /// Provider event ids of webhooks already acted on, with when.
    pub inbox: imbl::OrdMap<String, u64>,
    /// The changefeed kept (`changes.rs`), by change seq.
    pub changes: imbl::OrdMap<u64, Change>,
    /// The waiting room, if the event has one (`room.rs`).
    pub room: Option<Room>,
    /// Places in the waiting room, by buyer.
    pub places: imbl::OrdMap<UserId, Place>,
    #[serde(skip)]
    pub index: Indexes,
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
