//! The waiting room of one event: a fair queue in front of the sale.
//!
//! ```text
//!  edges batch joins ─▶ RoomAction::Join{buyers, salt} (one command per batch)
//!    before opens_at: a place without a position; the batch's salt folds into the draw's seed
//!    at the opening:  every early place gets its position by the draw (hash of seed and buyer)
//!    after it:        the next position, in commit order
//!  admission: position p is admitted at `admitted_at(p)`, a schedule of
//!    segments {from_pos, from_ms, per_sec}: no command per admitted buyer
//! ```
//!
//! Positions live in the group's state, so every region's edge reads the
//! same one, and a leader change, restart or move keeps them. The draw's
//! seed comes from the edges' random salts, which no buyer sees or picks,
//! so an early join or a bot's many joins buy no better place than being
//! in the room. A position is not a reservation: an admitted buyer still
//! has to win seats with a hold.
//!
//! Admission needs no write: `admitted(now)` follows from the schedule. A
//! new segment starts when an operator changes the rate (from the first
//! position not yet admitted) and when a join finds the queue drained
//! with admission credit saved up (so a rush after a quiet spell is paced,
//! not let in at once). Segments start at least [`MIN_SEGMENT_MS`] apart:
//! a join on a drained queue sooner than that keeps the last one (the
//! credit it can have saved is at most a second of the rate), and a rate
//! change sooner than that is refused. A segment goes only once every
//! position in it lapsed (admitted, and `ticket_ttl` passed), so at most
//! `ticket_ttl / MIN_SEGMENT_MS + 2` are ever kept and none is dropped
//! while one of its tickets could still be used.
//!
//! An admitted buyer may hold seats until `admitted_at + ticket_ttl`, at
//! most the event's per-buyer limit of them over the ticket's life
//! ([`Room::ticket_seats`]; `max_seats_per_hold` in an event without
//! one), counted as they are held, so cancelling does not give them back:
//! more is `ticket_used`. After that time the place has lapsed and the
//! buyer may join again, at the back, with a new allowance.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::ids::UserId;

mod apply;

use super::SpecError;

/// Bounds of a room's settings.
pub const MAX_ADMIT_PER_SEC: u32 = 100_000;
/// The shortest ticket TTL a room may have, in ms: 10 s.
pub const MIN_TICKET_TTL_MS: u64 = 10_000;
/// The longest ticket TTL a room may have, in ms: an hour.
pub const MAX_TICKET_TTL_MS: u64 = 3_600_000;
/// Most buyers in one join batch.
pub const MAX_JOIN_BATCH: usize = 1_000;
/// Schedule segments kept at most. Never reached while segments start
/// [`MIN_SEGMENT_MS`] apart and go once lapsed (at most
/// `MAX_TICKET_TTL_MS / MIN_SEGMENT_MS + 2` = 3,602 are live); a schedule
/// that is full anyway starts no segment (a join keeps the last one, a
/// rate change is refused) rather than drop one with usable tickets.
pub const MAX_SEGMENTS: usize = 4_096;
/// The least time between two segments' starts.
pub const MIN_SEGMENT_MS: u64 = 1_000;

/// A room's settings: the create body's `waiting_room` and the operators'
/// `POST /v1/admin/events/{id}/waiting-room`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RoomSettings {
    /// Whether the room stands in front of the sale; a disabled one asks for no ticket.
    pub enabled: bool,
    /// Positions admitted per second, 1 to [`MAX_ADMIT_PER_SEC`].
    pub admit_per_sec: u32,
    /// How long an admitted buyer may hold seats, in ms
    /// ([`MIN_TICKET_TTL_MS`] to [`MAX_TICKET_TTL_MS`]).
    pub ticket_ttl_ms: u64,
}

impl RoomSettings {
    /// Whether the rate and ticket TTL are within bounds; `Err` is `BadWaitingRoom`.
    pub fn validate(&self) -> Result<(), SpecError> {
        if !(1..=MAX_ADMIT_PER_SEC).contains(&self.admit_per_sec)
            || !(MIN_TICKET_TTL_MS..=MAX_TICKET_TTL_MS).contains(&self.ticket_ttl_ms)
        {
            return Err(SpecError::BadWaitingRoom);
        }
        Ok(())
    }
}

/// From `from_ms` on, positions from `from_pos` are admitted at `per_sec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Segment {
    /// The first position it admits (0-based), admitted at `from_ms`.
    pub from_pos: u64,
    /// When it starts, in Unix ms.
    pub from_ms: u64,
    /// Positions admitted per second.
    pub per_sec: u32,
}

impl Segment {
    /// When position `p` (at or after `from_pos`) is admitted.
    fn admitted_at(&self, p: u64) -> u64 {
        let n = u128::from(p - self.from_pos) * 1_000;
        let ms = n.div_ceil(u128::from(self.per_sec));
        self.from_ms
            .saturating_add(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// Positions admitted by `now` (uncapped by the queue's length).
    fn admitted(&self, now: u64) -> u64 {
        if now < self.from_ms {
            return self.from_pos;
        }
        let more = u128::from(now - self.from_ms) * u128::from(self.per_sec) / 1_000;
        self.from_pos
            .saturating_add(u64::try_from(more).unwrap_or(u64::MAX))
            .saturating_add(1)
    }
}

/// The room of one event (one record).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Room {
    /// The room's settings.
    pub settings: RoomSettings,
    /// Positions given out: 0..placed.
    pub placed: u64,
    /// Places waiting for the opening's draw.
    pub awaiting_draw: u64,
    /// The draw's seed: every pre-opening batch's salt folded in.
    pub seed: u64,
    /// The opening's draw has run: joins get the next position from then on.
    pub opened: bool,
    /// The admission schedule, oldest first; empty until the opening.
    pub segments: VecDeque<Segment>,
    /// Places whose buyer held seats while admitted.
    pub tickets_used: u64,
    /// Places that lapsed and joined again.
    pub rejoined: u64,
    /// Of those, places that had been used: their old positions leave the
    /// used index with them (see [`Room::lapsed`]).
    pub rejoined_used: u64,
}

/// One buyer's place.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Place {
    /// 0-based; `None` until the opening's draw.
    pub position: Option<u64>,
    /// When the buyer joined, on the event's clock (Unix ms).
    pub joined_ms: u64,
    /// Seats held through this place's ticket, in every hold it made
    /// (cancelled ones included); at most [`Room::ticket_seats`].
    pub seats_held: u32,
}

impl Place {
    /// The buyer held seats while admitted.
    pub fn used(&self) -> bool {
        self.seats_held > 0
    }
}

/// Where a buyer stands, as the group computes it at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Standing {
    /// Joined before the opening: the draw places everyone at `opens_at_ms`.
    AwaitingDraw {
        /// When the draw runs: the event's `opens_at_ms`.
        opens_at_ms: u64,
    },
    /// In the queue, not admitted yet.
    Waiting {
        /// 0-based position in the queue.
        position: u64,
        /// Buyers ahead not admitted yet.
        ahead: u64,
        /// When the schedule, as it stands now, admits it (Unix ms).
        admitted_at_ms: u64,
    },
    /// Admitted: may hold seats until `expires_at_ms`.
    Admitted {
        /// 0-based position in the queue.
        position: u64,
        /// When it was admitted, in Unix ms (never before the buyer joined).
        admitted_at_ms: u64,
        /// When the ticket lapses: `admitted_at_ms` plus the ticket TTL.
        expires_at_ms: u64,
    },
    /// Admitted and not used in time: may join again, at the back.
    Lapsed {
        /// The position it had.
        position: u64,
    },
}

/// Room commands.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RoomAction {
    /// Join these buyers (an edge's batch, in arrival order). `salt` is
    /// the edge's random number, folded into the draw's seed.
    Join {
        /// The buyers, in arrival order: 1 to [`MAX_JOIN_BATCH`].
        buyers: Vec<UserId>,
        /// The edge's random number.
        salt: u64,
    },
    /// Operators: change the room (or create it on an event without one).
    Configure(RoomSettings),
    /// A hold whose buyer showed the edge a valid admission ticket; the
    /// group checks the buyer's place again (a plain `Hold` in an event
    /// with a room is refused `ticket_required`).
    Hold {
        /// The buyer.
        owner: UserId,
        /// Which seats.
        pick: super::SeatPick,
    },
}

impl Room {
    pub(super) fn new(settings: RoomSettings) -> Room {
        Room {
            settings,
            placed: 0,
            awaiting_draw: 0,
            seed: 0,
            opened: false,
            segments: VecDeque::new(),
            tickets_used: 0,
            rejoined: 0,
            rejoined_used: 0,
        }
    }

    /// Positions admitted by `now`, capped at the places given out.
    pub fn admitted(&self, now: u64) -> u64 {
        self.segments
            .back()
            .map_or(0, |s| s.admitted(now).min(self.placed))
    }

    /// When position `p` is (or was) admitted; `None` if its segment was
    /// dropped (it lapsed long ago).
    pub fn admitted_at(&self, p: u64) -> Option<u64> {
        let first = self.segments.front()?;
        if p < first.from_pos {
            return None;
        }
        let i = self.segments.partition_point(|s| s.from_pos <= p) - 1;
        Some(self.segments[i].admitted_at(p))
    }

    /// Positions admitted by `t` on the schedule as it stood then (those of
    /// segments already dropped count as admitted).
    fn admitted_by(&self, t: u64) -> u64 {
        let i = self.segments.partition_point(|s| s.from_ms <= t);
        let Some(s) = i.checked_sub(1).map(|i| self.segments[i]) else {
            return self.segments.front().map_or(0, |s| s.from_pos);
        };
        let next = self.segments.get(i).map_or(self.placed, |n| n.from_pos);
        s.admitted(t).min(next).min(self.placed)
    }

    /// Places whose time ran out unused by `now`: admitted at least
    /// `ticket_ttl` ago, their buyer never held seats (`used`: the used
    /// positions). By the schedule alone: a place that joined a drained
    /// queue after its position's time counts up to [`MIN_SEGMENT_MS`]
    /// early.
    pub fn lapsed(&self, now: u64, used: &imbl::OrdSet<u64>) -> u64 {
        let expired = self.admitted_by(now.saturating_sub(self.settings.ticket_ttl_ms));
        let used_among = used.range(..expired).count() as u64;
        expired.saturating_sub(used_among + self.rejoined_used)
    }

    /// Buyers in the queue not admitted yet (awaiting the draw included).
    pub fn queue_len(&self, now: u64) -> u64 {
        self.awaiting_draw + (self.placed - self.admitted(now))
    }

    /// Where the holder of `place` stands at `now`.
    pub fn standing(&self, place: &Place, opens_at_ms: u64, now: u64) -> Standing {
        let Some(p) = place.position else {
            return Standing::AwaitingDraw { opens_at_ms };
        };
        let Some(at) = self.admitted_at(p) else {
            return Standing::Lapsed { position: p };
        };
        // Never before the buyer joined: a join on a drained queue within
        // [`MIN_SEGMENT_MS`] of the last segment's start takes a position
        // the schedule admitted a moment ago, and its ticket's time starts
        // now. (Still by the next segment's start, which a place in a
        // segment joined before.)
        let at = at.max(place.joined_ms);
        let admitted = self.admitted(now);
        if p >= admitted {
            return Standing::Waiting {
                position: p,
                ahead: p - admitted,
                admitted_at_ms: at,
            };
        }
        let expires = at.saturating_add(self.settings.ticket_ttl_ms);
        if now < expires {
            Standing::Admitted {
                position: p,
                admitted_at_ms: at,
                expires_at_ms: expires,
            }
        } else {
            Standing::Lapsed { position: p }
        }
    }

    /// Seats one ticket may hold over its life in an event with these
    /// limits: the per-buyer limit, else the per-hold one.
    pub fn ticket_seats(max_seats_per_hold: u32, max_seats_per_buyer: Option<u32>) -> u32 {
        max_seats_per_buyer.unwrap_or(max_seats_per_hold)
    }

    /// Why no segment may start at `now`, if none may: the last one
    /// started less than [`MIN_SEGMENT_MS`] ago, or the schedule is full
    /// of segments with usable tickets.
    fn restart_refused(&self, now: u64) -> Option<String> {
        if let Some(last) = self.segments.back() {
            if now < last.from_ms.saturating_add(MIN_SEGMENT_MS) {
                return Some(format!(
                    "the admission schedule last changed less than {MIN_SEGMENT_MS} ms ago: change the rate again a second later"
                ));
            }
        }
        let ttl = self.settings.ticket_ttl_ms;
        let lapsed = self
            .segments
            .iter()
            .skip(1)
            .take_while(|s| s.from_ms.saturating_add(ttl) <= now)
            .count();
        (self.segments.len() - lapsed >= MAX_SEGMENTS).then(|| {
            format!("the admission schedule holds {MAX_SEGMENTS} segments with usable tickets")
        })
    }

    /// Start a segment at `now` from the first position not yet admitted
    /// (the caller checked [`Room::restart_refused`]), forgetting those
    /// that lapsed.
    fn restart(&mut self, now: u64) {
        self.drop_lapsed_segments(now);
        let from_pos = self.admitted(now);
        self.segments.push_back(Segment {
            from_pos,
            from_ms: now,
            per_sec: self.settings.admit_per_sec,
        });
    }

    /// Forget the oldest segments whose every position lapsed by `now`:
    /// each was admitted by the next segment's start (a segment starts
    /// from the first position not yet admitted), so its tickets ended by
    /// then + `ticket_ttl`. The last segment always stays.
    fn drop_lapsed_segments(&mut self, now: u64) {
        let ttl = self.settings.ticket_ttl_ms;
        while self.segments.len() > 1 && self.segments[1].from_ms.saturating_add(ttl) <= now {
            self.segments.pop_front();
        }
    }
}
