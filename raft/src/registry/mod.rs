//! [`Registry`]: the groups hosted on this node, by group id: opening,
//! initializing, retiring and shutting them down here; each replica's
//! handle in [`group`], the unloaded ones in [`dormant`], rejoin on an empty
//! data dir in [`rejoin`], and the reads of the node's directory replica
//! the rest of `raft` needs in [`directory`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use openraft::BasicNode;
use seatfence_core::GroupId;

use crate::batcher::{Batcher, WriteLimits};
use crate::joining::Joining;
use crate::network::{NetworkFactory, PeerPool};
use crate::sleep::dormant::Dormant;
use crate::sleep::Activity;
mod directory;
mod dormant;
mod group;
mod rejoin;
mod status;

pub use directory::DirectoryView;
pub use group::{GroupHandle, HandOverError};
pub use status::state_digest;

use crate::storage::{LogStore, NodeDb, StateMachineStore};
use crate::types::Raft;

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
    /// What every batcher here admits (see [`WriteLimits`]).
    limits: Arc<WriteLimits>,
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
            limits: WriteLimits::unbounded(),
            peers: Default::default(),
            incarnation: Default::default(),
        }
    }

    /// Groups sleep when idle (`raft.sleep_after_ms` > 0): replicas opened
    /// here then start asleep, so a restarted node wakes no group whose
    /// leader is alive.
    pub fn with_sleep(mut self, on: bool) -> Registry {
        self.sleepy = on;
        self
    }

    /// Bound the writes this node's leaders hold at once (unbounded
    /// unless set).
    pub fn with_write_limits(mut self, limits: Arc<WriteLimits>) -> Registry {
        self.limits = limits;
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

    /// Whether `id` is hosted here, in memory or dormant.
    pub fn is_hosted(&self, id: GroupId) -> bool {
        self.get(id).is_some() || self.is_dormant(id)
    }

    /// Every hosted group, by id.
    pub fn all(&self) -> BTreeMap<GroupId, Arc<GroupHandle>> {
        let groups = self.groups.read().expect("registry lock poisoned");
        groups.iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// The hosted groups `keep` says yes to, looked at under the map's read
    /// lock: a scan over thousands of groups clones only the handles it
    /// keeps and builds no map.
    pub fn select(&self, mut keep: impl FnMut(&GroupHandle) -> bool) -> Vec<Arc<GroupHandle>> {
        self.scan(|g| keep(g).then(|| g.clone()))
    }

    /// What `f` makes of each hosted group, where it makes something;
    /// looked at under the map's read lock (`f` must not block or await).
    pub fn scan<T>(&self, f: impl FnMut(&Arc<GroupHandle>) -> Option<T>) -> Vec<T> {
        let groups = self.groups.read().expect("registry lock poisoned");
        groups.values().filter_map(f).collect()
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
        let batcher = Batcher::spawn(id, raft.clone(), self.limits.clone());
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
pub(super) fn watch_joining(h: &Arc<GroupHandle>) {
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
pub(super) fn warn_failed(
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
