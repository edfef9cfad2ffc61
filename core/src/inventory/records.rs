//! The records an event group stores, each under its own key: the
//! [`Event`], one [`Seat`] per seat, every [`Hold`], and an [`Operation`]
//! per idempotency key ([`OpKey`]).

use serde::{Deserialize, Serialize};

use super::{apply, Outcome, Survival, AUTO_KEY_PREFIX, AUTO_OPERATION_TTL_MS};
use crate::ids::{Epoch, EventId, RegionId, UserId};

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
