//! Applying a [`RoomAction`] to the inventory: opening the room when due,
//! configuring it, joins, the draw, and the admission check a hold passes
//! (tickets used). The records are `mod.rs`'s.

use crate::ids::UserId;
use crate::record_key::RecordKey;

use super::*;
use crate::inventory::apply::fnv;
use crate::inventory::{Inventory, Outcome};

impl Inventory {
    /// The event's room, if it has an enabled one.
    pub fn open_room(&self) -> Option<&Room> {
        self.room.as_ref().filter(|r| r.settings.enabled)
    }

    pub(in crate::inventory) fn room_mut(&mut self, changed: &mut Vec<RecordKey>) -> &mut Room {
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
    pub(in crate::inventory) fn open_room_if_due(
        &mut self,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) {
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

    pub(in crate::inventory) fn room_action(
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
        pick: &crate::inventory::SeatPick,
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
            crate::inventory::SeatPick::Seats(list) => list.len() as u64,
            crate::inventory::SeatPick::Quantity { quantity, .. } => u64::from(*quantity),
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
    pub(in crate::inventory) fn check_admitted(
        &self,
        owner: &UserId,
        now: u64,
    ) -> Result<(), Outcome> {
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
    pub(in crate::inventory) fn mark_ticket_used(
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
