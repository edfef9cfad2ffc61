//! The process's metrics, through the `metrics` facade, kept and rendered
//! in the Prometheus text format by `metrics-exporter-prometheus` (the
//! edge's `GET /metrics`). Every crate records into the same families (the
//! consensus layer, the edge, the move coordinator), so a family such as
//! `seatfence_stale_epoch_rejections_total{layer}` has all its layers in
//! one place. [`install`] sets the recorder up once per process; each crate
//! describes its families ([`describe`]) and creates its fixed label sets
//! when it makes its handles, so a scrape shows every series from zero.
//!
//! Recording never blocks a proposal or an apply: handles are atomics.

use std::sync::{LazyLock, OnceLock};

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, Counter, Gauge,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Upper bounds of the histogram buckets, in seconds: every histogram here
/// is a latency.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
];

/// The families this crate records into: (kind, name, help). The edge's
/// own families are described by `seatfence-api` (`EdgeMetrics`).
const FAMILIES: &[(Kind, &str, &str)] = &[
    (Kind::Counter, "seatfence_stale_epoch_rejections_total", "Stale fences refused, by layer: edge = replies below the highest fence seen (discarded, re-routed); propose = leader check; apply = state machine."),
    (Kind::Counter, "seatfence_not_leader_redirects_total", "not_leader answers: followed by this edge, and given by this node."),
    (Kind::Counter, "seatfence_leader_changes_total", "Times a group on this node became leader."),
    (Kind::Counter, "seatfence_group_leader_changes_total", "Times each group became leader on this node, by group id."),
    (Kind::Counter, "seatfence_moves_total", "Ownership moves: started and aborted through this edge, completed by this node's coordinator."),
    (Kind::Counter, "seatfence_move_duration_ms_sum", "Sums over moves completed by this node's coordinator, in ms: start to done (phase=\"total\"), and the write pause, membership change committed (old leader hands over) to epoch bump committed (phase=\"pause\")."),
    (Kind::Gauge, "seatfence_move_last_duration_seconds", "Start to done of the last move this node's coordinator completed."),
    (Kind::Gauge, "seatfence_move_last_pause_seconds", "Write pause (membership change committed to epoch bump committed) of the last move this node's coordinator completed."),
    (Kind::Gauge, "seatfence_nodes", "Nodes of the cluster by lifecycle state (live, suspect, dead, decommissioning, decommissioned), as this node's directory replica records them."),
    (Kind::Gauge, "seatfence_groups_under_replicated", "Groups with a voter on a dead or decommissioning node that no repair is replacing because no live node of its region can take it."),
    (Kind::Gauge, "seatfence_repairs_running", "Replica repairs running (a voter being replaced: dead or decommissioning node, or a region's rebalancing), as the directory records them."),
    (Kind::Gauge, "seatfence_storage_full", "1 while the data directory's free space is below the reserve ([raft] min_free_mb): new writes are refused storage_full until space returns."),
    (Kind::Gauge, "seatfence_storage_free_bytes", "Free bytes of the data directory's filesystem, checked every half second."),
    (Kind::Gauge, "seatfence_groups_dormant", "Replicas on this node unloaded from memory after sleeping for raft.unload_after_ms: followers, reopened from storage by a Raft message, a use, or their leader's node going down."),
    (Kind::Counter, "seatfence_raft_refused_total", "Raft messages this node refused from a peer, by reason: sender_mismatch (a certificate spoke for another node), not_a_group_member, term_out_of_bounds, snapshot_budget (too many snapshot bytes in flight), rejoining (a vote asked of this node's replica while it rejoins on an empty data dir), and answers to this node's messages refused: reply_term_out_of_bounds."),
    (Kind::Counter, "seatfence_writes_overloaded_total", "Writes this node's leaders refused at once (overloaded) because the group (scope=\"group\") or the node (scope=\"node\") had as many writes pending as [raft] max_pending_writes_per_group / max_pending_writes allow."),
    (Kind::Gauge, "seatfence_groups_sleeping", "Replicas on this node that sleep: idle, timers stopped until a proposal, a read, a leader's entries, a vote or node liveness wakes them."),
];

/// What a family is, for its `# TYPE` line.
#[derive(Clone, Copy)]
pub enum Kind {
    /// A monotonic counter.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A latency histogram, bucketed by [`LATENCY_BUCKETS`].
    Histogram,
}

/// Set up this process's recorder (once) and return the handle that
/// renders it.
pub fn install() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&LATENCY_BUCKETS)
            .expect("the latency buckets are not empty")
            .build_recorder();
        let handle = recorder.handle();
        // Histogram samples are kept until upkeep folds them in (or a
        // scrape does): without it a node nobody scrapes grows without end.
        let upkeep = handle.clone();
        std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_secs(5));
                upkeep.run_upkeep();
            })
            .expect("spawn the metrics upkeep thread");
        // Another recorder already installed (a process embedding a node
        // that set its own): the handles record into that one, and our
        // /metrics shows nothing. Say so.
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed: /metrics will be empty");
        }
        describe(FAMILIES);
        handle
    })
}

/// Give each family its `# HELP` text (after [`install`]).
pub fn describe(families: &[(Kind, &'static str, &'static str)]) {
    for (kind, name, help) in families {
        match kind {
            Kind::Counter => describe_counter!(*name, *help),
            Kind::Gauge => describe_gauge!(*name, *help),
            Kind::Histogram => describe_histogram!(*name, *help),
        }
    }
}

/// The Prometheus text exposition of everything this process recorded.
pub fn render() -> String {
    install().render()
}

/// The consensus layer's and the move coordinator's series.
pub struct RaftMetrics {
    /// Event commands refused by the leader before proposing (stale epoch).
    pub stale_epoch_propose: Counter,
    /// Event commands refused inside `apply` (stale epoch).
    pub stale_epoch_apply: Counter,
    /// Writes answered `not_leader` by this node.
    pub not_leader_answers: Counter,
    /// Leadership gained by a group on this node.
    pub leader_changes: Counter,
    /// Ownership moves started / aborted through this node's edge, and
    /// completed by this node's coordinator.
    pub moves_started: Counter,
    /// Ownership moves aborted through this node's edge.
    pub moves_aborted: Counter,
    /// Ownership moves completed by this node's coordinator.
    pub moves_completed: Counter,
    move_duration_ms_sum: Counter,
    move_pause_ms_sum: Counter,
    move_last_duration: Gauge,
    move_last_pause: Gauge,
    /// Replicas on this node whose timers are stopped (see `sleep`).
    pub groups_sleeping: Gauge,
    /// Replicas on this node unloaded from memory after sleeping (see `sleep::dormant`).
    pub groups_dormant: Gauge,
    /// 1 while free space is below the reserve (`storage::health`).
    pub storage_full: Gauge,
    /// Free bytes of the data directory's filesystem (`storage::health`).
    pub storage_free_bytes: Gauge,
    /// Writes refused `overloaded`: the group had its most pending.
    pub overloaded_group: Counter,
    /// Writes refused `overloaded`: the node had its most pending.
    pub overloaded_node: Counter,
}

/// This process's consensus-layer series (the recorder is installed first).
/// A node forces it at start, so every series shows from zero.
pub static METRICS: LazyLock<RaftMetrics> = LazyLock::new(|| {
    install();
    let moves = |result: &'static str| counter!("seatfence_moves_total", "result" => result);
    RaftMetrics {
        stale_epoch_propose: counter!("seatfence_stale_epoch_rejections_total", "layer" => "propose"),
        stale_epoch_apply: counter!("seatfence_stale_epoch_rejections_total", "layer" => "apply"),
        not_leader_answers: counter!("seatfence_not_leader_redirects_total", "side" => "node"),
        leader_changes: counter!("seatfence_leader_changes_total"),
        moves_started: moves("started"),
        moves_aborted: moves("aborted"),
        moves_completed: moves("completed"),
        move_duration_ms_sum: counter!("seatfence_move_duration_ms_sum", "phase" => "total"),
        move_pause_ms_sum: counter!("seatfence_move_duration_ms_sum", "phase" => "pause"),
        move_last_duration: gauge!("seatfence_move_last_duration_seconds"),
        move_last_pause: gauge!("seatfence_move_last_pause_seconds"),
        groups_sleeping: gauge!("seatfence_groups_sleeping"),
        groups_dormant: gauge!("seatfence_groups_dormant"),
        storage_full: gauge!("seatfence_storage_full"),
        storage_free_bytes: gauge!("seatfence_storage_free_bytes"),
        overloaded_group: counter!("seatfence_writes_overloaded_total", "scope" => "group"),
        overloaded_node: counter!("seatfence_writes_overloaded_total", "scope" => "node"),
    }
});

impl RaftMetrics {
    /// Add one to `counter`.
    pub fn inc(counter: &Counter) {
        counter.increment(1);
    }

    /// The cluster's node states (every state named, zero included), its
    /// under-replicated groups and running repairs.
    pub fn node_lifecycle(&self, states: &[(&'static str, usize)], under: usize, repairs: usize) {
        for (state, n) in states {
            gauge!("seatfence_nodes", "state" => *state).set(*n as f64);
        }
        gauge!("seatfence_groups_under_replicated").set(under as f64);
        gauge!("seatfence_repairs_running").set(repairs as f64);
    }

    /// Count a leadership gained by `group` on this node.
    pub fn leader_gained(&self, group: u64) {
        self.leader_changes.increment(1);
        counter!("seatfence_group_leader_changes_total", "group" => group.to_string()).increment(1);
    }

    /// Count a Raft message refused for `reason` (see `network::service`).
    pub fn raft_refused(&self, reason: &'static str) {
        counter!("seatfence_raft_refused_total", "reason" => reason).increment(1);
    }

    /// Count a move this node's coordinator completed: its duration and its
    /// write pause, in ms.
    pub fn move_completed(&self, duration_ms: u64, pause_ms: u64) {
        self.moves_completed.increment(1);
        self.move_duration_ms_sum.increment(duration_ms);
        self.move_pause_ms_sum.increment(pause_ms);
        self.move_last_duration.set(duration_ms as f64 / 1000.0);
        self.move_last_pause.set(pause_ms as f64 / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_rendered_with_its_help() {
        RaftMetrics::inc(&METRICS.stale_epoch_apply);
        METRICS.leader_gained(7);
        let text = render();
        assert!(
            text.contains("seatfence_stale_epoch_rejections_total{layer=\"apply\"} 1"),
            "{text}"
        );
        assert!(text.contains("seatfence_stale_epoch_rejections_total{layer=\"propose\"} 0"));
        assert!(text.contains("seatfence_group_leader_changes_total{group=\"7\"} 1"));
        assert!(text.contains("# HELP seatfence_moves_total Ownership moves"));
        assert!(text.contains("# TYPE seatfence_move_last_pause_seconds gauge"));
    }
}
