//! The directory's side of a node's rejoin on an empty data dir
//! (`seatfence node --rejoin-empty`): see [`Rejoin`](crate::lifecycle::Rejoin).

use std::collections::BTreeMap;

use crate::directory::Directory;
use crate::ids::{GroupId, NodeId};
use crate::lifecycle::{NodeOpDone, NodeRefused, Rejoin, RepairReason};
use crate::record_key::RecordKey;

impl Directory {
    pub(crate) fn rejoin_record(&self, node: NodeId) -> Result<NodeOpDone, NodeRefused> {
        let r = self.rejoins.get(&node).cloned();
        r.map(NodeOpDone::Rejoin).ok_or_else(|| {
            NodeRefused::new("rejoin_not_found", format!("node {node} is not rejoining"))
        })
    }

    /// [`NodeOp::Rejoin`].
    pub(crate) fn rejoin(
        &mut self,
        node: NodeId,
        incarnation: u64,
        at_ms: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Result<NodeOpDone, NodeRefused> {
        self.known(node)?;
        if let Some(r) = self
            .rejoins
            .get(&node)
            .filter(|r| r.incarnation == incarnation)
        {
            return Ok(NodeOpDone::Rejoin(r.clone()));
        }
        if self.node_state(node).is_retired() {
            return Err(NodeRefused::new(
                "node_retired",
                format!(
                    "node {node} is {}: its id does not come back; start the host under a new id",
                    self.node_state(node).name()
                ),
            ));
        }
        if incarnation == 0 {
            return Err(NodeRefused::new("invalid_request", "incarnation 0"));
        }
        // Every group whose replica the node holds or is receiving: a
        // running move or repair may already have made it a voter there
        // before the directory lists it.
        let mut pending = self.hosted_on(node);
        pending.insert(GroupId::DIRECTORY);
        // A rejoin repair of the node's previous life (wiped again
        // mid-way) must not finish for this one: the plan starts anew.
        let stale: Vec<GroupId> = self
            .repairs
            .values()
            .filter(|r| r.reason == RepairReason::Rejoin && r.remove == node)
            .map(|r| r.group)
            .collect();
        for g in stale {
            self.repairs.remove(&g);
            changed.push(RecordKey::Repair(g));
        }
        let r = Rejoin {
            incarnation,
            pending,
            started_ms: at_ms,
            directory_demoted: false,
            floors: BTreeMap::new(),
        };
        if let Some(n) = self.nodes.get_mut(&node) {
            n.incarnation = incarnation;
            changed.push(RecordKey::Node(node));
        }
        self.rejoins.insert(node, r.clone());
        changed.push(RecordKey::Rejoin(node));
        Ok(NodeOpDone::Rejoin(r))
    }

    /// `group` no longer waits for `node`'s rejoin (nothing if it did not).
    pub(crate) fn rejoin_done(
        &mut self,
        node: NodeId,
        group: GroupId,
        changed: &mut Vec<RecordKey>,
    ) {
        if let Some(r) = self.rejoins.get_mut(&node) {
            if r.pending.remove(&group) {
                r.floors.remove(&group);
                changed.push(RecordKey::Rejoin(node));
            }
        }
    }
}
