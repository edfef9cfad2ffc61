//! [`MovesConfig`]: the `[moves]` section of a node's config.

use serde::{Deserialize, Serialize};

/// `[moves]`: how this node coordinates ownership moves (while it leads
/// the directory) and when it deletes replicas it no longer hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MovesConfig {
    /// A learner counts as caught up within this many entries of the
    /// leader's log.
    pub catch_up_slack: u64,
    /// Wait this long after each step (drills and tests use it to act in
    /// the middle of a move; 0 in production).
    pub step_delay_ms: u64,
    /// A replica this node stopped hosting (moved away, aborted learner) is
    /// shut down at once; its data is deleted after this grace period.
    pub retired_grace_ms: u64,
    /// The directory's leader balances group leaderships across each
    /// group's voters this often (`regions::balance`); 0: never.
    pub balance_every_ms: u64,
    /// The directory's leader looks at node liveness, repairs and
    /// decommissions this often (`regions::lifecycle`).
    pub lifecycle_every_ms: u64,
    /// A node silent this long (to the directory's leader) is `suspect`:
    /// it takes new groups only when no live node can.
    pub suspect_after_ms: u64,
    /// A node silent this long is `dead`: its replicas are replaced.
    pub dead_after_ms: u64,
    /// At most this many repairs (dead or decommissioning nodes) at once.
    pub repair_parallel: usize,
    /// At most this many replicas moved at once to even out a region's
    /// nodes (a node added to a region); 0: never.
    pub rebalance_parallel: usize,
    /// The window (ms) over which an event with `follow_buyers` on counts
    /// the distinct buyers of its granted holds per buyer region
    /// (`seatfence_regions::follow`); 0: the policy is never acted on by
    /// this node.
    pub follow_window_ms: u64,
    /// A window whose granted holds came from fewer distinct buyers than
    /// this moves nothing (one buyer holding again and again is one).
    pub follow_min_holds: u64,
}

impl Default for MovesConfig {
    fn default() -> Self {
        MovesConfig {
            catch_up_slack: 100,
            step_delay_ms: 0,
            retired_grace_ms: 60_000,
            balance_every_ms: 10_000,
            lifecycle_every_ms: 1_000,
            suspect_after_ms: 10_000,
            dead_after_ms: 300_000,
            repair_parallel: 8,
            rebalance_parallel: 1,
            follow_window_ms: 60_000,
            follow_min_holds: 20,
        }
    }
}
