//! [`Origins`]: where the holds a leader takes come from, per group and
//! per sending node (the node whose edge took the buyer's request: this
//! node for its own edge, the caller of a `Write`/`WriteBatch` for the
//! others). Counted in memory since the last [`Origins::take`]; a new
//! leader starts from nothing. What `follow_buyers` decides on.

use std::collections::HashMap;
use std::sync::Mutex;

use seatfence_core::inventory::Outcome;
use seatfence_core::{GroupId, Response};

/// Holds taken per group, per sending node id.
pub type OriginCounts = HashMap<GroupId, HashMap<u64, u64>>;

/// The holds taken here since the last [`Origins::take`].
#[derive(Default)]
pub struct Origins {
    // Held only to add or swap, never across an `.await`.
    counts: Mutex<OriginCounts>,
}

impl Origins {
    /// Count `holds` holds of `group` sent by node `node`.
    pub fn note(&self, group: GroupId, node: u64, holds: u64) {
        if holds == 0 {
            return;
        }
        let mut counts = self.counts.lock().expect("origins lock poisoned");
        *counts.entry(group).or_default().entry(node).or_default() += holds;
    }

    /// What was counted since the last call, and start again.
    pub fn take(&self) -> OriginCounts {
        std::mem::take(&mut *self.counts.lock().expect("origins lock poisoned"))
    }
}

/// How many of `responses` are holds granted now (a refusal, or a replay
/// of a recorded answer, counts nothing).
pub fn holds_granted(responses: &[Response]) -> u64 {
    responses
        .iter()
        .filter(|r| {
            matches!(r, Response::Event(e) if !e.replayed && matches!(e.outcome, Outcome::Held(_)))
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_group_and_node_until_taken() {
        let o = Origins::default();
        o.note(GroupId(3), 1, 2);
        o.note(GroupId(3), 2, 1);
        o.note(GroupId(3), 1, 1);
        o.note(GroupId(4), 1, 0);
        let taken = o.take();
        assert_eq!(taken[&GroupId(3)][&1], 3);
        assert_eq!(taken[&GroupId(3)][&2], 1);
        assert!(!taken.contains_key(&GroupId(4)));
        assert!(o.take().is_empty());
    }
}
