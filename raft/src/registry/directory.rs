//! What this node's replica of the directory (group 0) says, as the rest
//! of `raft` needs it: a group's leader and members' addresses, the
//! registered nodes, whether a node may speak for a group (the gate), and
//! whether this node votes in group 0. Reads only; the directory changes
//! only through commands.

use seatfence_core::GroupId;

use super::{GroupHandle, Registry};

impl Registry {
    /// The leader of group `id` as this node's replica knows it.
    pub fn leader_of(&self, id: GroupId) -> Option<u64> {
        use openraft::async_runtime::watch::WatchReceiver;
        self.get(id)
            .and_then(|g| g.raft.metrics().borrow_watched().current_leader)
    }

    /// gRPC addresses of the nodes that may lead `group`, from this node's
    /// replica of the directory: its voters, plus the target voters of a
    /// running move (leadership goes there before the directory says so).
    pub fn member_addrs(&self, group: GroupId) -> Vec<String> {
        let Some(dir) = self.get(GroupId::DIRECTORY) else {
            return Vec::new();
        };
        dir.sm.read(|s| {
            let d = &s.state.directory;
            let mut ids: Vec<seatfence_core::NodeId> = if group.is_directory() {
                d.nodes.keys().copied().collect()
            } else {
                d.groups
                    .get(&group)
                    .map(|g| g.members.clone())
                    .unwrap_or_default()
            };
            // A moving group's leader ends up among the target voters: ask
            // them first (a removed leader answers with no hint).
            if let Some(m) = d.running_move_of(group) {
                let old: Vec<_> = ids
                    .drain(..)
                    .filter(|n| !m.to_members.contains(n))
                    .collect();
                ids = m.to_members.clone();
                ids.extend(old);
            }
            ids.iter()
                .filter_map(|id| d.nodes.get(id).map(|n| n.grpc_addr.clone()))
                .collect()
        })
    }

    /// Read this node's replica of the directory (`None` when it is not
    /// hosted here).
    pub fn read_directory<T>(&self, f: impl FnOnce(&seatfence_core::Directory) -> T) -> Option<T> {
        self.get(GroupId::DIRECTORY)
            .map(|d| d.sm.read(|s| f(&s.state.directory)))
    }

    /// Every node in this node's replica of the directory, with its gRPC
    /// address.
    pub fn directory_nodes(&self) -> Vec<(u64, String)> {
        let Some(dir) = self.get(GroupId::DIRECTORY) else {
            return Vec::new();
        };
        dir.sm.read(|s| {
            s.state
                .directory
                .nodes
                .iter()
                .map(|(id, n)| (id.0, n.grpc_addr.clone()))
                .collect()
        })
    }

    /// Whether this node's directory replica holds a cluster (it lists a
    /// node: every node registers itself at each start), and the
    /// incarnation it records for node `id` if it lists it: what a node starting on an empty data dir asks its
    /// peers (see [`crate::storage::ident`]). A directory that has a
    /// membership but no node yet is a cluster still forming, whose first
    /// leader waits for the other initial members.
    pub fn directory_knows(&self, id: u64) -> (bool, Option<u64>) {
        let Some(dir) = self.get(GroupId::DIRECTORY) else {
            return (false, None);
        };
        dir.sm.read(|s| {
            let nodes = &s.state.directory.nodes;
            (
                !nodes.is_empty(),
                nodes
                    .get(&seatfence_core::NodeId(id))
                    .map(|n| n.incarnation),
            )
        })
    }

    /// Whether node `node` may send group `g`'s Raft traffic (as its
    /// candidate or leader): a voter or learner of the replica's own
    /// membership (its log, which may be ahead of this node's directory
    /// replica), or a member in the directory replica, a target of its
    /// running move or the node a running repair adds (which may be ahead
    /// of the log). Group 0's traffic is the gate's to decide (a replica
    /// behind on the directory learns its members from it).
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
        let Some(dir) = self.get(GroupId::DIRECTORY) else {
            return false;
        };
        let who = seatfence_core::NodeId(node);
        dir.sm.read(|s| {
            let d = &s.state.directory;
            d.groups
                .get(&g.id)
                .is_some_and(|i| i.members.contains(&who))
                || d.running_move_of(g.id)
                    .is_some_and(|m| m.to_members.contains(&who))
                || d.repairs.get(&g.id).is_some_and(|r| r.add == who)
        })
    }

    /// Whether this node's directory replica lists this node as a voter of
    /// `id`.
    pub fn directory_voter(&self, id: GroupId) -> bool {
        let me = seatfence_core::NodeId(self.node_id);
        self.get(GroupId::DIRECTORY).is_some_and(|dir| {
            dir.sm.read(|s| {
                s.state
                    .directory
                    .groups
                    .get(&id)
                    .is_some_and(|g| g.members.contains(&me))
            })
        })
    }
}
