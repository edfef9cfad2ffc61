//! What an event group answers: an [`Outcome`] per command, inside an
//! [`EventReply`] that carries the fence (epoch, owner region).

use serde::{Deserialize, Serialize};

use super::{Booking, BookingStatus, Hold, HoldStatus, RoomSettings, SpecError, Standing};
use crate::ids::{Epoch, RegionId, UserId};

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
