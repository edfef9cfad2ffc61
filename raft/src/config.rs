//! [`RaftTuning`]: the `[raft]` section of a node's config (timing and
//! storage knobs), and the openraft configuration it makes.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::storage::FlushMode;

/// Raft timing and storage knobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftTuning {
    /// Leader heartbeat interval (ms), also the node-level liveness ping interval.
    pub heartbeat_ms: u64,
    /// Shortest election timeout (ms); must exceed `heartbeat_ms`.
    pub election_timeout_min_ms: u64,
    /// Longest election timeout (ms); must exceed `election_timeout_min_ms`.
    pub election_timeout_max_ms: u64,
    /// Build a snapshot after this many applied entries.
    pub snapshot_every: u64,
    /// Entries kept in the log behind a snapshot (lets a lagging follower
    /// catch up without a snapshot).
    pub logs_to_keep: u64,
    /// How log appends reach the disk (see [`FlushMode`]).
    pub flush: FlushMode,
    /// A group nobody has used for this long sleeps (no ticks, heartbeats
    /// or elections) until used again; 0: groups never sleep.
    pub sleep_after_ms: u64,
    /// A follower asleep for this long is unloaded from memory (its
    /// storage stays; reopened when a message, a use or its leader's
    /// failure needs it); 0: never. Only with sleeping on.
    pub unload_after_ms: u64,
    /// Free space (MiB) the data directory's filesystem keeps: below it the
    /// node takes no new writes or entries (`storage_full`) until space is
    /// back above it plus a quarter. 0: never refuse.
    pub min_free_mb: u64,
    /// sled's page cache (MiB): it fills up to this as data is written
    /// and read, then stays there.
    pub cache_mb: u64,
    /// Most writes (commands) this node's event-group leaders hold at once,
    /// admitted and not yet answered; beyond it a write is refused at once,
    /// `overloaded` (429 at the edge), so what is accepted is answered in
    /// time instead of queueing without bound. 0: no bound.
    pub max_pending_writes: usize,
    /// The same bound for one group, so one hot event cannot take the
    /// whole node's share. 0: no bound.
    pub max_pending_writes_per_group: usize,
    /// Fault in every page of each large allocation (64 KiB or more) when
    /// it is made, so RSS is what is allocated from the start rather than
    /// rising toward it as reserved queues are first written
    /// (`seatfence_raft::heap`). Off by default; the soak turns it on.
    pub pretouch: bool,
}

impl Default for RaftTuning {
    fn default() -> Self {
        RaftTuning {
            heartbeat_ms: 100,
            election_timeout_min_ms: 400,
            election_timeout_max_ms: 800,
            snapshot_every: 20_000,
            logs_to_keep: 5_000,
            flush: FlushMode::Shared,
            sleep_after_ms: 2_000,
            unload_after_ms: 60_000,
            min_free_mb: 128,
            cache_mb: crate::storage::DEFAULT_CACHE_MB,
            max_pending_writes: 65_536,
            max_pending_writes_per_group: 32_768,
            pretouch: false,
        }
    }
}

impl RaftTuning {
    /// Why these timings cannot run a group, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        if !(0 < self.heartbeat_ms
            && self.heartbeat_ms < self.election_timeout_min_ms
            && self.election_timeout_min_ms < self.election_timeout_max_ms)
        {
            return Err(format!(
                "raft timing: need 0 < heartbeat_ms ({}) < election_timeout_min_ms ({}) < election_timeout_max_ms ({})",
                self.heartbeat_ms, self.election_timeout_min_ms, self.election_timeout_max_ms
            ));
        }
        if self.sleep_after_ms != 0 && self.sleep_after_ms < self.election_timeout_max_ms {
            return Err(format!(
                "raft.sleep_after_ms ({}) must be 0 (never sleep) or at least election_timeout_max_ms ({})",
                self.sleep_after_ms, self.election_timeout_max_ms
            ));
        }
        if self.snapshot_every == 0 {
            return Err("raft.snapshot_every must be at least 1".into());
        }
        Ok(())
    }

    /// The node's write admission bounds (see `batcher::WriteLimits`).
    pub fn write_limits(&self) -> std::sync::Arc<crate::batcher::WriteLimits> {
        crate::batcher::WriteLimits::new(self.max_pending_writes, self.max_pending_writes_per_group)
    }

    /// Node-level liveness timings (see `sleep::liveness`).
    pub fn liveness(&self) -> crate::sleep::liveness::Timing {
        use std::time::Duration;
        crate::sleep::liveness::Timing {
            ping_every: Duration::from_millis(self.heartbeat_ms),
            election_timeout_min: Duration::from_millis(self.election_timeout_min_ms),
            election_timeout_max: Duration::from_millis(self.election_timeout_max_ms),
        }
    }

    /// The openraft configuration of every group on the node.
    pub fn openraft_config(&self) -> Arc<openraft::Config> {
        let c = openraft::Config {
            cluster_name: "seatfence".into(),
            heartbeat_interval: self.heartbeat_ms,
            // A node back from a partition asks before it campaigns, so it
            // cannot depose a healthy leader by inflating its term.
            enable_pre_vote: Some(true),
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            max_in_snapshot_log_to_keep: self.logs_to_keep,
            install_snapshot_timeout: 10_000,
            // openraft keeps a latency ring of this many entries per log
            // stage per group (1,024 by default: ~140 KiB a group, for
            // statistics we never read).
            log_stage_capacity: Some(1),
            // A replica whose log went back is one that came back on an
            // empty data dir under `--rejoin-empty` (a fresh one is not
            // admitted without it): its votes are refused until its group
            // took it back (`joining`), and a learner never votes. Without
            // this, the first append its leader sent to it after the wipe
            // panicked the leader (`follower log reversion is not
            // allowed`), and every next leader of the group the same: the
            // drill's `wipe-disk` of a directory learner stopped the
            // directory for good.
            allow_log_reversion: Some(true),
            ..Default::default()
        };
        Arc::new(
            c.validate()
                .expect("timings are checked before a node starts"),
        )
    }
}
