//! `Inventory::apply`: one event command, pure and deterministic.

use crate::ids::{Epoch, RegionId, UserId};
use crate::record_key::RecordKey;

use super::{
    echo, Event, EventAction, EventCommand, EventReply, EventSpec, Hold, HoldStatus, Inventory,
    OpKey, Operation, Outcome, Seat, SeatPick, SeatState, MAX_ECHOED_SEATS, MAX_PICK_NAME_BYTES,
};

/// FNV-1a of the request part of a command (not its epoch or time): equal
/// for a retry of the same request, different for another payload.
pub fn request_hash(action: &EventAction) -> u64 {
    fnv(&crate::format::canonical(action))
}

/// FNV-1a: a stable 64-bit hash (the same on every replica and version).
pub fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn spec_hash(spec: &EventSpec) -> u64 {
    fnv(&crate::format::canonical(spec))
}

impl Inventory {
    /// Apply one event command; `changed` collects the records it touched.
    pub fn apply(&mut self, cmd: &EventCommand, changed: &mut Vec<RecordKey>) -> EventReply {
        let mut replayed = false;
        let first = changed.len();
        let before = self.before();
        let outcome = self.apply_inner(cmd, changed, &mut replayed);
        self.refresh_prunes(&changed[first..]);
        self.record_changes(&before, first, changed);
        // What this command finished whose time has already come (an event
        // idle for longer than its retention) goes now, not a command later.
        if let Some(now) = self.event.as_ref().map(|e| e.clock_ms) {
            self.prune_finished(now, changed);
            self.prune_changes(now, changed);
        }
        let (epoch, owner) = match &self.event {
            Some(e) => (e.epoch, e.owner.clone()),
            None => (Epoch(0), RegionId(String::new())),
        };
        EventReply {
            epoch,
            owner,
            outcome,
            replayed,
        }
    }

    /// `replayed` is set when a keyed command answers its recorded outcome.
    fn apply_inner(
        &mut self,
        cmd: &EventCommand,
        changed: &mut Vec<RecordKey>,
        replayed: &mut bool,
    ) -> Outcome {
        if let EventAction::Create(spec) = &cmd.action {
            return self.create(spec, cmd.now_ms, changed);
        }
        let Some(ev) = &self.event else {
            return Outcome::EventNotFound;
        };
        if ev.event_id != cmd.event_id {
            return Outcome::EventNotFound;
        }
        if cmd.epoch != ev.epoch {
            return Outcome::StaleEpoch {
                current: ev.epoch,
                owner: ev.owner.clone(),
            };
        }
        let now = cmd.now_ms.max(ev.clock_ms);
        self.event_mut(changed).clock_ms = now;
        let expired = self.expire(now, changed);
        self.open_room_if_due(now, changed);
        self.forget_old_operations(now, changed);
        self.prune_finished(now, changed);

        let op_key = match (&cmd.idempotency, &cmd.action) {
            (
                Some((owner, key)),
                EventAction::Hold { .. }
                | EventAction::Cancel { .. }
                | EventAction::Room(super::RoomAction::Hold { .. })
                | EventAction::Payment(
                    super::PaymentAction::Attach { .. } | super::PaymentAction::Refund { .. },
                ),
            ) => Some(OpKey::new(owner.clone(), key.clone())),
            _ => None,
        };
        // Only keyed commands are hashed (the hash is recorded with them).
        let hash = op_key
            .as_ref()
            .map(|_| request_hash(&cmd.action))
            .unwrap_or(0);
        if let Some(k) = &op_key {
            if let Some(op) = self.ops.get(k) {
                return if op.request_hash == hash {
                    *replayed = true;
                    op.outcome.clone()
                } else {
                    Outcome::IdempotencyKeyReused
                };
            }
        }
        let outcome = match &cmd.action {
            EventAction::Create(_) => unreachable!("handled above"),
            // An event with a room takes holds only with a ticket.
            EventAction::Hold { .. } if self.open_room().is_some() => Outcome::TicketRequired,
            EventAction::Hold { owner, pick } => self.hold(owner, pick, now, changed),
            EventAction::Cancel { owner, hold } => self.cancel(owner, *hold, now, changed),
            EventAction::SetOpen { open } => {
                self.event_mut(changed).forced_open = Some(*open);
                Outcome::OpenSet { open: *open }
            }
            EventAction::Tick => Outcome::Ticked { expired },
            EventAction::BumpEpoch { epoch, owner } => {
                if epoch.0 != cmd.epoch.0 + 1 {
                    Outcome::InvalidRequest {
                        reason: format!(
                            "epoch {} can only be bumped to {}",
                            cmd.epoch,
                            cmd.epoch.0 + 1
                        ),
                    }
                } else {
                    let ev = self.event_mut(changed);
                    ev.epoch = *epoch;
                    ev.owner = owner.clone();
                    Outcome::EpochBumped {
                        epoch: *epoch,
                        owner: owner.clone(),
                    }
                }
            }
            EventAction::Payment(p) => self.payment(p, now, changed),
            EventAction::Room(r) => self.room_action(r, now, changed),
        };
        if let Some(k) = op_key {
            let forget_at = k.forget_at(now, self.retention_ms());
            self.index.op_times.insert((forget_at, k.clone()));
            changed.push(RecordKey::Op(k.owner.clone(), k.key.clone()));
            self.ops.insert(
                k,
                Operation {
                    request_hash: hash,
                    at_ms: now,
                    outcome: outcome.clone(),
                },
            );
        }
        outcome
    }

    pub(super) fn event_mut(&mut self, changed: &mut Vec<RecordKey>) -> &mut Event {
        changed.push(RecordKey::Event);
        self.event.as_mut().expect("checked by the caller")
    }

    fn create(&mut self, spec: &EventSpec, now: u64, changed: &mut Vec<RecordKey>) -> Outcome {
        let hash = spec_hash(spec);
        if let Some(ev) = &self.event {
            return if ev.spec_hash == hash {
                Outcome::Created {
                    capacity: ev.capacity,
                }
            } else {
                Outcome::EventExists
            };
        }
        if let Err(e) = spec.validate() {
            return Outcome::InvalidEvent(e);
        }
        let layout = spec.layout();
        let mut ordinal = 0u32;
        for (section, (_, ids)) in layout.iter().enumerate() {
            let section = section as u32;
            let free = self.index.free.entry(section).or_default();
            for id in ids {
                free.insert((ordinal, id.clone()));
                self.seats.insert(
                    id.clone(),
                    Seat {
                        ordinal,
                        section,
                        state: SeatState::Available,
                    },
                );
                changed.push(RecordKey::Seat(id.clone()));
                ordinal += 1;
            }
        }
        let capacity = spec.capacity();
        self.event = Some(Event {
            event_id: spec.event_id.clone(),
            name: spec.name.clone(),
            home_region: spec.home_region.clone(),
            owner: spec.home_region.clone(),
            epoch: Epoch(1),
            sections: layout.into_iter().map(|(name, _)| name).collect(),
            hold_ttl_ms: spec.hold_ttl_ms,
            max_seats_per_hold: spec.max_seats_per_hold,
            max_seats_per_buyer: spec.max_seats_per_buyer,
            opens_at_ms: spec.opens_at_ms,
            closes_at_ms: spec.closes_at_ms,
            survival: spec.survival,
            forced_open: None,
            capacity,
            available: capacity,
            held: 0,
            sold: 0,
            spec_hash: hash,
            next_hold_seq: 1,
            next_outbox_id: 1,
            price_cents: spec.price_cents,
            currency: spec.currency.clone(),
            retention_ms: spec.retention_ms,
            clock_ms: now,
            changes_retention_ms: spec.changes_retention_ms,
            next_change_seq: 1,
        });
        changed.push(RecordKey::Event);
        if let Some(settings) = spec.waiting_room {
            self.room = Some(super::Room::new(settings));
            changed.push(RecordKey::Room);
            self.open_room_if_due(now, changed);
        }
        Outcome::Created { capacity }
    }

    /// `Hold`: the picked seats for `owner`, all or none, while the sale is
    /// open and within the per-hold and per-buyer limits.
    pub(super) fn hold(
        &mut self,
        owner: &UserId,
        pick: &SeatPick,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        let ev = self.event.as_ref().expect("checked by the caller");
        if let Err(refused) = ev.sale_open(now) {
            return refused;
        }
        let seats = match self.pick_seats(ev, pick) {
            Ok(seats) => seats,
            Err(refused) => return refused,
        };
        if let Err(refused) = self.check_buyer_limit(ev, owner, seats.len() as u32) {
            return refused;
        }
        Outcome::Held(self.write_hold(owner, seats, now, changed))
    }

    /// The seats a hold asks for, all available, or why it cannot have them.
    fn pick_seats(&self, ev: &Event, pick: &SeatPick) -> Result<Vec<String>, Outcome> {
        let max = ev.max_seats_per_hold;
        match pick {
            SeatPick::Seats(list) => self.pick_listed_seats(ev, list, max),
            SeatPick::Quantity { section, quantity } => {
                self.pick_free_seats(ev, section.as_deref(), *quantity, max)
            }
        }
    }

    /// [`SeatPick::Seats`]: every listed seat, if each exists and is
    /// available (unknown seats are reported before taken ones).
    fn pick_listed_seats(
        &self,
        ev: &Event,
        list: &[String],
        max: u32,
    ) -> Result<Vec<String>, Outcome> {
        if list.is_empty() {
            return Err(invalid("seats is empty"));
        }
        if list.len() > max as usize {
            return Err(Outcome::TooManySeats { max });
        }
        let mut sorted: Vec<&String> = list.iter().collect();
        sorted.sort();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(invalid("a seat is listed twice"));
        }
        // One lookup per seat (the seat map is the hot path of a
        // flash sale): unknown seats win over taken ones. Only the first
        // few unknown ones are named, cut short: the refusal is recorded
        // under the key, and its size must not be the request's.
        let mut unknown = Vec::new();
        let mut unavailable = Vec::new();
        for s in list {
            match self.seats.get(s) {
                None if unknown.len() < MAX_ECHOED_SEATS => {
                    unknown.push(echo(s, MAX_PICK_NAME_BYTES))
                }
                None => {}
                Some(seat) if seat.state != SeatState::Available => unavailable.push(s.clone()),
                Some(_) => {}
            }
        }
        if !unknown.is_empty() {
            return Err(Outcome::UnknownSeats { seats: unknown });
        }
        if !unavailable.is_empty() {
            return Err(Outcome::SeatsUnavailable {
                unavailable,
                available: ev.available,
            });
        }
        Ok(list.to_vec())
    }

    /// [`SeatPick::Quantity`]: the first `quantity` free seats in layout
    /// order, from `section` or from any section.
    fn pick_free_seats(
        &self,
        ev: &Event,
        section: Option<&str>,
        quantity: u32,
        max: u32,
    ) -> Result<Vec<String>, Outcome> {
        if quantity == 0 {
            return Err(invalid("quantity must be at least 1"));
        }
        if quantity > max {
            return Err(Outcome::TooManySeats { max });
        }
        let sections: Vec<u32> = match section {
            Some(name) => match ev.sections.iter().position(|s| s == name) {
                Some(i) => vec![i as u32],
                None => {
                    return Err(Outcome::UnknownSection {
                        section: echo(name, MAX_PICK_NAME_BYTES),
                    })
                }
            },
            None => (0..ev.sections.len() as u32).collect(),
        };
        let picked: Vec<String> = sections
            .iter()
            .filter_map(|s| self.index.free.get(s))
            .flat_map(|free| free.iter().map(|(_, id)| id.clone()))
            .take(quantity as usize)
            .collect();
        if picked.len() < quantity as usize {
            return Err(Outcome::SeatsUnavailable {
                unavailable: vec![],
                available: picked.len() as u64,
            });
        }
        Ok(picked)
    }

    /// With a per-buyer limit: `owner` may hold `n` more seats.
    fn check_buyer_limit(&self, ev: &Event, owner: &UserId, n: u32) -> Result<(), Outcome> {
        if let Some(limit) = ev.max_seats_per_buyer {
            let has = self.index.buyer_seats.get(owner).copied().unwrap_or(0);
            if has + n > limit {
                return Err(Outcome::BuyerLimitReached { limit });
            }
        }
        Ok(())
    }

    /// Record a hold of `seats` (checked: they exist and are available) for
    /// `owner`: the seats become held, the counters and indexes follow.
    fn write_hold(
        &mut self,
        owner: &UserId,
        seats: Vec<String>,
        now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Hold {
        let n = seats.len() as u32;
        let ev = self.event_mut(changed);
        let seq = ev.next_hold_seq;
        ev.next_hold_seq += 1;
        ev.available -= u64::from(n);
        ev.held += u64::from(n);
        let expires_at_ms = now.saturating_add(ev.hold_ttl_ms);
        for id in &seats {
            let seat = self.seats.get_mut(id).expect("picked seats exist");
            seat.state = SeatState::Held(seq);
            let (section, ordinal) = (seat.section, seat.ordinal);
            if let Some(free) = self.index.free.get_mut(&section) {
                free.remove(&(ordinal, id.clone()));
                if free.is_empty() {
                    self.index.free.remove(&section);
                }
            }
            changed.push(RecordKey::Seat(id.clone()));
        }
        let hold = Hold {
            seq,
            owner: owner.clone(),
            seats,
            created_ms: now,
            expires_at_ms,
            status: HoldStatus::Held,
            extensions: 0,
        };
        self.index.deadlines.insert((expires_at_ms, seq));
        if self.counts_buyers() {
            *self.index.buyer_seats.entry(owner.clone()).or_default() += n;
        }
        self.holds.insert(seq, hold.clone());
        changed.push(RecordKey::Hold(seq));
        hold
    }

    fn cancel(
        &mut self,
        owner: &UserId,
        seq: u64,
        _now: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Outcome {
        let Some(hold) = self.holds.get(&seq).filter(|h| &h.owner == owner) else {
            return Outcome::HoldNotFound;
        };
        match hold.status {
            HoldStatus::Held if self.bookings.contains_key(&seq) => Outcome::HoldNotCancellable {
                status: HoldStatus::Held,
            },
            HoldStatus::Held => {
                self.release(seq, HoldStatus::Released, changed);
                Outcome::Cancelled(self.holds[&seq].clone())
            }
            HoldStatus::Released | HoldStatus::Expired => Outcome::Cancelled(hold.clone()),
            status @ HoldStatus::Booked => Outcome::HoldNotCancellable { status },
        }
    }

    /// End a held hold: its seats become available again.
    /// End live hold `seq` with `status`: its seats (held, or sold for an
    /// operator's refund that returns them) go back on sale.
    pub(super) fn release(&mut self, seq: u64, status: HoldStatus, changed: &mut Vec<RecordKey>) {
        let hold = self.holds.get_mut(&seq).expect("caller checked");
        debug_assert!(hold.status.is_live());
        let sold = hold.status == HoldStatus::Booked;
        hold.status = status;
        let (owner, seats, deadline) = (hold.owner.clone(), hold.seats.clone(), hold.expires_at_ms);
        changed.push(RecordKey::Hold(seq));
        self.index.deadlines.remove(&(deadline, seq));
        let n = seats.len() as u32;
        if self.counts_buyers() {
            if let Some(c) = self.index.buyer_seats.get_mut(&owner) {
                *c -= n;
                if *c == 0 {
                    self.index.buyer_seats.remove(&owner);
                }
            }
        }
        for id in seats {
            let seat = self.seats.get_mut(&id).expect("a hold's seats exist");
            debug_assert!(
                matches!(seat.state, SeatState::Held(s) | SeatState::Sold(s) if s == seq)
            );
            seat.state = SeatState::Available;
            self.index
                .free
                .entry(seat.section)
                .or_default()
                .insert((seat.ordinal, id.clone()));
            changed.push(RecordKey::Seat(id));
        }
        let ev = self.event_mut(changed);
        if sold {
            ev.sold -= u64::from(n);
        } else {
            ev.held -= u64::from(n);
        }
        ev.available += u64::from(n);
    }

    /// Expire every held hold whose deadline is at or before `now`.
    fn expire(&mut self, now: u64, changed: &mut Vec<RecordKey>) -> u32 {
        let mut n = 0;
        while let Some(&(deadline, seq)) = self.index.deadlines.get_min() {
            if deadline > now {
                break;
            }
            self.release(seq, HoldStatus::Expired, changed);
            n += 1;
        }
        n
    }

    fn forget_old_operations(&mut self, now: u64, changed: &mut Vec<RecordKey>) {
        while let Some((forget_at, key)) = self.index.op_times.get_min().cloned() {
            if forget_at > now {
                break;
            }
            self.index.op_times.remove(&(forget_at, key.clone()));
            self.ops.remove(&key);
            changed.push(RecordKey::Op(key.owner, key.key));
        }
        while let Some((seen_at, id)) = self.index.inbox_times.get_min().cloned() {
            if seen_at.saturating_add(super::INBOX_TTL_MS) > now {
                break;
            }
            self.index.inbox_times.remove(&(seen_at, id.clone()));
            self.inbox.remove(&id);
            changed.push(RecordKey::Inbox(id));
        }
    }
}

fn invalid(reason: &str) -> Outcome {
    Outcome::InvalidRequest {
        reason: reason.into(),
    }
}
