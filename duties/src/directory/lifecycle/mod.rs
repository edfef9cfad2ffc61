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
//!    change_membership  the leaving voter hands its leadership over if it leads;
//!                       ReplaceVoters(members → members − remove + add), a
//!                       compare-and-set at the group's leader: joint, then final; FinishRepair
//!    add no longer live: RemoveLearners([add]) while the voters are the old ones, CancelRepair
//! ```
//!
//! Every step is idempotent, so a directory leader killed mid-repair is
//! replaced by the next, which repeats the step the directory records. One
//! repair per group; a group loses a voter only in the same joint change
//! that adds its replacement, so it never drops below a majority of live
//! voters it did not already lack.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use seatfence_regions::transfer::{self, TransferError};

mod drive;
mod plan;
use plan::record_metrics;
pub use plan::{plan_membership, plan_repairs, plan_states, MembershipAction, Observed};
use seatfence_core::{
    Directory, GroupId, NodeId, NodeOp, NodeOpDone, NodeRefused, NodeState, Repair, RepairReason,
    RepairStep,
};
use seatfence_raft::membership::MembershipOp;
use tokio::sync::watch;

use super::{Context, Drives};

struct Lifecycle(Context);

impl std::ops::Deref for Lifecycle {
    type Target = Context;
    fn deref(&self) -> &Context {
        &self.0
    }
}

/// Run the lifecycle task of this node until `rx_stop`; it acts only while
/// the node leads the directory (the gauges are set on every node).
pub async fn run(context: Context, rx_stop: watch::Receiver<bool>) {
    Arc::new(Lifecycle(context)).run(rx_stop).await
}

impl Lifecycle {
    async fn run(self: Arc<Self>, mut rx_stop: watch::Receiver<bool>) {
        // Since when each node has not answered (this leader's view; it
        // starts over with each new leader, so nobody is declared dead
        // sooner than `dead_after_ms` of silence).
        let mut silent: BTreeMap<NodeId, Instant> = BTreeMap::new();
        let every = Duration::from_millis(self.config.lifecycle_every_ms.max(100));
        // The gauges change only with the directory: set them when it did.
        let mut rx_applied = self
            .registry
            .get(GroupId::DIRECTORY)
            .map(|d| d.subscribe_applied());
        let mut first = true;
        // One drive per repair; each ends with the node's stop, and this
        // task waits for them.
        let mut drives = Drives::new(self.clone());
        // The directory's applied index at the end of the last round that
        // found nothing to do and every node answering.
        let mut quiet: Option<u64> = None;
        loop {
            tokio::select! {
                biased;
                _ = rx_stop.wait_for(|s| *s) => break,
                _ = tokio::time::sleep(every) => {}
            }
            let changed = rx_applied.as_mut().is_some_and(|rx| {
                let c = rx.has_changed().unwrap_or(false);
                rx.borrow_and_update();
                c
            });
            if changed || std::mem::take(&mut first) {
                self.read(record_metrics);
            }
            if !self.leads_directory() {
                silent.clear();
                continue;
            }
            if let Err(e) = self
                .round(&mut silent, &mut quiet, &mut drives, &rx_stop)
                .await
            {
                tracing::warn!("node lifecycle: {e:#}");
            }
        }
        drives.join().await;
    }

    /// One look at the cluster: what it observes (pings, group 0's
    /// membership), then what the plans decide, carried out in order:
    /// node states, repairs to start, directory rejoins, directory voters,
    /// decommissions that completed, retired learners.
    ///
    /// The plans that scan every group (repairs, directory membership) are
    /// pure functions of the directory and of what was observed: while the
    /// directory has not changed since a round that found nothing to do
    /// (`quiet`, its applied index then) and every node answers, they are
    /// not run again (at 10,000 events they were most of an idle node's
    /// CPU).
    async fn round(
        self: &Arc<Self>,
        silent: &mut BTreeMap<NodeId, Instant>,
        quiet: &mut Option<u64>,
        drives: &mut Drives<Lifecycle>,
        rx_stop: &watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let mut observed = Observed {
            silent_ms: self.ping_all(silent).await,
            ..Observed::default()
        };
        let at_start = self.directory_applied();
        let unchanged = observed.silent_ms.is_empty() && at_start.is_some() && *quiet == at_start;
        *quiet = None;
        let mut acted = false;
        for op in self.read(|d| plan_states(d, &observed, &self.config)) {
            acted = true;
            if let Ok(Ok(_)) = self.propose(op.clone()).await {
                tracing::warn!(?op, "node state");
            }
        }
        let repairs = match unchanged && !acted {
            true => Vec::new(),
            false => self.read(|d| plan_repairs(d, &self.config)),
        };
        for op in repairs {
            acted = true;
            match self.propose(op.clone()).await? {
                Ok(_) => tracing::info!(?op, "repair started"),
                Err(r) => tracing::debug!(?op, "repair not started: {}", r.message),
            }
        }
        let repairs: Vec<GroupId> = self.read(|d| d.repairs.keys().copied().collect());
        drives.start(repairs, rx_stop);
        if let Err(e) = self.directory_rejoins(&self.directory_voters_now()).await {
            tracing::warn!("directory rejoins: {e:#}");
        }
        observed.directory_voters = self.directory_voters_now();
        observed.directory_learners = self.directory_learners_now();
        let actions = match unchanged && !acted {
            true => Vec::new(),
            false => self.read(|d| plan_membership(d, &observed)),
        };
        for action in actions {
            acted = true;
            if let Err(e) = self.carry_out(&action).await {
                tracing::warn!(?action, "directory membership: {e:#}");
            }
        }
        let at_end = self.directory_applied();
        if !acted && observed.silent_ms.is_empty() && at_end == at_start {
            *quiet = at_end;
        }
        Ok(())
    }

    /// The directory's applied index on this node's replica.
    fn directory_applied(&self) -> Option<u64> {
        let dir = self.registry.get(GroupId::DIRECTORY)?;
        let applied = *dir.subscribe_applied().borrow();
        Some(applied)
    }

    /// Ping every node the directory lists; for each that did not answer,
    /// for how long this leader has seen it silent (ms). This node
    /// (leading the directory) answers by definition.
    async fn ping_all(&self, silent: &mut BTreeMap<NodeId, Instant>) -> BTreeMap<NodeId, u64> {
        let me = self.registry.node_id();
        let nodes: Vec<(NodeId, String)> = self.read(|d| {
            d.nodes
                .values()
                .map(|n| (n.id, n.grpc_addr.clone()))
                .collect()
        });
        let pings = nodes.iter().map(|(id, addr)| {
            let pool = self.registry.pool();
            async move {
                if id.0 == me {
                    return (*id, true);
                }
                let call = pool.ping(id.0, addr, me);
                let ok = tokio::time::timeout(Duration::from_secs(1), call).await;
                (*id, matches!(ok, Ok(Ok(_))))
            }
        });
        let now = Instant::now();
        let mut silent_ms = BTreeMap::new();
        for (id, up) in futures::future::join_all(pings).await {
            if up {
                silent.remove(&id);
            } else {
                let since = *silent.entry(id).or_insert(now);
                silent_ms.insert(id, now.duration_since(since).as_millis() as u64);
            }
        }
        silent_ms
    }

    /// Carry out one of `plan_membership`'s actions.
    async fn carry_out(&self, action: &MembershipAction) -> anyhow::Result<()> {
        match action {
            MembershipAction::ReplaceDirectoryVoter { remove, add } => {
                let op = MembershipOp::ReplaceVoter {
                    remove: *remove,
                    add: *add,
                };
                self.client.membership(GroupId::DIRECTORY, &op).await?;
                tracing::info!(remove, add, "directory voter replaced");
            }
            MembershipAction::NoDirectoryVoterFor(v) => {
                tracing::warn!(
                    node = v,
                    "directory voter to replace, but no live node to vote"
                );
            }
            MembershipAction::Decommissioned(node) => {
                let op = NodeOp::Decommissioned { node: *node };
                if let Ok(Ok(_)) = self.propose(op).await {
                    tracing::info!(node = node.0, "node decommissioned");
                }
            }
            MembershipAction::RemoveDirectoryLearners(gone) => {
                let op = MembershipOp::RemoveLearners(gone.clone());
                self.client.membership(GroupId::DIRECTORY, &op).await?;
            }
        }
        Ok(())
    }

    /// Group 0's part of a rejoin on an empty data dir (`directory_voters`
    /// being the directory's voters now): a rejoining node that is not a
    /// directory voter (only a learner, as every node is) waits for nothing
    /// here; one that is (or was, `directory_demoted`) is demoted to a
    /// learner, waited for until caught up, and made a voter again. Each
    /// step is read from the directory and the group's membership, so a
    /// new directory leader picks it up where it stood.
    async fn directory_rejoins(&self, voters: &BTreeSet<u64>) -> anyhow::Result<()> {
        let live = |d: &Directory, n: NodeId| d.node_state(n) == NodeState::Live;
        let rejoining: Vec<(NodeId, bool, bool)> = self.read(|d| {
            d.rejoins
                .iter()
                .filter(|(_, r)| r.pending.contains(&GroupId::DIRECTORY))
                .map(|(n, r)| (*n, r.directory_demoted, live(d, *n)))
                .collect()
        });
        for (node, demoted, live) in rejoining {
            let done = NodeOp::RejoinDone {
                node,
                group: GroupId::DIRECTORY,
            };
            let voter = voters.contains(&node.0);
            if !voter && !demoted {
                self.expect_done(done, "rejoin_not_found").await?;
                tracing::info!(
                    node = node.0,
                    "rejoin: not a directory voter, nothing to wait for"
                );
                continue;
            }
            if !live {
                continue; // Demoted or not, it waits until it answers.
            }
            if voter && !demoted {
                let op = NodeOp::RejoinDirectoryDemoted { node };
                self.expect_done(op, "rejoin_not_found").await?;
            }
            let d = GroupId::DIRECTORY;
            let op = match voter {
                true => MembershipOp::DemoteVoter(node.0),
                false => MembershipOp::Status,
            };
            let st = self.client.membership(d, &op).await?;
            if st.voters.contains(&node.0) || !st.caught_up(node.0, self.config.catch_up_slack) {
                continue; // Next round.
            }
            let st = self
                .client
                .membership(d, &MembershipOp::PromoteLearner(node.0))
                .await?;
            anyhow::ensure!(
                st.voters.contains(&node.0) && !st.joint,
                "directory voters are {:?} after promoting node {node}",
                st.voters
            );
            self.expect_done(done, "rejoin_not_found").await?;
            tracing::info!(node = node.0, "rejoin: a caught-up directory voter again");
        }
        Ok(())
    }

    fn directory_voters_now(&self) -> BTreeSet<u64> {
        self.registry
            .get(GroupId::DIRECTORY)
            .map(|dir| dir.read(|s| s.membership.membership().voter_ids().collect()))
            .unwrap_or_default()
    }

    fn directory_learners_now(&self) -> BTreeSet<u64> {
        self.registry
            .get(GroupId::DIRECTORY)
            .map(|dir| dir.read(|s| s.membership.membership().learner_ids().collect()))
            .unwrap_or_default()
    }

    /// Perform `r`'s step once; advance it in the directory when done.
    /// `members`: the group's voters as the directory records them (the
    /// old ones, until `FinishRepair`).
    async fn perform(&self, r: &Repair, members: &[NodeId]) -> anyhow::Result<()> {
        if r.reason == RepairReason::Rejoin {
            return self.step_rejoin(r, members).await;
        }
        match r.step {
            RepairStep::AddLearner => self.learn_and_advance(r).await,
            RepairStep::ChangeMembership => {
                let from: Vec<u64> = members.iter().map(|m| m.0).collect();
                let mut to: Vec<u64> = r.members_after(members).iter().map(|m| m.0).collect();
                // A leader that leaves hands over to the first: an old,
                // caught-up voter rather than the newcomer.
                if to.first() == Some(&r.add.0) && to.len() > 1 {
                    to.swap(0, 1);
                }
                self.hand_over(r, &to).await?;
                let op = MembershipOp::ReplaceVoters {
                    from,
                    to: to.clone(),
                };
                let st = self.client.membership(r.group, &op).await?;
                let mut have = st.voters.clone();
                have.sort_unstable();
                to.sort_unstable();
                anyhow::ensure!(
                    have == to && !st.joint,
                    "voters are {have:?} (joint: {}), want {to:?}",
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

    /// `r.add` is added as a learner of `r.group` (unless it is one);
    /// once it caught up, the repair advances to `change_membership`.
    async fn learn_and_advance(&self, r: &Repair) -> anyhow::Result<()> {
        let addr = self
            .read(|d| d.nodes.get(&r.add).map(|n| n.grpc_addr.clone()))
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

    /// A rejoin's step: `add_learner` takes the node out of the voters
    /// (a joint change the other voters commit) and adds it back as a
    /// learner, then waits until it caught up; `change_membership` makes
    /// it a voter again. Its replica refused every vote meanwhile; the
    /// directory records the end (`FinishRepair`), after which it votes.
    async fn step_rejoin(&self, r: &Repair, members: &[NodeId]) -> anyhow::Result<()> {
        let all: Vec<u64> = members.iter().map(|m| m.0).collect();
        match r.step {
            RepairStep::AddLearner => {
                // Out of the voters, kept as a learner (a retry finds it
                // one already and changes nothing).
                let op = MembershipOp::DemoteVoter(r.add.0);
                let st = self.client.membership(r.group, &op).await?;
                anyhow::ensure!(
                    !st.voters.contains(&r.add.0) && !st.joint,
                    "node {} is still a voter ({:?}, joint: {})",
                    r.add,
                    st.voters,
                    st.joint
                );
                // Its replica takes this leader's entries (and later
                // terms'), a deposed leader's never.
                let op = NodeOp::RejoinDemoted {
                    node: r.add,
                    group: r.group,
                    term: st.term,
                };
                self.expect_done(op, "rejoin_not_found").await?;
                self.learn_and_advance(r).await
            }
            RepairStep::ChangeMembership => {
                let op = MembershipOp::PromoteLearner(r.add.0);
                let st = self.client.membership(r.group, &op).await?;
                let (mut have, mut want) = (st.voters.clone(), all);
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
                    node = r.add.0,
                    secs = self.clock.now_ms().saturating_sub(r.started_ms) / 1000,
                    "rejoin done: the node is a caught-up voter again"
                );
                Ok(())
            }
        }
    }

    /// The replaced voter leads (a node being retired, or rebalanced): hand
    /// its leadership to another caught-up voter first, through the one
    /// transfer path, so writes pause only for the hand-over.
    async fn hand_over(&self, r: &Repair, to: &[u64]) -> anyhow::Result<()> {
        let st = self
            .client
            .membership(r.group, &MembershipOp::Status)
            .await?;
        if st.leader != r.remove.0 {
            return Ok(());
        }
        let targets: Vec<u64> = to.iter().copied().filter(|n| *n != r.add.0).collect();
        let avoid: Vec<u64> = self.read(|d| d.not_leading().iter().map(|n| n.0).collect());
        let wait = Duration::from_secs(3);
        let slack = self.config.catch_up_slack;
        match transfer::transfer_leader(&self.client, r.group, &targets, &avoid, slack, wait).await
        {
            Ok(_) | Err(TransferError::LeaderChanged { .. }) => Ok(()),
            Err(e) => anyhow::bail!("hand-over before the membership change: {e}"),
        }
    }

    /// `r`'s new node is no longer live: undo the repair while the
    /// group's voters are still the old ones (remove the learner, then
    /// `CancelRepair`); if the change already happened, finish it instead.
    async fn cancel(&self, r: &Repair, members: &[NodeId]) -> anyhow::Result<()> {
        let st = self
            .client
            .membership(r.group, &MembershipOp::Status)
            .await?;
        let mut have = st.voters.clone();
        have.sort_unstable();
        let mut old: Vec<u64> = members.iter().map(|m| m.0).collect();
        old.sort_unstable();
        let mut new: Vec<u64> = r.members_after(members).iter().map(|m| m.0).collect();
        new.sort_unstable();
        anyhow::ensure!(!st.joint, "a membership change is half-way; asking again");
        if r.reason == RepairReason::Rejoin {
            // The rejoining node went silent. Demoted: put it back as a
            // voter (its replica still refuses votes: the rejoin stays
            // pending), which is the group as it was before the repair; the
            // plan starts a rejoin again when it answers, or replaces it if
            // it stays dead.
            if have != old {
                let addr = self
                    .read(|d| d.nodes.get(&r.add).map(|n| n.grpc_addr.clone()))
                    .ok_or_else(|| anyhow::anyhow!("node {} is not registered", r.add))?;
                let learner = MembershipOp::AddLearners(vec![(r.add.0, addr)]);
                self.client.membership(r.group, &learner).await?;
                let op = MembershipOp::PromoteLearner(r.add.0);
                self.client.membership(r.group, &op).await?;
            }
            return self
                .expect_done(NodeOp::CancelRepair { group: r.group }, "repair_not_found")
                .await;
        }
        if have == new {
            return self
                .expect_done(NodeOp::FinishRepair { group: r.group }, "repair_not_found")
                .await;
        }
        anyhow::ensure!(
            have == old,
            "voters are {have:?}, neither {old:?} nor {new:?}"
        );
        let op = MembershipOp::RemoveLearners(vec![r.add.0]);
        self.client.membership(r.group, &op).await?;
        self.expect_done(NodeOp::CancelRepair { group: r.group }, "repair_not_found")
            .await?;
        tracing::warn!(
            group = r.group.0,
            add = r.add.0,
            "repair cancelled: its new node is no longer live (another will be chosen)"
        );
        Ok(())
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
        seatfence_regions::ops::propose_node_op(&self.client, self.clock.now_ms(), op).await
    }

    fn leads_directory(&self) -> bool {
        super::leads_directory(&self.registry)
    }

    /// Read this node's directory replica (no copy of it).
    fn read<T: Default>(&self, f: impl FnOnce(&Directory) -> T) -> T {
        match self.registry.get(GroupId::DIRECTORY) {
            Some(dir) => dir.read(|s| f(s.state.directory())),
            None => T::default(),
        }
    }
}
