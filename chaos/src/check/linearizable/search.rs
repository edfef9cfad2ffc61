//! The search for an order of one seat's operations: depth first, each
//! op placed inside its own window (no pending op completed before it was
//! invoked), the system's own changes tried before each, and each
//! `(linearized set, state)` explored once (Lowe's memoization, the set
//! hashed with a Zobrist key per op).

use std::collections::HashSet;

use super::{HoldMeta, Kind, Seat, SeatOp};

/// Configurations explored per seat before the checker gives up (Unknown).
const BUDGET: usize = 2_000_000;

/// How the search of one seat ended.
pub(super) enum SeatResult {
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

/// The seat after an op of `kind` found it `s`, if the op fits.
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

/// The Zobrist key of op `i`: the linearized set's hash is the XOR of
/// its ops' keys.
fn zobrist(i: usize) -> u64 {
    // splitmix64 of the index: a fixed random 64-bit key per op.
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A level of the depth-first search: the choices at a configuration and
/// the next one to try.
struct Frame {
    choices: Vec<(usize, Seat)>,
    next: usize,
    /// The op this frame's state came from (undone when the frame is left).
    via: Option<(usize, Seat)>,
}

/// The ops that may come next, with the seat each would leave, when the
/// ops `done` are linearized (none pending before `first`) and the seat is
/// `state`: only ops no pending op completed before (see the comment
/// inside), each after any change the system may make first; an optional
/// op may also not have happened (the seat stays `state`).
fn choices(
    ops: &[SeatOp],
    holds: &[HoldMeta],
    done: &[bool],
    first: usize,
    state: Seat,
) -> Vec<(usize, Seat)> {
    let n = ops.len();
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
}

/// Depth-first search for an order; `ops` sorted by invoke time.
pub(super) fn search(ops: &[SeatOp], holds: &[HoldMeta]) -> SeatResult {
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

    let mut stack = vec![Frame {
        choices: choices(ops, holds, &done, first, state),
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
                let c = choices(ops, holds, &done, first, state);
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
