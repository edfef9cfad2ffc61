//! [`LocalReads`]: reads where the buyer is. An edge whose region holds a
//! replica of an event's group (this node's own, or a neighbour's in the
//! same region) answers availability and event reads from it instead of
//! crossing the world to the leader, within a staleness bound it can
//! prove with its own clock alone:
//!
//! - Now and then (at most every half bound, only for groups read here)
//!   the edge asks the leader for its applied index after a read-index
//!   round, noting when it *sent* the question: every write acknowledged
//!   before that instant is at or below that index (a write is
//!   acknowledged after it commits, and the read index covers every
//!   commit before the round began).
//! - A local read asks the replica for its state and applied index `A`,
//!   and takes the newest noted point whose index is at most `A`: the
//!   answer includes every write acknowledged before that point was sent,
//!   so `stale_ms` is the time since then. A replica too far behind, or
//!   no point within the bound, and the read goes to the leader as before.
//!
//! Never for decisions: holds, bookings and anything that checks an epoch
//! go to the leader.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seatfence_core::query::{Query, QueryResult};
use seatfence_core::{GroupId, NodeId, RegionId};
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
/// applied index it answered), oldest first; and whether a refresh runs.
#[derive(Default)]
struct Points {
    seen: VecDeque<(Instant, u64)>,
    refreshing: bool,
}

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
    /// own (`None` address) or a same-region member's, unless this node
    /// leads it (the leader's own read is local already) or `owner` is
    /// this region (its leader is a neighbour). `None`: no replica here.
    fn replica_here(&self, group: GroupId, owner: &RegionId) -> Option<(NodeId, Option<String>)> {
        let me = NodeId(self.registry.node_id());
        if self.client.leads(group) {
            return None;
        }
        let dir = self.registry.get(GroupId::DIRECTORY)?;
        dir.read(|s| {
            let d = s.state.directory();
            let region = &d.nodes.get(&me)?.region;
            if region == owner {
                return None;
            }
            let members = &d.groups.get(&group)?.members;
            if members.contains(&me) && self.registry.get(group).is_some() {
                return Some((me, None));
            }
            members
                .iter()
                .filter_map(|id| d.nodes.get(id))
                .find(|n| &n.region == region && d.node_state(n.id).takes_replicas())
                .map(|n| (n.id, Some(n.grpc_addr.clone())))
        })
    }

    /// `q` answered by a replica of `group` in this region within `bound`,
    /// or `None` (no replica here, or it cannot prove the bound): ask the
    /// leader.
    pub async fn read(
        self: &Arc<Self>,
        group: GroupId,
        owner: &RegionId,
        q: &Query,
        bound: Duration,
    ) -> Option<LocalAnswer> {
        let (node, addr) = self.replica_here(group, owner)?;
        if !self.fresh_within(group, bound).await {
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

    /// Make sure `group` has a point younger than `bound`: refresh in the
    /// background once the newest is older than half of it, and wait for
    /// the refresh when none is young enough. False when none could be had.
    async fn fresh_within(self: &Arc<Self>, group: GroupId, bound: Duration) -> bool {
        let (newest, start) = {
            let mut points = self.points.lock().expect("local reads lock poisoned");
            let p = points.entry(group).or_default();
            let newest = p.seen.back().map(|(at, _)| at.elapsed());
            let stale_soon = newest.is_none_or(|age| age > bound / 2);
            let start = stale_soon && !p.refreshing;
            if start {
                p.refreshing = true;
            }
            (newest, start)
        };
        if start {
            let me = self.clone();
            let refresh = tokio::spawn(async move { me.refresh(group).await });
            if newest.is_none_or(|age| age > bound) {
                return refresh.await.unwrap_or(false);
            }
            return true;
        }
        match newest {
            Some(age) if age <= bound => true,
            // Another read's refresh runs: wait for it a little.
            _ => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                self.point_at(group, u64::MAX)
                    .is_some_and(|at| at.elapsed() <= bound)
            }
        }
    }

    /// Ask the leader of `group` for its applied index after a read-index
    /// round; note it with when the question was sent.
    async fn refresh(&self, group: GroupId) -> bool {
        let sent = Instant::now();
        let answer = self
            .client
            .query_indexed(group, &Query::Event, Read::ReadIndex)
            .await;
        let mut points = self.points.lock().expect("local reads lock poisoned");
        let p = points.entry(group).or_default();
        p.refreshing = false;
        let Ok((_, _, index)) = answer else {
            return false;
        };
        // Answers may come back out of order; keep the points sorted by
        // sending time (and so by index).
        if p.seen.back().is_none_or(|(at, _)| *at < sent) {
            p.seen.push_back((sent, index));
            while p.seen.len() > POINTS_KEPT {
                p.seen.pop_front();
            }
        }
        true
    }
}
