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
    /// The event it is for: another one than the group's is `EventNotFound`.
    pub event_id: EventId,
    /// The epoch the sender routed by: any other than the event's is `StaleEpoch`.
    pub epoch: Epoch,
    /// The leader's clock, in Unix ms; `apply` never lets the event's clock go back.
    pub now_ms: u64,
    /// `(owner, Idempotency-Key)`: a replay returns the recorded outcome.
    pub idempotency: Option<(UserId, String)>,
    /// What to do.
    pub action: EventAction,
}

/// What an event command asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventAction {
    /// Create the event (epoch 1, owner = home region). Repeating the same
    /// spec answers `Created` again; another spec is `EventExists`.
    Create(Box<EventSpec>),
    /// Hold seats for `owner`, all or none.
    Hold {
        /// The buyer.
        owner: UserId,
        /// Which seats.
        pick: SeatPick,
    },
    /// Cancel a hold (its owner only, before payment).
    Cancel {
        /// The buyer who made the hold.
        owner: UserId,
        /// The hold's seq.
        hold: u64,
    },
    /// Operator override of the sale window.
    SetOpen {
        /// `true` opens the sale, `false` closes it, whatever the window says.
        open: bool,
    },
    /// Advance the clock: expires due holds.
    Tick,
    /// Bookings and payments (see `booking.rs`).
    Payment(PaymentAction),
    /// Ownership move, step 5: the new owner region's leader raises the
    /// epoch by one. The command carries the current epoch (so a repeat
    /// after success is a `StaleEpoch` naming the new one); `epoch` must be
    /// exactly one above it. From here on, every command stamped with the
    /// old epoch is refused on every replica.
    BumpEpoch {
        /// The new epoch: the command's `epoch` plus one.
        epoch: Epoch,
        /// The region that owns the event from now on.
        owner: RegionId,
    },
    /// The waiting room (see `room.rs`).
    Room(RoomAction),
}

/// Which seats a hold asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SeatPick {
    /// These seat ids, each once: all must exist and be available.
    Seats(Vec<String>),
    /// Any `quantity` free seats, from `section` or from any section.
    Quantity {
        /// The section to take them from; `None`: any, in layout order.
        section: Option<String>,
        /// How many seats, at least 1.
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
    /// The event's id.
    pub event_id: EventId,
    /// Display name.
    pub name: String,
    /// The region it was created in (its owner at epoch 1).
    pub home_region: RegionId,
    /// The region that owns it now; a move (`BumpEpoch`) changes it.
    pub owner: RegionId,
    /// The ownership fence: 1 at creation, one more per move.
    pub epoch: Epoch,
    /// Section names in layout order (`""` for explicit seats).
    pub sections: Vec<String>,
    /// How long a new hold lasts before it expires, in ms.
    pub hold_ttl_ms: u64,
    /// Most seats one hold may take.
    pub max_seats_per_hold: u32,
    /// Seats one buyer may have across live holds; `None`: no limit.
    pub max_seats_per_buyer: Option<u32>,
    /// When the sale window opens, in Unix ms; `None`: at creation.
    pub opens_at_ms: Option<u64>,
    /// When the sale window closes, in Unix ms; `None`: never.
    pub closes_at_ms: Option<u64>,
    /// Where the event group's voters go.
    pub survival: Survival,
    /// Operator override of the window (`POST .../open|close`).
    pub forced_open: Option<bool>,
    /// Total seats; `available + held + sold` always equals it.
    pub capacity: u64,
    /// Seats free to hold.
    pub available: u64,
    /// Seats in held holds, not sold yet.
    pub held: u64,
    /// Seats sold: those of booked holds.
    pub sold: u64,
    /// Hash of the creating spec: a repeated create must match it.
    pub spec_hash: u64,
    /// The seq the next hold gets: 1 for the first.
    pub next_hold_seq: u64,
    /// The id the next outbox item gets: 1 for the first.
    pub next_outbox_id: u64,
    /// Price of one seat, in the currency's minor unit.
    pub price_cents: u64,
    /// ISO 4217 code of `price_cents`.
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

/// Where one seat stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeatState {
    /// Free to hold.
    Available,
    /// Held, not sold yet, by the hold with this seq.
    Held(u64),
    /// Sold, through the hold with this seq.
    Sold(u64),
}

/// One seat's record, keyed by its seat id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seat {
    /// Position in the layout (free seats are handed out in this order).
    pub ordinal: u32,
    /// Index of its section in the event's `sections`.
    pub section: u32,
    /// Free, held or sold.
    pub state: SeatState,
}

/// Where a hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HoldStatus {
    /// Owns its seats, not paid yet.
    Held,
    /// Paid: its seats are sold.
    Booked,
    /// Ended early: cancelled by its owner, or refunded by an operator with the seats returned.
    Released,
    /// Ended at its deadline unpaid, or released by the reconciler (payment failed or unpaid).
    Expired,
}

impl HoldStatus {
    /// The lowercase name the API gives it.
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

/// Seats taken for one buyer, all or none; its booking, if any, has its `seq`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hold {
    /// Number within the event, from 1 in creation order; also its booking's key.
    pub seq: u64,
    /// The buyer.
    pub owner: UserId,
    /// Seat ids: in the order asked, or in layout order for a quantity.
    pub seats: Vec<String>,
    /// When it was made, on the event's clock (Unix ms).
    pub created_ms: u64,
    /// Its deadline, in Unix ms: unpaid by then, it expires.
    pub expires_at_ms: u64,
    /// Where it stands.
    pub status: HoldStatus,
    /// Times the reconciler pushed the deadline back (payment unknown).
    pub extensions: u32,
}

/// The recorded outcome of one idempotent request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// [`request_hash`] of the request: a replay must match it.
    pub request_hash: u64,
    /// When it was recorded, on the event's clock (Unix ms).
    pub at_ms: u64,
    /// The outcome a replay answers.
    pub outcome: Outcome,
}

/// What an event command did. Every replica computes the same one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// The event was created, or the same spec was sent again.
    Created {
        /// The event's total seats.
        capacity: u64,
    },
    /// The hold was made.
    Held(Hold),
    /// The hold as it stands after a cancel (also when it had ended already).
    Cancelled(Hold),
    /// The operator's override of the sale window was set.
    OpenSet {
        /// The override now in force.
        open: bool,
    },
    /// The clock advanced.
    Ticked {
        /// Holds this command expired.
        expired: u32,
    },
    /// The event moved: from now on only commands with the new epoch apply.
    EpochBumped {
        /// The new epoch.
        epoch: Epoch,
        /// The new owner region.
        owner: RegionId,
    },
    /// The command's epoch is not the event's: re-route with `current`.
    StaleEpoch {
        /// The event's epoch.
        current: Epoch,
        /// The region that owns the event at that epoch.
        owner: RegionId,
    },
    /// The group has no event, or another one than the command names.
    EventNotFound,
    /// A create sent a different spec for an event that exists.
    EventExists,
    /// The spec, or the waiting room's settings, were refused.
    InvalidEvent(SpecError),
    /// The event has no hold with that seq owned by that buyer.
    HoldNotFound,
    /// A hold that has a booking cannot be cancelled by its owner.
    HoldNotCancellable {
        /// The hold's status: held with a booking, or booked.
        status: HoldStatus,
    },
    /// Listed seats are taken, or too few seats are free; nothing was held.
    SeatsUnavailable {
        /// The listed seats that are held or sold (empty for a quantity).
        unavailable: Vec<String>,
        /// Free seats: in the event for a list, in the sections asked for a quantity.
        available: u64,
    },
    /// At most [`MAX_ECHOED_SEATS`] of the unknown seats (the first asked).
    UnknownSeats {
        /// The unknown seat ids, each cut to [`MAX_PICK_NAME_BYTES`].
        seats: Vec<String>,
    },
    /// The section asked for, cut to [`MAX_PICK_NAME_BYTES`].
    UnknownSection {
        /// The name asked for, cut short.
        section: String,
    },
    /// The hold asks for more seats than one hold may take.
    TooManySeats {
        /// The event's `max_seats_per_hold`.
        max: u32,
    },
    /// The request is malformed or not allowed now; nothing changed.
    InvalidRequest {
        /// Why, for a person to read.
        reason: String,
    },
    /// The sale window has not opened yet.
    SaleNotOpen,
    /// The sale window has closed, or an operator closed the sale.
    SaleClosed,
    /// The buyer's live holds plus this one would go over the per-buyer limit.
    BuyerLimitReached {
        /// The event's `max_seats_per_buyer`.
        limit: u32,
    },
    /// The idempotency key was used before for a different request.
    IdempotencyKeyReused,
    /// A booking as it stands after the command.
    Booking(Box<Booking>),
    /// The answer to a confirm: `changed` when this command moved the
    /// booking (to confirmed, or to refund_pending after a release).
    Confirmed {
        /// Whether this command changed the booking's status.
        changed: bool,
        /// The booking after the command.
        booking: Box<Booking>,
    },
    /// The answer to an execute intent.
    ExecuteIntent {
        /// Whether the requester may execute (capture) the payment now.
        granted: bool,
        /// The booking after the command.
        booking: Box<Booking>,
    },
    /// The payment deadline was pushed back (by this command or an earlier one).
    Extended {
        /// Extensions the hold has had so far.
        extensions: u32,
        /// The hold's deadline now, in Unix ms.
        expires_at_ms: u64,
    },
    /// The hold had its [`MAX_EXTENSIONS`] already: the deadline stays.
    ExtensionsExhausted {
        /// Extensions the hold has had.
        extensions: u32,
    },
    /// The outbox item is delivered (now or before).
    OutboxDone,
    /// The hold has no booking.
    BookingNotFound,
    /// The payment id is not the booking's.
    PaymentMismatch,
    /// Only a held hold can be booked.
    HoldNotBookable {
        /// The hold's status.
        status: HoldStatus,
    },
    /// The hold's deadline has passed: no payment is taken any more.
    PaymentDeadlinePassed,
    /// A release or void intent came before the deadline, or an unpaid release before a
    /// void intent.
    ReleaseRefused {
        /// Why, for a person to read.
        reason: String,
    },
    /// The event has no outbox item with that id.
    OutboxItemNotFound,
    /// Only a confirmed booking can be refunded by an operator.
    BookingNotRefundable {
        /// The booking's status.
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
        /// Seats one ticket may hold over its life.
        limit: u32,
        /// Seats already held through this ticket.
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
    /// The event's epoch after the command (`Epoch(0)` when the event is unknown).
    pub epoch: Epoch,
    /// The event's owner region after the command (empty when the event is unknown).
    pub owner: RegionId,
    /// What the command did.
    pub outcome: Outcome,
}

/// The key of an idempotency record: `(owner, key)`, ordered by a hash of
/// both first so a lookup among many records rarely compares strings
/// (they share long prefixes such as `buyer…`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpKey {
    /// FNV-1a of `owner`, a zero byte and `key`: the first field records sort by.
    pub hash: u64,
    /// The user who sent the key.
    pub owner: UserId,
    /// The Idempotency-Key as sent, or an edge's own (see [`AUTO_KEY_PREFIX`]).
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

    /// The key of `owner`'s `key`, with its hash.
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
    pub event: Option<Event>,
    /// Seat records by seat id.
    pub seats: imbl::OrdMap<String, Seat>,
    /// Holds by seq.
    pub holds: imbl::OrdMap<u64, Hold>,
    /// Idempotency records by [`OpKey`].
    pub ops: imbl::OrdMap<OpKey, Operation>,
    /// Bookings by hold seq.
    pub bookings: imbl::OrdMap<u64, Booking>,
    /// Outbox items by id.
    pub outbox: imbl::OrdMap<u64, OutboxItem>,
    /// Provider event ids of webhooks already acted on, with when.
    pub inbox: imbl::OrdMap<String, u64>,
    /// The changefeed kept (`changes.rs`), by change seq.
    pub changes: imbl::OrdMap<u64, Change>,
    /// The waiting room, if the event has one (`room.rs`).
    pub room: Option<Room>,
    /// Places in the waiting room, by buyer.
    pub places: imbl::OrdMap<UserId, Place>,
    /// Derived indexes: never serialized, rebuilt by [`Inventory::rebuild_indexes`].
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
