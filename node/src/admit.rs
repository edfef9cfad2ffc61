//! Admitting a data dir before the node votes: a node on an empty data dir
//! proves that its id is new to the cluster (or that the cluster itself is
//! new) before it takes any Raft message (see
//! `seatfence_raft::storage::ident` for why).
//!
//! ```text
//!  identity known (admitted data dir) ─▶ serve
//!  fresh ─▶ ping every other initial member (its answer: does its directory
//!           replica list any node, does it list me?)
//!    one lists me with my own incarnation       ─▶ my registration landed: serve
//!    one lists me (another incarnation)        ─▶ refuse to start
//!    one lists nodes                           ─▶ register my new incarnation
//!        (a linearizable write: the directory refuses a known id) ─▶ serve, or refuse
//!    a majority of the initial members (me included) list none ─▶ a new cluster: serve
//!    otherwise (peers unreachable, no directory quorum) ─▶ ask again; never serve meanwhile
//! ```
//!
//! A directory with a membership but no node listed is a cluster being
//! born: its first leader waits for the votes of initial members that are
//! still being admitted, so "lists no node" (not "has a log") is what
//! counts as new. Every node registers itself at each start, so an
//! established cluster lists at least its live nodes.
//!
//! Nothing is removed from the directory's node list, so a listed id is
//! conclusive even from a lagging replica; an unlisted one is settled by
//! the registration, which the directory's leader decides.

use std::time::{Duration, Instant};

use seatfence_core::{Command, GroupId, NodeId, NodeInfo, NodeOp, NodeOpDone, RegionId, Response};
use seatfence_raft::network::PeerPool;
use seatfence_raft::storage::{IdentState, NodeDb, StoreIdent};
use seatfence_raft::ClusterClient;
use tokio::sync::watch;

use crate::config::NodeConfig;

/// How long one round's pings and registration may take.
const ROUND: Duration = Duration::from_secs(2);

/// What the operator is told when the node refuses to start.
fn refusal(config: &NodeConfig, ident: &StoreIdent, why: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "node {node} refuses to start: its data dir {dir} is new (incarnation {inc:#x}) but {why}. \
         A node that forgot its log must not vote under its old id: it could elect a replica that \
         lacks a confirmed sale. If the old data dir still exists, start the node on it. If it is \
         lost: start it with `--rejoin-empty` (it rejoins every group as a learner and votes again once \
         caught up), or declare node {node} dead (`seatfence ctl declare-dead {node}`: its replicas are \
         repaired onto other nodes of its region) and start this host under a new node id with its own \
         certificate",
        node = config.node_id,
        dir = config.data_dir.display(),
        inc = ident.incarnation,
    )
}

/// `--rejoin-empty`: ask the directory to take this node back under its
/// id with this data dir's incarnation. The node-wide rejoin mark is
/// stored first, so a crash after the directory recorded the rejoin (its
/// answer lost) still comes back rejoining. `Ok(false)`: not decided yet,
/// ask again.
async fn rejoin(
    config: &NodeConfig,
    db: &NodeDb,
    client: &ClusterClient,
    ident: &StoreIdent,
) -> anyhow::Result<bool> {
    db.set_rejoining(true).await?;
    let node = NodeId(config.node_id);
    let op = NodeOp::Rejoin {
        node,
        incarnation: ident.incarnation,
    };
    let cmd = Command::Node {
        op,
        at_ms: seatfence_raft::clock::Clock::now_ms(&seatfence_raft::clock::SystemClock::default()),
    };
    match client.write(GroupId::DIRECTORY, &cmd).await {
        Ok(c) => match c.response {
            Response::Node(Ok(done)) => {
                if let NodeOpDone::Rejoin(r) = *done {
                    tracing::warn!(
                        node = config.node_id,
                        incarnation = ident.incarnation,
                        groups = r.pending.len(),
                        "rejoining on an empty data dir (--rejoin-empty): this node votes in no \
                         group until the group has taken it back as a caught-up voter"
                    );
                }
                Ok(true)
            }
            Response::Node(Err(r)) => Err(refusal(
                config,
                ident,
                &format!(
                    "the directory refused its rejoin: {} ({})",
                    r.message, r.code
                ),
            )),
            other => {
                tracing::warn!(node = config.node_id, "rejoin: {other:?}");
                Ok(false)
            }
        },
        Err(e) => {
            tracing::debug!(node = config.node_id, "rejoin: {e}");
            Ok(false)
        }
    }
}

/// The registration this node sends (at admission and on every start).
pub(crate) fn registration(config: &NodeConfig, incarnation: u64) -> Command {
    Command::RegisterNode(NodeInfo {
        id: NodeId(config.node_id),
        region: RegionId(config.region.clone()),
        grpc_addr: config.grpc_addr.clone(),
        incarnation,
        format_max: seatfence_core::format::newest(),
    })
}

/// The data dir's identity (as `NodeDb::ident` found it), once it is
/// admitted: at once for a known one, for a fresh one after the checks
/// above (the gRPC service refuses every Raft message until then). An
/// error means the node must not start.
pub(crate) async fn admit(
    config: &NodeConfig,
    db: &NodeDb,
    found: IdentState,
    pool: &PeerPool,
    mut rx_stop: watch::Receiver<bool>,
) -> anyhow::Result<StoreIdent> {
    let ident = match found {
        IdentState::Known(ident) => return Ok(ident),
        IdentState::Fresh(ident) => ident,
    };
    let peers: Vec<_> = config
        .initial_members
        .iter()
        .filter(|p| p.id != config.node_id)
        .collect();
    let majority = config.initial_members.len() / 2 + 1;
    let me_initial = config
        .initial_members
        .iter()
        .any(|p| p.id == config.node_id);
    let seeds = peers.iter().map(|p| p.grpc_addr.clone()).collect();
    let client = ClusterClient::new(seeds, pool.dialer().clone()).with_deadline(ROUND);
    let started = Instant::now();
    let mut last_said = Instant::now();
    tracing::info!(
        node = config.node_id,
        incarnation = ident.incarnation,
        "new data dir: asking the initial members whether node {} is known before serving Raft",
        config.node_id
    );
    loop {
        let answers = futures::future::join_all(peers.iter().map(|p| async move {
            tokio::time::timeout(ROUND, pool.probe(p.id, &p.grpc_addr, config.node_id))
                .await
                .map_err(|_| "timed out".to_string())
                .and_then(|r| r)
        }))
        .await;
        // This data dir's own registration landed (its answer was lost, or
        // the node stopped before it stored the admission): admitted.
        if answers
            .iter()
            .flatten()
            .any(|a| a.knows_caller && a.known_incarnation == ident.incarnation)
        {
            tracing::info!(
                node = config.node_id,
                "the directory lists this data dir's own incarnation: registered"
            );
            break;
        }
        if answers.iter().flatten().any(|a| a.knows_caller) {
            if !config.rejoin_empty {
                return Err(refusal(
                    config,
                    &ident,
                    "the cluster's directory already lists this node id",
                ));
            }
            if rejoin(config, db, &client, &ident).await? {
                break;
            }
        }
        let empty = answers
            .iter()
            .flatten()
            .filter(|a| !a.directory_initialized)
            .count()
            + usize::from(me_initial);
        if answers.iter().flatten().any(|a| a.directory_initialized) {
            // The cluster exists and its replicas seen so far do not list
            // this id: the directory's leader decides.
            if register(config, &client, &ident).await? {
                break;
            }
        } else if empty >= majority {
            tracing::info!(
                node = config.node_id,
                "a new cluster: no initial member holds one"
            );
            break;
        }
        if last_said.elapsed() >= Duration::from_secs(10) {
            last_said = Instant::now();
            say_waiting(config, &peers, &answers, started);
        }
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => anyhow::bail!("stopped while being admitted"),
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }
    db.admit(ident).await?;
    Ok(StoreIdent {
        admitted: true,
        ..ident
    })
}

/// A fresh data dir of an existing cluster whose replicas seen so far do
/// not list this node id: the directory's leader decides. `true` once
/// registered; `false` to ask again; an error when the directory knows the
/// id under another incarnation (this data dir is not the one that voted).
async fn register(
    config: &NodeConfig,
    client: &ClusterClient,
    ident: &StoreIdent,
) -> anyhow::Result<bool> {
    match client
        .write(GroupId::DIRECTORY, &registration(config, ident.incarnation))
        .await
    {
        Ok(c) => match c.response {
            Response::NodeRegistered { .. } => {
                tracing::info!(
                    node = config.node_id,
                    "a new node of the existing cluster: registered"
                );
                return Ok(true);
            }
            Response::IncarnationMismatch { known, .. } => {
                return Err(refusal(
                    config,
                    ident,
                    &format!("the directory knows this node id under incarnation {known:#x}"),
                ))
            }
            Response::FormatRefused { reason } => {
                anyhow::bail!("node {} refuses to start: {reason}", config.node_id)
            }
            other => tracing::warn!(node = config.node_id, "registration: {other:?}"),
        },
        Err(e) => tracing::debug!(node = config.node_id, "registration: {e}"),
    }
    Ok(false)
}

/// Say (every 10 s) that admission still waits, naming the initial members
/// that did not answer.
fn say_waiting<T>(
    config: &NodeConfig,
    peers: &[&crate::config::Peer],
    answers: &[Result<T, String>],
    started: Instant,
) {
    let unreachable: Vec<String> = peers
        .iter()
        .zip(answers)
        .filter_map(|(p, a)| a.as_ref().err().map(|e| format!("{} ({e})", p.id)))
        .collect();
    tracing::warn!(
        node = config.node_id,
        waited_s = started.elapsed().as_secs(),
        "new data dir: cannot tell yet whether node {} is known to the cluster (no \
         directory quorum answered; unreachable: {}); not serving Raft until it can",
        config.node_id,
        unreachable.join(", ")
    );
}
