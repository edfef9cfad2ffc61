//! The `follow_buyers` duty: every window, for each event group this node
//! leads whose policy is on (`seatfence_regions::follow::POLICY_KEY`),
//! the distinct buyers it granted holds to, per buyer region (the region
//! of the node whose edge took each hold, `Proposer::origins`), go through
//! `seatfence_regions::follow::plan`; a region that leads clearly for long
//! enough gets the event through the operators' move path (`MoveOp::Start`,
//! actor `follow-buyers`: learners, joint change, epoch bump), recorded in
//! the audit trail like an operator's move. Before it proposes the move,
//! the duty commits the move's time to the event group
//! (`follow::LAST_MOVE_KEY`): the cooldown is the group's, whichever node
//! leads it next.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use seatfence_core::{
    AuditEntry, Command, EventId, GroupId, MoveOp, NodeId, RegionId, Response, RouteState,
};
use seatfence_raft::clock::Clock;
use seatfence_raft::registry::Registry;
use seatfence_raft::{ClusterClient, Proposer};
use seatfence_regions::follow::{
    encode_last_move, last_move_ms, plan, Memory, Rule, Window, LAST_MOVE_KEY, ON, POLICY_KEY,
};
use tokio::sync::watch;

/// The actor the audit trail and the move record name.
pub const ACTOR: &str = "follow-buyers";

/// What one window saw of an event led here: its group, the distinct
/// buyers per buyer region, its owner, whether a move runs.
struct Seen {
    event: EventId,
    group: GroupId,
    buyers: BTreeMap<RegionId, u64>,
    owner: RegionId,
    moving: bool,
}

/// Run the duty every `every` until `rx_stop`.
pub async fn run(
    registry: Arc<Registry>,
    proposer: Arc<Proposer>,
    client: ClusterClient,
    clock: Arc<dyn Clock>,
    every: Duration,
    rule: Rule,
    mut rx_stop: watch::Receiver<bool>,
) {
    let mut memory: HashMap<GroupId, Memory> = HashMap::new();
    // Holds before the first window are not a whole window's.
    proposer.origins().take();
    loop {
        tokio::select! {
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(every) => {}
        }
        let seen = window_seen(&registry, &proposer);
        memory.retain(|g, _| seen.iter().any(|s| s.group == *g));
        for s in seen {
            let Some(g) = registry.get(s.group) else {
                continue;
            };
            let policy = g.leads().then(|| {
                g.read(|st| {
                    let kv = st.state.kv();
                    let on = kv.get(POLICY_KEY).is_some_and(|v| v == ON);
                    (on, last_move_ms(kv.get(LAST_MOVE_KEY).map(Vec::as_slice)))
                })
            });
            let Some((true, last_move_ms)) = policy else {
                memory.remove(&s.group);
                continue;
            };
            let now_ms = clock.now_ms();
            let window = Window {
                window_ms: every.as_millis().try_into().unwrap_or(u64::MAX),
                now_ms,
                buyers: &s.buyers,
                owner: &s.owner,
                moving: s.moving,
                last_move_ms,
            };
            let mem = memory.entry(s.group).or_default();
            if let Some(to) = plan(mem, &rule, &window) {
                start_move(&client, clock.as_ref(), &s, &to, now_ms).await;
            }
        }
    }
}

/// The buyers counted since the last window, by event and buyer region.
fn window_seen(registry: &Registry, proposer: &Proposer) -> Vec<Seen> {
    let counts = proposer.origins().take();
    if counts.is_empty() {
        return Vec::new();
    }
    let Some(dir) = registry.get(GroupId::DIRECTORY) else {
        return Vec::new();
    };
    dir.read(|s| {
        let d = s.state.directory();
        d.events
            .values()
            .filter_map(|route| {
                let buyers = counts.get(&route.group)?;
                let region_of = |node| d.nodes.get(&NodeId(node)).map(|i| i.region.clone());
                Some(Seen {
                    event: route.event_id.clone(),
                    group: route.group,
                    buyers: buyers.per_key(region_of),
                    owner: route.owner_region.clone(),
                    moving: route.state != RouteState::Active,
                })
            })
            .collect()
    })
}

/// Start moving `s.event` to `to` as [`ACTOR`]: first the move's time in
/// the event group (the cooldown; not committed: no move), then the move,
/// and record it (or the refusal) in the audit trail.
async fn start_move(
    client: &ClusterClient,
    clock: &dyn Clock,
    s: &Seen,
    to: &RegionId,
    now_ms: u64,
) {
    let total: u64 = s.buyers.values().sum();
    let from_there = s.buyers.get(to).copied().unwrap_or(0);
    let stamp = Command::Put {
        key: LAST_MOVE_KEY.to_string(),
        value: encode_last_move(now_ms),
    };
    match client.write(s.group, &stamp).await {
        Ok(c) if matches!(c.response, Response::Written { .. }) => {}
        Ok(c) => {
            tracing::warn!(event = %s.event, response = ?c.response,
                "follow-buyers: the move's time was not recorded, no move");
            return;
        }
        Err(e) => {
            tracing::warn!(event = %s.event, "follow-buyers: recording the move's time failed, no move: {e}");
            return;
        }
    }
    let op = MoveOp::Start {
        event_id: s.event.clone(),
        to_region: to.clone(),
        actor: ACTOR.to_string(),
        // One start per event and decision (its recorded time), whoever
        // retries it.
        request: format!("follow:{}:{}:{now_ms}", s.event.0, s.group.0),
    };
    let result = match seatfence_regions::ops::propose_move(client, clock.now_ms(), op).await {
        Ok(Ok(m)) => {
            tracing::info!(event = %s.event, from = %s.owner, to = %to, move_id = m.move_id,
                from_there, total, "follow-buyers: move started");
            "ok".to_string()
        }
        Ok(Err(refused)) => format!("{}: {}", refused.code, refused.message),
        Err(e) => e.to_string(),
    };
    let entry = AuditEntry {
        seq: 0,
        at_ms: clock.now_ms(),
        actor: ACTOR.to_string(),
        action: "move".to_string(),
        target: format!(
            "event {} to {to} ({from_there} of {total} buyers from there in the last window)",
            s.event
        ),
        result,
        id: format!("{:032x}", rand::random::<u128>()),
    };
    if let Err(e) = client
        .write(GroupId::DIRECTORY, &Command::Audit(entry))
        .await
    {
        tracing::warn!("follow-buyers: recording the audit entry failed: {e}");
    }
}
