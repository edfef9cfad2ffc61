//! [`Origins`]: who the buyers of the holds a leader grants are, and where
//! they come from, per group and per sending node (the node whose edge
//! took the buyer's request: this node for its own edge, the caller of a
//! `Write`/`WriteBatch` for the others). Counted in memory since the last
//! [`Origins::take`]; a new leader starts from nothing. What
//! `follow_buyers` decides on.
//!
//! Buyers, not holds: one buyer granted a thousand holds through one node
//! is one (buyer, node) pair. Memory is bounded per group whatever the
//! buyers do: each group keeps a bottom-k sample ([`SAMPLE`] pairs, the
//! ones whose buyer hashes lowest under a key drawn at random per
//! process), exact while a window has at most [`SAMPLE`] pairs and a
//! uniform sample of them beyond (a buyer cannot choose to land in it:
//! the key is never shown).

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher;
use std::sync::Mutex;

use seatfence_core::inventory::Outcome;
use seatfence_core::{GroupId, Response, UserId};

/// At most this many (buyer, node) pairs are kept per group and window
/// (16 bytes each, plus the set's overhead: well under 32 KiB a group).
pub const SAMPLE: usize = 1024;

/// The buyers of the holds granted by a set of responses (a refusal, or a
/// replay of a recorded answer, names no one), as [`holds_granted`]
/// returns them for [`Origins::note`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted(Vec<UserId>);

impl Granted {
    /// No hold was granted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The buyers whose holds one group granted in a window, with the node
/// each came through: a bottom-k sample of (buyer hash, node) pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Buyers {
    pairs: BTreeSet<(u64, u64)>,
}

impl Buyers {
    fn add(&mut self, hash: u64, node: u64) {
        self.pairs.insert((hash, node));
        if self.pairs.len() > SAMPLE {
            self.pairs.pop_last();
        }
    }

    /// Distinct buyers per key (`key_of` a sending node, e.g. its region;
    /// `None`: not counted). A buyer who came through two nodes of one
    /// key counts once there. Exact below [`SAMPLE`] pairs; beyond it,
    /// the sample's counts scaled by the share of hashes it covers.
    pub fn per_key<K: Ord + Clone>(&self, key_of: impl Fn(u64) -> Option<K>) -> BTreeMap<K, u64> {
        let mut distinct: BTreeSet<(K, u64)> = BTreeSet::new();
        for (hash, node) in &self.pairs {
            if let Some(k) = key_of(*node) {
                distinct.insert((k, *hash));
            }
        }
        let mut counts: BTreeMap<K, u64> = BTreeMap::new();
        for (k, _) in distinct {
            *counts.entry(k).or_default() += 1;
        }
        match self.pairs.last() {
            Some((top, _)) if self.pairs.len() >= SAMPLE => {
                // The sample holds every pair hashing at most `top`: a
                // share (top + 1) / 2^64 of all of them.
                let scale = 2f64.powi(64) / (*top as f64 + 1.0);
                for n in counts.values_mut() {
                    *n = (*n as f64 * scale).min(u64::MAX as f64) as u64;
                }
                counts
            }
            _ => counts,
        }
    }
}

/// Buyers per group since the last [`Origins::take`].
pub type OriginCounts = HashMap<GroupId, Buyers>;

/// The buyers of the holds granted here since the last [`Origins::take`].
#[derive(Default)]
pub struct Origins {
    /// Hashes buyers; its keys are drawn at random per process.
    key: RandomState,
    // Held only to add or swap, never across an `.await`.
    counts: Mutex<OriginCounts>,
}

impl Origins {
    /// Count the buyers of `granted` holds of `group`, sent by node `node`.
    pub fn note(&self, group: GroupId, node: u64, granted: Granted) {
        if granted.is_empty() {
            return;
        }
        let hashes: Vec<u64> = granted.0.iter().map(|b| self.key.hash_one(b)).collect();
        let mut counts = self.counts.lock().expect("origins lock poisoned");
        let buyers = counts.entry(group).or_default();
        for h in hashes {
            buyers.add(h, node);
        }
    }

    /// What was counted since the last call, and start again.
    pub fn take(&self) -> OriginCounts {
        std::mem::take(&mut *self.counts.lock().expect("origins lock poisoned"))
    }
}

/// The buyers of the holds granted now in `responses` (a refusal, or a
/// replay of a recorded answer, counts no one).
pub fn holds_granted(responses: &[Response]) -> Granted {
    Granted(
        responses
            .iter()
            .filter_map(|r| match r {
                Response::Event(e) if !e.replayed => match &e.outcome {
                    Outcome::Held(h) => Some(h.owner.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(who: &[&str]) -> Granted {
        Granted(who.iter().map(|w| UserId(w.to_string())).collect())
    }

    fn per_node(b: &Buyers) -> BTreeMap<u64, u64> {
        b.per_key(Some)
    }

    #[test]
    fn counts_distinct_buyers_per_group_and_node_until_taken() {
        let o = Origins::default();
        o.note(GroupId(3), 1, granted(&["ann", "bob"]));
        o.note(GroupId(3), 2, granted(&["ann"]));
        o.note(GroupId(3), 1, granted(&["ann", "ann"]));
        o.note(GroupId(4), 1, granted(&[]));
        let taken = o.take();
        assert_eq!(
            per_node(&taken[&GroupId(3)]),
            BTreeMap::from([(1, 2), (2, 1)])
        );
        assert!(!taken.contains_key(&GroupId(4)));
        assert!(o.take().is_empty());
    }

    #[test]
    fn one_buyer_granted_many_holds_is_one() {
        let o = Origins::default();
        for _ in 0..10_000 {
            o.note(GroupId(3), 7, granted(&["mallory"]));
        }
        assert_eq!(per_node(&o.take()[&GroupId(3)]), BTreeMap::from([(7, 1)]));
    }

    #[test]
    fn two_nodes_of_one_region_count_a_buyer_once() {
        let o = Origins::default();
        o.note(GroupId(3), 1, granted(&["ann"]));
        o.note(GroupId(3), 2, granted(&["ann", "bob"]));
        o.note(GroupId(3), 9, granted(&["ann"]));
        let region = |n: u64| Some(if n == 9 { "eu" } else { "us" });
        assert_eq!(
            o.take()[&GroupId(3)].per_key(region),
            BTreeMap::from([("eu", 1), ("us", 2)])
        );
    }

    #[test]
    fn memory_is_bounded_and_a_big_window_is_estimated() {
        let o = Origins::default();
        for n in 0..20_000u64 {
            let node = if n % 4 == 0 { 1 } else { 2 };
            o.note(GroupId(3), node, granted(&[&format!("buyer-{n}")]));
        }
        let taken = o.take();
        let b = &taken[&GroupId(3)];
        assert_eq!(b.pairs.len(), SAMPLE);
        let counts = per_node(b);
        let (one, two) = (counts[&1] as f64, counts[&2] as f64);
        // 5,000 and 15,000 in truth, 75 % of them through node 2: a
        // sample of 1,024 is within ~7 % (one sigma) of each count and
        // ~1.4 points of the share; the bounds are four sigma and more.
        assert!((3_500.0..6_500.0).contains(&one), "{counts:?}");
        assert!((12_000.0..18_000.0).contains(&two), "{counts:?}");
        let share = two / (one + two);
        assert!((0.67..0.83).contains(&share), "{counts:?}");
    }

    fn reply(owner: &str, replayed: bool, held: bool) -> Response {
        use seatfence_core::inventory::{EventReply, Hold, HoldStatus};
        let hold = Hold {
            seq: 1,
            owner: UserId(owner.to_string()),
            seats: vec!["A-1-1".to_string()],
            created_ms: 0,
            expires_at_ms: 1,
            status: HoldStatus::Held,
            extensions: 0,
        };
        Response::Event(EventReply {
            replayed,
            epoch: seatfence_core::Epoch(1),
            owner: seatfence_core::RegionId("us-east".to_string()),
            outcome: if held {
                Outcome::Held(hold)
            } else {
                Outcome::Cancelled(hold)
            },
        })
    }

    #[test]
    fn only_holds_granted_now_name_their_buyer() {
        let responses = [
            reply("ann", false, true),
            reply("bob", true, true),
            reply("cat", false, false),
            Response::None,
        ];
        assert_eq!(holds_granted(&responses), granted(&["ann"]));
    }
}
