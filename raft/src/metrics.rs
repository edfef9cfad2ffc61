//! Process-wide counters of the consensus layer, rendered by the edge's
//! `/metrics`. Atomics only: counting never blocks a proposal or an apply.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct RaftMetrics {
    /// Event commands refused by the leader before proposing (stale epoch).
    pub stale_epoch_propose: AtomicU64,
    /// Event commands refused inside `apply` (stale epoch).
    pub stale_epoch_apply: AtomicU64,
    /// Writes answered `not_leader` by this node.
    pub not_leader_answers: AtomicU64,
    /// Leadership gained by a group on this node.
    pub leader_changes: AtomicU64,
}

impl RaftMetrics {
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// This process's counters.
pub static METRICS: RaftMetrics = RaftMetrics {
    stale_epoch_propose: AtomicU64::new(0),
    stale_epoch_apply: AtomicU64::new(0),
    not_leader_answers: AtomicU64::new(0),
    leader_changes: AtomicU64::new(0),
};
