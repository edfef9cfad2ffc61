//! The directory (group 0): which nodes exist, in which region, and which
//! nodes host each group. Placement is decided here, inside `apply`, so every
//! replica of the directory places a group identically.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{Epoch, EventId, GroupId, NodeId, RegionId};
use crate::inventory::Survival;

/// A node as the directory knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The node's id (also its openraft node id).
    pub id: NodeId,
    /// The region it runs in, fixed for life (a `RegisterNode` naming another is refused).
    pub region: RegionId,
    /// `host:port` of the node's gRPC server.
    pub grpc_addr: String,
    /// The random incarnation of the node's data dir (its store identity,
    /// written before anything else in it): a node whose data dir was
    /// wiped or replaced comes back with another one, and the directory
    /// refuses it (`Response::IncarnationMismatch`), because a voter that
    /// forgot its log must never vote or acknowledge again under its old
    /// id. 0: not known (a record from before store identities).
    pub incarnation: u64,
    /// The newest data format the node's binary reads
    /// ([`crate::format::newest`]), sent at each start: the cluster's
    /// format is raised only when every node reads the new one.
    pub format_max: crate::format::Version,
}

/// The directory's shared key holding the cluster's id (random, written
/// once by the first node registered; a restored cluster has its own).
pub const CLUSTER_ID_KEY: &str = "cluster_id";

/// Whether the directory's shared key `key` holds a secret (the payment
/// gateway's token and what goes with it, under `gateway/`; anything
/// under `secret/`). Secrets stay in the cluster: no dump (so no backup)
/// carries them, and a restored cluster takes its own from its config.
pub fn is_secret(key: &str) -> bool {
    key.starts_with("gateway/") || key.starts_with("secret/")
}

/// Where a new group's voters go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// "Zone survival": `replicas` distinct nodes of one region.
    InRegion {
        /// The region all voters come from.
        region: RegionId,
        /// How many voters.
        replicas: u8,
    },
    /// "Region survival": one voter per region first, then further distinct
    /// nodes, least loaded first.
    Spread {
        /// How many voters.
        replicas: u8,
    },
}

/// A group as the directory knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    /// The group's id.
    pub id: GroupId,
    /// Voters; the first one initializes the group (and usually leads first).
    pub members: Vec<NodeId>,
}

/// What group 0 replicates: nodes, groups, event routes, moves and node lifecycle.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Directory {
    /// Every registered node, by id.
    pub nodes: BTreeMap<NodeId, NodeInfo>,
    /// Every group but the directory itself, by id.
    pub groups: BTreeMap<GroupId, GroupInfo>,
    /// The next id `CreateGroup { group_id: None }` hands out (never 0).
    pub next_group_id: u64,
    /// Where each event lives: the route every edge caches.
    pub events: BTreeMap<EventId, EventRoute>,
    /// Nodes drained for maintenance: they hand off any leadership they get.
    pub drained: std::collections::BTreeSet<NodeId>,
    /// Ownership moves, running and finished, by id.
    pub moves: BTreeMap<u64, crate::moves::MoveRecord>,
    /// The id the next move gets (never 0).
    pub next_move_id: u64,
    /// Nodes not live (see [`crate::lifecycle`]); absent: live.
    pub node_states: BTreeMap<NodeId, crate::lifecycle::NodeState>,
    /// Running replica repairs, one per group at most.
    pub repairs: BTreeMap<GroupId, crate::lifecycle::Repair>,
    /// Nodes that came back on an empty data dir (`--rejoin-empty`).
    pub rejoins: BTreeMap<NodeId, crate::lifecycle::Rejoin>,
    /// The cluster's active data format: what every node writes (see
    /// [`crate::format`]); 0 in a directory that never set it, read as
    /// [`crate::format::V1`] ([`Directory::format`]).
    pub active_format: crate::format::Version,
}

/// Whether an event is being moved between regions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RouteState {
    /// Not moving: the owner region serves it.
    #[default]
    Active,
    /// An ownership move is running.
    Moving {
        /// The running move's id (a key of [`Directory::moves`]).
        move_id: u64,
    },
}

impl RouteState {
    /// The name in the API: `active` or `moving`.
    pub fn name(self) -> &'static str {
        match self {
            RouteState::Active => "active",
            RouteState::Moving { .. } => "moving",
        }
    }
}

/// An event's entry in the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRoute {
    /// The event.
    pub event_id: EventId,
    /// The group holding its inventory.
    pub group: GroupId,
    /// The region it was registered in; never changes.
    pub home_region: RegionId,
    /// The region that owns it now (the home region until a move finishes).
    pub owner_region: RegionId,
    /// Its ownership epoch, raised by one at every finished move.
    pub epoch: Epoch,
    /// How its group is placed.
    pub survival: Survival,
    /// Whether it is being moved.
    pub state: RouteState,
}

impl EventRoute {
    /// How an event with this survival mode is placed.
    pub fn placement(home: &RegionId, survival: Survival) -> Placement {
        match survival {
            Survival::Zone => Placement::InRegion {
                region: home.clone(),
                replicas: 3,
            },
            Survival::Region => Placement::Spread { replicas: 3 },
        }
    }
}

impl Directory {
    /// The cluster's active data format (see [`crate::format`]).
    pub fn format(&self) -> crate::format::Version {
        self.active_format.max(crate::format::V1)
    }

    /// Why the cluster's format cannot be raised to `v`: a live node
    /// whose binary does not read it (retired nodes do not count), or a
    /// version no node knows. `None`: it can.
    pub fn format_blocker(&self, v: crate::format::Version) -> Option<String> {
        if v < crate::format::V1 {
            return Some(format!("data format v{v} does not exist"));
        }
        let behind: Vec<String> = self
            .nodes
            .values()
            .filter(|n| !self.node_state(n.id).is_retired() && n.format_max < v)
            .map(|n| format!("node {} reads v{} at most", n.id.0, n.format_max))
            .collect();
        (!behind.is_empty()).then(|| {
            format!(
                "data format v{v} is not read by every live node ({}): upgrade them first",
                behind.join(", ")
            )
        })
    }

    /// The groups `node` is a member of.
    pub fn groups_of(&self, node: NodeId) -> impl Iterator<Item = &GroupInfo> {
        self.groups
            .values()
            .filter(move |g| g.members.contains(&node))
    }

    /// The groups `node` should host a replica of: those it is a voter of,
    /// and those a running move or repair is adding it to.
    pub fn hosted_on(&self, node: NodeId) -> std::collections::BTreeSet<GroupId> {
        let mut out: std::collections::BTreeSet<GroupId> =
            self.groups_of(node).map(|g| g.id).collect();
        for m in self.moves.values() {
            if m.is_running() && m.to_members.contains(&node) {
                out.insert(m.group);
            }
        }
        out.extend(
            self.repairs
                .values()
                .filter(|r| r.add == node)
                .map(|r| r.group),
        );
        out
    }

    /// Choose the voters of a new group. Deterministic: the same directory
    /// and placement give the same members on every replica. Dead and
    /// retiring nodes take no new groups; suspect ones only when there are
    /// not enough live ones (they may well come back).
    pub fn place(&self, placement: &Placement) -> Result<Vec<NodeId>, String> {
        let mut load: BTreeMap<NodeId, (usize, usize)> =
            self.nodes.keys().map(|id| (*id, (0, 0))).collect();
        let live = |n: &&NodeInfo| {
            matches!(
                self.node_state(n.id),
                crate::lifecycle::NodeState::Live | crate::lifecycle::NodeState::Suspect
            )
        };
        for g in self.groups.values() {
            for (i, m) in g.members.iter().enumerate() {
                if let Some(l) = load.get_mut(m) {
                    l.0 += 1;
                    if i == 0 {
                        l.1 += 1;
                    }
                }
            }
        }
        let by_load = |ids: &mut Vec<&NodeInfo>| {
            ids.sort_by_key(|n| (!self.node_state(n.id).takes_replicas(), load[&n.id].0, n.id))
        };
        let mut picked: Vec<NodeId> = match placement {
            Placement::InRegion { region, replicas } => {
                let mut c: Vec<&NodeInfo> = self
                    .nodes
                    .values()
                    .filter(|n| &n.region == region)
                    .filter(live)
                    .collect();
                if c.len() < usize::from(*replicas) {
                    return Err(format!(
                        "region {region} has {} nodes in service, {replicas} replicas requested",
                        c.len()
                    ));
                }
                by_load(&mut c);
                c.iter()
                    .take(usize::from(*replicas))
                    .map(|n| n.id)
                    .collect()
            }
            Placement::Spread { replicas } => {
                let want = usize::from(*replicas);
                let mut c: Vec<&NodeInfo> = self.nodes.values().filter(live).collect();
                if c.len() < want {
                    return Err(format!(
                        "{} nodes in service, {replicas} replicas requested",
                        c.len()
                    ));
                }
                by_load(&mut c);
                let mut picked = Vec::with_capacity(want);
                let mut regions = Vec::new();
                for n in &c {
                    if picked.len() < want && !regions.contains(&&n.region) {
                        regions.push(&n.region);
                        picked.push(n.id);
                    }
                }
                for n in &c {
                    if picked.len() < want && !picked.contains(&n.id) {
                        picked.push(n.id);
                    }
                }
                picked
            }
        };
        if picked.is_empty() {
            return Err("no replicas requested".into());
        }
        // Spread leadership: the member leading the fewest groups goes first.
        let first = (0..picked.len())
            .min_by_key(|&i| (load[&picked[i]].1, picked[i]))
            .expect("picked is not empty");
        picked.swap(0, first);
        Ok(picked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(nodes: &[(u64, &str)]) -> Directory {
        let mut d = Directory::default();
        for (id, region) in nodes {
            d.nodes.insert(
                NodeId(*id),
                NodeInfo {
                    id: NodeId(*id),
                    region: RegionId::from(*region),
                    grpc_addr: format!("127.0.0.1:{}", 7000 + id),
                    incarnation: 0,
                    format_max: crate::format::newest(),
                },
            );
        }
        d
    }

    #[test]
    fn spread_puts_one_voter_per_region_first() {
        let d = dir(&[(1, "a"), (2, "a"), (3, "b"), (4, "c")]);
        let mut m = d.place(&Placement::Spread { replicas: 3 }).unwrap();
        m.sort();
        assert_eq!(m, vec![NodeId(1), NodeId(3), NodeId(4)]);
    }

    #[test]
    fn in_region_refuses_when_region_is_too_small() {
        let d = dir(&[(1, "a"), (2, "a"), (3, "b")]);
        let err = d
            .place(&Placement::InRegion {
                region: "a".into(),
                replicas: 3,
            })
            .unwrap_err();
        assert!(err.contains("region a has 2 nodes in service"), "{err}");
    }

    #[test]
    fn first_members_rotate_so_leaders_spread() {
        let mut d = dir(&[(1, "a"), (2, "b"), (3, "c")]);
        let mut firsts = Vec::new();
        for g in 1..=6 {
            let members = d.place(&Placement::Spread { replicas: 3 }).unwrap();
            firsts.push(members[0]);
            d.groups.insert(
                GroupId(g),
                GroupInfo {
                    id: GroupId(g),
                    members,
                },
            );
        }
        for n in 1..=3 {
            assert_eq!(firsts.iter().filter(|f| f.0 == n).count(), 2, "{firsts:?}");
        }
    }
}
