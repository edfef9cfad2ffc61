//! `Directory::apply_move`: one [`MoveOp`], pure and deterministic. Each
//! operation is a compare-and-set on the move's state and step, so a late or
//! repeated operation changes nothing.

use crate::directory::{Directory, Placement, RouteState};
use crate::ids::{Epoch, EventId, NodeId, RegionId};
use crate::inventory::Survival;
use crate::record_key::RecordKey;

use super::{MoveOp, MoveRecord, MoveRefused, MoveState, MoveStep};

impl Directory {
    /// Apply one move operation. Returns the move as it stands afterwards.
    pub fn apply_move(
        &mut self,
        op: &MoveOp,
        at_ms: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Result<MoveRecord, MoveRefused> {
        match op {
            MoveOp::Start {
                event_id,
                to_region,
                actor,
                request,
            } => self.start_move(event_id, to_region, actor, request, at_ms, changed),
            MoveOp::Advance {
                move_id,
                from,
                pause_ms,
            } => self.advance_move(*move_id, *from, *pause_ms, at_ms, changed),
            MoveOp::Finish { move_id, epoch } => self.finish_move(*move_id, *epoch, at_ms, changed),
            MoveOp::Abort { move_id, reason } => self.abort_move(*move_id, reason, at_ms, changed),
            MoveOp::Cleaned { move_id } => self.mark_move_cleaned(*move_id, changed),
        }
    }

    /// [`MoveOp::Start`]: record a new move of `event_id` into `to_region`
    /// at step `add_learners`, place its target voters and mark the route
    /// `moving`. Refused while the event is already moving, or when
    /// `to_region` already owns it.
    fn start_move(
        &mut self,
        event_id: &EventId,
        to_region: &RegionId,
        actor: &str,
        request: &str,
        at_ms: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Result<MoveRecord, MoveRefused> {
        let route = self
            .events
            .get(event_id)
            .ok_or_else(|| MoveRefused::new("event_not_found", format!("event {event_id}")))?;
        if let RouteState::Moving { move_id } = route.state {
            let m = &self.moves[&move_id];
            if !request.is_empty() && m.request == request && &m.to_region == to_region {
                // The same request again while its move runs: that move.
                return Ok(m.clone());
            }
            return Err(MoveRefused::new(
                "move_in_progress",
                format!("event {event_id} is already moving (move {move_id})"),
            )
            .with(m));
        }
        if &route.owner_region == to_region {
            return Err(MoveRefused::new(
                "already_owner",
                format!("event {event_id} is already owned by {to_region}"),
            ));
        }
        let group = self
            .groups
            .get(&route.group)
            .ok_or_else(|| MoveRefused::new("group_not_found", format!("group {}", route.group)))?;
        if let Some(r) = self.repairs.get(&route.group) {
            return Err(MoveRefused::new(
                "repair_in_progress",
                format!(
                    "group {} is replacing node {} with node {}; move it after",
                    route.group, r.remove, r.add
                ),
            ));
        }
        let from_members = group.members.clone();
        let to_members = self.place_move(&from_members, to_region, route.survival)?;
        let move_id = self.next_move_id.max(1);
        self.next_move_id = move_id + 1;
        let m = MoveRecord {
            move_id,
            event_id: event_id.clone(),
            group: route.group,
            from_region: route.owner_region.clone(),
            to_region: to_region.clone(),
            from_epoch: route.epoch,
            from_members,
            to_members,
            step: MoveStep::AddLearners,
            state: MoveState::Running,
            started_ms: at_ms,
            updated_ms: at_ms,
            history: vec![(MoveStep::AddLearners, at_ms)],
            actor: actor.to_owned(),
            reason: None,
            cleaned: false,
            pause_ms: None,
            request: request.to_owned(),
        };
        let route = self.events.get_mut(event_id).expect("checked above");
        route.state = RouteState::Moving { move_id };
        changed.push(RecordKey::Route(event_id.clone()));
        changed.push(RecordKey::NextMoveId);
        changed.push(RecordKey::Move(move_id));
        self.moves.insert(move_id, m.clone());
        Ok(m)
    }

    /// [`MoveOp::Advance`]: move a running move from step `from` to the
    /// next, only if it is at `from` (and `from` is before
    /// `update_directory`, which only [`MoveOp::Finish`] ends).
    fn advance_move(
        &mut self,
        move_id: u64,
        from: MoveStep,
        pause_ms: Option<u64>,
        at_ms: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Result<MoveRecord, MoveRefused> {
        let m = self.move_mut(move_id)?;
        if !m.is_running() || m.step != from || from >= MoveStep::UpdateDirectory {
            return Err(MoveRefused::new(
                "step_mismatch",
                format!(
                    "move {move_id} is {} at {}, not running at {}",
                    m.state.name(),
                    m.step.name(),
                    from.name()
                ),
            )
            .with(m));
        }
        m.step = from.next();
        m.updated_ms = at_ms;
        m.history.push((m.step, at_ms));
        if pause_ms.is_some() {
            m.pause_ms = pause_ms;
        }
        let m = m.clone();
        changed.push(RecordKey::Move(move_id));
        Ok(m)
    }

    /// [`MoveOp::Finish`]: the new epoch is committed in the event group.
    /// Only from `update_directory` and only to `from_epoch + 1`: the move is
    /// done, the route takes the new epoch and owner (and is active again),
    /// the group its new voters. Finishing a done move answers it again.
    fn finish_move(
        &mut self,
        move_id: u64,
        epoch: Epoch,
        at_ms: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Result<MoveRecord, MoveRefused> {
        let m = self.move_mut(move_id)?;
        if m.state == MoveState::Done {
            return Ok(m.clone());
        }
        if !m.is_running() || m.step != MoveStep::UpdateDirectory {
            return Err(MoveRefused::new(
                "step_mismatch",
                format!(
                    "move {move_id} is {} at {}, not at update_directory",
                    m.state.name(),
                    m.step.name()
                ),
            )
            .with(m));
        }
        if epoch.0 != m.from_epoch.0 + 1 {
            return Err(MoveRefused::new(
                "bad_epoch",
                format!("move {move_id} ends at epoch {}", m.from_epoch.0 + 1),
            )
            .with(m));
        }
        m.step = MoveStep::Done;
        m.state = MoveState::Done;
        m.updated_ms = at_ms;
        m.history.push((MoveStep::Done, at_ms));
        let m = m.clone();
        changed.push(RecordKey::Move(move_id));
        if let Some(route) = self.events.get_mut(&m.event_id) {
            route.epoch = epoch;
            route.owner_region = m.to_region.clone();
            route.state = RouteState::Active;
            changed.push(RecordKey::Route(m.event_id.clone()));
        }
        if let Some(g) = self.groups.get_mut(&m.group) {
            g.members = m.to_members.clone();
            changed.push(RecordKey::Group(m.group));
        }
        Ok(m)
    }

    /// [`MoveOp::Abort`]: abort a running move before its membership change
    /// (see [`MoveStep::abortable`]); the route is active again, unchanged.
    /// Aborting an aborted move answers it again.
    fn abort_move(
        &mut self,
        move_id: u64,
        reason: &str,
        at_ms: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Result<MoveRecord, MoveRefused> {
        let m = self.move_mut(move_id)?;
        if m.state == MoveState::Aborted {
            return Ok(m.clone());
        }
        if !m.is_running() || !m.step.abortable() {
            return Err(MoveRefused::new(
                "move_not_abortable",
                format!(
                    "move {move_id} is {} at {}: only a running move before its \
                     membership change can be aborted",
                    m.state.name(),
                    m.step.name()
                ),
            )
            .with(m));
        }
        m.state = MoveState::Aborted;
        m.reason = Some(reason.to_owned());
        m.updated_ms = at_ms;
        let m = m.clone();
        changed.push(RecordKey::Move(move_id));
        if let Some(route) = self.events.get_mut(&m.event_id) {
            route.state = RouteState::Active;
            changed.push(RecordKey::Route(m.event_id.clone()));
        }
        Ok(m)
    }

    /// [`MoveOp::Cleaned`]: an aborted move's learners have been removed.
    fn mark_move_cleaned(
        &mut self,
        move_id: u64,
        changed: &mut Vec<RecordKey>,
    ) -> Result<MoveRecord, MoveRefused> {
        let m = self.move_mut(move_id)?;
        if m.state != MoveState::Aborted {
            return Err(MoveRefused::new(
                "step_mismatch",
                format!("move {move_id} is {}, not aborted", m.state.name()),
            )
            .with(m));
        }
        m.cleaned = true;
        let m = m.clone();
        changed.push(RecordKey::Move(move_id));
        Ok(m)
    }

    fn move_mut(&mut self, id: u64) -> Result<&mut MoveRecord, MoveRefused> {
        self.moves
            .get_mut(&id)
            .ok_or_else(|| MoveRefused::new("move_not_found", format!("move {id}")))
    }

    /// The voters a group moving into `to` will have. Zone survival: three
    /// nodes of `to`, least loaded first, the least-leading first. Region
    /// survival: the same voters (one per region already), with the one in
    /// `to` first, so leadership goes there.
    fn place_move(
        &self,
        from_members: &[NodeId],
        to: &RegionId,
        survival: Survival,
    ) -> Result<Vec<NodeId>, MoveRefused> {
        if !self.nodes.values().any(|n| &n.region == to) {
            return Err(MoveRefused::new(
                "unknown_region",
                format!("no node is registered in region {to}"),
            ));
        }
        let mut members = match survival {
            Survival::Zone => self
                .place(&Placement::InRegion {
                    region: to.clone(),
                    replicas: u8::try_from(from_members.len()).unwrap_or(3),
                })
                .map_err(|e| MoveRefused::new("placement_failed", e))?,
            Survival::Region => from_members.to_vec(),
        };
        // Never lead from a drained, retiring or dead node; prefer a voter
        // in `to`.
        let in_to = |n: &NodeId| self.nodes.get(n).is_some_and(|i| &i.region == to);
        let not_leading = self.not_leading();
        if let Some(i) = members
            .iter()
            .position(|n| in_to(n) && !not_leading.contains(n))
        {
            members.swap(0, i);
        }
        if !members.first().is_some_and(in_to) {
            return Err(MoveRefused::new(
                "placement_failed",
                format!("no voter of the group can be placed in region {to}"),
            ));
        }
        Ok(members)
    }
}
