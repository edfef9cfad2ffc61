//! The history projected onto seats: for each `(event, seat)`, what each op
//! says about it (see the module doc of `linearizable`) inside the op's
//! window, and for each hold when the system may free or sell its seats
//! by itself.

use std::collections::BTreeMap;

use super::clocks::Clocks;
use super::{Holds, Kind, SeatOp};
use crate::history::{Call, Op, Outcome, Reply};

/// Each seat's operations, by `(event, seat)`.
pub(super) type PerSeat = BTreeMap<(String, String), Vec<SeatOp>>;

/// Project the history onto seats: each seat's operations (sorted by
/// invoke time), and the holds they name. `ttl` and `slack` in µs.
pub(super) fn seat_ops(ops: &[Op], ttl: u64, slack: u64, clocks: &Clocks) -> (PerSeat, Holds) {
    let mut holds = Holds::default();
    note_payments(ops, &mut holds);
    let mut p = Projection {
        per: BTreeMap::new(),
        holds,
        ttl,
        slack,
        clocks,
    };
    for o in ops {
        match (&o.call, &o.outcome) {
            (Call::Hold { event, seats, .. } | Call::StaleHold { event, seats, .. }, outcome) => {
                p.hold(o, event, seats, outcome)
            }
            (Call::Cancel { event, hold, seats }, outcome) => {
                p.cancel(o, event, hold, seats, outcome)
            }
            (
                Call::Pay {
                    event, hold, seats, ..
                }
                | Call::ReadBooking {
                    event, hold, seats, ..
                },
                Outcome::Ok(Reply::Booking { status }),
            ) => p.booking(o, event, hold, seats, status),
            _ => {}
        }
    }
    for v in p.per.values_mut() {
        v.sort_by_key(|s| (s.inv, s.op));
    }
    (p.per, p.holds)
}

/// For each hold, the earliest invoke of its booking (from then on a
/// payment may sell its seats) and of an abandoned payment (from then on
/// the reconciler may free them).
fn note_payments(ops: &[Op], holds: &mut Holds) {
    let earliest = |t: Option<u64>, at: u64| Some(t.map_or(at, |t| t.min(at)));
    for o in ops {
        match &o.call {
            Call::Book { hold, .. } => {
                let h = holds.id(hold);
                let m = &mut holds.meta[h as usize];
                m.sellable_from = earliest(m.sellable_from, o.invoked);
            }
            Call::Pay {
                hold,
                abandon: true,
                ..
            } => {
                let h = holds.id(hold);
                let m = &mut holds.meta[h as usize];
                m.cancelled_from = earliest(m.cancelled_from, o.invoked);
            }
            _ => {}
        }
    }
}

/// The seat operations found so far, and the holds they name.
struct Projection<'a> {
    per: PerSeat,
    holds: Holds,
    /// The events' hold TTL, µs.
    ttl: u64,
    /// How much earlier than the TTL a hold may lapse (clock skew), µs.
    slack: u64,
    clocks: &'a Clocks,
}

impl Projection<'_> {
    /// Add `op` to the operations of `seat` of `event`.
    fn add(&mut self, event: &str, seat: &str, op: SeatOp) {
        self.per
            .entry((event.to_string(), seat.to_string()))
            .or_default()
            .push(op);
    }

    /// The end of `o`'s window: its answer, or if none came, the time its
    /// hold would have been due had it happened.
    fn window_end(&self, o: &Op) -> u64 {
        o.completed.unwrap_or(o.invoked + self.ttl + self.slack)
    }

    /// A hold (or the zombie's stale hold) of `seats`: 201 acquired the
    /// seats it names; 409 found the seats it names (or its only seat) not
    /// free; an unknown outcome may have acquired them all.
    fn hold(&mut self, o: &Op, event: &str, seats: &[String], outcome: &Outcome) {
        match outcome {
            Outcome::Ok(Reply::Held {
                hold,
                seats: got,
                expires_at_ms,
                ..
            }) => {
                let h = self.holds.id(hold);
                let own = expires_at_ms.and_then(|e| self.clocks.free_from(e));
                let m = &mut self.holds.meta[h as usize];
                m.expire_from =
                    own.unwrap_or_else(|| (o.invoked + self.ttl).saturating_sub(self.slack));
                let end = self.window_end(o);
                for s in got {
                    self.add(event, s, seat_op(o, Kind::Acquire(h), false, end));
                }
            }
            Outcome::Fail { code, unavailable } if code == "seats_unavailable" => {
                let named: &[String] = if unavailable.is_empty() && seats.len() == 1 {
                    seats
                } else {
                    unavailable
                };
                let end = self.window_end(o);
                for s in named {
                    self.add(event, s, seat_op(o, Kind::NotFree, false, end));
                }
            }
            Outcome::Unknown(_) => {
                let h = self.holds.id(&format!("?op{}", o.op));
                self.holds.meta[h as usize].expire_from =
                    (o.invoked + self.ttl).saturating_sub(self.slack);
                // Had it happened later, it would have been due at once.
                let end = o.invoked + self.ttl + self.slack;
                for s in seats {
                    self.add(event, s, seat_op(o, Kind::Acquire(h), true, end));
                }
            }
            _ => {}
        }
    }

    /// A cancel of `hold`: answered ok, it released the seats (or, the
    /// hold `expired`, found them not held by it); an unknown outcome may
    /// have released them.
    fn cancel(&mut self, o: &Op, event: &str, hold: &str, seats: &[String], outcome: &Outcome) {
        let h = self.holds.id(hold);
        match outcome {
            Outcome::Ok(reply) => {
                let lapsed = matches!(
                    reply,
                    Reply::Cancelled { status: Some(s), .. } if s == "expired"
                );
                let kind = if lapsed {
                    Kind::NotHeldBy(h)
                } else {
                    Kind::Release(h)
                };
                let end = self.window_end(o);
                for s in seats {
                    self.add(event, s, seat_op(o, kind, false, end));
                }
            }
            Outcome::Unknown(_) => {
                let end = o.invoked + self.ttl + self.slack;
                for s in seats {
                    self.add(event, s, seat_op(o, Kind::Release(h), true, end));
                }
            }
            Outcome::Fail { .. } => {}
        }
    }

    /// A booking's `status`, as the payment callback or a booking read
    /// answered it: `confirmed` sold the seats to `hold`; anything else,
    /// from a read, says they were not.
    fn booking(&mut self, o: &Op, event: &str, hold: &str, seats: &[String], status: &str) {
        let h = self.holds.id(hold);
        let kind = match status {
            "confirmed" => Kind::SoldTo(h),
            // Only a linearizable read proves "not sold"; the
            // callback may answer pending from what it saw earlier.
            _ if matches!(o.call, Call::ReadBooking { .. }) => Kind::NotSoldTo(h),
            _ => return,
        };
        let end = self.window_end(o);
        for s in seats {
            self.add(event, s, seat_op(o, kind, false, end));
        }
    }
}

/// `o` as a seat op of `kind`, its window ending at `ret` (never before
/// its invoke).
fn seat_op(o: &Op, kind: Kind, optional: bool, ret: u64) -> SeatOp {
    SeatOp {
        op: o.op,
        kind,
        inv: o.invoked,
        ret: ret.max(o.invoked),
        optional,
    }
}
