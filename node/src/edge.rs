//! The node's HTTP edge and payment side, when `[edge]` (and `[payments]`)
//! are configured: the edge's cluster client (in-process for the groups
//! this node leads), its `Commands` and route cache follower, the waiting
//! rooms' gauges on its `/metrics`, and the payment token's refresher.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use seatfence_api::Edge;
use seatfence_payments::Payments;
use seatfence_raft::clock::SystemClock;
use seatfence_raft::registry::Registry;
use seatfence_raft::{ClusterClient, Proposer};
use seatfence_regions::Commands;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::NodeConfig;

/// The seeds a node's clients start from: itself, then the directory's
/// initial voters.
fn seeds(config: &NodeConfig) -> Vec<String> {
    let mut seeds = vec![config.grpc_addr.clone()];
    seeds.extend(config.initial_members.iter().map(|p| p.grpc_addr.clone()));
    seeds
}

/// A client for in-node callers: this node's own groups in-process, the
/// members its directory replica names for the others.
pub(crate) fn node_client(
    config: &NodeConfig,
    registry: &Arc<Registry>,
    proposer: &Arc<Proposer>,
) -> ClusterClient {
    let resolver = registry.clone();
    ClusterClient::new(seeds(config), registry.pool().dialer().clone())
        .with_members(Arc::new(move |g| resolver.member_addrs(g)))
        .with_local(proposer.clone())
}

/// The HTTP edge, if `[edge]` is configured, with the node's payment side
/// if `[payments]` is (its token refresher started here; its duties on the
/// groups this node leads are `EventDuties`').
pub(crate) async fn start_edge(
    tasks: &mut JoinSet<()>,
    config: &NodeConfig,
    registry: &Arc<Registry>,
    proposer: &Arc<Proposer>,
    clock: &Arc<SystemClock>,
    rx_stop: &watch::Receiver<bool>,
) -> anyhow::Result<Option<(Arc<Edge>, SocketAddr)>> {
    let Some(edge_config) = config.edge.clone() else {
        return Ok(None);
    };
    let listener = TcpListener::bind(&edge_config.http_addr)
        .await
        .with_context(|| format!("bind HTTP edge on {}", edge_config.http_addr))?;
    let addr = listener.local_addr()?;
    let tls = match &edge_config.tls {
        Some(t) => Some(seatfence_api::tls::acceptor(t)?),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(%addr, region = %config.region, scheme, "edge serving");
    let deadline = Duration::from_millis(edge_config.request_timeout_ms);
    let commands = start_commands(tasks, config, registry, proposer, rx_stop, deadline);
    // How buyers and the gateway reach this edge; answers led here name it
    // (the leader hint, `X-Seatfence-Leader-Edge`).
    let public_url = edge_config
        .public_url
        .clone()
        .or_else(|| config.payments.as_ref().and_then(|p| p.public_url.clone()))
        .unwrap_or_else(|| format!("{scheme}://{addr}"));
    proposer.set_edge_url(&public_url);
    let mut edge = Edge::new(edge_config, commands.clone(), clock.clone());
    edge = edge.with_catch_up_slack(config.moves.catch_up_slack);
    let (leader_registry, leader_clock) = (registry.clone(), clock.clone());
    edge = edge.with_metrics(Arc::new(move || {
        seatfence_duties::rooms::metrics(
            &leader_registry,
            seatfence_raft::clock::Clock::now_ms(&*leader_clock),
        )
    }));
    if let Some(payments) = start_payments(
        tasks, config, commands, registry, clock, rx_stop, public_url,
    ) {
        edge = edge.with_payments(payments);
    }
    let edge = Arc::new(edge);
    edge.spawn_workers(tasks, rx_stop.clone());
    tasks.spawn(seatfence_api::serve(
        edge.clone(),
        listener,
        tls,
        rx_stop.clone(),
    ));
    Ok(Some((edge, addr)))
}

/// The fenced command path of this node: its cluster client (in-process
/// for the groups it leads) with `deadline` per command, routed by a cache
/// that follows the directory.
fn start_commands(
    tasks: &mut JoinSet<()>,
    config: &NodeConfig,
    registry: &Arc<Registry>,
    proposer: &Arc<Proposer>,
    rx_stop: &watch::Receiver<bool>,
    deadline: Duration,
) -> Arc<Commands> {
    let client = node_client(config, registry, proposer).with_deadline(deadline);
    let commands = Arc::new(Commands::new(client, registry.clone()));
    tasks.spawn(seatfence_regions::routes::follow_directory(
        commands.routes.clone(),
        registry.clone(),
        rx_stop.clone(),
    ));
    commands
}

/// The payment side, if `[payments]` is configured, with its token
/// refresher started; `public_url` is where buyers and the gateway reach
/// this node (`[payments] public_url` wins).
fn start_payments(
    tasks: &mut JoinSet<()>,
    config: &NodeConfig,
    commands: Arc<Commands>,
    registry: &Arc<Registry>,
    clock: &Arc<SystemClock>,
    rx_stop: &watch::Receiver<bool>,
    public_url: String,
) -> Option<Arc<Payments>> {
    let payments = Arc::new(Payments::new(
        config.payments.clone()?,
        public_url,
        config.data_dir.join("mail"),
        commands,
        registry.clone(),
        clock.clone(),
    ));
    tasks.spawn(seatfence_payments::refresher::run(
        payments.clone(),
        rx_stop.clone(),
    ));
    Some(payments)
}

/// The payment side of a node without an HTTP edge: its duties (the
/// reconciler and the outbox of the groups it leads) still run, so a
/// leader without an edge settles its payments. Commands get the edge's
/// default deadline; no buyer is sent here, so `public_url` is only what
/// `[payments]` names.
pub(crate) fn start_payments_without_edge(
    tasks: &mut JoinSet<()>,
    config: &NodeConfig,
    registry: &Arc<Registry>,
    proposer: &Arc<Proposer>,
    clock: &Arc<SystemClock>,
    rx_stop: &watch::Receiver<bool>,
) -> Option<Arc<Payments>> {
    config.payments.as_ref()?;
    let deadline = Duration::from_millis(seatfence_api::config::DEFAULT_REQUEST_TIMEOUT_MS);
    let commands = start_commands(tasks, config, registry, proposer, rx_stop, deadline);
    start_payments(
        tasks,
        config,
        commands,
        registry,
        clock,
        rx_stop,
        String::new(),
    )
}
