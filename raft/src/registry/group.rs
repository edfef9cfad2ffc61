//! [`GroupHandle`]: one hosted replica, and the few ways other crates may
//! reach it.

use std::sync::Arc;

use seatfence_core::GroupId;

use crate::batcher::Batcher;
use crate::joining::Joining;
use crate::sleep::Activity;
use crate::storage::{GroupState, StateMachineStore};
use crate::types::Raft;

/// One hosted replica.
///
/// Its Raft instance and state machine are the crate's own: other crates
/// read the state through [`GroupHandle::read`], watch applies through
/// [`GroupHandle::subscribe_applied`], and change a group only through a
/// command (`propose`), a membership operation (`membership::apply`) or
/// the one leadership hand-over ([`GroupHandle::hand_over`]).
pub struct GroupHandle {
    /// The group this replica belongs to.
    pub id: GroupId,
    pub(crate) raft: Raft,
    pub(crate) sm: StateMachineStore,
    /// Packs concurrent proposals into one entry.
    pub batcher: Batcher,
    /// Whether it sleeps (see `sleep`).
    pub activity: Activity,
    /// Whether it may not campaign yet (see `joining`).
    pub joining: Arc<Joining>,
}

impl GroupHandle {
    /// Whether this replica leads the group *and* is one of its voters. A
    /// leader removed by a membership change (an ownership move) can go on
    /// believing it leads, at its old term, because the new voters never
    /// write to it again; it can never commit anything, so it must not take
    /// writes or run leader-side work.
    ///
    /// Until the configuration that removed it is committed, a leader still
    /// leads (it replicates to the new voters and commits with their
    /// majority), so writes keep flowing through a membership change.
    pub fn leads(&self) -> bool {
        use openraft::async_runtime::watch::WatchReceiver;
        if !self.raft.is_leader() {
            return false;
        }
        // A short borrow (it holds a lock RaftCore also takes), no clone:
        // this runs on every write an edge sends in-process.
        let rx = self.raft.metrics();
        let m = rx.borrow_watched();
        let membership = &m.membership_config;
        if membership.membership().voter_ids().any(|v| v == m.id) {
            return true;
        }
        // Removed: lead only while the removal is not committed yet.
        let removal = membership.log_id().as_ref().map(|l| l.index);
        let committed = m.cluster_committed.as_ref().map(|l| l.index);
        removal > committed
    }

    /// The current Raft term as this replica sees it.
    pub fn term(&self) -> u64 {
        use openraft::async_runtime::watch::WatchReceiver;
        self.raft.metrics().borrow_watched().current_term
    }

    /// The replica's openraft instance, for this crate's own integration
    /// tests (`raft/tests/`), which play a leader's appends against it. No
    /// other crate calls it (`tests/t01_layers.rs` checks).
    #[doc(hidden)]
    pub fn raw_raft(&self) -> &Raft {
        &self.raft
    }

    /// Read this replica's applied state (a short read lock; never held
    /// across an `.await`).
    pub fn read<T>(&self, f: impl FnOnce(&GroupState) -> T) -> T {
        self.sm.read(f)
    }

    /// Watch this replica's applied index.
    pub fn subscribe_applied(&self) -> tokio::sync::watch::Receiver<u64> {
        self.sm.subscribe_applied()
    }

    /// Hand this group's leadership to its voter `to`: the one place a
    /// leader transfer is triggered (`Proposer::transfer_leader`, which
    /// `regions::transfer` reaches through the cluster client, and the
    /// hand-over of a leader a membership change removed, which still
    /// leads in Raft's eyes but no longer [`leads`](GroupHandle::leads)).
    /// Only a Raft leader may, and only to a voter of the group.
    pub async fn hand_over(&self, to: u64) -> Result<(), HandOverError> {
        if !self.raft.is_leader() {
            return Err(HandOverError::NotLeading);
        }
        if !self.raft.voter_ids().any(|v| v == to) {
            return Err(HandOverError::NotAVoter);
        }
        self.wake_for_use().await;
        self.raft
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| HandOverError::Failed(e.to_string()))
    }
}

/// Why [`GroupHandle::hand_over`] did not start a transfer.
#[derive(Debug, thiserror::Error)]
pub enum HandOverError {
    /// This replica is not the group's Raft leader.
    #[error("this replica is not the group's Raft leader")]
    NotLeading,
    /// The target node is not a voter of the group.
    #[error("the target is not a voter of the group")]
    NotAVoter,
    /// The Raft instance has stopped (a fatal error): it took no transfer.
    #[error("{0}")]
    Failed(String),
}
