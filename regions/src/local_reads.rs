//! [`LocalReads`]: reads where the buyer is. An edge whose region holds a
//! replica of an event's group (this node's own, or a neighbour's in the
//! same region) while its leader is in another region answers
//! availability, event and queue reads from it instead of crossing the
//! world to the leader, within a staleness bound it can
//! prove with its own clock alone:
//!
//! - Every quarter bound, for as long as reads of a group keep coming here
//!   (and [`LINGER`] after the last), the edge asks the leader for its applied index after a read-index
//!   round, noting when it *sent* the question: every write acknowledged
//!   before that instant is at or below that index (a write is
//!   acknowledged after it commits, and the read index covers every
//!   commit before the round began).
//! - A local read asks the replica for its state and applied index `A`,
//!   and takes the newest noted point whose index is at most `A`: the
//!   answer includes every write acknowledged before that point was sent,
//!   so `stale_ms` is the time since then. A replica too far behind, or
//!   no point within the bound (the first read of a quiet group), and the
//!   read goes to the leader as before.
//!
//! Never for decisions: holds, bookings and anything that checks an epoch
//! go to the leader.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seatfence_core::query::{Query, QueryResult};
use seatfence_core::{GroupId, NodeId};
use seatfence_raft::registry::Registry;
use seatfence_raft::{ClusterClient, Read};
use tokio::time::Instant;

/// How long a replica read in the region may take before the edge gives up
/// on it (and asks the leader).
const REPLICA_TIMEOUT: Duration = Duration::from_millis(500);

/// Points kept per group (the newest; older ones only help a replica that
/// lags by more than a few refreshes).
const POINTS_KEPT: usize = 16;

/// A group's freshness points: (when the question was sent, the leader's
/// applied index it answered), oldest first.
#[derive(Default)]
struct Points {
    seen: VecDeque<(Instant, u64)>,
    /// A refresher runs for the group.
    refreshing: bool,
    /// When a read last asked for the group.
    read_at: Option<Instant>,
}

/// A refresher stops once no read asked for its group for this long.
const LINGER: Duration = Duration::from_secs(10);

/// The refreshers' pace bounds (a quarter of the bound, within these).
const REFRESH_MIN: Duration = Duration::from_millis(250);
const REFRESH_MAX: Duration = Duration::from_secs(5);

/// A read answered in the region.
#[derive(Debug, Clone)]
pub struct LocalAnswer {
    /// The replica's answer.
    pub result: QueryResult,
    /// The replica's term.
    pub term: u64,
    /// Every write acknowledged more than this long ago is in `result`.
    pub stale: Duration,
    /// The node whose replica answered.
    pub node: NodeId,
}

/// This edge's local reads (see the module docs).
pub struct LocalReads {
    client: ClusterClient,
    registry: Arc<Registry>,
    points: Mutex<HashMap<GroupId, Points>>,
    served: metrics::Counter,
    fell_back: metrics::Counter,
}

impl LocalReads {
    /// Local reads through `client`, finding replicas in `registry`'s directory.
    pub fn new(client: ClusterClient, registry: Arc<Registry>) -> LocalReads {
        LocalReads {
            client,
            registry,
            points: Mutex::new(HashMap::new()),
            served: metrics::counter!("seatfence_local_reads_total", "served" => "replica"),
            fell_back: metrics::counter!("seatfence_local_reads_total", "served" => "leader"),
        }
    }

    /// Count a read the leader answered after all.
    pub fn note_fallback(&self) {
        self.fell_back.increment(1);
    }

    /// The replica of `group` to read in this node's region: this node's
    /// own (`None` address) or a same-region member's, when the group's
    /// leader is known to be in another region. `None` when this node or a
    /// neighbour leads it (the leader is as near as a replica, and exact),
    /// when its leader is not known yet (the leader answers, and this
    /// client learns where it is), or when no member is in this region.
    fn replica_here(&self, group: GroupId) -> Option<(NodeId, Option<String>)> {
        let me = NodeId(self.registry.node_id());
        if self.client.leads(group) {
            return None;
        }
        let leader = self.client.known_leader(group)?;
        let dir = self.registry.get(GroupId::DIRECTORY)?;
        dir.read(|s| {
            let d = s.state.directory();
            let region = &d.nodes.get(&me)?.region;
            let near = |n: &&seatfence_core::NodeInfo| &n.region == region;
            if d.nodes.values().filter(near).any(|n| n.grpc_addr == leader) {
                return None;
            }
            let members = &d.groups.get(&group)?.members;
            if members.contains(&me) && self.registry.get(group).is_some() {
                return Some((me, None));
            }
            members
                .iter()
                .filter_map(|id| d.nodes.get(id))
                .find(|n| near(n) && d.node_state(n.id).takes_replicas())
                .map(|n| (n.id, Some(n.grpc_addr.clone())))
        })
    }

    /// `q` answered by a replica of `group` in this region within `bound`,
    /// or `None` (no replica here, or it cannot prove the bound): ask the
    /// leader.
    pub async fn read(
        self: &Arc<Self>,
        group: GroupId,
        q: &Query,
        bound: Duration,
    ) -> Option<LocalAnswer> {
        let (node, addr) = self.replica_here(group)?;
        if !self.fresh_within(group, bound) {
            return None;
        }
        let (result, term, applied) = self
            .client
            .query_replica(group, addr.as_deref(), q, REPLICA_TIMEOUT)
            .await
            .ok()?;
        let sent = self.point_at(group, applied)?;
        let stale = sent.elapsed();
        if stale > bound {
            return None;
        }
        self.served.increment(1);
        Some(LocalAnswer {
            result,
            term,
            stale,
            node,
        })
    }

    /// The sending time of the newest point of `group` whose index is at
    /// most `applied`.
    fn point_at(&self, group: GroupId, applied: u64) -> Option<Instant> {
        let points = self.points.lock().expect("local reads lock poisoned");
        points
            .get(&group)?
            .seen
            .iter()
            .rev()
            .find(|(_, index)| *index <= applied)
            .map(|(at, _)| *at)
    }

    /// Whether `group` has a point younger than `bound`. The first read
    /// of a group (or one after a quiet spell) starts a refresher that asks
    /// the leader every quarter bound for as long as reads keep coming (and
    /// [`LINGER`] after); until
    /// its first answer the reads go to the leader, so a local read never
    /// costs more than the leader's.
    fn fresh_within(self: &Arc<Self>, group: GroupId, bound: Duration) -> bool {
        let (fresh, start) = {
            let mut points = self.points.lock().expect("local reads lock poisoned");
            let p = points.entry(group).or_default();
            p.read_at = Some(Instant::now());
            let fresh = p.seen.back().is_some_and(|(at, _)| at.elapsed() <= bound);
            let start = !p.refreshing;
            p.refreshing = true;
            (fresh, start)
        };
        if start {
            let every = (bound / 4).clamp(REFRESH_MIN, REFRESH_MAX);
            tokio::spawn(self.clone().keep_fresh(group, every));
        }
        fresh
    }

    /// Refresh `group`'s points every `every` until no read asked for it
    /// for [`LINGER`].
    async fn keep_fresh(self: Arc<Self>, group: GroupId, every: Duration) {
        loop {
            self.refresh(group).await;
            tokio::time::sleep(every).await;
            let mut points = self.points.lock().expect("local reads lock poisoned");
            let p = points.entry(group).or_default();
            if p.read_at.is_none_or(|at| at.elapsed() > LINGER) {
                p.refreshing = false;
                return;
            }
        }
    }

    /// Ask the leader of `group` for its applied index once it confirmed
    /// its leadership (lease or read index); note it with when the
    /// question was sent.
    async fn refresh(&self, group: GroupId) {
        let sent = Instant::now();
        let answer = self
            .client
            .query_indexed(group, &Query::Event, Read::Lease)
            .await;
        let Ok((_, _, index)) = answer else {
            return;
        };
        let mut points = self.points.lock().expect("local reads lock poisoned");
        let p = points.entry(group).or_default();
        // Answers may come back out of order; keep the points sorted by
        // sending time (and so by index).
        if p.seen.back().is_none_or(|(at, _)| *at < sent) {
            p.seen.push_back((sent, index));
            while p.seen.len() > POINTS_KEPT {
                p.seen.pop_front();
            }
        }
    }
}
