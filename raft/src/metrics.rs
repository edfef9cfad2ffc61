//! Process-wide counters of the consensus layer, rendered by the edge's
//! `/metrics`. Atomics only: counting never blocks a proposal or an apply.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
    /// The same, per group id. Held only to bump or copy a count.
    pub leader_changes_by_group: Mutex<BTreeMap<u64, u64>>,
    /// Ownership moves started / aborted through this node's edge, and
    /// completed by this node's coordinator.
    pub moves_started: AtomicU64,
    pub moves_aborted: AtomicU64,
    pub moves_completed: AtomicU64,
    /// Sums over completed moves (ms): start to done, and the write pause
    /// (membership change committed to epoch bump committed).
    pub move_duration_ms_sum: AtomicU64,
    pub move_pause_ms_sum: AtomicU64,
    /// The last completed move's figures (ms).
    pub move_last_duration_ms: AtomicU64,
    pub move_last_pause_ms: AtomicU64,
}

impl RaftMetrics {
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Count a leadership gained by `group` on this node.
    pub fn leader_gained(&self, group: u64) {
        Self::inc(&self.leader_changes);
        *self
            .leader_changes_by_group
            .lock()
            .expect("metrics lock poisoned")
            .entry(group)
            .or_default() += 1;
    }

    /// Leaderships gained per group, by group id.
    pub fn leader_changes_by_group(&self) -> BTreeMap<u64, u64> {
        self.leader_changes_by_group
            .lock()
            .expect("metrics lock poisoned")
            .clone()
    }
}

/// This process's counters.
pub static METRICS: RaftMetrics = RaftMetrics {
    stale_epoch_propose: AtomicU64::new(0),
    stale_epoch_apply: AtomicU64::new(0),
    not_leader_answers: AtomicU64::new(0),
    leader_changes: AtomicU64::new(0),
    leader_changes_by_group: Mutex::new(BTreeMap::new()),
    moves_started: AtomicU64::new(0),
    moves_aborted: AtomicU64::new(0),
    moves_completed: AtomicU64::new(0),
    move_duration_ms_sum: AtomicU64::new(0),
    move_pause_ms_sum: AtomicU64::new(0),
    move_last_duration_ms: AtomicU64::new(0),
    move_last_pause_ms: AtomicU64::new(0),
};
