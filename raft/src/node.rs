//! [`run_node`]: one `seatfence node` process.
//!
//! ```text
//!  open sled ─▶ reopen stored groups + directory ─▶ serve gRPC
//!     ─▶ (lowest initial member) initialize the directory
//!     ─▶ register this node in the directory (retried until committed)
//!     ─▶ watch the directory: open/initialize every group placed here
//!  SIGTERM ─▶ stop serving ─▶ shut every replica down ─▶ final flush
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use openraft::BasicNode;
use seatfence_core::{Command, GroupId, NodeId, NodeInfo, RegionId, Response};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::NodeApi;
use crate::client::ClusterClient;
use crate::clock::SystemClock;
use crate::config::NodeConfig;
use crate::network::{PeerPool, RaftGrpc};
use crate::propose::Proposer;
use crate::registry::Registry;
use crate::storage::NodeDb;

/// Run a node until `shutdown` resolves.
pub async fn run_node(
    config: NodeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let node = Node::start(config).await?;
    shutdown.await;
    node.stop().await;
    Ok(())
}

/// A running node: its replicas, its gRPC server and background tasks.
/// Layers above (the HTTP edge) are started next to it by the binary.
pub struct Node {
    pub config: NodeConfig,
    pub registry: Arc<Registry>,
    /// The leader side of this node's groups, shared by the gRPC API and
    /// every in-process caller (`ClusterClient::with_local`).
    pub proposer: Arc<Proposer>,
    pub clock: Arc<SystemClock>,
    /// Turns `true` when the node is stopping.
    pub rx_stop: watch::Receiver<bool>,
    tx_stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Node {
    pub async fn start(config: NodeConfig) -> anyhow::Result<Node> {
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("create data dir {}", config.data_dir.display()))?;
        let db = NodeDb::open(&config.data_dir, config.raft.flush)
            .with_context(|| format!("open sled db in {}", config.data_dir.display()))?;
        let pool = PeerPool::default();
        let registry = Arc::new(Registry::new(
            config.node_id,
            db.clone(),
            pool,
            config.openraft_config(),
        ));
        let clock = Arc::new(SystemClock::default());
        if let Some(hooks) = &config.chaos {
            crate::network::via::install(hooks.via.clone(), hooks.source_ip);
        }

        for g in db.stored_groups() {
            registry.open(g).await?;
        }
        registry.open(GroupId::DIRECTORY).await?;

        let listener = TcpListener::bind(&config.grpc_addr)
            .await
            .with_context(|| format!("bind gRPC on {}", config.grpc_addr))?;
        tracing::info!(node = config.node_id, region = %config.region, addr = %config.grpc_addr, "node serving");

        let proposer = Arc::new(
            Proposer::new(registry.clone(), clock.clone())
                .with_planted_bug(config.chaos.as_ref().and_then(|c| c.plant_bug)),
        );
        let (tx_stop, rx_stop) = watch::channel(false);
        let server = {
            let mut rx = rx_stop.clone();
            // Accepted sockets need TCP_NODELAY set here: the builder's
            // `tcp_nodelay` only reaches listeners tonic binds itself, and
            // without it small replies wait for the peer's delayed ACK (~40 ms).
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            tonic::transport::Server::builder()
                .add_service(RaftGrpc::new(registry.clone()).into_server())
                .add_service(NodeApi::new(proposer.clone(), config.region.clone()).into_server())
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = rx.wait_for(|s| *s).await;
                })
        };
        let server = tokio::spawn(server);

        if config.is_bootstrapper() {
            registry
                .initialize(GroupId::DIRECTORY, config.directory_members())
                .await?;
        }
        tokio::spawn(register_self(config.clone(), rx_stop.clone()));
        tokio::spawn(place_groups(
            registry.clone(),
            config.moves.clone(),
            rx_stop.clone(),
        ));
        tokio::spawn(add_directory_learners(registry.clone(), rx_stop.clone()));
        tokio::spawn(expire_holds(
            registry.clone(),
            clock.clone(),
            rx_stop.clone(),
        ));
        tokio::spawn(hand_off_when_drained(registry.clone(), rx_stop.clone()));
        if let Some(path) = config.chaos.as_ref().and_then(|c| c.skew_file.clone()) {
            tokio::spawn(follow_skew_file(path, clock.clone(), rx_stop.clone()));
        }
        Ok(Node {
            config,
            registry,
            proposer,
            clock,
            rx_stop,
            tx_stop,
            server,
        })
    }

    /// Stop serving, shut every replica down, flush.
    pub async fn stop(self) {
        tracing::info!(node = self.config.node_id, "shutting down");
        let _ = self.tx_stop.send(true);
        match tokio::time::timeout(Duration::from_secs(5), self.server).await {
            Ok(Ok(Err(e))) => tracing::warn!("gRPC server: {e}"),
            Ok(Err(e)) => tracing::warn!("gRPC server task: {e}"),
            Err(_) => tracing::warn!("gRPC server did not stop within 5 s"),
            Ok(Ok(Ok(()))) => {}
        }
        self.registry.shutdown().await;
    }
}

/// Record this node (id, region, address) in the directory, retrying until
/// the directory commits it.
async fn register_self(config: NodeConfig, mut rx_stop: watch::Receiver<bool>) {
    let seeds = config
        .initial_members
        .iter()
        .map(|p| p.grpc_addr.clone())
        .collect();
    let client = ClusterClient::new(seeds).with_deadline(Duration::from_secs(5));
    let cmd = Command::RegisterNode(NodeInfo {
        id: NodeId(config.node_id),
        region: RegionId(config.region.clone()),
        grpc_addr: config.grpc_addr.clone(),
    });
    loop {
        match client.write(GroupId::DIRECTORY, &cmd).await {
            Ok(_) => {
                tracing::info!(node = config.node_id, "registered in directory");
                return;
            }
            Err(e) => tracing::debug!(node = config.node_id, "register: {e}"),
        }
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// Follow the directory: open every group placed on this node (the group's
/// first member initializes it), including groups a running move adds this
/// node to as a learner; retire replicas the directory no longer places
/// here (moved away, or an aborted move's learner): shut down at once so
/// they never campaign, data deleted after `retired_grace_ms`.
async fn place_groups(
    registry: Arc<Registry>,
    moves: crate::config::MovesConfig,
    mut rx_stop: watch::Receiver<bool>,
) {
    let Some(dir) = registry.get(GroupId::DIRECTORY) else {
        return;
    };
    let me = NodeId(registry.node_id());
    let mut rx_applied = dir.sm.subscribe_applied();
    // Retired replicas whose data is still on disk, with when they retired.
    let mut retired: BTreeMap<GroupId, tokio::time::Instant> = BTreeMap::new();
    let grace = Duration::from_millis(moves.retired_grace_ms);
    loop {
        type Wanted = (GroupId, Vec<NodeId>, BTreeMap<u64, BasicNode>);
        let (wanted, known): (Vec<Wanted>, std::collections::BTreeSet<GroupId>) =
            dir.sm.read(|s| {
                let d = &s.state.directory;
                let wanted = d
                    .hosted_on(me)
                    .into_iter()
                    .map(|gid| {
                        let order = d.groups.get(&gid).map(|g| g.members.clone());
                        let order = order.unwrap_or_default();
                        let members = order
                            .iter()
                            .filter_map(|m| {
                                d.nodes.get(m).map(|n| (m.0, BasicNode::new(&n.grpc_addr)))
                            })
                            .collect();
                        (gid, order, members)
                    })
                    .collect::<Vec<_>>();
                (wanted, d.groups.keys().copied().collect())
            });
        let wanted_ids: std::collections::BTreeSet<GroupId> = wanted.iter().map(|w| w.0).collect();
        for (gid, order, members) in wanted {
            if retired.remove(&gid).is_some() {
                // Placed here again before its old data was deleted: start
                // from nothing rather than from a stale log.
                if let Err(e) = registry.db().drop_group(gid) {
                    tracing::warn!(group = gid.0, "drop stale replica data: {e}");
                }
            }
            let result = if order.first() == Some(&me) && members.len() == order.len() {
                registry.initialize(gid, members).await
            } else {
                registry.open(gid).await.map(drop)
            };
            if let Err(e) = result {
                tracing::warn!(group = gid.0, "cannot host group: {e:#}");
            }
        }
        for gid in registry.all().into_keys() {
            // Only groups the directory knows: a replica lagging behind a
            // group's creation must not retire it.
            if gid.is_directory() || wanted_ids.contains(&gid) || !known.contains(&gid) {
                continue;
            }
            registry.retire(gid).await;
            retired.insert(gid, tokio::time::Instant::now());
        }
        let now = tokio::time::Instant::now();
        let due: Vec<GroupId> = retired
            .iter()
            .filter(|(_, at)| now.duration_since(**at) >= grace)
            .map(|(g, _)| *g)
            .collect();
        for gid in due {
            retired.remove(&gid);
            match registry.db().drop_group(gid) {
                Ok(()) => tracing::info!(group = gid.0, "deleted retired replica data"),
                Err(e) => tracing::warn!(group = gid.0, "delete retired replica data: {e}"),
            }
        }
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            changed = rx_applied.changed() => if changed.is_err() { return },
            // Retired data falls due without a directory change.
            _ = tokio::time::sleep(grace.min(Duration::from_secs(5))), if !retired.is_empty() => {}
        }
    }
}

/// On the directory's leader: every registered node that is not yet in
/// group 0's membership is added as a learner, so it receives the directory
/// (and with it the groups placed on it). Runs on every node, acts only
/// while leading.
async fn add_directory_learners(registry: Arc<Registry>, mut rx_stop: watch::Receiver<bool>) {
    let Some(dir) = registry.get(GroupId::DIRECTORY) else {
        return;
    };
    let mut rx_applied = dir.sm.subscribe_applied();
    loop {
        if dir.raft.is_leader() {
            let missing: Vec<(u64, String)> = dir.sm.read(|s| {
                let members = s.membership.membership();
                s.state
                    .directory
                    .nodes
                    .values()
                    .filter(|n| members.get_node(&n.id.0).is_none())
                    .map(|n| (n.id.0, n.grpc_addr.clone()))
                    .collect()
            });
            for (id, addr) in missing {
                match dir.raft.add_learner(id, BasicNode::new(&addr), false).await {
                    Ok(_) => tracing::info!(
                        group = 0,
                        node = id,
                        "added node to the directory as a learner"
                    ),
                    Err(e) => tracing::debug!(group = 0, node = id, "add learner: {e}"),
                }
            }
        }
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            changed = rx_applied.changed() => if changed.is_err() { return },
            // Leadership may arrive without a new apply.
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Drills only: keep the leader clock's skew equal to the integer in `path`
/// (missing or unreadable: 0), re-read every 100 ms.
async fn follow_skew_file(
    path: std::path::PathBuf,
    clock: Arc<SystemClock>,
    mut rx_stop: watch::Receiver<bool>,
) {
    loop {
        let skew = tokio::fs::read_to_string(&path)
            .await
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .unwrap_or(0);
        if skew != clock.skew() {
            tracing::warn!(skew_ms = skew, "clock skew changed (drill)");
            clock.set_skew(skew);
        }
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// On each event group this node leads: once a hold's deadline has passed,
/// propose a `Tick` so the hold is expired and its seats counted free again
/// even when no other command arrives. (Any command expires due holds
/// first; this only keeps idle events current.) Holds with a payment are
/// never expired by time; only the reconciler releases those.
async fn expire_holds(
    registry: Arc<Registry>,
    clock: Arc<SystemClock>,
    mut rx_stop: watch::Receiver<bool>,
) {
    use crate::clock::Clock;
    use seatfence_core::inventory::{EventAction, EventCommand};
    loop {
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        let now = clock.now_ms();
        for (gid, g) in registry.all() {
            if gid.is_directory() || !g.leads() {
                continue;
            }
            let due = g.sm.read(|s| {
                let inv = &s.state.inventory;
                let first = inv.index.deadlines.get_min().map(|(at, _)| *at);
                match (&inv.event, first) {
                    (Some(e), Some(at)) if at <= now => Some((e.event_id.clone(), e.epoch)),
                    _ => None,
                }
            });
            let Some((event_id, epoch)) = due else {
                continue;
            };
            let cmd = Command::Event(EventCommand {
                event_id,
                epoch,
                now_ms: now,
                idempotency: None,
                action: EventAction::Tick,
            });
            let term = {
                use openraft::async_runtime::watch::WatchReceiver;
                g.raft.metrics().borrow_watched().current_term
            };
            if let Err(e) = g.batcher.propose(cmd, Some(term)).await {
                tracing::debug!(group = gid.0, "expire tick: {e}");
            }
        }
    }
}

/// While the directory marks this node drained, hand every leadership it
/// gains (an election can still pick it) to the most caught-up other voter
/// that is not drained. Checked every second.
async fn hand_off_when_drained(registry: Arc<Registry>, mut rx_stop: watch::Receiver<bool>) {
    use openraft::async_runtime::watch::WatchReceiver;
    let me = registry.node_id();
    loop {
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let Some(dir) = registry.get(GroupId::DIRECTORY) else {
            continue;
        };
        let drained = dir.sm.read(|s| s.state.directory.drained.clone());
        if !drained.contains(&seatfence_core::NodeId(me)) {
            continue;
        }
        for (gid, g) in registry.all() {
            if !g.leads() {
                continue;
            }
            let matched = g.raft.metrics().borrow_watched().replication.clone();
            let target = g
                .raft
                .voter_ids()
                .filter(|v| *v != me && !drained.contains(&seatfence_core::NodeId(*v)))
                .max_by_key(|v| {
                    matched
                        .as_ref()
                        .and_then(|m| m.get(v).cloned().flatten())
                        .map(|log_id| log_id.index)
                });
            let Some(to) = target else {
                tracing::warn!(group = gid.0, "drained, but no other voter can lead");
                continue;
            };
            tracing::info!(group = gid.0, to, "drained node hands off leadership");
            if let Err(e) = g.raft.trigger().transfer_leader(to).await {
                tracing::warn!(group = gid.0, to, "hand-off failed: {e}");
            }
        }
    }
}

/// Create a group through the directory. Returns its id and members.
pub async fn create_group(
    client: &ClusterClient,
    group_id: Option<GroupId>,
    placement: seatfence_core::Placement,
) -> anyhow::Result<(GroupId, Vec<NodeId>)> {
    let out = client
        .write(
            GroupId::DIRECTORY,
            &Command::CreateGroup {
                group_id,
                placement,
            },
        )
        .await
        .context("propose CreateGroup to the directory")?;
    match out.response {
        Response::GroupCreated { group_id, members } => Ok((group_id, members)),
        other => anyhow::bail!("directory refused the group: {other}"),
    }
}
