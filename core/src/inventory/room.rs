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
use crate::state::RecordKey;

use super::apply::fnv;
use super::{Inventory, Outcome, SpecError};

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

impl Inventory {
    /// The event's room, if it has an enabled one.
    pub fn open_room(&self) -> Option<&Room> {
        self.room.as_ref().filter(|r| r.settings.enabled)
    }

    pub(super) fn room_mut(&mut self, changed: &mut Vec<RecordKey>) -> &mut Room {
        changed.push(RecordKey::Room);
        self.room.as_mut().expect("checked by the caller")
    }

    fn opens_at(&self) -> u64 {
        self.event.as_ref().and_then(|e| e.opens_at_ms).unwrap_or(0)
    }

    /// When the leader must propose a command for the room: its opening's
    /// draw, while buyers wait for it.
    pub fn room_due_ms(&self) -> Option<u64> {
        let room = self.room.as_ref()?;
        (!room.opened && room.settings.enabled).then(|| self.opens_at())
    }

    /// Run at every command: the draw, once `now` reaches `opens_at`.
    pub(super) fn open_room_if_due(&mut self, now: u64, changed: &mut Vec<RecordKey>) {
        let opens_at = self.opens_at();
        let due = self
            .room
            .as_ref()
            .is_some_and(|r| r.settings.enabled && !r.opened && now >= opens_at);
        if !due {
            return;
        }
        let seed = self.room.as_ref().map_or(0, |r| r.seed);
        let mut early: Vec<(u64, UserId)> = self
            .places
            .iter()
            .filter(|(_, p)| p.position.is_none())
            .map(|(u, _)| (draw_key(seed, u), u.clone()))
            .collect();
        early.sort_unstable();
        let n = early.len() as u64;
        for (position, (_, buyer)) in (0u64..).zip(early) {
            if let Some(place) = self.places.get_mut(&buyer) {
                place.position = Some(position);
            }
            changed.push(RecordKey::Place(buyer));
        }
        let room = self.room_mut(changed);
        room.opened = true;
        room.placed = n;
        room.awaiting_draw = 0;
        // From opens_at, not from this command's time: a late first command
        // does not slow the schedule down.
        room.segments.push_back(Segment {
            from_pos: 0,
            from_ms: opens_at,
            per_sec: room.settings.admit_per_sec,
        });
    }

    pub(super) fn room_action(
        &mut self,
        action: &RoomAction,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        match action {
            RoomAction::Configure(settings) => self.configure_room(*settings, now, changed),
            RoomAction::Join { buyers, salt } => self.join(buyers, *salt, now, changed),
            RoomAction::Hold { owner, pick } => self.ticket_hold(owner, pick, now, changed),
        }
    }

    /// A hold through an admitted buyer's ticket: while the place is
    /// admitted and the ticket has seats left for all of it.
    fn ticket_hold(
        &mut self,
        owner: &UserId,
        pick: &super::SeatPick,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        if let Err(refused) = self.check_admitted(owner, now) {
            return refused;
        }
        let ev = self.event.as_ref().expect("checked by the caller");
        let limit = Room::ticket_seats(ev.max_seats_per_hold, ev.max_seats_per_buyer);
        let held = self.places.get(owner).map_or(0, |p| p.seats_held);
        let asked = match pick {
            super::SeatPick::Seats(list) => list.len() as u64,
            super::SeatPick::Quantity { quantity, .. } => u64::from(*quantity),
        };
        // An empty or oversized pick is the hold's own refusal (400).
        let sane = (1..=u64::from(ev.max_seats_per_hold)).contains(&asked);
        if self.open_room().is_some() && sane && u64::from(held) + asked > u64::from(limit) {
            return Outcome::TicketUsed { limit, held };
        }
        let outcome = self.hold(owner, pick, now, changed);
        if let Outcome::Held(hold) = &outcome {
            self.mark_ticket_used(owner, hold.seats.len() as u32, changed);
        }
        outcome
    }

    fn configure_room(
        &mut self,
        settings: RoomSettings,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        if let Err(e) = settings.validate() {
            return Outcome::InvalidEvent(e);
        }
        if settings.enabled && self.event.as_ref().and_then(|e| e.opens_at_ms).is_none() {
            return Outcome::OpensAtRequired;
        }
        if self.room.is_none() {
            self.room = Some(Room::new(settings));
            changed.push(RecordKey::Room);
            self.open_room_if_due(now, changed);
            return Outcome::RoomSet(settings);
        }
        let room = self.room.as_ref().expect("checked above");
        let paced_anew = room.opened
            && (room.settings.admit_per_sec != settings.admit_per_sec
                || (settings.enabled && !room.settings.enabled));
        let mut next = room.clone();
        next.settings = settings;
        if paced_anew {
            if let Some(reason) = next.restart_refused(now) {
                return Outcome::InvalidRequest { reason };
            }
            next.restart(now);
        }
        *self.room_mut(changed) = next;
        self.open_room_if_due(now, changed);
        Outcome::RoomSet(settings)
    }

    fn join(
        &mut self,
        buyers: &[UserId],
        salt: u64,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        if buyers.is_empty() || buyers.len() > MAX_JOIN_BATCH {
            return Outcome::InvalidRequest {
                reason: format!("a join batch has 1 to {MAX_JOIN_BATCH} buyers"),
            };
        }
        let Some(room) = self.open_room() else {
            return Outcome::NoWaitingRoom;
        };
        let opened = room.opened;
        let opens_at = self.opens_at();
        let room = self.room_mut(changed);
        if !opened {
            room.seed = fnv(&[room.seed.to_be_bytes(), salt.to_be_bytes()].concat());
        } else if room
            .segments
            .back()
            .is_some_and(|s| s.admitted(now) > room.placed)
            && room.restart_refused(now).is_none()
        {
            // Drained, with credit saved up: pace what comes next (within
            // a second of the last segment's start the credit is at most a
            // second of the rate, and that one stays).
            room.restart(now);
        }
        let mut standings = Vec::with_capacity(buyers.len());
        for buyer in buyers {
            let room = self.room.as_ref().expect("checked above");
            let lapsed = match self.places.get(buyer) {
                Some(p) => match room.standing(p, opens_at, now) {
                    Standing::Lapsed { .. } => {
                        if p.used() {
                            if let Some(old) = p.position {
                                self.index.used_positions.remove(&old);
                            }
                            self.room_mut(changed).rejoined_used += 1;
                        }
                        true
                    }
                    // Joining twice keeps the first place.
                    s => {
                        standings.push((buyer.clone(), s));
                        continue;
                    }
                },
                None => false,
            };
            let room = self.room_mut(changed);
            let position = room.opened.then_some(room.placed);
            match position {
                Some(_) => room.placed += 1,
                None => room.awaiting_draw += 1,
            }
            if lapsed {
                room.rejoined += 1;
            }
            let place = Place {
                position,
                joined_ms: now,
                seats_held: 0,
            };
            let room = self.room.as_ref().expect("checked above");
            standings.push((buyer.clone(), room.standing(&place, opens_at, now)));
            self.places.insert(buyer.clone(), place);
            changed.push(RecordKey::Place(buyer.clone()));
        }
        Outcome::Joined(standings)
    }

    /// A hold in an event with a room: only an admitted buyer's, within
    /// its ticket's time. `Err` is the refusal.
    pub(super) fn check_admitted(&self, owner: &UserId, now: u64) -> Result<(), Outcome> {
        let Some(room) = self.open_room() else {
            return Ok(());
        };
        let Some(place) = self.places.get(owner) else {
            return Err(Outcome::TicketRequired);
        };
        match room.standing(place, self.opens_at(), now) {
            Standing::Admitted { .. } => Ok(()),
            Standing::AwaitingDraw { .. } | Standing::Waiting { .. } => {
                Err(Outcome::NotAdmittedYet)
            }
            Standing::Lapsed { .. } => Err(Outcome::TicketInvalid),
        }
    }

    /// An admitted buyer's hold of `seats` succeeded: count them against
    /// its ticket, and the ticket used (once).
    pub(super) fn mark_ticket_used(
        &mut self,
        owner: &UserId,
        seats: u32,
        changed: &mut Vec<RecordKey>,
    ) {
        if self.open_room().is_none() {
            return;
        }
        let Some(place) = self.places.get_mut(owner) else {
            return;
        };
        let first = !place.used();
        place.seats_held = place.seats_held.saturating_add(seats);
        changed.push(RecordKey::Place(owner.clone()));
        if first {
            self.index.used_positions.extend(place.position);
            self.room_mut(changed).tickets_used += 1;
        }
    }
}

/// The draw's order key of `buyer`: FNV-1a of seed and id, then
/// MurmurHash3's finalizer, since FNV alone leaves its high bits (which
/// decide the order) following the id's length and last bytes.
fn draw_key(seed: u64, buyer: &UserId) -> u64 {
    let mut x = fnv(&[&seed.to_be_bytes()[..], buyer.0.as_bytes()].concat());
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}
