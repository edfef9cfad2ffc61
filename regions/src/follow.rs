//! Ownership that follows the buyers: the per-event policy
//! (`follow_buyers`) and the decision, a pure function of the holds each
//! region's buyers sent in a window ([`plan`]); the duty that counts and
//! moves is `seatfence_duties::follow`.
//!
//! The policy lives in the event group's key-value table under
//! [`POLICY_KEY`] (`"1"` on), so it is replicated, kept in snapshots and
//! backups, and carried along by a move (the same group changes members),
//! without changing any record's format.

use std::collections::BTreeMap;

use seatfence_core::RegionId;

/// The event group's key holding its `follow_buyers` policy.
pub const POLICY_KEY: &str = "policy/follow_buyers";

/// The value of [`POLICY_KEY`] for "on" (anything else, or absent: off).
pub const ON: &[u8] = b"1";

/// When a region's buyers count as "most" of a window's holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// A window with fewer holds than this says nothing.
    pub min_holds: u64,
    /// The leading region's share of the window's holds, in percent,
    /// above which it counts (a majority and then some: hysteresis).
    pub share_pct: u64,
    /// Consecutive windows the same region must lead before a move.
    pub windows: u32,
}

impl Default for Rule {
    fn default() -> Rule {
        Rule {
            min_holds: 20,
            share_pct: 60,
            windows: 2,
        }
    }
}

/// What the decision remembers of an event between windows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// The region that led the last windows, and for how many in a row.
    leading: Option<(RegionId, u32)>,
    /// The window in which the last move started.
    moved_in: Option<u64>,
}

/// The region to move the event to after window number `window` (numbered
/// upwards, one per window), or `None`. Holds per buyer region in that
/// window: `counts`; the owner now: `owner`; `moving`: a move runs. A
/// region must send more than `share_pct` % of at least `min_holds` holds
/// in `windows` windows in a row, and at most one move starts per window
/// and the one after it (the move's own window is not judged).
pub fn plan(
    mem: &mut Memory,
    rule: &Rule,
    window: u64,
    counts: &BTreeMap<RegionId, u64>,
    owner: &RegionId,
    moving: bool,
) -> Option<RegionId> {
    let total: u64 = counts.values().sum();
    let top = counts
        .iter()
        .max_by_key(|(r, n)| (**n, std::cmp::Reverse((*r).clone())))
        .filter(|(r, n)| {
            total >= rule.min_holds && *r != owner && **n * 100 > total * rule.share_pct
        })
        .map(|(r, _)| r.clone());
    let Some(top) = top else {
        mem.leading = None;
        return None;
    };
    let streak = match &mem.leading {
        Some((r, n)) if *r == top => n + 1,
        _ => 1,
    };
    mem.leading = Some((top.clone(), streak));
    let cooling = mem.moved_in.is_some_and(|w| window <= w + 1);
    if moving || cooling || streak < rule.windows {
        return None;
    }
    mem.moved_in = Some(window);
    mem.leading = None;
    Some(top)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> BTreeMap<RegionId, u64> {
        pairs
            .iter()
            .map(|(r, n)| (RegionId(r.to_string()), *n))
            .collect()
    }

    fn r(s: &str) -> RegionId {
        RegionId(s.to_string())
    }

    #[test]
    fn moves_once_after_two_windows_and_not_again_while_buyers_stay() {
        let (rule, mut mem) = (Rule::default(), Memory::default());
        let ap = counts(&[("us-east", 5), ("ap-south", 45)]);
        assert_eq!(plan(&mut mem, &rule, 1, &ap, &r("us-east"), false), None);
        assert_eq!(
            plan(&mut mem, &rule, 2, &ap, &r("us-east"), false),
            Some(r("ap-south"))
        );
        // Owned by ap-south now: its own buyers never move it.
        for w in 3..10 {
            assert_eq!(plan(&mut mem, &rule, w, &ap, &r("ap-south"), false), None);
        }
    }

    #[test]
    fn hysteresis_small_windows_near_ties_and_a_running_move() {
        let rule = Rule::default();
        let mut mem = Memory::default();
        // Too few holds, or no clear majority: no streak.
        let few = counts(&[("ap-south", 10)]);
        let tie = counts(&[("us-east", 45), ("ap-south", 55)]);
        for w in 0..4 {
            assert_eq!(plan(&mut mem, &rule, w, &few, &r("us-east"), false), None);
            assert_eq!(plan(&mut mem, &rule, w, &tie, &r("us-east"), false), None);
        }
        // A streak broken by another region starts over.
        let ap = counts(&[("ap-south", 40)]);
        let eu = counts(&[("eu-west", 40)]);
        assert_eq!(plan(&mut mem, &rule, 5, &ap, &r("us-east"), false), None);
        assert_eq!(plan(&mut mem, &rule, 6, &eu, &r("us-east"), false), None);
        assert_eq!(plan(&mut mem, &rule, 7, &ap, &r("us-east"), false), None);
        // A running move (an operator's) holds the decision back.
        assert_eq!(plan(&mut mem, &rule, 8, &ap, &r("us-east"), true), None);
        assert_eq!(
            plan(&mut mem, &rule, 9, &ap, &r("us-east"), false),
            Some(r("ap-south"))
        );
        // The next window cannot move again, whatever the buyers do; the
        // one after may, once the new region led two windows in a row.
        assert_eq!(plan(&mut mem, &rule, 10, &eu, &r("ap-south"), false), None);
        assert_eq!(
            plan(&mut mem, &rule, 11, &eu, &r("ap-south"), false),
            Some(r("eu-west"))
        );
    }
}
