//! The leader's side of sleeping: every second, each group this node leads
//! that has been idle long enough and is fully replicated asks its
//! followers to sleep, and sleeps itself once all of them do.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::ServerState;
use seatfence_proto::v1::QuiesceRequest;
use tokio::sync::watch;

use super::liveness::PeersUp;
use super::now_ms;
use crate::registry::{GroupHandle, Registry};

/// How often idle groups are looked for.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Groups asked to sleep at once.
const CONCURRENCY: usize = 64;
/// Rounds between two looks for followers to unload.
const UNLOAD_EVERY: u64 = 5;
/// How long a follower gets to answer a `Quiesce`.
const QUIESCE_TIMEOUT: Duration = Duration::from_millis(500);

/// What a leader needs to put its group to sleep.
#[derive(Debug, PartialEq, Eq)]
pub struct SleepPlan {
    /// The leader's current term, which the `Quiesce` carries.
    pub term: u64,
    /// The leader's last log index, applied and held by every voter.
    pub last_log_index: u64,
    /// The last use the decision was made on.
    pub active_at: u64,
    /// Every other voter, with its address.
    pub followers: Vec<(u64, String)>,
}

/// Whether `g` may sleep now (it leads, has been idle for `sleep_after_ms`,
/// every voter holds the whole applied log and answers pings, no
/// membership change is under way), and how.
pub fn plan(g: &GroupHandle, peers: &PeersUp, sleep_after_ms: u64) -> Option<SleepPlan> {
    if g.id.is_directory() || g.is_asleep() {
        return None;
    }
    let active_at = g.last_active_ms();
    if now_ms().saturating_sub(active_at) < sleep_after_ms || !g.leads() {
        return None;
    }
    let rx = g.raft.metrics();
    let m = rx.borrow_watched();
    if m.state != ServerState::Leader {
        return None;
    }
    let membership = m.membership_config.membership();
    if membership.get_joint_config().len() != 1 || membership.learner_ids().next().is_some() {
        return None;
    }
    let last = m.last_log_index?;
    if m.last_applied.as_ref().map(|l| l.index) != Some(last) {
        return None;
    }
    let replication = m.replication.as_ref()?;
    let mut followers = Vec::new();
    for v in membership.voter_ids().filter(|v| *v != m.id) {
        // A follower whose node does not answer pings cannot agree.
        if !peers.is_up(v) {
            return None;
        }
        let matched = replication.get(&v)?.as_ref().map(|l| l.index);
        if matched != Some(last) {
            return None;
        }
        followers.push((v, membership.get_node(&v)?.addr.clone()));
    }
    Some(SleepPlan {
        term: m.current_term,
        last_log_index: last,
        active_at,
        followers,
    })
}

/// Ask every follower in `plan` to sleep; sleep too if all of them did.
pub async fn put_to_sleep(registry: &Registry, g: &GroupHandle, plan: SleepPlan) -> bool {
    let me = registry.node_id();
    let asks = plan.followers.iter().map(|(id, addr)| {
        let req = QuiesceRequest {
            group_id: g.id.0,
            term: plan.term,
            leader: me,
            last_log_index: plan.last_log_index,
        };
        let pool = registry.pool();
        async move {
            let call = pool.quiesce(*id, addr, req);
            matches!(
                tokio::time::timeout(QUIESCE_TIMEOUT, call).await,
                Ok(Ok(true))
            )
        }
    });
    let agreed = futures::future::join_all(asks).await;
    // A follower that slept while another refused stays asleep (a
    // heartbeat does not wake it): the leader, still awake, keeps time and
    // asks again next round; liveness wakes the follower if this node goes
    // away.
    agreed.iter().all(|ok| *ok) && g.doze_leader(plan.active_at)
}

/// Runs on every node: puts idle groups this node leads to sleep, and
/// unloads followers asleep for `unload_after_ms` (see [`super::dormant`];
/// 0: never). `sleep_after_ms` 0 disables sleeping.
pub async fn run(
    registry: Arc<Registry>,
    sleep_after_ms: u64,
    unload_after_ms: u64,
    mut stop: watch::Receiver<bool>,
) {
    if sleep_after_ms == 0 {
        return;
    }
    let mut round: u64 = 0;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = crate::timer::sleep(CHECK_EVERY) => {}
        }
        // A sleeping group is skipped without reading its metrics.
        let candidates: Vec<_> = registry
            .select(|g| !g.is_asleep() && !g.id.is_directory())
            .into_iter()
            .filter_map(|g| plan(&g, &registry.peers, sleep_after_ms).map(|p| (g, p)))
            .collect();
        futures::stream::iter(candidates)
            .for_each_concurrent(CONCURRENCY, |(g, p)| {
                let registry = &registry;
                async move {
                    if put_to_sleep(registry, &g, p).await {
                        tracing::debug!(group = g.id.0, "group asleep");
                    }
                }
            })
            .await;
        // Unloading is a matter of tens of seconds: looked for every
        // `UNLOAD_EVERY` rounds.
        round += 1;
        if round.is_multiple_of(UNLOAD_EVERY) {
            unload_sleepers(&registry, unload_after_ms).await;
        }
    }
}

/// Unload every follower that may go dormant now.
async fn unload_sleepers(registry: &Registry, after_ms: u64) {
    if after_ms == 0 {
        return;
    }
    let me = registry.node_id();
    // Sleeping leaders (most of a node's loaded groups once its followers
    // are unloaded) are skipped without reading their metrics.
    let sleepers = registry.select(|g| g.nap().is_some_and(|n| !n.as_leader));
    for g in sleepers {
        if let Some(record) = super::dormant::plan(&g, &registry.peers, me, after_ms) {
            registry.unload(&g, record).await;
        }
    }
}
