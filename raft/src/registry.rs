//! [`Registry`]: the groups hosted on this node, by group id.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use openraft::BasicNode;
use seatfence_core::GroupId;

use crate::batcher::Batcher;
use crate::joining::Joining;
use crate::network::{NetworkFactory, PeerPool};
use crate::sleep::dormant::Dormant;
use crate::sleep::Activity;
use crate::storage::{GroupState, LogStore, NodeDb, StateMachineStore};
use crate::types::Raft;

/// One hosted replica.
///
/// Its Raft instance and state machine are the crate's own: other crates
/// read the state through [`GroupHandle::read`], watch applies through
/// [`GroupHandle::subscribe_applied`], and change a group only through a
/// command (`propose`), a membership operation (`membership::apply`) or
/// the one leadership hand-over ([`GroupHandle::hand_over`]).
pub struct GroupHandle {
    /// The group this replica belongs to.
    pub id: GroupId,
    pub(crate) raft: Raft,
    pub(crate) sm: StateMachineStore,
    /// Packs concurrent proposals into one entry.
    pub batcher: Batcher,
    /// Whether it sleeps (see `sleep`).
    pub activity: Activity,
    /// Whether it may not campaign yet (see `joining`).
    pub joining: Arc<Joining>,
}

impl GroupHandle {
    /// Whether this replica leads the group *and* is one of its voters. A
    /// leader removed by a membership change (an ownership move) can go on
    /// believing it leads, at its old term, because the new voters never
    /// write to it again; it can never commit anything, so it must not take
    /// writes or run leader-side work.
    ///
    /// Until the configuration that removed it is committed, a leader still
    /// leads (it replicates to the new voters and commits with their
    /// majority), so writes keep flowing through a membership change.
    pub fn leads(&self) -> bool {
        use openraft::async_runtime::watch::WatchReceiver;
        if !self.raft.is_leader() {
            return false;
        }
        // A short borrow (it holds a lock RaftCore also takes), no clone:
        // this runs on every write an edge sends in-process.
        let rx = self.raft.metrics();
        let m = rx.borrow_watched();
        let membership = &m.membership_config;
        if membership.membership().voter_ids().any(|v| v == m.id) {
            return true;
        }
        // Removed: lead only while the removal is not committed yet.
        let removal = membership.log_id().as_ref().map(|l| l.index);
        let committed = m.cluster_committed.as_ref().map(|l| l.index);
        removal > committed
    }

    /// The current Raft term as this replica sees it.
    pub fn term(&self) -> u64 {
        use openraft::async_runtime::watch::WatchReceiver;
        self.raft.metrics().borrow_watched().current_term
    }

    /// The replica's openraft instance, for this crate's own integration
    /// tests (`raft/tests/`), which play a leader's appends against it. No
    /// other crate calls it (`tests/t01_layers.rs` checks).
    #[doc(hidden)]
    pub fn raw_raft(&self) -> &Raft {
        &self.raft
    }

    /// Read this replica's applied state (a short read lock; never held
    /// across an `.await`).
    pub fn read<T>(&self, f: impl FnOnce(&GroupState) -> T) -> T {
        self.sm.read(f)
    }

    /// Watch this replica's applied index.
    pub fn subscribe_applied(&self) -> tokio::sync::watch::Receiver<u64> {
        self.sm.subscribe_applied()
    }

    /// Hand this group's leadership to its voter `to`: the one place a
    /// leader transfer is triggered (`Proposer::transfer_leader`, which
    /// `regions::transfer` reaches through the cluster client, and the
    /// hand-over of a leader a membership change removed, which still
    /// leads in Raft's eyes but no longer [`leads`](GroupHandle::leads)).
    /// Only a Raft leader may, and only to a voter of the group.
    pub async fn hand_over(&self, to: u64) -> Result<(), HandOverError> {
        if !self.raft.is_leader() {
            return Err(HandOverError::NotLeading);
        }
        if !self.raft.voter_ids().any(|v| v == to) {
            return Err(HandOverError::NotAVoter);
        }
        self.wake_for_use().await;
        self.raft
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| HandOverError::Failed(e.to_string()))
    }
}

/// Why [`GroupHandle::hand_over`] did not start a transfer.
#[derive(Debug, thiserror::Error)]
pub enum HandOverError {
    /// This replica is not the group's Raft leader.
    #[error("this replica is not the group's Raft leader")]
    NotLeading,
    /// The target node is not a voter of the group.
    #[error("the target is not a voter of the group")]
    NotAVoter,
    /// The Raft instance has stopped (a fatal error): it took no transfer.
    #[error("{0}")]
    Failed(String),
}

/// The node's replicas. The map is behind a `std::sync::RwLock`, held only
/// for lookups and inserts, never across an `.await`; opening a group is
/// serialised by an async mutex so a group is never opened twice.
pub struct Registry {
    node_id: u64,
    db: NodeDb,
    pool: PeerPool,
    config: Arc<openraft::Config>,
    groups: RwLock<HashMap<GroupId, Arc<GroupHandle>>>,
    /// Replicas hosted here but unloaded from memory (`sleep::dormant`).
    dormant: RwLock<HashMap<GroupId, Dormant>>,
    opening: tokio::sync::Mutex<()>,
    /// Whether replicas opened here sleep until spoken to.
    sleepy: bool,
    /// Which peers answer pings (node liveness, see `sleep::liveness`).
    pub peers: crate::sleep::liveness::PeersUp,
    /// This data dir's store incarnation, once admitted (0 before): what
    /// a rejoin record must name to count as this node's.
    incarnation: std::sync::atomic::AtomicU64,
}

impl Registry {
    /// An empty registry for node `node_id`: groups opened here run with `config` over
    /// `pool`, stored in `db`, and never sleep unless [`Registry::with_sleep`] says so.
    pub fn new(
        node_id: u64,
        db: NodeDb,
        pool: PeerPool,
        config: Arc<openraft::Config>,
    ) -> Registry {
        Registry {
            node_id,
            db,
            pool,
            config,
            groups: RwLock::new(HashMap::new()),
            dormant: RwLock::new(HashMap::new()),
            opening: tokio::sync::Mutex::new(()),
            sleepy: false,
            peers: Default::default(),
            incarnation: Default::default(),
        }
    }

    /// Record this data dir's admitted store incarnation (see
    /// [`Registry::rejoin_settled`]).
    pub fn set_incarnation(&self, incarnation: u64) {
        self.incarnation
            .store(incarnation, std::sync::atomic::Ordering::SeqCst);
    }

    /// This node is rejoining under `--rejoin-empty` (just admitted, or
    /// restarted before every group took it back), before it serves any
    /// Raft message: mark it rejoining (flushed), and every replica already
    /// open that has no mark and whose group has not taken it back (group
    /// 0's, on a new data dir) with a rejoin mark, elections off; replicas
    /// opened later on new storage get one at open (see
    /// [`joining`](crate::joining)).
    pub async fn begin_rejoin(&self, incarnation: u64) -> anyhow::Result<()> {
        self.set_incarnation(incarnation);
        self.db.set_rejoining(true).await?;
        // At every start while rejoining: a crash between the admission
        // and the marks left an open replica (group 0's) unmarked. A group
        // the directory says took the node back keeps its own state.
        for h in self.all().into_values() {
            if h.joining.refuses_votes() || self.rejoin_settled(h.id) {
                continue;
            }
            h.joining.begin_rejoin()?;
            h.raft.runtime_config().elect(false);
            watch_joining(&h);
        }
        self.db.flush().await?;
        Ok(())
    }

    /// The term from which `id`'s rejoining replica here may take appends
    /// (see [`Rejoin::floors`](seatfence_core::Rejoin)); `None`: not yet.
    pub fn rejoin_floor(&self, id: GroupId) -> Option<u64> {
        let me = seatfence_core::NodeId(self.node_id);
        let mine = self.incarnation.load(std::sync::atomic::Ordering::SeqCst);
        self.get(GroupId::DIRECTORY).and_then(|dir| {
            dir.sm.read(|s| {
                let r = s.state.directory.rejoins.get(&me)?;
                (r.incarnation == mine).then(|| r.floor(id)).flatten()
            })
        })
    }

    /// Whether this node's directory replica records that `id` took this
    /// node back after its rejoin on an empty data dir (a rejoin record of
    /// this data dir's incarnation that no longer lists `id` as pending).
    /// A replica that has not heard of the rejoin yet says no.
    pub fn rejoin_settled(&self, id: GroupId) -> bool {
        let me = seatfence_core::NodeId(self.node_id);
        let mine = self.incarnation.load(std::sync::atomic::Ordering::SeqCst);
        self.get(GroupId::DIRECTORY).is_some_and(|dir| {
            dir.sm.read(|s| {
                s.state
                    .directory
                    .rejoins
                    .get(&me)
                    .is_some_and(|r| r.incarnation == mine && !r.pending.contains(&id))
            })
        })
    }

    /// Follow the directory for a rejoining node: each replica whose group
    /// took it back answers votes again (and its ordinary joining mark
    /// ends once the directory lists it as a voter), and once none is
    /// pending the node-wide mark goes. Called on each directory change.
    pub async fn follow_rejoin(&self) {
        if !self.db.is_rejoining().unwrap_or(false) {
            return;
        }
        let mut all_settled = true;
        for h in self.all().into_values() {
            if !h.joining.refuses_votes() {
                continue;
            }
            if self.rejoin_settled(h.id) {
                h.joining
                    .end_rejoin("the directory records the group took it back");
                if h.id.is_directory() || self.directory_voter(h.id) {
                    h.joining.end("the directory lists it as a voter");
                }
            } else {
                all_settled = false;
            }
        }
        let me = seatfence_core::NodeId(self.node_id);
        let mine = self.incarnation.load(std::sync::atomic::Ordering::SeqCst);
        let none_pending = self.get(GroupId::DIRECTORY).is_some_and(|dir| {
            dir.sm.read(|s| {
                s.state
                    .directory
                    .rejoins
                    .get(&me)
                    .is_some_and(|r| r.incarnation == mine && r.pending.is_empty())
            })
        });
        if all_settled && none_pending {
            match self.db.set_rejoining(false).await {
                Ok(()) => tracing::info!(
                    node = self.node_id,
                    "rejoined every group: this node votes again everywhere"
                ),
                Err(e) => tracing::warn!("clear the rejoin mark: {e}"),
            }
        }
    }

    /// Groups sleep when idle (`raft.sleep_after_ms` > 0): replicas opened
    /// here then start asleep, so a restarted node wakes no group whose
    /// leader is alive.
    pub fn with_sleep(mut self, on: bool) -> Registry {
        self.sleepy = on;
        self
    }

    /// This node's id.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The node's database, shared by all its replicas.
    pub fn db(&self) -> &NodeDb {
        &self.db
    }

    /// The node's channels to its peers.
    pub fn pool(&self) -> &PeerPool {
        &self.pool
    }

    /// The replica of `id` if it is open in memory here (a dormant one stays dormant: see
    /// [`Registry::hosted`]).
    pub fn get(&self, id: GroupId) -> Option<Arc<GroupHandle>> {
        self.groups
            .read()
            .expect("registry lock poisoned")
            .get(&id)
            .cloned()
    }

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

    /// Whether `id` is hosted here, in memory or dormant.
    pub fn is_hosted(&self, id: GroupId) -> bool {
        self.get(id).is_some() || self.is_dormant(id)
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
    fn forget_dormant(&self, id: GroupId) -> Option<Dormant> {
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

    /// Every hosted group, by id.
    pub fn all(&self) -> BTreeMap<GroupId, Arc<GroupHandle>> {
        let groups = self.groups.read().expect("registry lock poisoned");
        groups.iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// Open the replica of `id` (creating its storage if new). Idempotent.
    pub async fn open(&self, id: GroupId) -> anyhow::Result<Arc<GroupHandle>> {
        self.open_as(id, false).await
    }

    /// [`open`](Self::open) a replica that joins the group as a learner
    /// (placed here by a running move or repair): new storage is marked
    /// joining, so it does not campaign on a membership from the group's
    /// past (see [`joining`](crate::joining)).
    pub async fn open_target(&self, id: GroupId) -> anyhow::Result<Arc<GroupHandle>> {
        self.open_as(id, true).await
    }

    async fn open_as(&self, id: GroupId, target: bool) -> anyhow::Result<Arc<GroupHandle>> {
        let _guard = self.opening.lock().await;
        if let Some(h) = self.get(id) {
            return Ok(h);
        }
        let was_dormant = self.dormant_record(id);
        self.open_locked(id, was_dormant, target).await
    }

    /// Open `id` (the caller holds `opening` and found it not in memory);
    /// `was_dormant` is its dormant record, if it has one. The record goes
    /// only once the replica is in the map (a lookup meanwhile finds the
    /// record, and placement still sees the group hosted), and stays if
    /// the open fails (the group stays hosted, to be reopened when next
    /// needed).
    async fn open_locked(
        &self,
        id: GroupId,
        was_dormant: Option<Dormant>,
        target: bool,
    ) -> anyhow::Result<Arc<GroupHandle>> {
        let joining = Arc::new(self.joining(id, target)?);
        let log = LogStore::open(&self.db, id)
            .with_context(|| format!("open log of {id}"))?
            .with_joining(joining.clone());
        let sm = StateMachineStore::open(&self.db, id)
            .with_context(|| format!("open state of {id}"))?
            .with_joining(joining.clone());
        let network = NetworkFactory {
            pool: self.pool.clone(),
            group: id,
        };
        let raft = Raft::new(self.node_id, self.config.clone(), network, log, sm.clone())
            .await
            .with_context(|| format!("start raft for {id}"))?;
        if joining.is_on() {
            // Before any timer can fire: the first election timeout is
            // hundreds of milliseconds away.
            raft.runtime_config().elect(false);
        }
        let batcher = Batcher::spawn(id, raft.clone());
        tokio::spawn(log_leadership(id, raft.clone()));
        let handle = Arc::new(GroupHandle {
            id,
            raft,
            sm,
            batcher,
            activity: Activity::new(),
            joining: joining.clone(),
        });
        if joining.is_on() {
            watch_joining(&handle);
        }
        // A replica that restored its leadership keeps heartbeating (its
        // followers expect it); the controller puts it to sleep later.
        if self.sleepy && !id.is_directory() && !handle.raft.is_leader() {
            handle.doze_at_open();
        }
        if let Some(d) = &was_dormant {
            handle.set_leader_hint(d.leader);
        }
        self.groups
            .write()
            .expect("registry lock poisoned")
            .insert(id, handle.clone());
        self.forget_dormant(id);
        match was_dormant {
            Some(_) => tracing::debug!(group = id.0, "reopened dormant replica"),
            None => tracing::info!(group = id.0, "opened group replica"),
        }
        Ok(handle)
    }

    /// A Raft message came for `id`, which this node does not host yet:
    /// open it now if this node's directory replica already makes it a
    /// voter here and no data of it is stored here (a new group whose
    /// first member campaigns before `place_groups` opened it here; without
    /// this the vote fails and the election waits a whole timeout). A
    /// replica with stored data is left to `place_groups`, which knows
    /// whether that data is stale. Checked before taking the opening lock
    /// (a message for a group not placed here waits for nobody's open) and
    /// again under it (a group retired meanwhile is not brought back).
    pub async fn open_if_placed(&self, id: GroupId) -> Option<Arc<GroupHandle>> {
        if id.is_directory() || !self.placed_here_and_new(id) {
            return None;
        }
        let _guard = self.opening.lock().await;
        if let Some(h) = self.get(id) {
            return Some(h);
        }
        if !self.placed_here_and_new(id) {
            return None;
        }
        warn_failed(
            id,
            "open on first message",
            self.open_locked(id, None, false).await,
        )
    }

    /// The joining state of `id`'s replica about to open: a target's new
    /// storage is marked first (a rejoining node's new storage with a
    /// rejoin mark); a mark ends once the directory lists this node as a
    /// voter of the group (a rejoin mark once the directory records the
    /// group took the node back).
    fn joining(&self, id: GroupId, target: bool) -> anyhow::Result<Joining> {
        let db = &self.db;
        let rejoining = db.is_rejoining()?;
        if (target || rejoining) && !db.is_stored(id)? {
            match rejoining {
                true => db.set_rejoin_mark(id)?,
                false => db.set_joining(id, true)?,
            }
        }
        let rejoin = db.is_rejoin_mark(id)?;
        let joining = Joining::new(db.clone(), id, self.node_id, db.is_joining(id)?, rejoin);
        if rejoin && self.rejoin_settled(id) {
            joining.end_rejoin("the directory records the group took it back");
        }
        if joining.is_on() && self.directory_voter(id) {
            joining.end("the directory lists it as a voter");
        }
        Ok(joining)
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

    /// Whether this node's directory replica places `id` here and no data
    /// of it is stored here.
    fn placed_here_and_new(&self, id: GroupId) -> bool {
        self.directory_voter(id) && self.db.is_stored(id).is_ok_and(|stored| !stored)
    }

    /// Initialize `id` with `members` if it has never been initialized.
    pub async fn initialize(
        &self,
        id: GroupId,
        members: BTreeMap<u64, BasicNode>,
    ) -> anyhow::Result<()> {
        let h = self.open(id).await?;
        if h.raft.is_initialized().await? {
            return Ok(());
        }
        // A node back on an empty data dir must not start a group's log
        // afresh: the group exists, and its leader will send the log.
        if h.joining.refuses_votes() {
            tracing::info!(group = id.0, "rejoining: not initializing the group");
            return Ok(());
        }
        // A candidate retries its election on ticks (a peer may not have
        // opened the group yet), and a new leader must heartbeat.
        h.wake();
        match h.raft.initialize(members).await {
            Ok(()) => {
                tracing::info!(group = id.0, "initialized group");
                Ok(())
            }
            // Someone else got there first (or a vote already exists).
            Err(openraft::error::RaftError::APIError(e)) => {
                tracing::debug!(group = id.0, "initialize skipped: {e}");
                Ok(())
            }
            Err(e) => Err(e).with_context(|| format!("initialize {id}")),
        }
    }

    /// Stop serving `id` on this node (it is no longer a member): shut the
    /// replica down so it never campaigns, and forget it. Its storage stays
    /// until [`NodeDb::drop_group`].
    pub async fn retire(&self, id: GroupId) {
        let _guard = self.opening.lock().await;
        let removed = self
            .groups
            .write()
            .expect("registry lock poisoned")
            .remove(&id);
        self.forget_dormant(id);
        if let Some(h) = removed {
            h.leave_sleep_count();
            if let Err(e) = h.raft.shutdown().await {
                tracing::warn!(group = id.0, "shutdown of retired replica: {e}");
            }
            tracing::info!(group = id.0, "retired group replica");
        }
    }

    /// Stop every replica (used at shutdown), then flush.
    pub async fn shutdown(&self) {
        let groups: Vec<_> = self.all().into_values().collect();
        for h in groups {
            if let Err(e) = h.raft.shutdown().await {
                tracing::warn!(group = h.id.0, "shutdown: {e}");
            }
        }
        if let Err(e) = self.db.flush().await {
            tracing::warn!("final flush failed: {e}");
        }
    }
}

/// Turn `h`'s elections on once its joining ends (a task holding no
/// reference to the replica).
fn watch_joining(h: &Arc<GroupHandle>) {
    let weak = Arc::downgrade(h);
    let mut rx = h.joining.subscribe();
    tokio::spawn(async move {
        if rx.wait_for(|on| !on).await.is_ok() {
            if let Some(h) = weak.upgrade() {
                h.allow_elections();
            }
        }
    });
}

/// The opened replica, or `None` with the failure logged as `what`.
fn warn_failed(
    id: GroupId,
    what: &str,
    opened: anyhow::Result<Arc<GroupHandle>>,
) -> Option<Arc<GroupHandle>> {
    opened
        .inspect_err(|e| tracing::warn!(group = id.0, "{what}: {e:#}"))
        .ok()
}

/// Log every change of a group's role, leader or term (group id and term in
/// every line). Watches only the server metrics, which change on elections,
/// not on every write.
async fn log_leadership(group: GroupId, raft: Raft) {
    use openraft::async_runtime::watch::WatchReceiver;
    let mut rx = raft.server_metrics();
    let mut last = None;
    while rx.changed().await.is_ok() {
        let (term, leader, state) = {
            let m = rx.borrow_watched();
            (m.vote.leader_id().term, m.current_leader, m.state)
        };
        if last != Some((term, leader, state)) {
            if state == openraft::ServerState::Leader
                && last.is_none_or(|(_, _, s)| s != openraft::ServerState::Leader)
            {
                crate::metrics::METRICS.leader_gained(group.0);
            }
            last = Some((term, leader, state));
            tracing::info!(group = group.0, term, ?leader, ?state, "leadership");
        }
    }
}
