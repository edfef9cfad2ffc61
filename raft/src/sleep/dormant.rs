//! Dormant replicas: a follower that has slept for `raft.unload_after_ms`
//! is shut down and dropped from memory; its log, vote and state stay in
//! storage, and it is opened again from there when something needs it.
//!
//! A sleeping replica costs no CPU but still holds its openraft runtime:
//! ~1.5 MiB of command and response queues per group (openraft reserves them
//! at `Raft::new`, and their pages become resident as a group works), plus
//! its state. A node hosting thousands of events would hold gigabytes for
//! groups nobody uses; a dormant replica holds a few hundred bytes (this
//! record).
//!
//! Only followers go dormant: the leader of a sleeping group stays in
//! memory, so everything that reads leaders (writes, leader counts, the
//! balancer, drains, hold expiry) sees what it saw before. A dormant
//! replica comes back (`Registry::hosted`) on:
//! - any Raft message for it (an append, a vote or pre-vote, a snapshot):
//!   opened asleep, then the message is handled as for any sleeping
//!   replica (entries, a vote or a higher term wake it);
//! - its leader's node going down (node liveness opens it, then wakes it
//!   as any sleeping follower of a dead leader);
//! - a local use (a replica read, a proposal that must be told who
//!   leads).
//!
//! A `Quiesce` from the leader it slept under, in that term, at that last
//! index is granted without opening it: nothing changed since it agreed.
//!
//! Safety does not change: a dormant replica is what a replica of a
//! stopped node is, and reopening is what a restart does (votes, log and
//! applied state come back from storage, flushed before they were
//! acknowledged). Until it hears its leader again, a reopened replica
//! takes its leader from this record (`Activity`'s leader hint), so node
//! liveness and pre-vote refusals treat it as the sleeping follower it was.

use seatfence_proto::v1::GroupStatus;

use super::liveness::PeersUp;
use crate::registry::GroupHandle;

/// What is kept of a dormant replica.
#[derive(Debug, Clone)]
pub struct Dormant {
    /// The leader it slept under.
    pub leader: u64,
    /// The term it slept in.
    pub term: u64,
    /// Its last log index when unloaded (0: empty log), all of it applied.
    pub last_log_index: u64,
    /// Its `Status` entry when it was unloaded (`dormant` set).
    pub status: GroupStatus,
}

impl Dormant {
    /// Whether a `Quiesce` asks for what this replica already agreed to.
    pub fn agrees(&self, term: u64, leader: u64, last_log_index: u64) -> bool {
        self.term == term && self.leader == leader && self.last_log_index == last_log_index
    }
}

/// Whether `g` may be unloaded now, and its record: a follower (not of the
/// directory) asleep for at least `after_ms`, holding and having applied
/// the whole log, whose leader is another node that answers pings.
pub fn plan(g: &GroupHandle, peers: &PeersUp, me: u64, after_ms: u64) -> Option<Dormant> {
    use openraft::async_runtime::watch::WatchReceiver;
    if after_ms == 0 || g.id.is_directory() || !g.is_asleep() || g.asleep_for_ms() < after_ms {
        return None;
    }
    let (state, leader, term, last, applied) = {
        let rx = g.raft.metrics();
        let m = rx.borrow_watched();
        (
            m.state,
            m.current_leader.or(g.leader_hint()),
            m.current_term,
            m.last_log_index,
            m.last_applied.as_ref().map(|l| l.index),
        )
    };
    let leader = leader.filter(|l| *l != me)?;
    if state != openraft::ServerState::Follower || last != applied || !peers.is_up(leader) {
        return None;
    }
    let mut status = g.status(true);
    status.dormant = true;
    status.leader = Some(leader);
    Some(Dormant {
        leader,
        term,
        last_log_index: last.unwrap_or(0),
        status,
    })
}
