//! The events of the drill, a generation at a time: two hot events with
//! few seats and a cold one with many; every so often a new generation is
//! created and the previous one retires, so seats never run out.

use std::sync::Arc;
use std::time::Duration;

use crate::drill::World;
use crate::run::EventInfo;
use anyhow::Context;
use hyper::Method;
use seatfence_testkit::cluster::REGIONS;
use serde_json::json;

use super::{send, Answer};

/// Create generation `gen`: two hot events of `hot_seats` seats and a cold
/// one of 40, homed round-robin over the regions, through any edge that
/// answers (a repeated create with the same spec is answered 201 again).
pub async fn create_generation(
    w: &World,
    gen: u32,
    hot_seats: usize,
) -> anyhow::Result<Vec<EventInfo>> {
    let token = w.token("chaos-operator", true);
    let edges: Vec<String> = w.edges.values().cloned().collect();
    let kinds = [
        ("hot-a", true, hot_seats),
        ("hot-b", true, hot_seats),
        ("cold", false, 40),
    ];
    let mut out = Vec::new();
    for (k, (kind, hot, seats)) in kinds.into_iter().enumerate() {
        let event_id = format!("chaos-g{gen}-{kind}");
        let home = REGIONS[(gen as usize + k) % REGIONS.len()];
        let prefix = if hot { 'H' } else { 'C' };
        let seat_ids: Vec<String> = (1..=seats).map(|s| format!("{prefix}{s}")).collect();
        let name = format!("chaos drill generation {gen} {kind}");
        let group = create_event(w, &token, &edges, (&event_id, &name, home), &seat_ids).await?;
        out.push(EventInfo {
            event_id,
            group,
            seats: seat_ids,
            hot,
            home_region: home.to_string(),
            generation: gen,
            retired: false,
            sleeper: false,
        });
    }
    Ok(out)
}

/// Create the event `(id, name, home region)` with `seats` through any
/// edge that answers (a repeated create with the same spec is answered 201
/// again): its group.
async fn create_event(
    w: &World,
    token: &str,
    edges: &[String],
    (event_id, name, home): (&str, &str, &str),
    seats: &[String],
) -> anyhow::Result<u64> {
    let body = json!({
        "event_id": event_id,
        "name": name,
        "home_region": home,
        "seats": seats,
        "hold_ttl_secs": crate::drill::runner::HOLD_TTL_SECS,
        "retention_secs": crate::drill::runner::RETENTION_SECS,
        // The changefeed keeps as long as finished records, so a soak's
        // second half runs at the feed's steady state too.
        "changes_retention_secs": crate::drill::runner::RETENTION_SECS,
        "max_seats_per_hold": 4,
    });
    let body = &body;
    for attempt in 0..20 {
        for e in edges.iter().cycle().skip(attempt).take(edges.len()) {
            let url = format!("{e}/v1/events");
            match send(w, Method::POST, &url, Some(token), None, Some(body), 1).await {
                Answer::Http(a) if a.status.as_u16() == 201 => {
                    return a.body["group_id"]
                        .as_u64()
                        .with_context(|| format!("create {event_id}: no group_id in {}", a.body));
                }
                Answer::Http(a) => anyhow::bail!("create {event_id}: {} {}", a.status, a.body),
                Answer::Unknown(_) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::bail!("create {event_id}: no edge answered 201")
}

/// `n` small events (8 seats each), homed round-robin over the regions,
/// 16 created at once: the drill's sleeping events.
pub async fn create_sleepers(w: &World, n: usize) -> anyhow::Result<Vec<EventInfo>> {
    use futures::StreamExt;
    let token = w.token("chaos-operator", true);
    let edges: Vec<String> = w.edges.values().cloned().collect();
    let created: Vec<anyhow::Result<EventInfo>> = futures::stream::iter(0..n)
        .map(|i| {
            let (token, edges) = (&token, &edges);
            async move {
                let event_id = format!("chaos-sleeper-{i}");
                let home = REGIONS[i % REGIONS.len()];
                let seat_ids: Vec<String> = (1..=8).map(|s| format!("S{s}")).collect();
                let name = format!("chaos drill sleeping event {i}");
                let group =
                    create_event(w, token, edges, (&event_id, &name, home), &seat_ids).await?;
                Ok(EventInfo {
                    event_id,
                    group,
                    seats: seat_ids,
                    hot: false,
                    home_region: home.to_string(),
                    generation: 0,
                    retired: false,
                    sleeper: true,
                })
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    created.into_iter().collect()
}

/// Every `every_ms`, a new generation of events; the previous ones retire.
pub async fn generations(w: Arc<World>, hot_seats: usize, every_ms: u64) {
    let mut gen = 1;
    while w.pause(every_ms).await {
        match create_generation(&w, gen, hot_seats).await {
            Ok(fresh) => {
                let mut events = w.events.lock().expect("events lock poisoned");
                for e in events.iter_mut().filter(|e| !e.sleeper) {
                    e.retired = true;
                }
                events.extend(fresh);
                gen += 1;
            }
            Err(e) => tracing::warn!("generation {gen} not created (tried again later): {e:#}"),
        }
    }
}
