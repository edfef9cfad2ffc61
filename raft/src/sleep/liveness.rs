//! Node-level liveness: one ping per pair of nodes every heartbeat
//! interval stands in for the heartbeats sleeping groups do not send.
//!
//! - A peer silent for longer than the election timeout is down: every
//!   group sleeping here whose leader is on it wakes so it can elect. To
//!   avoid split votes only the lowest-id voter still up wakes at once;
//!   the others wake if the group is still leaderless after twice the
//!   election timeout (a vote request wakes them sooner).
//! - A peer that comes back, or answers with a new incarnation (it
//!   restarted), wakes every sleeping group this node leads with it as a
//!   voter: the leader heartbeats, the peer learns its leader and catches
//!   up, and nobody campaigns.
//! - While a sleeping follower's leader answers pings, the follower refuses
//!   pre-votes without waking ([`PeersUp`] stands in for the leader lease
//!   a sleeping group does not renew), so a candidate cannot depose a
//!   leader that is alive and reachable.
//! - A replica asleep since it opened whose leader never spoke (or is
//!   down) wakes after three election timeouts: after a full-cluster
//!   restart nobody else would.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use openraft::Instant as _;

// The node's timer clock: a drill that runs this node's timers fast or slow
// runs its liveness with them, as it does openraft's election timers.
use crate::timer::TimerInstant as Instant;

use openraft::async_runtime::watch::WatchReceiver;
use tokio::sync::watch;

use crate::registry::{GroupHandle, Registry};

/// What this node knows of one peer.
#[derive(Debug)]
struct Peer {
    last_ok: Instant,
    /// When it was declared down, if it is.
    down_since: Option<Instant>,
    incarnation: Option<u64>,
}

/// Which peers answered a ping lately: the node-level lease.
#[derive(Default)]
pub struct PeersUp {
    last_ok: RwLock<HashMap<u64, Instant>>,
    /// How recent an answer must be (the election timeout's upper bound).
    within: RwLock<Duration>,
}

impl PeersUp {
    /// Whether `peer` answered a ping within the election timeout.
    pub fn is_up(&self, peer: u64) -> bool {
        let within = *self.within.read().expect("peers lock");
        self.last_ok
            .read()
            .expect("peers lock")
            .get(&peer)
            .is_some_and(|t| t.elapsed() <= within)
    }

    fn answered(&self, peer: u64, at: Instant) {
        self.last_ok.write().expect("peers lock").insert(peer, at);
    }
}

/// This process's incarnation, sent in every ping reply.
pub fn incarnation() -> u64 {
    static ID: std::sync::LazyLock<u64> = std::sync::LazyLock::new(rand::random);
    *ID
}

/// Timings, from the `[raft]` section.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Time between rounds of pings to every other node (`heartbeat_ms`).
    pub ping_every: Duration,
    /// How long a ping may wait for its answer.
    pub election_timeout_min: Duration,
    /// A peer that answered no ping for longer is down ([`PeersUp::is_up`] says no).
    pub election_timeout_max: Duration,
}

/// Runs on every node while sleeping is on.
pub async fn run(registry: Arc<Registry>, timing: Timing, mut stop: watch::Receiver<bool>) {
    let mut peers: HashMap<u64, Peer> = HashMap::new();
    let started = Instant::now();
    let mut round: u64 = 0;
    *registry.peers.within.write().expect("peers lock") = timing.election_timeout_max;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = crate::timer::sleep(timing.ping_every) => {}
        }
        let me = registry.node_id();
        let nodes: Vec<(u64, String)> = registry
            .directory_nodes()
            .into_iter()
            .filter(|(id, _)| *id != me)
            .collect();
        let pings = nodes.iter().map(|(id, addr)| {
            let pool = registry.pool();
            async move {
                let call = pool.ping(*id, addr, me);
                let r = tokio::time::timeout(timing.election_timeout_min, call).await;
                (*id, r.ok().and_then(Result::ok))
            }
        });
        let now = Instant::now();
        for (id, answer) in futures::future::join_all(pings).await {
            let p = peers.entry(id).or_insert(Peer {
                last_ok: now,
                down_since: None,
                incarnation: None,
            });
            match answer {
                Some(inc) => {
                    let restarted = p.incarnation.is_some_and(|i| i != inc);
                    if restarted || p.down_since.is_some() {
                        tracing::info!(
                            peer = id,
                            restarted,
                            "peer back: waking the groups led here"
                        );
                        wake_led_with(&registry, id);
                    }
                    registry.peers.answered(id, now);
                    *p = Peer {
                        last_ok: now,
                        down_since: None,
                        incarnation: Some(inc),
                    };
                }
                None if p.down_since.is_none()
                    && now.saturating_duration_since(p.last_ok) > timing.election_timeout_max =>
                {
                    tracing::info!(peer = id, "peer down: waking the groups it led");
                    p.down_since = Some(now);
                }
                None => {}
            }
        }
        let down: HashMap<u64, Instant> = peers
            .iter()
            .filter_map(|(id, p)| p.down_since.map(|t| (*id, t)))
            .collect();
        // Sleeping replicas are looked at when a peer is down, and once a
        // second for the never-spoke case: with 10,000 groups a scan every
        // ping cost ~5% of a core.
        round += 1;
        if !down.is_empty() || round.is_multiple_of(10) {
            // Dormant followers of a leader that is down come back first,
            // then wake below as any sleeping follower would.
            registry.reopen_dormant_led_by(&down).await;
            // A leader put to sleep never wakes for this: only followers
            // are looked at (their metrics read).
            let followers = registry.select(|g| g.nap().is_some_and(|n| !n.as_leader));
            for g in followers {
                if should_wake(&g, me, &down, now, started, timing) {
                    g.wake();
                }
            }
        }
    }
}

/// Wake the sleeping groups this node leads that have `peer` as a voter.
fn wake_led_with(registry: &Registry, peer: u64) {
    for g in registry.select(|g| g.is_asleep()) {
        if g.raft.is_leader() && g.raft.voter_ids().any(|v| v == peer) {
            g.wake();
        }
    }
}

/// Whether a sleeping follower `g` should wake to elect: its leader is on
/// a node that is `down` (at once if this node is the lowest-id voter
/// still up, otherwise after two election timeouts), or no leader spoke
/// for three election timeouts since it fell asleep (and this node has
/// run that long).
fn should_wake(
    g: &GroupHandle,
    me: u64,
    down: &HashMap<u64, Instant>,
    now: Instant,
    started: Instant,
    timing: Timing,
) -> bool {
    let state = g.raft.metrics().borrow_watched().state;
    let leader = g.leader_or_hint();
    if state == openraft::ServerState::Leader {
        return false;
    }
    let long = timing.election_timeout_max * 3;
    match leader.filter(|l| *l != me) {
        Some(l) => match down.get(&l) {
            Some(since) => {
                let voters: BTreeSet<u64> = g.raft.voter_ids().collect();
                let first_up = voters.iter().find(|v| !down.contains_key(v));
                first_up == Some(&me)
                    || now.saturating_duration_since(*since) > timing.election_timeout_max * 2
            }
            None => false,
        },
        None => {
            g.asleep_for_ms() > long.as_millis() as u64
                && now.saturating_duration_since(started) > long
        }
    }
}
