//! [`Node`]: start and stop one node; [`run`]: until a shutdown signal.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use seatfence_api::Edge;
use seatfence_core::{Command, GroupId, NodeId, Response};
use seatfence_duties::EventDuties;
use seatfence_raft::api::{Exposition, NodeApi};
use seatfence_raft::clock::SystemClock;
use seatfence_raft::network::gate::Gate;
use seatfence_raft::network::tls::{node_server_name, Principal, Tls};
use seatfence_raft::network::Dialer;
use seatfence_raft::network::{PeerPool, RaftGrpc};
use seatfence_raft::operator::Auditor;
use seatfence_raft::registry::Registry;
use seatfence_raft::storage::{NodeDb, StoreIdent};
use seatfence_raft::{ClusterClient, Proposer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::NodeConfig;
use crate::edge::{node_client, start_edge, start_payments_without_edge};
use crate::{admit, jobs};

/// Run a node until `shutdown` resolves, then stop it; or until a flush of
/// its storage fails, then exit at once with the reason (no graceful stop:
/// that would flush again, and a failed flush is final; see
/// `seatfence_raft::storage::health`).
pub async fn run(
    config: NodeConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let node = Node::start(config).await?;
    let mut failed = node.registry.db().watch_failed();
    let mut fatal = node.rx_fatal.clone();
    tokio::select! {
        _ = shutdown => {
            node.stop().await;
            Ok(())
        }
        // Registration ends its sender once it succeeded: then never.
        why = async {
            // The guard is dropped before the await below: `run` stays Send.
            let why = fatal.wait_for(Option::is_some).await.ok().map(|w| w.clone());
            match why {
                Some(why) => why,
                None => std::future::pending().await,
            }
        } => {
            // Stopped without shutting the replicas down gracefully: a
            // leadership hand-off would be this data dir speaking again.
            std::mem::forget(node);
            anyhow::bail!("{}", why.unwrap_or_default())
        }
        // The guard `wait_for` returns is dropped in here: `run` stays Send.
        why = async { failed.wait_for(Option::is_some).await.ok().and_then(|w| w.clone()) } => {
            let why = why.unwrap_or_default();
            // Not dropped: dropping it would end every task (its stop
            // channel closes) and the last `NodeDb` would flush in sled's
            // `Drop`, past the failed-flush gate. The process exits next.
            std::mem::forget(node);
            anyhow::bail!(
                "storage failed ({why}): exiting without another flush; nothing that flush \
                 covered was acknowledged, and a restart recovers from what the disk holds"
            )
        }
    }
}

/// A running node: its replicas, its gRPC server, the move coordinator,
/// its HTTP edge (when configured) and background jobs.
pub struct Node {
    /// The config the node started with (secrets resolved).
    pub config: NodeConfig,
    /// This node's replicas of its groups.
    pub registry: Arc<Registry>,
    /// The leader side of this node's groups, shared by the gRPC API and
    /// every in-process caller (`ClusterClient::with_local`).
    pub proposer: Arc<Proposer>,
    /// The node's clock, shared by every leader side; a drill's `skew_file` shifts it.
    pub clock: Arc<SystemClock>,
    /// The HTTP edge, when the config has `[edge]`.
    pub edge: Option<Arc<Edge>>,
    /// Where gRPC and HTTP listen, as bound. (The directory records the
    /// configured `grpc_addr`, which peers dial: `:0` suits a lone node in
    /// a test only.)
    pub grpc_addr: SocketAddr,
    /// Where the HTTP edge listens, as bound (`None` without `[edge]`).
    pub http_addr: Option<SocketAddr>,
    /// Turns `true` when the node is stopping.
    pub rx_stop: watch::Receiver<bool>,
    tx_stop: watch::Sender<bool>,
    /// Why the node must stop at once (the directory refused its data
    /// dir's incarnation), once it must.
    rx_fatal: watch::Receiver<Option<String>>,
    server: ServerTask,
    /// Every background task the node started (jobs, duties, the edge's
    /// server and workers): `stop` waits for all of them.
    tasks: JoinSet<()>,
}

impl Node {
    /// Start the node. On a new data dir this returns only once the data
    /// dir is admitted (`admit`): in a cluster being born, once a majority
    /// of the initial members answer, so start those together.
    pub async fn start(mut config: NodeConfig) -> anyhow::Result<Node> {
        // `env:`/`file:` secrets, for a config not read by `from_toml`.
        config.resolve_secrets()?;
        config.validate()?;
        // TLS before anything dials: a stored group that leads at once
        // opens its peers' channels, and a channel keeps its scheme.
        let tls = load_tls(&config)?;
        let mut dialer = Dialer::new(tls.as_ref());
        if let Some(hooks) = &config.chaos {
            dialer = dialer.with_via(hooks.via.clone(), hooks.source_ip);
        }
        seatfence_raft::heap::set_pretouch(config.raft.pretouch);
        let (db, ident, registry) = open_storage(&config, dialer).await?;
        let clock = Arc::new(SystemClock::default());
        // Every consensus-layer series shows on /metrics from zero.
        std::sync::LazyLock::force(&seatfence_raft::metrics::METRICS);
        open_stored(&registry, db.stored_groups()).await?;
        registry.open(GroupId::DIRECTORY).await?;
        let proposer = Arc::new(
            Proposer::new(registry.clone(), clock.clone())
                .with_planted_bug(config.chaos.as_ref().and_then(|c| c.plant_bug)),
        );

        let (tx_stop, rx_stop) = watch::channel(false);
        // Raft messages wait for the data dir's admission (`admit`): a
        // fresh one must not vote before the node knows its id is new.
        let admitted = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The node's metrics for the fleet view: its edge's whole /metrics
        // once the edge runs.
        let exposition = Exposition::default();
        let (server, grpc_addr) = serve_grpc(
            &config,
            tls.as_ref(),
            &registry,
            &proposer,
            &admitted,
            &exposition,
            &rx_stop,
        )
        .await?;
        let ident = match admit::admit(&config, &db, ident, registry.pool(), rx_stop.clone()).await
        {
            Ok(ident) => ident,
            Err(e) => {
                let _ = tx_stop.send(true);
                return Err(e);
            }
        };
        registry.set_incarnation(ident.incarnation);
        // Admitted under `--rejoin-empty` (now or in an earlier start):
        // every replica refuses votes until its group took this node back,
        // starting before the first Raft message is served.
        if db.is_rejoining()? {
            registry.begin_rejoin(ident.incarnation).await?;
        }
        admitted.store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::info!(
            node = config.node_id,
            incarnation = ident.incarnation,
            "data dir admitted"
        );
        let (tx_fatal, rx_fatal) = watch::channel(None);
        let mut tasks = JoinSet::new();

        if config.is_bootstrapper() {
            registry
                .initialize(GroupId::DIRECTORY, config.directory_members())
                .await?;
        }
        spawn_jobs(
            &mut tasks,
            &config,
            &registry,
            &proposer,
            &clock,
            (ident, tx_fatal),
            &rx_stop,
        );
        let (edge, http_addr) =
            match start_edge(&mut tasks, &config, &registry, &proposer, &clock, &rx_stop).await? {
                Some((edge, addr)) => (Some(edge), Some(addr)),
                None => (None, None),
            };
        if let Some(e) = &edge {
            let e = Arc::downgrade(e);
            let _ = exposition.set(Arc::new(move || {
                e.upgrade().map(|e| e.metrics_text()).unwrap_or_default()
            }));
        }
        // The leader duties of the event groups this node leads, the
        // payment ones with the node's payment side (the edge's, or one of
        // its own on a node that serves no HTTP).
        let payments = match &edge {
            Some(e) => e.payments.clone(),
            None => start_payments_without_edge(
                &mut tasks, &config, &registry, &proposer, &clock, &rx_stop,
            ),
        };
        tasks.spawn(
            EventDuties::new(registry.clone(), proposer.clone(), clock.clone(), payments)
                .run(rx_stop.clone()),
        );
        Ok(Node {
            config,
            registry,
            proposer,
            clock,
            edge,
            grpc_addr,
            http_addr,
            rx_stop,
            tx_stop,
            rx_fatal,
            server,
            tasks,
        })
    }

    /// Stop serving, wait for every background task, shut every replica
    /// down, flush.
    pub async fn stop(mut self) {
        tracing::info!(node = self.config.node_id, "shutting down");
        let _ = self.tx_stop.send(true);
        match tokio::time::timeout(STOP_LIMIT, &mut self.server).await {
            Ok(Ok(Err(e))) => tracing::warn!("gRPC server: {e}"),
            Ok(Err(e)) => tracing::warn!("gRPC server task: {e}"),
            Err(_) => tracing::warn!("gRPC server did not stop within 5 s"),
            Ok(Ok(Ok(()))) => {}
        }
        let tasks = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(STOP_LIMIT, tasks).await.is_err() {
            tracing::warn!(
                left = self.tasks.len(),
                "background tasks did not stop within {STOP_LIMIT:?}: aborted"
            );
            self.tasks.shutdown().await;
        }
        self.registry.shutdown().await;
    }
}

/// The data dir, its sled database (with the disk-space watch), the
/// store's identity as the previous life left it (read before any group
/// opens, since an open writes its mark), and the node's registry.
async fn open_storage(
    config: &NodeConfig,
    dialer: Dialer,
) -> anyhow::Result<(NodeDb, seatfence_raft::storage::IdentState, Arc<Registry>)> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("create data dir {}", config.data_dir.display()))?;
    let db = NodeDb::open_with_cache(
        &config.data_dir,
        config.raft.flush,
        config.raft.cache_mb.saturating_mul(1 << 20),
    )
    .with_context(|| format!("open sled db in {}", config.data_dir.display()))?;
    db.watch_space(config.raft.min_free_mb.saturating_mul(1 << 20));
    // Before any group opens (an open writes its mark): whether the
    // data dir is new is read from what the previous life left.
    let ident = db
        .ident(config.node_id)
        .await
        .with_context(|| format!("store identity in {}", config.data_dir.display()))?;
    let registry = Arc::new(
        Registry::new(
            config.node_id,
            db.clone(),
            PeerPool::new(dialer),
            config.openraft_config(),
        )
        .with_sleep(config.raft.sleep_after_ms > 0)
        .with_write_limits(config.raft.write_limits()),
    );
    Ok((db, ident, registry))
}

/// Serve the node plane (Raft messages behind `admitted`, the node API)
/// on `[node] grpc_addr`, with mutual TLS when configured, until
/// `rx_stop`: the server's task and the address it listens on.
async fn serve_grpc(
    config: &NodeConfig,
    tls: Option<&Tls>,
    registry: &Arc<Registry>,
    proposer: &Arc<Proposer>,
    admitted: &Arc<std::sync::atomic::AtomicBool>,
    exposition: &Exposition,
    rx_stop: &watch::Receiver<bool>,
) -> anyhow::Result<(ServerTask, std::net::SocketAddr)> {
    let gate = match tls {
        Some(_) => Gate::new(
            registry.clone(),
            config.initial_members.iter().map(|p| p.id).collect(),
        ),
        None => Gate::open(),
    };
    let listener = TcpListener::bind(&config.grpc_addr)
        .await
        .with_context(|| format!("bind gRPC on {}", config.grpc_addr))?;
    let grpc_addr = listener.local_addr()?;
    tracing::info!(node = config.node_id, region = %config.region, addr = %grpc_addr, "node serving");
    let server = {
        let mut rx = rx_stop.clone();
        // Accepted sockets need TCP_NODELAY set here: the builder's
        // `tcp_nodelay` only reaches listeners tonic binds itself, and
        // without it small replies wait for the peer's delayed ACK (~40 ms).
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let mut builder = tonic::transport::Server::builder();
        if let Some(t) = tls {
            builder = builder.tls_config(t.server()).context("[tls]")?;
        }
        builder
            .add_service(
                RaftGrpc::new(registry.clone())
                    .with_gate(gate.clone())
                    .with_admission(admitted.clone())
                    .into_server(),
            )
            .add_service(
                NodeApi::new(proposer.clone(), config.region.clone())
                    .with_gate(gate)
                    .with_auditor(Auditor::new(crate::edge::node_client(
                        config, registry, proposer,
                    )))
                    .with_exposition(exposition.clone())
                    .into_server(),
            )
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = rx.wait_for(|s| *s).await;
            })
    };
    Ok((tokio::spawn(server), grpc_addr))
}

/// The gRPC server's task.
type ServerTask = tokio::task::JoinHandle<Result<(), tonic::transport::Error>>;

/// The node's TLS identity from `[tls]` (`None`: insecure, said loudly),
/// checked to be this node's own certificate.
fn load_tls(config: &NodeConfig) -> anyhow::Result<Option<Tls>> {
    let tls = config
        .tls
        .as_ref()
        .map(|t| t.load())
        .transpose()
        .context("[tls]")?
        .flatten();
    match &tls {
        Some(t) if *t.identity() != Principal::Node(config.node_id) => anyhow::bail!(
            "[tls] cert names {}, this is node {}: give each node its own certificate",
            t.identity(),
            config.node_id
        ),
        Some(t) if !t.names_dns(&node_server_name(config.node_id)) => anyhow::bail!(
            "[tls] cert of node {id} does not name {name}, which its peers verify since \
             this version: reissue it (`seatfence cert node --id {id}`, after moving the old \
             node-{id}.pem and .key aside)",
            id = config.node_id,
            name = node_server_name(config.node_id),
        ),
        Some(_) => {}
        None => tracing::warn!(
            node = config.node_id,
            "INSECURE: [tls] insecure = true, the gRPC port takes plaintext from anyone \
             who reaches it (no peer identity, no authorization)"
        ),
    }
    Ok(tls)
}

/// Start the node's background work into `tasks`, each stopped by
/// `rx_stop`: registration (`registered`: this data dir's incarnation, and
/// where a refusal goes), sleep and liveness, placement, the directory
/// leader's learners and duties (moves, lifecycle, balance), hold expiry,
/// a drained node's hand-off, the cluster's data format, and a drill's
/// skew file.
fn spawn_jobs(
    tasks: &mut JoinSet<()>,
    config: &NodeConfig,
    registry: &Arc<Registry>,
    proposer: &Arc<Proposer>,
    clock: &Arc<SystemClock>,
    registered: (StoreIdent, watch::Sender<Option<String>>),
    rx_stop: &watch::Receiver<bool>,
) {
    let (ident, tx_fatal) = registered;
    let incarnation = ident.incarnation;
    let sleep_after_ms = config.raft.sleep_after_ms;
    tasks.spawn(jobs::register_self(
        config.clone(),
        registry.pool().dialer().clone(),
        incarnation,
        tx_fatal,
        rx_stop.clone(),
    ));
    if sleep_after_ms > 0 {
        tasks.spawn(seatfence_raft::sleep::controller::run(
            registry.clone(),
            sleep_after_ms,
            config.raft.unload_after_ms,
            rx_stop.clone(),
        ));
        tasks.spawn(seatfence_raft::sleep::liveness::run(
            registry.clone(),
            config.raft.liveness(),
            rx_stop.clone(),
        ));
    }
    tasks.spawn(seatfence_regions::placement::place_groups(
        registry.clone(),
        config.moves.clone(),
        rx_stop.clone(),
    ));
    tasks.spawn(seatfence_duties::directory::learners::run(
        registry.clone(),
        rx_stop.clone(),
    ));
    tasks.spawn(jobs::follow_retired(registry.clone(), rx_stop.clone()));
    tasks.spawn(jobs::follow_format(
        registry.clone(),
        ident,
        rx_stop.clone(),
    ));
    tasks.spawn(seatfence_regions::transfer::hand_off_when_drained(
        registry.clone(),
        config.moves.catch_up_slack,
        rx_stop.clone(),
    ));
    if let Some(path) = config.chaos.as_ref().and_then(|c| c.skew_file.clone()) {
        tasks.spawn(jobs::follow_skew_file(
            path,
            clock.clone(),
            registry.db().clone(),
            rx_stop.clone(),
        ));
    }
    if config.moves.balance_every_ms > 0 {
        tasks.spawn(seatfence_duties::directory::balance::run(
            registry.clone(),
            node_client(config, registry, proposer).with_deadline(Duration::from_secs(5)),
            Duration::from_millis(config.moves.balance_every_ms),
            config.moves.catch_up_slack,
            rx_stop.clone(),
        ));
    }
    if config.moves.follow_window_ms > 0 {
        tasks.spawn(seatfence_duties::follow::run(
            registry.clone(),
            proposer.clone(),
            node_client(config, registry, proposer).with_deadline(Duration::from_secs(5)),
            clock.clone(),
            Duration::from_millis(config.moves.follow_window_ms),
            seatfence_regions::follow::Rule {
                min_holds: config.moves.follow_min_holds,
                ..Default::default()
            },
            rx_stop.clone(),
        ));
    }
    let directory = seatfence_duties::directory::Context {
        registry: registry.clone(),
        client: node_client(config, registry, proposer).with_deadline(Duration::from_secs(5)),
        config: config.moves.clone(),
        clock: clock.clone(),
    };
    tasks.spawn(seatfence_duties::directory::moves::run(
        directory.clone(),
        rx_stop.clone(),
    ));
    tasks.spawn(seatfence_duties::directory::lifecycle::run(
        directory,
        rx_stop.clone(),
    ));
}

/// How long `Node::stop` waits for the gRPC server, then for the
/// background tasks.
const STOP_LIMIT: Duration = Duration::from_secs(5);

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

/// A group still opening after this is named in the log (and again every
/// as long).
const OPEN_WARN: Duration = Duration::from_secs(10);

/// A group not open after this fails the node's start, naming it: a node
/// that hangs while opening is worse than one that exits and says why.
const OPEN_LIMIT: Duration = Duration::from_secs(120);

/// Open every group stored on this node, one after another (they share
/// the disk). Each failure names its group; a slow one is reported while
/// it opens.
async fn open_stored(
    registry: &Registry,
    groups: std::collections::BTreeSet<GroupId>,
) -> anyhow::Result<()> {
    let total = groups.len();
    let started = std::time::Instant::now();
    for (i, g) in groups.into_iter().enumerate() {
        let t0 = std::time::Instant::now();
        let open = registry.open(g);
        tokio::pin!(open);
        loop {
            match tokio::time::timeout(OPEN_WARN, &mut open).await {
                Ok(opened) => {
                    opened.with_context(|| format!("open group {g} ({}/{total})", i + 1))?;
                    break;
                }
                Err(_) if t0.elapsed() >= OPEN_LIMIT => anyhow::bail!(
                    "group {g} ({}/{total}) did not open within {OPEN_LIMIT:?}: its log and \
                     state are still being read (disk stalled?)",
                    i + 1
                ),
                Err(_) => tracing::warn!(
                    group = g.0,
                    waited_s = t0.elapsed().as_secs(),
                    "group {g} ({}/{total}) is still opening",
                    i + 1
                ),
            }
        }
    }
    tracing::info!(
        groups = total,
        ms = started.elapsed().as_millis() as u64,
        "opened the stored groups"
    );
    Ok(())
}
