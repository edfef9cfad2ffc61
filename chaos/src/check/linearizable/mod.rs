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
//! before its own `expires_at` less the forward clock skew injected around
//! then (`clocks`; a hold whose answer never came: `ttl - slack` after it
//! was asked for, `slack` covering the largest skew the drill injects); a
//! payment confirms (`Held(h) → Sold(h)`), but only after the hold's
//! booking was asked for.
//!
//! Here: the checker and the model's types; `project` turns the history
//! into each seat's operations, `search` looks for an order of them.

mod clocks;
mod project;
mod search;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use super::{Input, Status, Verdict, Violation};
use project::seat_ops;
use search::{search, SeatResult};

pub const NAME: &str = "linearizable";

/// What a seat is at a point of the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Seat {
    Free,
    Held(u32),
    Sold(u32),
}

/// What an op says about a seat (see the module doc).
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

/// One op as it concerns one seat, inside its window `[inv, ret]`.
#[derive(Debug, Clone)]
struct SeatOp {
    op: u64,
    kind: Kind,
    inv: u64,
    ret: u64,
    optional: bool,
}

/// When the system may change a hold's seats by itself.
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
    /// The id of hold `name`, new (due never, not sellable, not
    /// cancelled) the first time it is named.
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

/// Search every seat for an order of its operations that explains them.
pub fn check(input: &Input<'_>) -> Verdict {
    let ttl = input.run.hold_ttl_ms * 1_000;
    let slack = input.run.expiry_slack_us();
    let clocks = clocks::Clocks::of(input.run, input.history);
    let (per_seat, holds) = seat_ops(&input.ops, ttl, slack, &clocks);
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
            "{} seats that ops named, {checked} seat operations searched (an op counts once \
             per seat it names; Wing–Gong, memoized)",
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
