//! The leader balancer: on the directory's leader, every
//! `balance_every_ms`, spread group leaderships evenly over their voters.
//!
//! A node's fair share is, over every group it is a voter of, one divided
//! by that group's voters that may lead (not drained). It may lead up to
//! its fair share plus 10% (at least the fair share rounded up); a node
//! above that hands groups to their least-loaded voter below its own
//! limit. Every hand-off goes through [`transfer::transfer_leader`], the
//! one leadership-transfer path, so a voter that is not caught up (as the
//! group's leader sees it) is never picked. The balancer leaves alone:
//! the directory (group 0), every group whose event is moving, every group
//! with learners (a move's catch-up), and drained nodes (they lead nothing
//! and receive nothing: their own hand-off moves what they gain). A node
//! that does not answer its status is left out of the shares like a
//! drained one until it answers again.
//!
//! It runs after creation, after a restart, after an undone drain alike:
//! it reads who leads now from every node's status and does not need to
//! know why the leaderships are uneven.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use seatfence_core::{GroupId, NodeId, RouteState};
use seatfence_raft::registry::Registry;
use seatfence_raft::ClusterClient;
use tokio::sync::watch;

use seatfence_regions::transfer;

/// Most transfers one round starts: the rest waits for the next round.
pub const MAX_TRANSFERS_PER_ROUND: usize = 64;

/// Transfers of one round run this many at once.
const PARALLEL: usize = 8;

/// One group as the balancer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Led {
    /// The group.
    pub group: GroupId,
    /// Node ids of the group's voters, as the directory records them.
    pub voters: Vec<u64>,
    /// Node id of the group's leader now (the highest term's claim).
    pub leader: u64,
}

/// A planned hand-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// The group whose leadership moves.
    pub group: GroupId,
    /// Node id of its leader now.
    pub from: u64,
    /// Node id of the voter to take the leadership (below its own limit, not drained).
    pub to: u64,
}

/// How many groups `node` may lead: its fair share plus 10%, at least the
/// fair share rounded up.
fn limit(fair: f64) -> u64 {
    // Sums of thirds are not exact in floating point: 300 × 1/3 is
    // 99.999…; round away that noise first.
    let fair = (fair * 1e6).round() / 1e6;
    ((fair * 1.1 + 1e-9).floor() as u64).max(fair.ceil() as u64)
}

/// The hand-offs that bring every node within its limit, at most `max`.
/// Groups led by a drained node are left to its own hand-off.
pub fn plan(groups: &[Led], drained: &BTreeSet<u64>, max: usize) -> Vec<Move> {
    let mut fair: BTreeMap<u64, f64> = BTreeMap::new();
    let mut led: BTreeMap<u64, u64> = BTreeMap::new();
    for g in groups {
        let eligible: Vec<u64> = g
            .voters
            .iter()
            .copied()
            .filter(|v| !drained.contains(v))
            .collect();
        for v in &eligible {
            *fair.entry(*v).or_default() += 1.0 / eligible.len() as f64;
        }
        *led.entry(g.leader).or_default() += 1;
    }
    let limits: BTreeMap<u64, u64> = fair.iter().map(|(n, f)| (*n, limit(*f))).collect();
    let over = |led: &BTreeMap<u64, u64>, n: u64| {
        led.get(&n).copied().unwrap_or(0) > limits.get(&n).copied().unwrap_or(0)
    };
    let mut moves = Vec::new();
    for g in groups {
        if moves.len() >= max {
            break;
        }
        if drained.contains(&g.leader) || !over(&led, g.leader) {
            continue;
        }
        // The voter furthest below its limit takes it.
        let to = g
            .voters
            .iter()
            .copied()
            .filter(|v| *v != g.leader && !drained.contains(v))
            .filter(|v| led.get(v).copied().unwrap_or(0) < limits.get(v).copied().unwrap_or(0))
            .max_by_key(|v| {
                let room = limits[v] - led.get(v).copied().unwrap_or(0);
                (room, std::cmp::Reverse(*v))
            });
        if let Some(to) = to {
            *led.entry(g.leader).or_default() -= 1;
            *led.entry(to).or_default() += 1;
            moves.push(Move {
                group: g.group,
                from: g.leader,
                to,
            });
        }
    }
    moves
}

/// Every `every`, while this node leads the directory: read who leads each
/// group, plan, and hand off through the one transfer path.
pub async fn run(
    registry: Arc<Registry>,
    client: ClusterClient,
    every: Duration,
    slack: u64,
    mut rx_stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(every) => {}
        }
        let Some(dir) = registry.get(GroupId::DIRECTORY) else {
            continue;
        };
        if !dir.leads() {
            continue;
        }
        let (nodes, groups, drained) = dir.read(|s| {
            let d = s.state.directory();
            let moving: BTreeSet<GroupId> = d
                .events
                .values()
                .filter(|r| matches!(r.state, RouteState::Moving { .. }))
                .map(|r| r.group)
                .collect();
            let groups: BTreeMap<GroupId, Vec<u64>> = d
                .groups
                .values()
                .filter(|g| g.id != GroupId::DIRECTORY && !moving.contains(&g.id))
                .map(|g| (g.id, g.members.iter().map(|n| n.0).collect()))
                .collect();
            let nodes: Vec<(u64, String)> = d
                .nodes
                .values()
                .map(|n| (n.id.0, n.grpc_addr.clone()))
                .collect();
            let drained: BTreeSet<u64> = d.not_leading().iter().map(|n: &NodeId| n.0).collect();
            (nodes, groups, drained)
        });
        let (led, answered) = leaders(&client, &nodes, &groups).await;
        // A node that does not answer is left out of the shares like a
        // drained one: the others take its part meanwhile.
        let mut drained = drained;
        drained.extend(
            nodes
                .iter()
                .filter(|(id, _)| !answered.contains(id))
                .map(|(id, _)| *id),
        );
        let moves = plan(&led, &drained, MAX_TRANSFERS_PER_ROUND);
        if moves.is_empty() {
            continue;
        }
        tracing::info!(transfers = moves.len(), "balancing group leaderships");
        let drained: Vec<u64> = drained.into_iter().collect();
        futures::stream::iter(moves)
            .for_each_concurrent(PARALLEL, |m| {
                let (client, drained) = (&client, &drained);
                async move {
                    let r = transfer::transfer_leader(
                        client,
                        m.group,
                        &[m.to],
                        drained,
                        slack,
                        Duration::from_secs(3),
                    )
                    .await;
                    match r {
                        Ok(t) => tracing::info!(
                            group = m.group.0,
                            from = t.previous,
                            to = t.leader,
                            "balancer moved leadership"
                        ),
                        Err(e) => tracing::debug!(group = m.group.0, to = m.to, "balancer: {e}"),
                    }
                }
            })
            .await;
    }
}

/// Who leads each of `groups` now, from every node's status (the highest
/// term's claim wins; groups with learners or no known leader are left
/// out), and which nodes answered.
async fn leaders(
    client: &ClusterClient,
    nodes: &[(u64, String)],
    groups: &BTreeMap<GroupId, Vec<u64>>,
) -> (Vec<Led>, BTreeSet<u64>) {
    let mut claims: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut learning: BTreeSet<u64> = BTreeSet::new();
    let mut answered = BTreeSet::new();
    for (id, addr) in nodes {
        let Ok(st) = client.status_at(addr).await else {
            continue;
        };
        answered.insert(*id);
        for g in st.groups {
            if !g.learners.is_empty() {
                learning.insert(g.group_id);
            }
            if g.role == "leader" && claims.get(&g.group_id).is_none_or(|(t, _)| g.term > *t) {
                claims.insert(g.group_id, (g.term, st.node_id));
            }
        }
    }
    let led = groups
        .iter()
        .filter(|(g, _)| !learning.contains(&g.0))
        .filter_map(|(g, voters)| {
            let (_, leader) = claims.get(&g.0)?;
            Some(Led {
                group: *g,
                voters: voters.clone(),
                leader: *leader,
            })
        })
        .collect();
    (led, answered)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(n: u64, voters: &[u64], leader: u64) -> Vec<Led> {
        (1..=n)
            .map(|i| Led {
                group: GroupId(i),
                voters: voters.to_vec(),
                leader,
            })
            .collect()
    }

    /// Apply `moves` to `groups`; leaders per node after.
    fn counts(groups: &mut [Led], moves: &[Move]) -> BTreeMap<u64, u64> {
        for m in moves {
            let g = groups.iter_mut().find(|g| g.group == m.group).unwrap();
            assert_eq!(g.leader, m.from);
            assert!(g.voters.contains(&m.to), "only to a voter");
            g.leader = m.to;
        }
        let mut c = BTreeMap::new();
        for g in groups.iter() {
            *c.entry(g.leader).or_default() += 1;
        }
        c
    }

    #[test]
    fn all_on_one_node_spreads_evenly() {
        let mut g = groups(300, &[1, 2, 3], 1);
        let moves = plan(&g, &BTreeSet::new(), 1_000);
        let c = counts(&mut g, &moves);
        for n in [1, 2, 3] {
            assert!(c[&n] <= 110, "node {n} leads {} of 300: {c:?}", c[&n]);
        }
        assert_eq!(moves.len(), 190, "no more transfers than needed");
        assert!(
            plan(&g, &BTreeSet::new(), 1_000).is_empty(),
            "balanced stays put"
        );
    }

    #[test]
    fn small_counts_round_up_and_drained_nodes_take_nothing() {
        let mut g = groups(3, &[1, 2, 3], 1);
        let c = counts(&mut g.clone(), &plan(&g, &BTreeSet::new(), 10));
        assert_eq!(c.values().copied().collect::<Vec<_>>(), vec![1, 1, 1]);
        let drained = BTreeSet::from([3]);
        let moves = plan(&g, &drained, 10);
        assert!(moves.iter().all(|m| m.to != 3), "{moves:?}");
        let c = counts(&mut g, &moves);
        assert!(c[&1] <= 2 && c[&2] >= 1, "{c:?}");
        // A drained leader's groups are its own hand-off's.
        let g = groups(4, &[1, 2, 3], 3);
        assert!(plan(&g, &drained, 10).is_empty());
    }

    #[test]
    fn regions_are_balanced_within_their_voters() {
        let mut g = groups(20, &[1, 2, 3], 1);
        g.extend(groups(20, &[4, 5, 6], 4).into_iter().map(|mut l| {
            l.group = GroupId(l.group.0 + 100);
            l
        }));
        let moves = plan(&g, &BTreeSet::new(), 100);
        let c = counts(&mut g, &moves);
        for n in 1..=6 {
            assert!((6..=8).contains(&c[&n]), "{c:?}");
        }
        assert_eq!(plan(&g, &BTreeSet::new(), 5).len(), 0);
        assert!(plan(&groups(20, &[1, 2, 3], 1), &BTreeSet::new(), 5).len() == 5);
    }
}
