//! Ownership that follows the buyers: the per-event policy
//! (`follow_buyers`) and the decision, a pure function of the distinct
//! buyers each region sent granted holds from in a window ([`plan`]); the
//! duty that counts and moves is `seatfence_duties::follow`.
//!
//! The policy lives in the event group's key-value table under
//! [`POLICY_KEY`] (`"1"` on), and so does the time of the last move the
//! policy started ([`LAST_MOVE_KEY`]): both are replicated, kept in
//! snapshots and backups, and carried along by a move (the same group
//! changes members), so a restart or a new leader keeps the cooldown,
//! without changing any record's format.
//!
//! Buyers, not holds: one buyer granted a hold, cancelling it and holding
//! again counts once however often it cycles, so moving an event takes
//! `min_holds` different buyers (tokens), most of them from one region.

use std::collections::BTreeMap;

use seatfence_core::RegionId;

/// The event group's key holding its `follow_buyers` policy.
pub const POLICY_KEY: &str = "policy/follow_buyers";

/// The value of [`POLICY_KEY`] for "on" (anything else, or absent: off).
pub const ON: &[u8] = b"1";

/// The event group's key holding when (Unix ms, decimal) the policy last
/// started a move of the event, written by a committed `Put` before the
/// move is proposed ([`encode_last_move`], [`last_move_ms`]).
pub const LAST_MOVE_KEY: &str = "policy/follow_buyers/last_move_ms";

/// When a region's buyers count as "most" of a window's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// A window whose granted holds came from fewer distinct buyers than
    /// this says nothing (`[moves] follow_min_holds`).
    pub min_holds: u64,
    /// The leading region's share of the window's distinct buyers, in
    /// percent, above which it counts (a majority and then some:
    /// hysteresis).
    pub share_pct: u64,
    /// Consecutive windows the same region must lead before a move.
    pub windows: u32,
    /// No move starts within this many windows of the last one's start
    /// (the move's own window and the next, by default), whichever node
    /// started it ([`LAST_MOVE_KEY`]).
    pub cooldown_windows: u32,
}

impl Default for Rule {
    fn default() -> Rule {
        Rule {
            min_holds: 20,
            share_pct: 60,
            windows: 2,
            cooldown_windows: 2,
        }
    }
}

/// What the decision remembers of an event between windows, in this
/// node's memory (a new leader starts from nothing, which only delays a
/// move; the cooldown is the group's, [`Window::last_move_ms`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// The region that led the last windows, and for how many in a row.
    leading: Option<(RegionId, u32)>,
}

/// What one window saw of an event.
#[derive(Debug, Clone, Copy)]
pub struct Window<'a> {
    /// The window's length (ms).
    pub window_ms: u64,
    /// Now, at the window's end (Unix ms, the node's clock).
    pub now_ms: u64,
    /// Distinct buyers whose holds were granted, per buyer region.
    pub buyers: &'a BTreeMap<RegionId, u64>,
    /// The event's owner region now.
    pub owner: &'a RegionId,
    /// A move of the event runs.
    pub moving: bool,
    /// When the policy last started a move ([`LAST_MOVE_KEY`]).
    pub last_move_ms: Option<u64>,
}

/// The region to move the event to after window `w`, or `None`. A region
/// must send more than `share_pct` % of at least `min_holds` distinct
/// buyers in `windows` windows in a row; no move starts while one runs,
/// nor within `cooldown_windows` windows of the last start (either side:
/// a start stamped ahead of this clock cools as long, and a stamp further
/// ahead than that is ignored, so a skewed clock cannot stop the policy
/// for good).
pub fn plan(mem: &mut Memory, rule: &Rule, w: &Window<'_>) -> Option<RegionId> {
    let total: u64 = w.buyers.values().sum();
    let top = w
        .buyers
        .iter()
        .max_by_key(|(r, n)| (**n, std::cmp::Reverse((*r).clone())))
        .filter(|(r, n)| {
            total >= rule.min_holds
                && *r != w.owner
                && n.saturating_mul(100) > total.saturating_mul(rule.share_pct)
        })
        .map(|(r, _)| r.clone());
    let Some(top) = top else {
        mem.leading = None;
        return None;
    };
    let streak = match &mem.leading {
        Some((r, n)) if *r == top => n.saturating_add(1),
        _ => 1,
    };
    mem.leading = Some((top.clone(), streak));
    let cooldown_ms = w.window_ms.saturating_mul(rule.cooldown_windows.into());
    let cooling = w
        .last_move_ms
        .is_some_and(|t| w.now_ms.abs_diff(t) < cooldown_ms);
    if w.moving || cooling || streak < rule.windows {
        return None;
    }
    mem.leading = None;
    Some(top)
}

/// The value of [`LAST_MOVE_KEY`] for a move started at `now_ms`.
pub fn encode_last_move(now_ms: u64) -> Vec<u8> {
    now_ms.to_string().into_bytes()
}

/// The time [`LAST_MOVE_KEY`]'s value names; `None` when absent or not a
/// decimal number (a value the duty never wrote: no cooldown).
pub fn last_move_ms(value: Option<&[u8]>) -> Option<u64> {
    std::str::from_utf8(value?).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 1_000;

    fn counts(pairs: &[(&str, u64)]) -> BTreeMap<RegionId, u64> {
        pairs
            .iter()
            .map(|(r, n)| (RegionId(r.to_string()), *n))
            .collect()
    }

    fn r(s: &str) -> RegionId {
        RegionId(s.to_string())
    }

    /// One event as the duty sees it: this leader's memory, and the
    /// group's replicated last move (written whenever a move starts).
    #[derive(Default)]
    struct Event {
        mem: Memory,
        last_move_ms: Option<u64>,
    }

    impl Event {
        /// Window `n` (ending at `n * W`) saw `buyers`.
        fn window(
            &mut self,
            n: u64,
            buyers: &BTreeMap<RegionId, u64>,
            owner: &str,
            moving: bool,
        ) -> Option<RegionId> {
            let owner = r(owner);
            let w = Window {
                window_ms: W,
                now_ms: n * W,
                buyers,
                owner: &owner,
                moving,
                last_move_ms: self.last_move_ms,
            };
            let to = plan(&mut self.mem, &Rule::default(), &w);
            if to.is_some() {
                self.last_move_ms = Some(w.now_ms);
            }
            to
        }

        /// Leadership moved: the new leader's memory is empty, the
        /// group's state is not.
        fn new_leader(&mut self) {
            self.mem = Memory::default();
        }
    }

    #[test]
    fn moves_once_after_two_windows_and_not_again_while_buyers_stay() {
        let mut e = Event::default();
        let ap = counts(&[("us-east", 5), ("ap-south", 45)]);
        assert_eq!(e.window(1, &ap, "us-east", false), None);
        assert_eq!(e.window(2, &ap, "us-east", false), Some(r("ap-south")));
        // Owned by ap-south now: its own buyers never move it.
        for n in 3..10 {
            assert_eq!(e.window(n, &ap, "ap-south", false), None);
        }
    }

    #[test]
    fn hysteresis_small_windows_near_ties_and_a_running_move() {
        let mut e = Event::default();
        // Too few buyers, or no clear majority: no streak.
        let few = counts(&[("ap-south", 10)]);
        let tie = counts(&[("us-east", 45), ("ap-south", 55)]);
        for n in 0..4 {
            assert_eq!(e.window(n, &few, "us-east", false), None);
            assert_eq!(e.window(n, &tie, "us-east", false), None);
        }
        // A streak broken by another region starts over.
        let ap = counts(&[("ap-south", 40)]);
        let eu = counts(&[("eu-west", 40)]);
        assert_eq!(e.window(5, &ap, "us-east", false), None);
        assert_eq!(e.window(6, &eu, "us-east", false), None);
        assert_eq!(e.window(7, &ap, "us-east", false), None);
        // A running move (an operator's) holds the decision back.
        assert_eq!(e.window(8, &ap, "us-east", true), None);
        assert_eq!(e.window(9, &ap, "us-east", false), Some(r("ap-south")));
        // The next window cannot move again, whatever the buyers do; the
        // one after may, once the new region led two windows in a row.
        assert_eq!(e.window(10, &eu, "ap-south", false), None);
        assert_eq!(e.window(11, &eu, "ap-south", false), Some(r("eu-west")));
    }

    #[test]
    fn one_buyer_cycling_holds_moves_nothing() {
        // The duty counts distinct buyers: one buyer granted 600 holds a
        // window through ap-south is one buyer there, however long.
        let mut e = Event::default();
        let one = counts(&[("ap-south", 1)]);
        for n in 0..100 {
            assert_eq!(e.window(n, &one, "us-east", false), None);
        }
        // Beside a few real buyers at home, it is still one.
        let mixed = counts(&[("us-east", 3), ("ap-south", 1)]);
        for n in 100..110 {
            assert_eq!(e.window(n, &mixed, "us-east", false), None);
        }
    }

    #[test]
    fn the_cooldown_survives_a_new_leader() {
        let mut e = Event::default();
        let ap = counts(&[("ap-south", 40)]);
        let us = counts(&[("us-east", 40)]);
        assert_eq!(e.window(1, &ap, "us-east", false), None);
        assert_eq!(e.window(2, &ap, "us-east", false), Some(r("ap-south")));
        // The move hands leadership to ap-south, whose buyers swing back
        // at once and whose windows start half a window later: its fresh
        // memory builds a streak, the group's last move still cools it.
        e.new_leader();
        let (a, b) = (2 * W + W / 2, 3 * W + W / 2);
        for now in [a, b] {
            let owner = r("ap-south");
            let w = Window {
                window_ms: W,
                now_ms: now,
                buyers: &us,
                owner: &owner,
                moving: false,
                last_move_ms: e.last_move_ms,
            };
            assert_eq!(plan(&mut e.mem, &Rule::default(), &w), None, "at {now}");
        }
        // Two windows after the move's start, it may move again.
        assert_eq!(e.window(5, &us, "ap-south", false), Some(r("us-east")));
    }

    #[test]
    fn a_last_move_stamped_far_ahead_does_not_stop_the_policy() {
        let mut e = Event {
            last_move_ms: Some(u64::MAX),
            ..Event::default()
        };
        let ap = counts(&[("ap-south", 40)]);
        assert_eq!(e.window(1, &ap, "us-east", false), None);
        assert_eq!(e.window(2, &ap, "us-east", false), Some(r("ap-south")));
    }

    #[test]
    fn the_last_move_value_reads_back_and_garbage_is_none() {
        assert_eq!(last_move_ms(Some(&encode_last_move(1234))), Some(1234));
        assert_eq!(last_move_ms(Some(b"soon")), None);
        assert_eq!(last_move_ms(Some(b"")), None);
        assert_eq!(last_move_ms(None), None);
    }
}
