//! The node's own background jobs, each a task that stops with the node:
//! registering in the directory, adding registered nodes to the directory
//! as learners (on its leader), following the retired nodes, and following
//! a drill's clock-skew file. (The event groups' leader duties are
//! `seatfence-duties`'.)

use std::sync::Arc;
use std::time::Duration;

use seatfence_core::{Command, GroupId, Response};
use seatfence_raft::clock::SystemClock;
use seatfence_raft::registry::Registry;
use seatfence_raft::ClusterClient;
use tokio::sync::watch;

use crate::config::NodeConfig;

/// Record this node (id, region, address, data-dir incarnation) in the
/// directory, retrying until the directory commits it. A refusal (the
/// directory knows this id under another incarnation: this data dir is not
/// the one that voted under it) is fatal: it goes to `tx_fatal`, and the
/// node exits.
pub(crate) async fn register_self(
    config: NodeConfig,
    dialer: seatfence_raft::network::Dialer,
    incarnation: u64,
    tx_fatal: watch::Sender<Option<String>>,
    mut rx_stop: watch::Receiver<bool>,
) {
    let seeds = config
        .initial_members
        .iter()
        .map(|p| p.grpc_addr.clone())
        .collect();
    let client = ClusterClient::new(seeds, dialer).with_deadline(Duration::from_secs(5));
    let cmd = crate::admit::registration(&config, incarnation);
    loop {
        match client.write(GroupId::DIRECTORY, &cmd).await {
            Ok(c) => {
                if let Response::IncarnationMismatch { known, claimed, .. } = c.response {
                    let why = format!(
                        "node {} must stop: the directory knows it under data-dir incarnation \
                         {known:#x}, and {} holds {claimed:#x} (a data dir from another life of \
                         this node, which may lack what the other acknowledged); start it on \
                         its current data dir, or declare it dead and add the host under a new id",
                        config.node_id,
                        config.data_dir.display()
                    );
                    tracing::error!(node = config.node_id, "{why}");
                    tx_fatal.send_replace(Some(why));
                    return;
                }
                if let Response::FormatRefused { reason } = c.response {
                    let why = format!("node {} must stop: {reason}", config.node_id);
                    tracing::error!(node = config.node_id, "{why}");
                    tx_fatal.send_replace(Some(why));
                    return;
                }
                if let Response::RegionMismatch { known, claimed, .. } = c.response {
                    let why = format!(
                        "node {} must stop: the directory has it in region {known}, its config \
                         says {claimed}; a node keeps its region (decommission it and add the \
                         host to the other region under a new id)",
                        config.node_id
                    );
                    tracing::error!(node = config.node_id, "{why}");
                    tx_fatal.send_replace(Some(why));
                    return;
                }
                tracing::info!(node = config.node_id, "registered in directory");
                name_cluster(&client).await;
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

/// Give the cluster its id if it has none yet (compare-and-set: the first
/// node to ask names it). A failure is left to the next start.
async fn name_cluster(client: &ClusterClient) {
    let cmd = Command::PutSharedIf {
        key: seatfence_core::directory::CLUSTER_ID_KEY.into(),
        expected: None,
        value: format!("c-{:016x}", rand::random::<u64>()).into_bytes(),
    };
    if let Err(e) = client.write(GroupId::DIRECTORY, &cmd).await {
        tracing::debug!("naming the cluster: {e}");
    }
}

/// Keep the peer pool's retired set (decommissioned nodes, nodes declared
/// dead) equal to this node's directory replica's, after every directory
/// apply: no Raft message goes to a retired node, so none of its answers
/// counts toward a quorum, as the gate already refuses everything it sends.
pub(crate) async fn follow_retired(registry: Arc<Registry>, mut rx_stop: watch::Receiver<bool>) {
    let Some(dir) = registry.get(GroupId::DIRECTORY) else {
        return;
    };
    let mut rx_applied = dir.subscribe_applied();
    loop {
        let retired = dir.read(|s| {
            let d = s.state.directory();
            d.nodes
                .keys()
                .filter(|n| d.node_state(**n).is_retired())
                .map(|n| n.0)
                .collect()
        });
        if registry.pool().set_retired(retired) {
            tracing::info!(
                node = registry.node_id(),
                "retired nodes changed: no Raft message goes to them"
            );
        }
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            changed = rx_applied.changed() => if changed.is_err() { return },
        }
    }
}

/// Write the cluster's active data format (see `seatfence_core::format`)
/// once this node's directory replica names a newer one than the process
/// writes: the data dir's identity is raised first (flushed), so a binary
/// that cannot read the new format refuses to start on this data dir
/// rather than trip over one of its records. A failure to raise is
/// retried; the node keeps writing the old format meanwhile, which every
/// node reads.
pub(crate) async fn follow_format(
    registry: Arc<Registry>,
    mut ident: seatfence_raft::storage::StoreIdent,
    mut rx_stop: watch::Receiver<bool>,
) {
    let Some(dir) = registry.get(GroupId::DIRECTORY) else {
        return;
    };
    let mut rx_applied = dir.subscribe_applied();
    loop {
        let want = dir.read(|s| s.state.directory().format());
        if want > seatfence_core::format::active() {
            match registry.db().raise_format(ident, want).await {
                Ok(raised) => {
                    ident = raised;
                    tracing::warn!(
                        node = registry.node_id(),
                        format = want,
                        "the cluster's data format was raised: this node writes it from now on"
                    );
                }
                Err(e) => tracing::error!(
                    node = registry.node_id(),
                    format = want,
                    "cannot raise this data dir's format (retrying): {e}"
                ),
            }
        }
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            changed = rx_applied.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Drills only: follow the file at `path`, re-read every 100 ms: `MS
/// [RATE [FULL]]` — the leader clock's skew in ms, the rate of the node's
/// timer clock (`seatfence_raft::timer`; absent: 1), and 1 to behave as if
/// the disk were full (absent: 0). Missing or unreadable: none of them.
pub(crate) async fn follow_skew_file(
    path: std::path::PathBuf,
    clock: Arc<SystemClock>,
    db: seatfence_raft::storage::NodeDb,
    mut rx_stop: watch::Receiver<bool>,
) {
    loop {
        let text = tokio::fs::read_to_string(&path).await.unwrap_or_default();
        let (skew, rate, full) = parse_skew(&text);
        db.force_full(full);
        if skew != clock.skew() {
            tracing::warn!(skew_ms = skew, "clock skew changed (drill)");
            clock.set_skew(skew);
        }
        if rate != seatfence_raft::timer::rate() {
            tracing::warn!(rate, "timer rate changed (drill)");
            seatfence_raft::timer::set_rate(rate);
        }
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// `MS [RATE [FULL]]` of a skew file; anything unreadable counts as 0,
/// 1 and not full.
fn parse_skew(text: &str) -> (i64, f64, bool) {
    let mut words = text.split_whitespace();
    let skew = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    let rate = words
        .next()
        .and_then(|w| w.parse::<f64>().ok())
        .filter(|r| r.is_finite() && *r > 0.0)
        .unwrap_or(1.0);
    let full = words.next() == Some("1");
    (skew, rate, full)
}

#[cfg(test)]
mod tests {
    #[test]
    fn skew_files_parse() {
        use super::parse_skew;
        assert_eq!(parse_skew("1500\n"), (1500, 1.0, false));
        assert_eq!(parse_skew("-200 1.25"), (-200, 1.25, false));
        assert_eq!(parse_skew("0 0.8 1\n"), (0, 0.8, true));
        assert_eq!(parse_skew("0 1 0"), (0, 1.0, false));
        assert_eq!(parse_skew("garbage -3"), (0, 1.0, false));
        assert_eq!(parse_skew(""), (0, 1.0, false));
    }
}
