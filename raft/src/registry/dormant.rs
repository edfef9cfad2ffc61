//! Replicas hosted here but unloaded from memory (`sleep::dormant`): found,
//! reopened on use, unloaded, and reopened when their leader's node dies.

use std::collections::HashMap;
use std::sync::Arc;

use seatfence_core::GroupId;

use super::{warn_failed, GroupHandle, Registry};
use crate::sleep::dormant::Dormant;

impl Registry {
    /// The replica of `id` hosted here, reopened from storage if it is
    /// dormant (see [`crate::sleep::dormant`]); `None` if not hosted here.
    pub async fn hosted(&self, id: GroupId) -> Option<Arc<GroupHandle>> {
        if let Some(h) = self.get(id) {
            return Some(h);
        }
        if !self.is_dormant(id) {
            return None;
        }
        let _guard = self.opening.lock().await;
        if let Some(h) = self.get(id) {
            return Some(h);
        }
        // Checked again under the lock: the record may have gone while this
        // waited (retired, because the directory moved the group away).
        // Reopening then would bring back a replica nothing tracks any more
        // — one placement might later find still running when the group
        // comes back here, and serve its stale state.
        let record = self.dormant_record(id)?;
        warn_failed(
            id,
            "reopen dormant replica",
            self.open_locked(id, Some(record), false).await,
        )
    }

    /// Whether `id` is hosted here but unloaded from memory.
    pub fn is_dormant(&self, id: GroupId) -> bool {
        self.dormant
            .read()
            .expect("registry lock poisoned")
            .contains_key(&id)
    }

    /// The record of a dormant replica.
    pub fn dormant_record(&self, id: GroupId) -> Option<Dormant> {
        self.dormant
            .read()
            .expect("registry lock poisoned")
            .get(&id)
            .cloned()
    }

    /// Every group hosted here, in memory or dormant.
    pub fn hosted_ids(&self) -> std::collections::BTreeSet<GroupId> {
        let mut ids: std::collections::BTreeSet<GroupId> = self
            .groups
            .read()
            .expect("registry lock poisoned")
            .keys()
            .copied()
            .collect();
        ids.extend(self.dormant.read().expect("registry lock poisoned").keys());
        ids
    }

    /// `Status` entries of the dormant replicas (as they were unloaded).
    pub fn dormant_status(&self) -> Vec<seatfence_proto::v1::GroupStatus> {
        let dormant = self.dormant.read().expect("registry lock poisoned");
        dormant.values().map(|d| d.status.clone()).collect()
    }

    /// Unload `g` (a sleeping follower, see [`crate::sleep::dormant::plan`])
    /// from memory, keeping `record`; unless it woke or went away meanwhile.
    /// Whether it was unloaded.
    pub async fn unload(&self, g: &Arc<GroupHandle>, record: Dormant) -> bool {
        let _guard = self.opening.lock().await;
        match self.get(g.id) {
            Some(h) if Arc::ptr_eq(&h, g) && g.is_asleep() => {}
            _ => return false,
        }
        // The record first, then out of the map (every change of either is
        // made under `opening`): a lookup finds one or the other, never
        // neither, so a message or a use meanwhile never hears "not hosted".
        self.dormant
            .write()
            .expect("registry lock poisoned")
            .insert(g.id, record);
        crate::metrics::METRICS.groups_dormant.increment(1.0);
        self.groups
            .write()
            .expect("registry lock poisoned")
            .remove(&g.id);
        g.leave_sleep_count();
        if let Err(e) = g.raft.shutdown().await {
            tracing::warn!(group = g.id.0, "shutdown of unloaded replica: {e}");
        }
        tracing::debug!(group = g.id.0, "unloaded sleeping follower");
        true
    }

    /// Reopen the dormant replicas whose leader is on a node in `down`, so
    /// node liveness can wake them to elect.
    pub async fn reopen_dormant_led_by<V>(&self, down: &HashMap<u64, V>) {
        if down.is_empty() {
            return;
        }
        let ids: Vec<GroupId> = {
            let dormant = self.dormant.read().expect("registry lock poisoned");
            dormant
                .iter()
                .filter(|(_, d)| down.contains_key(&d.leader))
                .map(|(id, _)| *id)
                .collect()
        };
        for id in ids {
            self.hosted(id).await;
        }
    }

    /// Forget `id`'s dormant record; whether there was one.
    pub(super) fn forget_dormant(&self, id: GroupId) -> Option<Dormant> {
        let d = self
            .dormant
            .write()
            .expect("registry lock poisoned")
            .remove(&id);
        if d.is_some() {
            crate::metrics::METRICS.groups_dormant.decrement(1.0);
        }
        d
    }
}
