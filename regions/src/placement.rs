//! Hosting follows the directory: [`place_groups`] opens every group the
//! directory places on this node and retires the replicas it no longer
//! places here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use seatfence_core::directory::Directory;
use seatfence_core::{GroupId, NodeId};
use seatfence_raft::registry::Registry;
use tokio::sync::watch;

/// A group the directory places on this node: its id, its members in the
/// directory's order (the first initializes it), and their addresses.
type Wanted = (GroupId, Vec<NodeId>, BTreeMap<u64, BasicNode>);

/// Follow the directory: open every group placed on this node (the group's
/// first member initializes it), including groups a running move adds this
/// node to as a learner; retire replicas the directory no longer places
/// here (moved away, or an aborted move's learner): shut down at once so
/// they never campaign, data deleted after `retired_grace_ms`.
pub async fn place_groups(
    registry: Arc<Registry>,
    moves: crate::config::MovesConfig,
    mut rx_stop: watch::Receiver<bool>,
) {
    let Some(dir) = registry.get(GroupId::DIRECTORY) else {
        return;
    };
    let me = NodeId(registry.node_id());
    let mut rx_applied = dir.subscribe_applied();
    // Retired replicas whose data is still on disk, with when they retired.
    let mut retired: BTreeMap<GroupId, tokio::time::Instant> = BTreeMap::new();
    let grace = Duration::from_millis(moves.retired_grace_ms);
    // Groups this loop opened (or initialized) here: each directory change
    // acts on the new ones only. Asking every hosted group again cost a
    // round trip through each group's Raft task per created event, O(n²)
    // over a catalogue's creation.
    let mut hosted: BTreeSet<GroupId> = BTreeSet::new();
    loop {
        // A node back on an empty data dir votes again in each group that
        // took it back (see `seatfence_raft::joining`).
        registry.follow_rejoin().await;
        let (wanted, known): (Vec<Wanted>, BTreeSet<GroupId>) = dir.read(|s| {
            let d = s.state.directory();
            (wanted_here(d, me), d.groups.keys().copied().collect())
        });
        let wanted_ids: BTreeSet<GroupId> = wanted.iter().map(|w| w.0).collect();
        for w in wanted {
            host_group(&registry, me, w, &mut hosted, &mut retired).await;
        }
        retire_unplaced(&registry, &wanted_ids, &known, &mut hosted, &mut retired).await;
        drop_due_retired(&registry, &mut retired, grace);
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            changed = rx_applied.changed() => if changed.is_err() { return },
            // Retired data falls due without a directory change.
            _ = tokio::time::sleep(grace.min(Duration::from_secs(5))), if !retired.is_empty() => {}
        }
    }
}

/// The groups directory `d` places on node `me`, with their members.
fn wanted_here(d: &Directory, me: NodeId) -> Vec<Wanted> {
    d.hosted_on(me)
        .into_iter()
        .map(|gid| {
            let order = d.groups.get(&gid).map(|g| g.members.clone());
            let order = order.unwrap_or_default();
            let members = order
                .iter()
                .filter_map(|m| d.nodes.get(m).map(|n| (m.0, BasicNode::new(&n.grpc_addr))))
                .collect();
            (gid, order, members)
        })
        .collect()
}

/// Host one group the directory places here: initialize it (its first
/// member), open it (another member), or open it as a move's learner.
async fn host_group(
    registry: &Registry,
    me: NodeId,
    (gid, order, members): Wanted,
    hosted: &mut BTreeSet<GroupId>,
    retired: &mut BTreeMap<GroupId, tokio::time::Instant>,
) {
    // A dormant replica is hosted: it reopens when it is needed.
    if hosted.contains(&gid) && registry.is_hosted(gid) {
        // A target the move or repair has made a voter: the new
        // configuration is committed (see `seatfence_raft::joining`).
        if order.contains(&me) {
            if let Some(g) = registry.get(gid).filter(|g| g.joining.is_on()) {
                g.joining.end("the directory lists it as a voter");
            }
        }
        return;
    }
    if retired.remove(&gid).is_some() {
        // Placed here again before its old data was deleted: start
        // from nothing rather than from a stale log, with no replica
        // still running on that data.
        registry.retire(gid).await;
        if let Err(e) = registry.db().drop_group(gid) {
            tracing::warn!(group = gid.0, "drop stale replica data: {e}");
        }
    }
    let result = if order.first() == Some(&me) && members.len() == order.len() {
        registry.initialize(gid, members).await
    } else if order.contains(&me) {
        registry.open(gid).await.map(drop)
    } else {
        // A running move or repair adds this node as a learner.
        registry.open_target(gid).await.map(drop)
    };
    match result {
        Ok(()) => {
            hosted.insert(gid);
        }
        Err(e) => tracing::warn!(group = gid.0, "cannot host group: {e:#}"),
    }
}

/// Retire the hosted replicas of groups the directory knows but no longer
/// places here (`wanted_ids`), starting their grace period in `retired`.
async fn retire_unplaced(
    registry: &Registry,
    wanted_ids: &BTreeSet<GroupId>,
    known: &BTreeSet<GroupId>,
    hosted: &mut BTreeSet<GroupId>,
    retired: &mut BTreeMap<GroupId, tokio::time::Instant>,
) {
    for gid in registry.hosted_ids() {
        // Only groups the directory knows: a replica lagging behind a
        // group's creation must not retire it.
        if gid.is_directory() || wanted_ids.contains(&gid) || !known.contains(&gid) {
            continue;
        }
        registry.retire(gid).await;
        hosted.remove(&gid);
        retired.insert(gid, tokio::time::Instant::now());
    }
}

/// Delete the data of replicas retired at least `grace` ago.
fn drop_due_retired(
    registry: &Registry,
    retired: &mut BTreeMap<GroupId, tokio::time::Instant>,
    grace: Duration,
) {
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
}
