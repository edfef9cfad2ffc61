//! Per-seat linearizability: the Wing–Gong search (with Lowe's
//! memoization of `(linearized set, state)`) over each seat's operations.
//!
//! A seat is `Free`, `Held(h)` or `Sold(h)`. What the history says about a
//! seat, each inside its op's invoke–complete window:
//! - a hold answered 201 took it: `Free → Held(h)`;
//! - a hold answered 409 naming it found it not free;
//! - a cancel answered ok with the hold `released` freed it:
//!   `Held(h) → Free`; answered ok with the hold `expired` (a cancel is
//!   idempotent: it answers 200 for a hold that already lapsed), `h` no
//!   longer held it;
//! - a booking read or callback answered `confirmed`: `Sold(h)`; a booking
//!   read answered `pending`/`expired`/`refund_pending`/`refunded`: not
//!   `Sold(h)`.
//! - an op with an unknown outcome may or may not have happened: it is
//!   optional, and if it happened it did so before its hold could have
//!   expired (a hold committed later is already due when anyone looks).
//!
//! The system changes a seat by itself too, and the model allows it: a hold
//! expires or is released by the reconciler (`Held(h) → Free`), but never
//! before `ttl - slack` after the hold was asked for; a payment confirms
//! (`Held(h) → Sold(h)`), but only after the hold's booking was asked for.
//! `slack` covers the clock skew the drill injects.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{Input, Status, Verdict, Violation};
use crate::history::{Call, Op, Outcome, Reply};

pub const NAME: &str = "linearizable";

/// Configurations explored per seat before the checker gives up (Unknown).
const BUDGET: usize = 2_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Seat {
    Free,
    Held(u32),
    Sold(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire(u32),
    NotFree,
    Release(u32),
    /// The seat is not held by this hold (a cancel found it lapsed).
    NotHeldBy(u32),
    SoldTo(u32),
    NotSoldTo(u32),
}

#[derive(Debug, Clone)]
struct SeatOp {
    op: u64,
    kind: Kind,
    inv: u64,
    ret: u64,
    optional: bool,
}

#[derive(Debug, Clone, Default)]
struct HoldMeta {
    name: String,
    /// Earliest time the system may free the hold by itself.
    expire_from: u64,
    /// Earliest time a payment may have sold it (its booking was asked for).
    sellable_from: Option<u64>,
    /// Earliest time its payment was cancelled at the gateway: from then
    /// on the reconciler may release it, deadline or not.
    cancelled_from: Option<u64>,
}

/// The holds of one run, by name (`h12-3`, or `?op17` for a hold whose
/// answer never came).
#[derive(Default)]
struct Holds {
    by_name: HashMap<String, u32>,
    meta: Vec<HoldMeta>,
}

impl Holds {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let i = self.meta.len() as u32;
        self.meta.push(HoldMeta {
            name: name.to_string(),
            expire_from: u64::MAX,
            sellable_from: None,
            cancelled_from: None,
        });
        self.by_name.insert(name.to_string(), i);
        i
    }
}

pub fn check(input: &Input<'_>) -> Verdict {
    let ttl = input.run.hold_ttl_ms * 1_000;
    let slack = input.run.expiry_slack_us();
    let (per_seat, holds) = seat_ops(&input.ops, ttl, slack);
    let mut violations = Vec::new();
    let mut unknown = Vec::new();
    let mut checked = 0usize;
    for ((event, seat), ops) in &per_seat {
        checked += ops.len();
        match search(ops, &holds.meta) {
            SeatResult::Ok => {}
            SeatResult::Budget => unknown.push(format!("{event}/{seat}")),
            SeatResult::Stuck { after, state, next } => {
                let state = match state {
                    Seat::Free => "free".to_string(),
                    Seat::Held(h) => format!("held by {}", holds.meta[h as usize].name),
                    Seat::Sold(h) => {
                        format!("sold to the booking of {}", holds.meta[h as usize].name)
                    }
                };
                violations.push(Violation {
                    message: format!(
                        "seat {event}/{seat}: no order of its {} operations explains the answers; \
                         the longest explainable prefix has {after} of them and leaves the seat {state}, \
                         and none of the ops pending there (history ops {:?}) can come next",
                        ops.len(),
                        next
                    ),
                    ops: next,
                });
            }
        }
    }
    let mut v = Verdict::new(
        NAME,
        format!(
            "{} seats, {checked} seat operations searched (Wing–Gong, memoized)",
            per_seat.len()
        ),
        violations,
    );
    if v.status == Status::Pass && !unknown.is_empty() {
        v.status = Status::Unknown;
        v.summary += &format!("; search budget exhausted on {}", unknown.join(", "));
    }
    v
}

type PerSeat = BTreeMap<(String, String), Vec<SeatOp>>;

/// Project the history onto seats.
fn seat_ops(ops: &[Op], ttl: u64, slack: u64) -> (PerSeat, Holds) {
    let mut holds = Holds::default();
    let mut per: PerSeat = BTreeMap::new();
    // Bookings asked for, by hold: the earliest invoke.
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
    let window_end = |o: &Op| o.completed.unwrap_or(o.invoked + ttl + slack);
    let add = |per: &mut PerSeat, event: &str, seat: &str, op: SeatOp| {
        per.entry((event.to_string(), seat.to_string()))
            .or_default()
            .push(op);
    };
    for o in ops {
        match (&o.call, &o.outcome) {
            (Call::Hold { event, seats, .. } | Call::StaleHold { event, seats, .. }, outcome) => {
                match outcome {
                    Outcome::Ok(Reply::Held {
                        hold, seats: got, ..
                    }) => {
                        let h = holds.id(hold);
                        let m = &mut holds.meta[h as usize];
                        m.expire_from = (o.invoked + ttl).saturating_sub(slack);
                        for s in got {
                            add(
                                &mut per,
                                event,
                                s,
                                seat_op(o, Kind::Acquire(h), false, window_end(o)),
                            );
                        }
                    }
                    Outcome::Fail { code, unavailable } if code == "seats_unavailable" => {
                        let named: &[String] = if unavailable.is_empty() && seats.len() == 1 {
                            seats
                        } else {
                            unavailable
                        };
                        for s in named {
                            add(
                                &mut per,
                                event,
                                s,
                                seat_op(o, Kind::NotFree, false, window_end(o)),
                            );
                        }
                    }
                    Outcome::Unknown(_) => {
                        let h = holds.id(&format!("?op{}", o.op));
                        holds.meta[h as usize].expire_from =
                            (o.invoked + ttl).saturating_sub(slack);
                        // Had it happened later, it would have been due at once.
                        let end = o.invoked + ttl + slack;
                        for s in seats {
                            add(&mut per, event, s, seat_op(o, Kind::Acquire(h), true, end));
                        }
                    }
                    _ => {}
                }
            }
            (Call::Cancel { event, hold, seats }, outcome) => {
                let h = holds.id(hold);
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
                        for s in seats {
                            add(&mut per, event, s, seat_op(o, kind, false, window_end(o)));
                        }
                    }
                    Outcome::Unknown(_) => {
                        for s in seats {
                            add(
                                &mut per,
                                event,
                                s,
                                seat_op(o, Kind::Release(h), true, o.invoked + ttl + slack),
                            );
                        }
                    }
                    Outcome::Fail { .. } => {}
                }
            }
            (
                Call::Pay {
                    event, hold, seats, ..
                }
                | Call::ReadBooking {
                    event, hold, seats, ..
                },
                Outcome::Ok(Reply::Booking { status }),
            ) => {
                let h = holds.id(hold);
                let kind = match status.as_str() {
                    "confirmed" => Kind::SoldTo(h),
                    // Only a linearizable read proves "not sold"; the
                    // callback may answer pending from what it saw earlier.
                    _ if matches!(o.call, Call::ReadBooking { .. }) => Kind::NotSoldTo(h),
                    _ => continue,
                };
                for s in seats {
                    add(&mut per, event, s, seat_op(o, kind, false, window_end(o)));
                }
            }
            _ => {}
        }
    }
    for v in per.values_mut() {
        v.sort_by_key(|s| (s.inv, s.op));
    }
    (per, holds)
}

fn seat_op(o: &Op, kind: Kind, optional: bool, ret: u64) -> SeatOp {
    SeatOp {
        op: o.op,
        kind,
        inv: o.invoked,
        ret: ret.max(o.invoked),
        optional,
    }
}

enum SeatResult {
    Ok,
    Budget,
    Stuck {
        after: usize,
        state: Seat,
        next: Vec<u64>,
    },
}

/// What the seat may be just before an op that completes at `t`, given it
/// was `s` after the previous one: unchanged, or changed by the system.
fn before(s: Seat, t: u64, holds: &[HoldMeta]) -> impl Iterator<Item = Seat> {
    let mut out = [Some(s), None, None];
    if let Seat::Held(h) = s {
        let m = &holds[h as usize];
        if t >= m.expire_from || m.cancelled_from.is_some_and(|c| c <= t) {
            out[1] = Some(Seat::Free);
        }
        if m.sellable_from.is_some_and(|b| b <= t) {
            out[2] = Some(Seat::Sold(h));
        }
    }
    out.into_iter().flatten()
}

fn step(kind: Kind, s: Seat) -> Option<Seat> {
    match (kind, s) {
        (Kind::Acquire(h), Seat::Free) => Some(Seat::Held(h)),
        (Kind::NotFree, Seat::Held(_) | Seat::Sold(_)) => Some(s),
        (Kind::Release(h), Seat::Held(x)) if x == h => Some(Seat::Free),
        (Kind::NotHeldBy(h), s) if s != Seat::Held(h) => Some(s),
        (Kind::SoldTo(h), Seat::Sold(x)) if x == h => Some(s),
        (Kind::NotSoldTo(h), s) if s != Seat::Sold(h) => Some(s),
        _ => None,
    }
}

fn zobrist(i: usize) -> u64 {
    // splitmix64 of the index: a fixed random 64-bit key per op.
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct Frame {
    choices: Vec<(usize, Seat)>,
    next: usize,
    /// The op this frame's state came from (undone when the frame is left).
    via: Option<(usize, Seat)>,
}

/// Depth-first search for an order; `ops` sorted by invoke time.
fn search(ops: &[SeatOp], holds: &[HoldMeta]) -> SeatResult {
    let n = ops.len();
    let mut done = vec![false; n];
    let mut count = 0usize;
    let mut first = 0usize;
    let mut hash = 0u64;
    let mut state = Seat::Free;
    let mut seen: HashSet<(u64, Seat)> = HashSet::new();
    // The deepest configuration reached: ops linearized, the seat, and the
    // pending ops that could have come next (or, if none could, the
    // earliest pending ones).
    let mut best: Option<(usize, Seat, Vec<u64>)> = None;

    let choices = |done: &[bool], first: usize, state: Seat| -> Vec<(usize, Seat)> {
        // An op may come next only if no pending op completed before it
        // was invoked.
        let mut min_ret = u64::MAX;
        for i in first..n {
            if done[i] {
                continue;
            }
            if ops[i].inv > min_ret {
                break;
            }
            min_ret = min_ret.min(ops[i].ret);
        }
        let mut out = Vec::new();
        for i in first..n {
            if done[i] {
                continue;
            }
            if ops[i].inv > min_ret {
                break;
            }
            for pre in before(state, ops[i].ret, holds) {
                if let Some(s) = step(ops[i].kind, pre) {
                    if !out.contains(&(i, s)) {
                        out.push((i, s));
                    }
                }
            }
            if ops[i].optional && !out.contains(&(i, state)) {
                out.push((i, state));
            }
        }
        out
    };

    let mut stack = vec![Frame {
        choices: choices(&done, first, state),
        next: 0,
        via: None,
    }];
    while let Some(top) = stack.last_mut() {
        if top.next < top.choices.len() {
            let (i, s) = top.choices[top.next];
            top.next += 1;
            let prev = state;
            done[i] = true;
            count += 1;
            hash ^= zobrist(i);
            state = s;
            if count == n {
                return SeatResult::Ok;
            }
            if seen.insert((hash, state)) {
                if seen.len() > BUDGET {
                    return SeatResult::Budget;
                }
                while first < n && done[first] {
                    first += 1;
                }
                let c = choices(&done, first, state);
                if best.as_ref().is_none_or(|b| count > b.0) {
                    let mut next: Vec<u64> = c.iter().map(|(i, _)| ops[*i].op).collect();
                    if next.is_empty() {
                        next = (first..n)
                            .filter(|i| !done[*i])
                            .take(4)
                            .map(|i| ops[i].op)
                            .collect();
                    }
                    best = Some((count, state, next));
                }
                stack.push(Frame {
                    choices: c,
                    next: 0,
                    via: Some((i, prev)),
                });
                continue;
            }
            // Seen before: undo at once.
            done[i] = false;
            count -= 1;
            hash ^= zobrist(i);
            state = prev;
            first = first.min(i);
        } else {
            let frame = stack.pop().expect("stack is not empty");
            if let Some((i, prev)) = frame.via {
                done[i] = false;
                count -= 1;
                hash ^= zobrist(i);
                state = prev;
                first = first.min(i);
            }
        }
    }
    let (after, state, mut next) = best.unwrap_or_else(|| {
        // Stuck at the very start: the first ops themselves do not fit.
        (0, Seat::Free, ops.iter().take(4).map(|o| o.op).collect())
    });
    next.sort_unstable();
    next.dedup();
    SeatResult::Stuck { after, state, next }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixtures::{finals, good_dump, run, Done, H};
    use crate::check::Input;

    fn verdict(h: &H) -> Verdict {
        let run = run();
        let hist = h.history();
        let finals = finals(vec![good_dump()]);
        check(&Input::new(&run, &hist, &finals))
    }

    #[test]
    fn concurrent_holds_one_winner_pass() {
        let mut h = H::default();
        h.hold("c1", "S1", 0.0, 0.2, Some("h5-1"));
        h.hold("c2", "S1", 0.1, 0.3, None);
        // The loser's 409 may come before the winner's 201.
        h.hold("c3", "S1", 0.05, 0.06, None);
        h.hold("c4", "S1", 0.01, 0.3, None);
        let v = verdict(&h);
        // c3's 409 completed at 0.06 while only c1 could have taken the seat
        // (invoked at 0.0): fine, c1 may have linearized first.
        assert_eq!(v.status, Status::Pass, "{v:?}");
    }

    #[test]
    fn planted_double_hold_is_caught() {
        let mut h = H::default();
        h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
        // Two seconds later, well inside the 4 s TTL, another buyer gets it.
        let bad = h.hold("c2", "S1", 2.0, 2.1, Some("h5-2"));
        let v = verdict(&h);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.violations[0].ops.contains(&bad), "{v:?}");
    }

    #[test]
    fn hold_after_expiry_passes_and_after_cancel_passes() {
        let mut h = H::default();
        h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
        h.hold("c2", "S1", 5.0, 5.1, Some("h5-2"));
        h.cancel("c2", "h5-2", 5.5, 5.6, "released");
        h.hold("c3", "S1", 5.7, 5.8, Some("h5-3"));
        assert_eq!(verdict(&h).status, Status::Pass);
    }

    #[test]
    fn cancel_of_a_lapsed_hold_answers_expired() {
        let run_with = |status: &str| {
            let mut h = H::default();
            h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
            // After the TTL someone else holds the seat; then c1 cancels.
            h.hold("c2", "S1", 5.0, 5.1, Some("h5-2"));
            let cancel = h.cancel("c1", "h5-1", 5.5, 5.6, status);
            (verdict(&h), cancel)
        };
        // The hold had lapsed: the cancel says so, and changes nothing.
        assert_eq!(run_with("expired").0.status, Status::Pass);
        // A cancel that claims to have released a seat someone else holds.
        let (v, cancel) = run_with("released");
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.violations[0].ops.contains(&cancel), "{v:?}");
    }

    #[test]
    fn abandoned_payment_may_free_the_seat_early() {
        let run_with = |abandon: bool| {
            let mut h = H::default();
            h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
            h.book(0.2);
            h.booking_status(0.4, 0.5, Some(abandon), "pending");
            // Long before the 4 s TTL, someone else gets the seat.
            h.hold("c2", "S1", 1.0, 1.1, Some("h5-2"));
            verdict(&h).status
        };
        // The reconciler releases a cancelled payment at once: fine.
        assert_eq!(run_with(true), Status::Pass);
        // A payment nobody cancelled holds its seat until the deadline.
        assert_eq!(run_with(false), Status::Fail);
    }

    #[test]
    fn phantom_unavailable_is_caught() {
        let mut h = H::default();
        // Nobody ever held S2, yet a lone hold was refused.
        let bad = h.hold("c1", "S2", 1.0, 1.1, None);
        let v = verdict(&h);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert_eq!(v.violations[0].ops, vec![bad]);
    }

    #[test]
    fn unknown_hold_may_or_may_not_have_happened() {
        // It happened: explains the later 409.
        let mut h = H::default();
        h.op(
            "c1",
            Call::Hold {
                event: "e".into(),
                seats: vec!["S1".into()],
                edge: "n1".into(),
            },
            0.0,
            0.5,
            Done::Info,
        );
        h.hold("c2", "S1", 1.0, 1.1, None);
        assert_eq!(verdict(&h).status, Status::Pass);
        // It did not: a later 201 is fine too.
        let mut h = H::default();
        h.op(
            "c1",
            Call::Hold {
                event: "e".into(),
                seats: vec!["S1".into()],
                edge: "n1".into(),
            },
            0.0,
            0.5,
            Done::Info,
        );
        h.hold("c2", "S1", 1.0, 1.1, Some("h5-9"));
        assert_eq!(verdict(&h).status, Status::Pass);
    }

    #[test]
    fn sold_seat_held_again_is_caught() {
        let mut h = H::default();
        h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
        h.book(0.2);
        h.booking_status(0.4, 0.6, Some(false), "confirmed");
        // Long after the TTL: a sold seat never comes back.
        let bad = h.hold("c2", "S1", 30.0, 30.1, Some("h5-7"));
        let v = verdict(&h);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.violations[0].ops.contains(&bad), "{v:?}");
    }

    #[test]
    fn confirmed_then_read_pending_is_caught() {
        let mut h = H::default();
        h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
        h.book(0.2);
        h.booking_status(0.5, 0.6, Some(false), "confirmed");
        let bad = h.booking_status(1.0, 1.1, None, "pending");
        let v = verdict(&h);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.violations[0].ops.contains(&bad), "{v:?}");
    }

    #[test]
    fn many_concurrent_ops_stay_fast() {
        // 16 clients hammering one seat for 60 s of history: the search
        // must finish (memoization), and pass.
        let mut h = H::default();
        let mut t = 0.0;
        let mut seq = 0;
        while t < 60.0 {
            seq += 1;
            let name = format!("h5-{seq}");
            h.hold("w", "S1", t, t + 0.05, Some(&name));
            for c in 0..15 {
                let t0 = t + 0.01 * c as f64;
                h.hold(&format!("c{c}"), "S1", t0, t0 + 0.08, None);
            }
            h.cancel("w", &name, t + 0.2, t + 0.25, "released");
            t += 0.3;
        }
        assert_eq!(verdict(&h).status, Status::Pass);
    }
}
