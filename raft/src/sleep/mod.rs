//! Sleeping groups: a group nobody uses stops its timers, so a node can
//! host thousands of idle events for nothing.
//!
//! Openraft's runtime switches turn a replica's tick (and with it
//! heartbeats and election timeouts) off and on; everything else in a
//! replica waits on messages. A group goes to sleep only by its leader's
//! decision ([`controller`]): idle for `sleep_after_ms`, every voter holds
//! the whole log, no learner or joint configuration (no move or membership
//! change running). The leader asks each follower to sleep (`Quiesce`:
//! granted only by a follower of that leader in that term holding that
//! last index) and stops its own timers only once every follower agreed.
//!
//! It wakes on:
//! - any local use of the leader ([`GroupHandle::wake_for_use`]:
//!   proposals, linearizable reads, membership changes, leader
//!   transfers); it renews its lease with one heartbeat round before the
//!   caller proposes;
//! - an incoming append carrying entries or a higher vote (unless refused),
//!   a vote, a transfer or a snapshot (after handling it, so the
//!   follower's election timer starts from that message); not a pre-vote,
//!   which restarts no timer (woken by one, the replica would campaign at
//!   once against the candidate asking);
//! - node-level liveness ([`liveness`]): the leader's node stopped
//!   answering pings, or this replica woke from a restart and no leader
//!   spoke up; a leader whose follower's node restarted wakes to catch it
//!   up.
//!
//! A replica opened at start sleeps until one of those happens (unless it
//! restored its leadership), so a node coming back causes no elections in
//! groups whose leader is alive.
//!
//! Sleeping changes no safety argument: votes, log matching and commit by
//! a quorum never depend on timers (see ARCHITECTURE.md, "Sleeping
//! groups").

pub mod controller;
pub mod dormant;
pub mod liveness;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use openraft::async_runtime::watch::WatchReceiver;
use openraft::raft::VoteResponse;
use openraft::{ReadPolicy, ServerState};

use crate::metrics::METRICS;
use crate::registry::GroupHandle;
use crate::types::TypeConfig;

static START: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Milliseconds on this process's monotonic clock.
pub(crate) fn now_ms() -> u64 {
    START.elapsed().as_millis() as u64
}

/// Longest a waking leader waits for the heartbeat round that renews its
/// lease; the caller's proposal reports whatever went wrong.
const RENEW_LEASE_WITHIN: Duration = Duration::from_secs(2);

/// Whether a replica sleeps, and when it was last used.
pub struct Activity {
    last_active_ms: AtomicU64,
    /// When it fell asleep (ms), 0 while awake.
    asleep_since_ms: AtomicU64,
    asleep: AtomicBool,
    /// False from a wake until a heartbeat round has confirmed (as leader)
    /// the lease that lapsed while asleep.
    lease_confirmed: AtomicBool,
    /// The leader a dormant replica slept under (0: none), for a replica
    /// reopened from dormancy until openraft knows its leader again.
    leader_hint: AtomicU64,
    /// Changes at every fall asleep and every wake: a scan that reads a
    /// sleeping replica may keep what it read while this stays the same
    /// (see [`GroupHandle::nap`]).
    naps: AtomicU64,
    /// Whether the replica fell asleep as its group's leader (false while
    /// awake).
    napping_leader: AtomicBool,
    /// Held while the runtime switches change, so the flag and the
    /// switches never disagree.
    transition: Mutex<()>,
}

/// One uninterrupted sleep of a replica, as [`GroupHandle::nap`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nap {
    /// Which sleep this is: the same number only within one sleep.
    pub seq: u64,
    /// Whether it fell asleep leading its group (the controller put it to
    /// sleep, [`controller`]): it still leads, unless a message it handled
    /// has deposed it and the wake that follows has not run yet.
    pub as_leader: bool,
}

impl Activity {
    /// Awake and just used (its last use is now).
    pub fn new() -> Activity {
        Activity {
            last_active_ms: AtomicU64::new(now_ms()),
            asleep_since_ms: AtomicU64::new(0),
            asleep: AtomicBool::new(false),
            lease_confirmed: AtomicBool::new(true),
            leader_hint: AtomicU64::new(0),
            naps: AtomicU64::new(0),
            napping_leader: AtomicBool::new(false),
            transition: Mutex::new(()),
        }
    }
}

impl Default for Activity {
    fn default() -> Self {
        Activity::new()
    }
}

impl GroupHandle {
    /// Whether this replica sleeps now (timers stopped).
    pub fn is_asleep(&self) -> bool {
        self.activity.asleep.load(SeqCst)
    }

    /// The sleep this replica is in, if it sleeps. While the same nap
    /// lasts, its applied state and its role stay as they were when it fell
    /// asleep: a proposal or a read wakes a leader first, a message that
    /// changes a follower's log or vote wakes it after being handled (so a
    /// scan may see such a change at most one look late, never miss it).
    /// Scans over thousands of sleeping groups remember what they read per
    /// nap instead of reading every group's state again.
    pub fn nap(&self) -> Option<Nap> {
        let seq = self.activity.naps.load(SeqCst);
        let as_leader = self.activity.napping_leader.load(SeqCst);
        (self.activity.asleep.load(SeqCst) && self.activity.naps.load(SeqCst) == seq)
            .then_some(Nap { seq, as_leader })
    }

    /// How long this replica has slept (0 while awake).
    pub fn asleep_for_ms(&self) -> u64 {
        match self.activity.asleep_since_ms.load(SeqCst) {
            0 => 0,
            since => now_ms().saturating_sub(since),
        }
    }

    /// The leader this replica slept under before it went dormant, if it
    /// was reopened from dormancy (see [`dormant`]).
    pub fn leader_hint(&self) -> Option<u64> {
        match self.activity.leader_hint.load(SeqCst) {
            0 => None,
            l => Some(l),
        }
    }

    pub(crate) fn set_leader_hint(&self, leader: u64) {
        self.activity.leader_hint.store(leader, SeqCst);
    }

    /// The leader as openraft knows it, else the hint.
    pub(crate) fn leader_or_hint(&self) -> Option<u64> {
        let known = self.raft.metrics().borrow_watched().current_leader;
        known.or(self.leader_hint())
    }

    /// Stop counting this replica as sleeping without touching its timers:
    /// it is about to be shut down (unloaded or retired).
    pub(crate) fn leave_sleep_count(&self) {
        let _t = self.activity.transition.lock().expect("transition lock");
        if self.activity.asleep.swap(false, SeqCst) {
            self.activity.asleep_since_ms.store(0, SeqCst);
            METRICS.groups_sleeping.decrement(1.0);
        }
    }

    /// The last local use, on [`now_ms`]'s clock.
    pub fn last_active_ms(&self) -> u64 {
        self.activity.last_active_ms.load(SeqCst)
    }

    /// Note a local use (it keeps the group from falling asleep).
    pub fn touch(&self) {
        self.activity.last_active_ms.store(now_ms(), SeqCst);
    }

    /// Before a proposal, linearizable read, membership change or leader
    /// transfer: note the use and, on the leader, wake the replica. A
    /// leader that slept has let its lease lapse (it sent no heartbeats)
    /// and openraft refuses writes without one: until one heartbeat round
    /// has renewed it, every use runs one (or finds that it no longer
    /// leads, which the caller's proposal then reports). Any other replica
    /// stays asleep: it cannot serve the use, and waking it would make it
    /// campaign against a leader it has not heard from for a while.
    pub async fn wake_for_use(&self) {
        self.touch();
        if !self.raft.is_leader() {
            return;
        }
        self.wake();
        if !self.activity.lease_confirmed.load(SeqCst) {
            let renew = self.raft.ensure_linearizable(ReadPolicy::ReadIndex);
            if let Ok(Ok(_)) = tokio::time::timeout(RENEW_LEASE_WITHIN, renew).await {
                self.activity.lease_confirmed.store(true, SeqCst);
            }
        }
    }

    /// Restart the replica's timers; whether it was asleep.
    pub fn wake(&self) -> bool {
        // The load pairs with `doze_leader`'s store (both SeqCst): a use
        // that touched and then saw "awake" is seen by the doze's re-check.
        if !self.activity.asleep.load(SeqCst) {
            return false;
        }
        let _t = self.activity.transition.lock().expect("transition lock");
        if !self.activity.asleep.load(SeqCst) {
            return false;
        }
        let rc = self.raft.runtime_config();
        rc.elect(!self.joining.is_on());
        rc.heartbeat(true);
        rc.tick(true);
        self.activity.asleep_since_ms.store(0, SeqCst);
        self.activity.lease_confirmed.store(false, SeqCst);
        self.activity.napping_leader.store(false, SeqCst);
        self.activity.naps.fetch_add(1, SeqCst);
        self.activity.asleep.store(false, SeqCst);
        METRICS.groups_sleeping.decrement(1.0);
        true
    }

    /// The replica's joining ended: an awake replica may campaign from now
    /// on (a sleeping one will when it wakes).
    pub(crate) fn allow_elections(&self) {
        let _t = self.activity.transition.lock().expect("transition lock");
        if !self.activity.asleep.load(SeqCst) {
            self.raft.runtime_config().elect(true);
        }
    }

    /// Stop the timers (elections first, so a follower never campaigns
    /// between the two); `as_leader`: the controller put the group's
    /// leader to sleep. The caller holds the transition lock.
    fn stop_timers(&self, as_leader: bool) {
        let rc = self.raft.runtime_config();
        rc.elect(false);
        rc.heartbeat(false);
        rc.tick(false);
        self.activity.napping_leader.store(as_leader, SeqCst);
        self.activity.naps.fetch_add(1, SeqCst);
        self.activity.asleep_since_ms.store(now_ms().max(1), SeqCst);
        METRICS.groups_sleeping.increment(1.0);
    }

    /// A replica just opened (at start, or placed here): sleep until its
    /// leader speaks, a vote arrives, or liveness wakes it.
    pub(crate) fn doze_at_open(&self) {
        let _t = self.activity.transition.lock().expect("transition lock");
        if !self.activity.asleep.swap(true, SeqCst) {
            self.stop_timers(false);
        }
    }

    /// A follower asked by its leader: sleep if it follows `leader` in
    /// `term` and holds and has applied the log up to `last_log_index`,
    /// which the leader has seen every voter match (so every replica of a
    /// sleeping group holds the same state). Whether it sleeps.
    pub fn quiesce_follower(&self, term: u64, leader: u64, last_log_index: u64) -> bool {
        let _t = self.activity.transition.lock().expect("transition lock");
        let follows = {
            let m = self.raft.metrics();
            let m = m.borrow_watched();
            m.state == ServerState::Follower
                && m.current_term == term
                && m.current_leader == Some(leader)
                && m.last_log_index == Some(last_log_index)
                && m.last_applied.as_ref().map(|l| l.index) == Some(last_log_index)
        };
        if !follows {
            return false;
        }
        if !self.activity.asleep.swap(true, SeqCst) {
            self.stop_timers(false);
        }
        true
    }

    /// A pre-vote refusal, if this replica sleeps and its leader's node
    /// answers pings: a sleeping group renews no lease, so node liveness
    /// stands in for it. `None`: let openraft decide (and wake).
    pub fn refuse_pre_vote(&self, peers: &liveness::PeersUp) -> Option<VoteResponse<TypeConfig>> {
        if !self.is_asleep() {
            return None;
        }
        let leader = self.leader_or_hint()?;
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        if leader == m.id {
            return None;
        }
        peers
            .is_up(leader)
            .then(|| VoteResponse::new(m.vote, m.last_applied, false))
    }

    /// The leader, once every follower sleeps: stop its own timers unless
    /// the group was used since `active_at` (the use it decided on).
    /// Whether it sleeps.
    pub(crate) fn doze_leader(&self, active_at: u64) -> bool {
        let _t = self.activity.transition.lock().expect("transition lock");
        if self.activity.asleep.swap(true, SeqCst) {
            return true;
        }
        // Stored before this load (SeqCst): a use after this point sees
        // "asleep" and wakes the group; one before it is seen here.
        if self.activity.last_active_ms.load(SeqCst) != active_at || !self.raft.is_leader() {
            // A scan may have seen it asleep meanwhile: not this nap.
            self.activity.naps.fetch_add(1, SeqCst);
            self.activity.asleep.store(false, SeqCst);
            return false;
        }
        self.stop_timers(true);
        true
    }
}
