//! A repair (or rejoin) as one drive of `directory::Drives` sees it.

use seatfence_core::{GroupId, NodeId, Repair};
use seatfence_raft::registry::Registry;

use super::Lifecycle;
use crate::directory::{Driven, Next};

/// A repair (or rejoin) as a drive sees it: the repair, the group's
/// voters as the directory records them (the old ones, until
/// `FinishRepair`), and whether the node it adds still takes replicas
/// (otherwise the repair is cancelled).
type RepairItem = (Repair, Vec<NodeId>, bool);

impl Driven for Lifecycle {
    type Key = GroupId;
    type Item = RepairItem;
    type State = ();
    const KIND: &'static str = "repair";

    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn step_delay_ms(&self) -> u64 {
        self.config.step_delay_ms
    }

    fn item(&self, group: GroupId) -> Option<RepairItem> {
        self.read(|d| {
            let r = d.repairs.get(&group)?.clone();
            let members = d.groups.get(&group)?.members.clone();
            let add_live = d.node_state(r.add).takes_replicas();
            Some((r, members, add_live))
        })
    }

    fn step_name((r, _, _): &RepairItem) -> &'static str {
        r.step.name()
    }

    async fn step(&self, (r, members, add_live): &RepairItem, _: &mut ()) -> anyhow::Result<Next> {
        if *add_live {
            self.perform(r, members).await?;
        } else {
            self.cancel(r, members).await?;
        }
        Ok(Next::Again)
    }
}
