//! Node lifecycle on the directory's leader: liveness into node states,
//! replica repairs, replica rebalancing, directory voters and retiring
//! decommissioned nodes. The records and their rules are
//! `seatfence_core::lifecycle`; this task only proposes operations and
//! performs membership changes at the groups' leaders.
//!
//! ```text
//!  every lifecycle_every_ms, while leading group 0:
//!    ping every node ─▶ silent ≥ suspect_after_ms: suspect, ≥ dead_after_ms: dead, answers: live
//!    voter on a dead / decommissioning node, group not moving ─▶ StartRepair (≤ repair_parallel)
//!    nothing to repair, a region's replica counts differ by ≥ 2 ─▶ StartRepair(rebalance) (≤ rebalance_parallel)
//!    a directory voter dead / decommissioning ─▶ another live node votes instead
//!    decommissioning, no replica, no directory vote ─▶ decommissioned
//!  one task per repair (progress only in the directory, resumable):
//!    add_learner        AddLearners([add]) at the group's leader; wait until caught up
//!    change_membership  SetVoters(members − remove + add): joint, then final; FinishRepair
//! ```
//!
//! Every step is idempotent, so a directory leader killed mid-repair is
//! replaced by the next, which repeats the step the directory records. One
//! repair per group; a group loses a voter only in the same joint change
//! that adds its replacement, so it never drops below a majority of live
//! voters it did not already lack.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::MovesConfig;
use seatfence_core::{
    Command, Directory, GroupId, NodeId, NodeOp, NodeOpDone, NodeRefused, NodeState, Repair,
    RepairReason, RepairStep, Response,
};
use seatfence_raft::clock::Clock;
use seatfence_raft::membership::MembershipOp;
use seatfence_raft::metrics::METRICS;
use seatfence_raft::registry::Registry;
use seatfence_raft::ClusterClient;
use tokio::sync::watch;

struct Lifecycle {
    registry: Arc<Registry>,
    client: ClusterClient,
    config: MovesConfig,
    clock: Arc<dyn Clock>,
    /// Groups whose repair a task of this node drives.
    driving: Mutex<HashSet<GroupId>>,
}

/// Start the lifecycle task of this node; it acts only while the node
/// leads the directory.
pub fn spawn(
    registry: Arc<Registry>,
    client: ClusterClient,
    config: MovesConfig,
    clock: Arc<dyn Clock>,
    rx_stop: watch::Receiver<bool>,
) {
    let l = Arc::new(Lifecycle {
        registry,
        client,
        config,
        clock,
        driving: Mutex::new(HashSet::new()),
    });
    tokio::spawn(l.run(rx_stop));
}

impl Lifecycle {
    async fn run(self: Arc<Self>, mut rx_stop: watch::Receiver<bool>) {
        // Since when each node has not answered (this leader's view; it
        // starts over with each new leader, so nobody is declared dead
        // sooner than `dead_after_ms` of silence).
        let mut silent: BTreeMap<NodeId, Instant> = BTreeMap::new();
        let every = Duration::from_millis(self.config.lifecycle_every_ms.max(100));
        loop {
            tokio::select! {
                biased;
                _ = rx_stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(every) => {}
            }
            let Some(dir) = self.registry.get(GroupId::DIRECTORY) else {
                continue;
            };
            record_metrics(&self.directory());
            if !dir.raft.is_leader() {
                silent.clear();
                continue;
            }
            if let Err(e) = self.round(&mut silent, &rx_stop).await {
                tracing::warn!("node lifecycle: {e:#}");
            }
        }
    }

    /// One look at the cluster: states, repairs to start, directory voters,
    /// decommissions that completed.
    async fn round(
        self: &Arc<Self>,
        silent: &mut BTreeMap<NodeId, Instant>,
        rx_stop: &watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let d = self.directory();
        self.update_states(&d, silent).await?;
        let d = self.directory();
        for op in plan_repairs(&d, &self.config) {
            match self.propose(op.clone()).await? {
                Ok(_) => tracing::info!(?op, "repair started"),
                Err(r) => tracing::debug!(?op, "repair not started: {}", r.message),
            }
        }
        let d = self.directory();
        for r in d.repairs.values() {
            let fresh = self.driving.lock().expect("lock poisoned").insert(r.group);
            if fresh {
                tokio::spawn(self.clone().drive(r.group, rx_stop.clone()));
            }
        }
        self.directory_voters(&d).await?;
        for (node, state) in &d.node_states {
            if *state == NodeState::Decommissioning
                && d.replica_count(*node) == 0
                && !self.directory_voters_now().contains(&node.0)
            {
                if let Ok(Ok(_)) = self.propose(NodeOp::Decommissioned { node: *node }).await {
                    tracing::info!(node = node.0, "node decommissioned");
                }
            }
        }
        Ok(())
    }

    /// Ping every node; record `suspect`, `dead` or `live` where the
    /// silence crossed a threshold or ended.
    async fn update_states(
        &self,
        d: &Directory,
        silent: &mut BTreeMap<NodeId, Instant>,
    ) -> anyhow::Result<()> {
        let me = self.registry.node_id();
        let pings = d.nodes.values().filter(|n| n.id.0 != me).map(|n| {
            let pool = self.registry.pool();
            let (id, addr) = (n.id, n.grpc_addr.clone());
            async move {
                let call = pool.ping(id.0, &addr, me);
                let ok = tokio::time::timeout(Duration::from_secs(1), call).await;
                (id, matches!(ok, Ok(Ok(_))))
            }
        });
        let now = Instant::now();
        for (id, up) in futures::future::join_all(pings).await {
            let since = if up {
                silent.remove(&id);
                None
            } else {
                Some(*silent.entry(id).or_insert(now))
            };
            let was = d.node_state(id);
            let want = match since.map(|t| now.duration_since(t).as_millis() as u64) {
                None => NodeState::Live,
                Some(ms) if ms >= self.config.dead_after_ms => NodeState::Dead { declared: false },
                Some(ms) if ms >= self.config.suspect_after_ms => NodeState::Suspect,
                Some(_) => was,
            };
            let liveness_owns = matches!(
                was,
                NodeState::Live | NodeState::Suspect | NodeState::Dead { declared: false }
            );
            if want != was && liveness_owns {
                let op = NodeOp::SetState {
                    node: id,
                    state: want,
                };
                if let Ok(Ok(_)) = self.propose(op).await {
                    tracing::warn!(
                        node = id.0,
                        from = was.name(),
                        to = want.name(),
                        "node state"
                    );
                }
            }
        }
        Ok(())
    }

    /// A directory voter on a dead or decommissioning node is replaced by
    /// a live node that is not a voter (its own region first): every node
    /// is a learner of the directory already, so it is caught up.
    async fn directory_voters(&self, d: &Directory) -> anyhow::Result<()> {
        let voters = self.directory_voters_now();
        for v in &voters {
            if !d.node_state(NodeId(*v)).needs_repair() {
                continue;
            }
            let region = d.nodes.get(&NodeId(*v)).map(|n| n.region.clone());
            let add = d
                .nodes
                .values()
                .filter(|n| !voters.contains(&n.id.0) && d.node_state(n.id).takes_replicas())
                .min_by_key(|n| (Some(&n.region) != region.as_ref(), n.id))
                .map(|n| n.id.0);
            let Some(add) = add else {
                tracing::warn!(
                    node = v,
                    "directory voter to replace, but no live node to vote"
                );
                continue;
            };
            let op = MembershipOp::ReplaceVoter { remove: *v, add };
            self.client.membership(GroupId::DIRECTORY, &op).await?;
            tracing::info!(remove = v, add, "directory voter replaced");
            return Ok(()); // One at a time: the next round sees the new voters.
        }
        Ok(())
    }

    fn directory_voters_now(&self) -> BTreeSet<u64> {
        self.registry
            .get(GroupId::DIRECTORY)
            .map(|dir| {
                dir.sm
                    .read(|s| s.membership.membership().voter_ids().collect())
            })
            .unwrap_or_default()
    }

    /// Drive `group`'s repair until it is finished or this node stops
    /// leading the directory.
    async fn drive(self: Arc<Self>, group: GroupId, rx_stop: watch::Receiver<bool>) {
        let mut backoff = Duration::from_millis(100);
        let mut delayed: Option<RepairStep> = None;
        loop {
            if *rx_stop.borrow() || !self.leads_directory() {
                break;
            }
            let Some(r) = self.directory().repairs.get(&group).cloned() else {
                break;
            };
            // `step_delay_ms` (tests and drills): linger once at each step.
            if self.config.step_delay_ms > 0 && delayed != Some(r.step) {
                delayed = Some(r.step);
                tokio::time::sleep(Duration::from_millis(self.config.step_delay_ms)).await;
                continue;
            }
            match self.step(&r).await {
                Ok(()) => backoff = Duration::from_millis(100),
                Err(e) => {
                    tracing::warn!(
                        group = group.0,
                        step = r.step.name(),
                        "repair step failed, retrying: {e:#}"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
        self.driving.lock().expect("lock poisoned").remove(&group);
    }

    /// Perform `r`'s step once; advance it in the directory when done.
    async fn step(&self, r: &Repair) -> anyhow::Result<()> {
        match r.step {
            RepairStep::AddLearner => {
                let addr = self
                    .directory()
                    .nodes
                    .get(&r.add)
                    .map(|n| n.grpc_addr.clone())
                    .ok_or_else(|| anyhow::anyhow!("node {} is not registered", r.add))?;
                let st = self
                    .client
                    .membership(r.group, &MembershipOp::AddLearners(vec![(r.add.0, addr)]))
                    .await?;
                if !st.caught_up(r.add.0, self.config.catch_up_slack) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    return Ok(());
                }
                let op = NodeOp::AdvanceRepair {
                    group: r.group,
                    from: RepairStep::AddLearner,
                };
                self.expect_done(op, "step_mismatch").await
            }
            RepairStep::ChangeMembership => {
                let members = self
                    .directory()
                    .groups
                    .get(&r.group)
                    .map(|g| g.members.clone())
                    .unwrap_or_default();
                let mut want: Vec<u64> = members
                    .iter()
                    .map(|m| if *m == r.remove { r.add.0 } else { m.0 })
                    .collect();
                // A leader that leaves hands over to the first: an old,
                // caught-up voter rather than the newcomer.
                if want.first() == Some(&r.add.0) && want.len() > 1 {
                    want.swap(0, 1);
                }
                let st = self
                    .client
                    .membership(r.group, &MembershipOp::SetVoters(want.clone()))
                    .await?;
                let mut have = st.voters.clone();
                have.sort_unstable();
                want.sort_unstable();
                anyhow::ensure!(
                    have == want && !st.joint,
                    "voters are {have:?} (joint: {}), want {want:?}",
                    st.joint
                );
                self.expect_done(NodeOp::FinishRepair { group: r.group }, "repair_not_found")
                    .await?;
                tracing::info!(
                    group = r.group.0,
                    remove = r.remove.0,
                    add = r.add.0,
                    reason = r.reason.name(),
                    secs = self.clock.now_ms().saturating_sub(r.started_ms) / 1000,
                    "repair done"
                );
                Ok(())
            }
        }
    }

    /// Propose `op`; a refusal with `benign` (another task got there
    /// first) is no error.
    async fn expect_done(&self, op: NodeOp, benign: &str) -> anyhow::Result<()> {
        match self.propose(op).await? {
            Ok(_) => Ok(()),
            Err(r) if r.code == benign => Ok(()),
            Err(r) => anyhow::bail!("{}: {}", r.code, r.message),
        }
    }

    async fn propose(
        &self,
        op: NodeOp,
    ) -> Result<Result<NodeOpDone, NodeRefused>, seatfence_raft::ClientError> {
        propose(&self.client, self.clock.now_ms(), op).await
    }

    fn leads_directory(&self) -> bool {
        self.registry
            .get(GroupId::DIRECTORY)
            .is_some_and(|d| d.raft.is_leader())
    }

    fn directory(&self) -> Directory {
        self.registry
            .get(GroupId::DIRECTORY)
            .map(|dir| dir.sm.read(|s| s.state.directory.clone()))
            .unwrap_or_default()
    }
}

/// The lifecycle gauges, from this node's directory replica.
fn record_metrics(d: &Directory) {
    let mut states = [
        ("live", 0),
        ("suspect", 0),
        ("dead", 0),
        ("decommissioning", 0),
        ("decommissioned", 0),
    ];
    for n in d.nodes.keys() {
        let name = d.node_state(*n).name();
        if let Some(s) = states.iter_mut().find(|(s, _)| *s == name) {
            s.1 += 1;
        }
    }
    METRICS.node_lifecycle(&states, d.under_replicated().len(), d.repairs.len());
}

/// The repairs to start now: voters on dead or decommissioning nodes first
/// (at most `repair_parallel` running); when there are none, one replica
/// from the fullest to the emptiest live node of a region whose counts
/// differ by two or more (at most `rebalance_parallel` running).
pub fn plan_repairs(d: &Directory, config: &MovesConfig) -> Vec<NodeOp> {
    let mut ops = Vec::new();
    let mut running = d.repairs.len();
    let mut needed = false;
    for g in d.groups.values() {
        if d.repairs.contains_key(&g.id) || d.is_moving(g.id) {
            continue;
        }
        for m in &g.members {
            let reason = match d.node_state(*m) {
                NodeState::Dead { .. } => RepairReason::Dead,
                NodeState::Decommissioning => RepairReason::Decommission,
                _ => continue,
            };
            if d.replacement(g.id, *m).is_none() {
                continue; // Under-replicated: reported, not guessed.
            }
            needed = true;
            if running < config.repair_parallel {
                running += 1;
                ops.push(NodeOp::StartRepair {
                    group: g.id,
                    remove: *m,
                    add: None,
                    reason,
                });
            }
            break;
        }
    }
    let rebalancing = d
        .repairs
        .values()
        .filter(|r| r.reason == RepairReason::Rebalance)
        .count();
    if needed || rebalancing >= config.rebalance_parallel {
        return ops;
    }
    let mut by_region: BTreeMap<&seatfence_core::RegionId, Vec<(usize, NodeId)>> = BTreeMap::new();
    for n in d.nodes.values() {
        if d.node_state(n.id).takes_replicas() {
            by_region
                .entry(&n.region)
                .or_default()
                .push((d.replica_count(n.id), n.id));
        }
    }
    for nodes in by_region.values() {
        let (Some(&(most, from)), Some(&(least, to))) = (nodes.iter().max(), nodes.iter().min())
        else {
            continue;
        };
        if most < least + 2 {
            continue;
        }
        let group = d.groups_of(from).find(|g| {
            !g.members.contains(&to) && !d.repairs.contains_key(&g.id) && !d.is_moving(g.id)
        });
        if let Some(g) = group {
            ops.push(NodeOp::StartRepair {
                group: g.id,
                remove: from,
                add: Some(to),
                reason: RepairReason::Rebalance,
            });
            break; // One at a time: counts change with it.
        }
    }
    ops
}

/// Propose one lifecycle operation to the directory.
pub async fn propose(
    client: &ClusterClient,
    at_ms: u64,
    op: NodeOp,
) -> Result<Result<NodeOpDone, NodeRefused>, seatfence_raft::ClientError> {
    let out = client
        .write(GroupId::DIRECTORY, &Command::Node { op, at_ms })
        .await?;
    match out.response {
        Response::Node(r) => Ok(r.map(|d| *d)),
        other => Err(seatfence_raft::ClientError::BadReply(format!(
            "directory answered {other}"
        ))),
    }
}
