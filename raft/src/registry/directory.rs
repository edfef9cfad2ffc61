//! What `raft` asks of the directory (group 0), through one narrow trait,
//! [`DirectoryView`]: the registered nodes, whether a node is registered,
//! whom to ask for a group's leader, whether a node may speak for a group,
//! whether a node votes in it. Its one implementation, for
//! `seatfence_core::Directory`, is the only code in `raft` that reads the
//! directory's records; the registry answers through it from this node's
//! replica (`Registry::view`), and the rest of `raft` asks the registry.
//! Reads only: the directory changes only through commands.

use seatfence_core::{Directory, GroupId, NodeId};

use super::{GroupHandle, Registry};

/// The questions `raft` asks of the directory.
pub trait DirectoryView {
    /// Every registered node, with its gRPC address.
    fn node_addrs(&self) -> Vec<(u64, String)>;
    /// Whether a cluster exists (some node is registered: every node
    /// registers itself at each start), and the incarnation registered for
    /// node `id`, if it is.
    fn registration(&self, id: u64) -> (bool, Option<u64>);
    /// gRPC addresses of the nodes that may lead `group`: its voters (every
    /// node for group 0), a running move's target voters first (leadership
    /// goes there before the directory says so).
    fn addrs_to_ask(&self, group: GroupId) -> Vec<String>;
    /// Whether `node` belongs to `group` as the directory says: a voter, a
    /// target of its running move, or the node its running repair adds.
    fn places(&self, group: GroupId, node: u64) -> bool;
    /// Whether `node` is a voter of `group`.
    fn lists_voter(&self, group: GroupId, node: u64) -> bool;
    /// How many nodes are registered.
    fn node_count(&self) -> usize;
    /// Whether node `id` is retired (decommissioned or declared dead);
    /// `None`: it is not registered.
    fn retired(&self, id: u64) -> Option<bool>;
    /// The term from which the rejoining replica of `group` on `node` (at
    /// store `incarnation`) may take appends; `None`: not yet, or no such
    /// rejoin.
    fn rejoin_floor(&self, node: u64, incarnation: u64, group: GroupId) -> Option<u64>;
    /// Whether `group` took `node` back after its rejoin at store
    /// `incarnation` (a rejoin record of that incarnation that no longer
    /// lists the group as pending).
    fn rejoin_settled(&self, node: u64, incarnation: u64, group: GroupId) -> bool;
}

impl DirectoryView for Directory {
    fn node_addrs(&self) -> Vec<(u64, String)> {
        self.nodes
            .iter()
            .map(|(id, n)| (id.0, n.grpc_addr.clone()))
            .collect()
    }

    fn registration(&self, id: u64) -> (bool, Option<u64>) {
        let known = self.nodes.get(&NodeId(id)).map(|n| n.incarnation);
        (!self.nodes.is_empty(), known)
    }

    fn addrs_to_ask(&self, group: GroupId) -> Vec<String> {
        let mut ids: Vec<NodeId> = if group.is_directory() {
            self.nodes.keys().copied().collect()
        } else {
            self.groups
                .get(&group)
                .map(|g| g.members.clone())
                .unwrap_or_default()
        };
        // A moving group's leader ends up among the target voters: ask
        // them first (a removed leader answers with no hint).
        if let Some(m) = self.running_move_of(group) {
            let old: Vec<_> = ids
                .drain(..)
                .filter(|n| !m.to_members.contains(n))
                .collect();
            ids = m.to_members.clone();
            ids.extend(old);
        }
        ids.iter()
            .filter_map(|id| self.nodes.get(id).map(|n| n.grpc_addr.clone()))
            .collect()
    }

    fn places(&self, group: GroupId, node: u64) -> bool {
        let who = NodeId(node);
        self.lists_voter(group, node)
            || self
                .running_move_of(group)
                .is_some_and(|m| m.to_members.contains(&who))
            || self.repairs.get(&group).is_some_and(|r| r.add == who)
    }

    fn lists_voter(&self, group: GroupId, node: u64) -> bool {
        self.groups
            .get(&group)
            .is_some_and(|g| g.members.contains(&NodeId(node)))
    }

    fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn retired(&self, id: u64) -> Option<bool> {
        let id = NodeId(id);
        self.nodes
            .contains_key(&id)
            .then(|| self.node_state(id).is_retired())
    }

    fn rejoin_floor(&self, node: u64, incarnation: u64, group: GroupId) -> Option<u64> {
        let r = self.rejoins.get(&NodeId(node))?;
        (r.incarnation == incarnation)
            .then(|| r.floor(group))
            .flatten()
    }

    fn rejoin_settled(&self, node: u64, incarnation: u64, group: GroupId) -> bool {
        self.rejoins
            .get(&NodeId(node))
            .is_some_and(|r| r.incarnation == incarnation && !r.pending.contains(&group))
    }
}

impl Registry {
    /// Ask this node's replica of the directory (`None` when it is not
    /// hosted here).
    pub fn view<T>(&self, f: impl FnOnce(&dyn DirectoryView) -> T) -> Option<T> {
        self.read_directory(|d| f(d))
    }

    /// Read this node's replica of the directory, whole (for the crates
    /// above `raft`, whose rules it holds; `raft` itself asks [`Registry::view`]).
    pub fn read_directory<T>(&self, f: impl FnOnce(&Directory) -> T) -> Option<T> {
        self.get(GroupId::DIRECTORY)
            .map(|d| d.sm.read(|s| f(s.state.directory())))
    }

    /// The leader of group `id` as this node's replica knows it.
    pub fn leader_of(&self, id: GroupId) -> Option<u64> {
        use openraft::async_runtime::watch::WatchReceiver;
        self.get(id)
            .and_then(|g| g.raft.metrics().borrow_watched().current_leader)
    }

    /// gRPC addresses to ask for `group`'s leader ([`DirectoryView::addrs_to_ask`]).
    pub fn member_addrs(&self, group: GroupId) -> Vec<String> {
        self.view(|d| d.addrs_to_ask(group)).unwrap_or_default()
    }

    /// Every node in this node's replica of the directory, with its gRPC
    /// address.
    pub fn directory_nodes(&self) -> Vec<(u64, String)> {
        self.view(|d| d.node_addrs()).unwrap_or_default()
    }

    /// Whether this node's directory replica holds a cluster, and the
    /// incarnation it records for node `id` if it lists it
    /// ([`DirectoryView::registration`]): what a node starting on an empty
    /// data dir asks its peers (see [`crate::storage::ident`]). A directory
    /// that has a membership but no node yet is a cluster still forming,
    /// whose first leader waits for the other initial members.
    pub fn directory_knows(&self, id: u64) -> (bool, Option<u64>) {
        self.view(|d| d.registration(id)).unwrap_or((false, None))
    }

    /// Whether node `node` may send group `g`'s Raft traffic (as its
    /// candidate or leader): a voter or learner of the replica's own
    /// membership (its log, which may be ahead of this node's directory
    /// replica), or placed in the group by the directory replica
    /// ([`DirectoryView::places`], which may be ahead of the log). Group
    /// 0's traffic is the gate's to decide (a replica behind on the
    /// directory learns its members from it).
    pub fn may_speak_for(&self, g: &GroupHandle, node: u64) -> bool {
        use openraft::async_runtime::watch::WatchReceiver;
        if g.id.is_directory() {
            return true;
        }
        {
            let rx = g.raft.metrics();
            let m = rx.borrow_watched();
            if m.membership_config.membership().get_node(&node).is_some() {
                return true;
            }
        }
        self.view(|d| d.places(g.id, node)).unwrap_or(false)
    }

    /// Whether this node's directory replica lists this node as a voter of
    /// `id`.
    pub fn directory_voter(&self, id: GroupId) -> bool {
        self.view(|d| d.lists_voter(id, self.node_id))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seatfence_core::{GroupInfo, NodeInfo, RegionId};

    /// Nodes 1-5; group 7 on 1, 2, 3.
    fn directory() -> Directory {
        let mut d = Directory::default();
        for id in 1..=5 {
            d.nodes.insert(
                NodeId(id),
                NodeInfo {
                    id: NodeId(id),
                    region: RegionId::from("a"),
                    grpc_addr: format!("127.0.0.1:{}", 7000 + id),
                    incarnation: 10 + id,
                    format_max: seatfence_core::format::newest(),
                },
            );
        }
        let members = vec![NodeId(1), NodeId(2), NodeId(3)];
        d.groups.insert(
            GroupId(7),
            GroupInfo {
                id: GroupId(7),
                members,
            },
        );
        d
    }

    #[test]
    fn only_a_groups_voters_move_targets_and_repair_target_may_speak_for_it() {
        let mut d = directory();
        let view: &dyn DirectoryView = &d;
        assert!(view.places(GroupId(7), 2) && view.lists_voter(GroupId(7), 2));
        assert!(!view.places(GroupId(7), 4), "a stranger to the group");
        assert!(!view.places(GroupId(8), 1), "an unknown group");
        d.repairs.insert(
            GroupId(7),
            seatfence_core::Repair {
                group: GroupId(7),
                remove: NodeId(3),
                add: NodeId(4),
                reason: seatfence_core::RepairReason::Dead,
                step: seatfence_core::RepairStep::AddLearner,
                started_ms: 0,
            },
        );
        assert!(d.places(GroupId(7), 4), "the node a repair adds");
        assert!(!d.lists_voter(GroupId(7), 4), "not a voter yet");
        assert!(!d.places(GroupId(7), 5));
    }

    #[test]
    fn registration_and_whom_to_ask() {
        let d = directory();
        assert_eq!(d.registration(2), (true, Some(12)));
        assert_eq!(d.registration(9), (true, None));
        assert_eq!(Directory::default().registration(1), (false, None));
        assert_eq!(
            d.addrs_to_ask(GroupId(7)),
            vec!["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
        );
        assert_eq!(d.addrs_to_ask(GroupId::DIRECTORY).len(), 5);
        assert_eq!(d.node_addrs().len(), 5);
    }
}
