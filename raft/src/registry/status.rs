//! What `Status` reports of a replica held in memory ([`GroupHandle::status`]),
//! and the digest that tells equal replicas apart from diverged ones.

use openraft::async_runtime::watch::WatchReceiver;
use openraft::ServerState;
use seatfence_proto::v1::GroupStatus;

use super::GroupHandle;

impl GroupHandle {
    /// This replica's status (see [`group_status`]).
    pub fn status(&self, digest: bool) -> GroupStatus {
        group_status(self, digest)
    }
}

/// What `Status` reports of one replica held in memory; with `digest`,
/// its `state_digest`, hashed from a copy taken under the lock (the
/// records' maps are persistent: the copy shares them) after the lock is
/// released, so a status read never holds applies up for a scan.
pub(crate) fn group_status(g: &GroupHandle, digest: bool) -> GroupStatus {
    let m = g.raft.metrics().borrow_watched().clone();
    let (copy, keys, holds, conflicts) = g.sm.read(|s| {
        (
            digest.then(|| s.state.clone()),
            s.state.kv().len() as u64,
            s.holds_applied,
            s.conflicts_applied,
        )
    });
    let digest = copy.map(|state| state_digest(&state)).unwrap_or(0);
    let membership = m.membership_config.membership();
    GroupStatus {
        group_id: g.id.0,
        role: match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        }
        .to_string(),
        term: m.current_term,
        leader: m.current_leader,
        last_log_index: m.last_log_index.unwrap_or(0),
        applied_index: m.last_applied.map(|l| l.index).unwrap_or(0),
        committed_index: m.local_committed.map(|l| l.index).unwrap_or(0),
        snapshot_index: m.snapshot.map(|l| l.index).unwrap_or(0),
        purged_index: m.purged.map(|l| l.index).unwrap_or(0),
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        state_digest: digest,
        key_count: keys,
        asleep: g.is_asleep(),
        dormant: false,
        holds_applied: holds,
        conflicts_applied: conflicts,
    }
}

/// FNV-1a over every stored record: equal digests mean equal replicas.
pub fn state_digest(state: &seatfence_core::State) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (k, v) in state.records() {
        for b in k.iter().chain(&[0xff]).chain(v.iter()).chain(&[0xfe]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
