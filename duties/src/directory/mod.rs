//! The directory leader's duties, run on every node and acting only while
//! it leads group 0: [`moves`] (the ownership-move coordinator),
//! [`lifecycle`] (node states from liveness, replica repairs and rejoins,
//! the directory's voters, decommissions), [`balance`] (the leader
//! balancer), [`learners`] (registered nodes join group 0 as learners).
//! Each decides through pure functions of the directory and what it
//! observed (`moves::plan_step`, `lifecycle::{plan_states, plan_repairs,
//! plan_membership}`, `balance::plan`, `learners::plan`), unit-tested on
//! their own, and a runtime carries the actions out. What stays a
//! dialogue in the runtime: a repair's steps (`lifecycle/drive.rs`) and
//! group 0's rejoin (demote, wait until caught up, promote), which read
//! the group's membership status between actions.
//!
//! Moves and repairs are driven item by item through one skeleton
//! ([`Drives`], [`Driven`]):
//!
//! ```text
//!  the duty's own loop ─ pending items (the directory says) ─▶ Drives::start: one task per item not driven yet
//!  a drive: stop? not leading? item gone? ─▶ end
//!           step_delay_ms > 0 and a new step ─▶ linger once
//!           Driven::step ─▶ Again (look again) | Finished (end) | Err (log, back off 100 ms doubling to 2 s)
//! ```
//!
//! Every step is idempotent and its progress is recorded only in the
//! directory, so a new directory leader resumes any item where it stands.

pub mod balance;
pub mod learners;
pub mod lifecycle;
pub mod moves;

use std::collections::HashSet;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seatfence_core::GroupId;
use seatfence_raft::clock::Clock;
use seatfence_raft::registry::Registry;
use seatfence_raft::ClusterClient;
use seatfence_regions::config::MovesConfig;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What the directory's move and lifecycle duties work with (one per
/// node, cloned into each).
#[derive(Clone)]
pub struct Context {
    /// This node's replicas (the directory's among them).
    pub registry: Arc<Registry>,
    /// This node's client (its own groups in-process).
    pub client: ClusterClient,
    /// `[moves]`: slack, step delay, lifecycle timings.
    pub config: MovesConfig,
    /// The node's clock: the `now_ms` of the move and node ops the duties propose.
    pub clock: Arc<dyn Clock>,
}

/// What a step of a driven item says about the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Look at the item again (the step advanced, or must be retried).
    Again,
    /// Nothing left to do for this item.
    Finished,
}

/// One kind of item the directory's leader drives step by step.
pub trait Driven: Send + Sync + 'static {
    /// Names one item (a move id, a repaired group).
    type Key: Copy + Eq + Hash + Debug + Send + Sync + 'static;
    /// The item as a step needs it, read from the directory.
    type Item: Send;
    /// What one drive keeps between its steps.
    type State: Default + Send;
    /// The kind, for the log ("move", "repair").
    const KIND: &'static str;

    /// This node's replicas: a drive steps only while they lead the directory.
    fn registry(&self) -> &Registry;
    /// `[moves] step_delay_ms`: linger once at each step (tests, drills).
    fn step_delay_ms(&self) -> u64;
    /// The item as this node's directory replica has it; `None` once it
    /// is gone (finished, forgotten).
    fn item(&self, key: Self::Key) -> Option<Self::Item>;
    /// The item's current step, by name (a drive lingers once per step).
    fn step_name(item: &Self::Item) -> &'static str;
    /// Whether a step of `item` lingers under `step_delay_ms`.
    fn lingers(_item: &Self::Item) -> bool {
        true
    }
    /// Perform the item's step once.
    fn step(
        &self,
        item: &Self::Item,
        state: &mut Self::State,
    ) -> impl Future<Output = anyhow::Result<Next>> + Send;
}

/// The drives of one kind of item on this node: at most one per item,
/// each a task this owner waits for.
pub struct Drives<D: Driven> {
    driven: Arc<D>,
    driving: Arc<Mutex<HashSet<D::Key>>>,
    tasks: JoinSet<()>,
}

impl<D: Driven> Drives<D> {
    /// The drives of `driven`'s items, none started yet.
    pub fn new(driven: Arc<D>) -> Drives<D> {
        Drives {
            driven,
            driving: Arc::default(),
            tasks: JoinSet::new(),
        }
    }

    /// Start a drive for every item of `keys` not driven yet (drives that
    /// ended are reaped first).
    pub fn start(
        &mut self,
        keys: impl IntoIterator<Item = D::Key>,
        rx_stop: &watch::Receiver<bool>,
    ) {
        while self.tasks.try_join_next().is_some() {}
        for key in keys {
            let fresh = self.driving.lock().expect("lock poisoned").insert(key);
            if fresh {
                let (driven, driving) = (self.driven.clone(), self.driving.clone());
                self.tasks
                    .spawn(drive(driven, key, driving, rx_stop.clone()));
            }
        }
    }

    /// Wait for every drive to end (each ends with the node's stop).
    pub async fn join(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Whether this node leads the directory now.
pub fn leads_directory(registry: &Registry) -> bool {
    registry.get(GroupId::DIRECTORY).is_some_and(|d| d.leads())
}

/// Drive `key` until it is finished, gone, or this node stops leading the
/// directory (see the module's diagram).
async fn drive<D: Driven>(
    driven: Arc<D>,
    key: D::Key,
    driving: Arc<Mutex<HashSet<D::Key>>>,
    rx_stop: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    let mut delayed: Option<&'static str> = None;
    let mut state = D::State::default();
    loop {
        if *rx_stop.borrow() || !leads_directory(driven.registry()) {
            break;
        }
        let Some(item) = driven.item(key) else {
            break;
        };
        let step = D::step_name(&item);
        let delay = driven.step_delay_ms();
        if delay > 0 && D::lingers(&item) && delayed != Some(step) {
            delayed = Some(step);
            tokio::time::sleep(Duration::from_millis(delay)).await;
            continue;
        }
        match driven.step(&item, &mut state).await {
            Ok(Next::Again) => backoff = Duration::from_millis(100),
            Ok(Next::Finished) => break,
            Err(e) => {
                tracing::warn!(?key, step, "{} step failed, retrying: {e:#}", D::KIND);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
    driving.lock().expect("lock poisoned").remove(&key);
}
