//! What an event group is asked to do: [`EventCommand`] (event, epoch,
//! time, idempotency key, action), its [`EventAction`]s, and how a hold
//! names its seats ([`SeatPick`]).

use serde::{Deserialize, Serialize};

use super::{EventSpec, PaymentAction, RoomAction};
use crate::ids::{Epoch, EventId, RegionId, UserId};

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
