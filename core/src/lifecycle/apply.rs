//! Applying a [`NodeOp`] to the directory: node states, decommissions,
//! repairs and rejoins, each refused with a [`NodeRefused`] code when it
//! does not fit the records (the rules of the module above).

use crate::directory::Directory;
use crate::ids::{GroupId, NodeId};
use crate::record_key::RecordKey;

use super::{NodeOp, NodeOpDone, NodeRefused, NodeState, Repair, RepairReason, RepairStep};

impl Directory {
    /// Apply one lifecycle operation.
    pub fn apply_node_op(
        &mut self,
        op: &NodeOp,
        at_ms: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Result<NodeOpDone, NodeRefused> {
        match op {
            NodeOp::SetState { node, state } => self.set_node_state(*node, *state, changed),
            NodeOp::Decommission { node } => self.decommission(*node, changed),
            NodeOp::Recommission { node } => self.recommission(*node, changed),
            NodeOp::Decommissioned { node } => self.decommissioned(*node, changed),
            NodeOp::StartRepair {
                group,
                remove,
                add,
                reason,
            } => self.start_repair(*group, *remove, *add, *reason, at_ms, changed),
            NodeOp::AdvanceRepair { group, from } => self.advance_repair(*group, *from, changed),
            NodeOp::FinishRepair { group } => self.finish_repair(*group, changed),
            NodeOp::CancelRepair { group } => {
                self.repair_mut(*group)?;
                self.repairs.remove(group);
                changed.push(RecordKey::Repair(*group));
                Ok(NodeOpDone::Repair(None))
            }
            NodeOp::Rejoin { node, incarnation } => {
                self.rejoin(*node, *incarnation, at_ms, changed)
            }
            NodeOp::RejoinDone { node, group } => {
                self.known(*node)?;
                if self
                    .groups
                    .get(group)
                    .is_some_and(|g| g.members.contains(node))
                {
                    return Err(NodeRefused::new(
                        "still_a_member",
                        format!("node {node} is still a voter of group {group}"),
                    ));
                }
                self.rejoin_done(*node, *group, changed);
                self.rejoin_record(*node)
            }
            NodeOp::RejoinDemoted { node, group, term } => {
                if let Some(r) = self.rejoins.get_mut(node) {
                    if r.pending.contains(group) && !r.floors.contains_key(group) {
                        r.floors.insert(*group, *term);
                        changed.push(RecordKey::Rejoin(*node));
                    }
                }
                self.rejoin_record(*node)
            }
            NodeOp::RejoinDirectoryDemoted { node } => {
                if let Some(r) = self.rejoins.get_mut(node) {
                    if r.pending.contains(&GroupId::DIRECTORY) && !r.directory_demoted {
                        r.directory_demoted = true;
                        changed.push(RecordKey::Rejoin(*node));
                    }
                }
                self.rejoin_record(*node)
            }
        }
    }

    /// `Recommission`: a decommissioning node is live again.
    fn recommission(
        &mut self,
        node: NodeId,
        changed: &mut Vec<RecordKey>,
    ) -> Result<NodeOpDone, NodeRefused> {
        self.known(node)?;
        match self.node_state(node) {
            NodeState::Decommissioning => {
                self.put_state(node, NodeState::Live, changed);
                Ok(NodeOpDone::State(NodeState::Live))
            }
            NodeState::Live => Ok(NodeOpDone::State(NodeState::Live)),
            other => Err(NodeRefused::new(
                "not_decommissioning",
                format!("node {node} is {}", other.name()),
            )),
        }
    }

    /// `Decommissioned`: a decommissioning node that holds no replica.
    fn decommissioned(
        &mut self,
        node: NodeId,
        changed: &mut Vec<RecordKey>,
    ) -> Result<NodeOpDone, NodeRefused> {
        self.known(node)?;
        match self.node_state(node) {
            NodeState::Decommissioned => {}
            NodeState::Decommissioning if self.replica_count(node) == 0 => {
                self.put_state(node, NodeState::Decommissioned, changed);
            }
            other => {
                return Err(NodeRefused::new(
                    "replicas_remain",
                    format!(
                        "node {node} is {} and holds {} replicas",
                        other.name(),
                        self.replica_count(node)
                    ),
                ))
            }
        }
        Ok(NodeOpDone::State(NodeState::Decommissioned))
    }

    /// `AdvanceRepair` from `AddLearner`: the learner caught up.
    fn advance_repair(
        &mut self,
        group: GroupId,
        from: RepairStep,
        changed: &mut Vec<RecordKey>,
    ) -> Result<NodeOpDone, NodeRefused> {
        let r = self.repair_mut(group)?;
        if r.step != from || from != RepairStep::AddLearner {
            return Err(step_mismatch(r, from));
        }
        r.step = RepairStep::ChangeMembership;
        let r = r.clone();
        changed.push(RecordKey::Repair(group));
        Ok(NodeOpDone::Repair(Some(r)))
    }

    /// `FinishRepair`: the membership changed; the group's members follow.
    fn finish_repair(
        &mut self,
        group: GroupId,
        changed: &mut Vec<RecordKey>,
    ) -> Result<NodeOpDone, NodeRefused> {
        let r = self.repair_mut(group)?;
        if r.step != RepairStep::ChangeMembership {
            return Err(step_mismatch(r, RepairStep::ChangeMembership));
        }
        let r = self.repairs.remove(&group).expect("found above");
        changed.push(RecordKey::Repair(group));
        if let Some(g) = self.groups.get_mut(&group) {
            g.members = r.members_after(&g.members);
            changed.push(RecordKey::Group(group));
        }
        // The rejoined node is a caught-up voter again, or (another
        // repair) not a voter at all: either way the group no longer
        // waits for it.
        self.rejoin_done(r.remove, group, changed);
        Ok(NodeOpDone::Repair(None))
    }

    pub(crate) fn known(&self, node: NodeId) -> Result<(), NodeRefused> {
        if self.nodes.contains_key(&node) {
            Ok(())
        } else {
            Err(NodeRefused::new("node_not_found", format!("node {node}")))
        }
    }

    fn put_state(&mut self, node: NodeId, state: NodeState, changed: &mut Vec<RecordKey>) {
        if state == NodeState::Live {
            self.node_states.remove(&node);
        } else {
            self.node_states.insert(node, state);
        }
        changed.push(RecordKey::NodeState(node));
    }

    /// [`NodeOp::SetState`]. Liveness moves a node between live, suspect
    /// and (undeclared) dead; it never touches a decommission or a declared
    /// death. An operator's declaration (`Dead{declared: true}`) holds
    /// until the node is decommissioned.
    fn set_node_state(
        &mut self,
        node: NodeId,
        state: NodeState,
        changed: &mut Vec<RecordKey>,
    ) -> Result<NodeOpDone, NodeRefused> {
        self.known(node)?;
        let now = self.node_state(node);
        let allowed = match (now, state) {
            (a, b) if a == b => return Ok(NodeOpDone::State(now)),
            (
                NodeState::Decommissioning
                | NodeState::Decommissioned
                | NodeState::Dead { declared: true },
                _,
            ) => false,
            (NodeState::Live, NodeState::Dead { declared: true }) => {
                return Err(NodeRefused::new(
                    "node_alive",
                    format!(
                        "node {node} answers the directory's leader; only a suspect node can \
                         be declared dead (decommission a live one)"
                    ),
                ))
            }
            (_, NodeState::Dead { declared: true }) => true,
            (_, NodeState::Live | NodeState::Suspect | NodeState::Dead { declared: false }) => true,
            _ => false,
        };
        if !allowed {
            return Err(NodeRefused::new(
                "state_refused",
                format!(
                    "node {node} is {}, cannot become {}",
                    now.name(),
                    state.name()
                ),
            ));
        }
        self.put_state(node, state, changed);
        Ok(NodeOpDone::State(state))
    }

    /// [`NodeOp::Decommission`]: refused when a group with a voter on the
    /// node would have nowhere to go.
    fn decommission(
        &mut self,
        node: NodeId,
        changed: &mut Vec<RecordKey>,
    ) -> Result<NodeOpDone, NodeRefused> {
        self.known(node)?;
        let now = self.node_state(node);
        match now {
            NodeState::Decommissioning | NodeState::Decommissioned => {
                return Ok(NodeOpDone::State(now))
            }
            NodeState::Live | NodeState::Suspect | NodeState::Dead { .. } => {}
        }
        let counts = self.replica_counts();
        let stuck: Vec<u64> = self
            .groups_of(node)
            .filter(|g| self.replacement(g.id, node, &counts).is_none())
            .map(|g| g.id.0)
            .collect();
        if let Some(first) = stuck.first() {
            let region = &self.nodes[&node].region;
            return Err(NodeRefused::new(
                "no_spare_node",
                format!(
                    "region {region} has no live node to take node {node}'s replicas of \
                     {} groups (group {first} first); add a node to the region first",
                    stuck.len()
                ),
            ));
        }
        self.put_state(node, NodeState::Decommissioning, changed);
        Ok(NodeOpDone::State(NodeState::Decommissioning))
    }

    /// [`NodeOp::StartRepair`]: one repair per group, never beside a move,
    /// only for a voter of the group, to a live member-less node of its
    /// region. Starting the same repair again answers it.
    fn start_repair(
        &mut self,
        group: GroupId,
        remove: NodeId,
        add: Option<NodeId>,
        reason: RepairReason,
        at_ms: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Result<NodeOpDone, NodeRefused> {
        if let Some(r) = self.repairs.get(&group) {
            if r.remove == remove && add.is_none_or(|a| a == r.add) {
                return Ok(NodeOpDone::Repair(Some(r.clone())));
            }
            return Err(NodeRefused::new(
                "repair_in_progress",
                format!(
                    "group {group} is already replacing node {} with node {}",
                    r.remove, r.add
                ),
            ));
        }
        let g = self
            .groups
            .get(&group)
            .ok_or_else(|| NodeRefused::new("group_not_found", format!("group {group}")))?;
        if !g.members.contains(&remove) {
            return Err(NodeRefused::new(
                "not_a_member",
                format!("node {remove} is not a voter of group {group}"),
            ));
        }
        if self.is_moving(group) {
            return Err(NodeRefused::new(
                "move_in_progress",
                format!("group {group}'s event is moving"),
            ));
        }
        if reason == RepairReason::Rejoin || add == Some(remove) {
            if reason != RepairReason::Rejoin || add.is_some_and(|a| a != remove) {
                return Err(NodeRefused::new(
                    "invalid_request",
                    "a rejoin repair puts the same node back, and only it does",
                ));
            }
            if !self.rejoin_pending(remove, group) {
                return Err(NodeRefused::new(
                    "rejoin_not_found",
                    format!("node {remove} is not rejoining group {group}"),
                ));
            }
        }
        let add = match add {
            None if reason == RepairReason::Rejoin => Some(remove),
            None => self.replacement(group, remove, &self.replica_counts()),
            Some(a) if reason == RepairReason::Rejoin => Some(a),
            Some(a) => {
                let fits =
                    self.nodes.get(&a).is_some_and(|n| {
                        Some(&n.region) == self.nodes.get(&remove).map(|r| &r.region)
                    }) && !g.members.contains(&a)
                        && self.node_state(a).takes_replicas();
                fits.then_some(a)
            }
        };
        let add = add.ok_or_else(|| {
            NodeRefused::new(
                "no_spare_node",
                format!("no live node of node {remove}'s region can take group {group}"),
            )
        })?;
        let r = Repair {
            group,
            remove,
            add,
            reason,
            step: RepairStep::AddLearner,
            started_ms: at_ms,
        };
        self.repairs.insert(group, r.clone());
        changed.push(RecordKey::Repair(group));
        Ok(NodeOpDone::Repair(Some(r)))
    }

    fn repair_mut(&mut self, group: GroupId) -> Result<&mut Repair, NodeRefused> {
        self.repairs
            .get_mut(&group)
            .ok_or_else(|| NodeRefused::new("repair_not_found", format!("group {group}")))
    }
}

fn step_mismatch(r: &Repair, from: RepairStep) -> NodeRefused {
    NodeRefused::new(
        "step_mismatch",
        format!(
            "group {}'s repair is at {}, not {}",
            r.group,
            r.step.name(),
            from.name()
        ),
    )
}
