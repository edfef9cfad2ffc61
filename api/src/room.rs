//! The waiting room at the edge: joins batched into one command per event,
//! polls, admission tickets, and the operators' settings.
//!
//! A join is queued on the edge's join worker ([`run_joins`]), which waits
//! [`JOIN_WINDOW`] for more, then proposes one `RoomAction::Join` per event
//! with every buyer that came meanwhile (at most `MAX_JOIN_BATCH`) and a
//! random salt (the opening's draw folds the salts into its seed). So a
//! rush of joins costs the event's group one entry per few milliseconds
//! per edge, not one per buyer. Where a buyer stands is computed by the
//! group from its schedule (`Query::Room`): admission itself is never
//! written.
//!
//! An admitted buyer's answer carries a ticket: `v1.<event hex>.<buyer
//! hex>.<position>.<expires_at_ms>.<hmac>`, HMAC-SHA256 under a key derived
//! from the fleet's `jwt_secret`, so every region's edge checks it without
//! asking the group. `POST /v1/holds` with an `Admission-Ticket` header is
//! refused `ticket_invalid` at the edge when the ticket is forged, another
//! buyer's, another event's or expired; the group then checks the buyer's
//! own place again in apply (a hold without a ticket meets the group's
//! `ticket_required`, a waiting buyer's `not_admitted_yet`), and counts the
//! seats held through the ticket: past the event's per-buyer limit (or
//! `max_seats_per_hold` without one) it is 409 `ticket_used`.

use seatfence_regions::Commands;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use seatfence_core::inventory::{
    EventAction, Outcome, RoomAction, RoomSettings, Standing, MAX_JOIN_BATCH,
};
use seatfence_core::query::{Query, QueryResult, RoomView};
use seatfence_core::{Epoch, EventId, RegionId, UserId};
use seatfence_raft::Read;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::events::{format_ms, parse_event_id};
use crate::message::{Reply, Req};
use crate::Edge;
use seatfence_payments::gateway::sign;

/// How long the join worker waits for more joins before proposing.
pub const JOIN_WINDOW: Duration = Duration::from_millis(3);
/// Joins queued on one edge at most; more are refused 429.
pub const JOIN_QUEUE: usize = 65_536;

/// One join waiting for its batch.
pub(crate) struct Waiter {
    event: EventId,
    buyer: UserId,
    tx: oneshot::Sender<Result<(Standing, Epoch, RegionId), ApiError>>,
}

/// The edge's side of its join worker.
pub struct Joins {
    tx: mpsc::Sender<Waiter>,
    rx: std::sync::Mutex<Option<mpsc::Receiver<Waiter>>>,
}

impl Default for Joins {
    fn default() -> Joins {
        let (tx, rx) = mpsc::channel(JOIN_QUEUE);
        Joins {
            tx,
            rx: std::sync::Mutex::new(Some(rx)),
        }
    }
}

impl Joins {
    /// The worker's end, once (`Edge::spawn_workers`).
    pub(crate) fn take_receiver(&self) -> Option<mpsc::Receiver<Waiter>> {
        self.rx.lock().expect("joins lock").take()
    }
}

/// The join worker: gathers joins for [`JOIN_WINDOW`], then one command
/// per event (and per `MAX_JOIN_BATCH` buyers), each on its own task.
pub(crate) async fn run_joins(
    edge: Arc<Edge>,
    mut rx: mpsc::Receiver<Waiter>,
    mut rx_stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut buf = Vec::new();
    loop {
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            n = rx.recv_many(&mut buf, JOIN_QUEUE) => if n == 0 { return },
        }
        tokio::time::sleep(JOIN_WINDOW).await;
        while buf.len() < JOIN_QUEUE {
            match rx.try_recv() {
                Ok(w) => buf.push(w),
                Err(_) => break,
            }
        }
        let mut by_event: HashMap<EventId, Vec<Waiter>> = HashMap::new();
        for w in buf.drain(..) {
            by_event.entry(w.event.clone()).or_default().push(w);
        }
        for (event, mut waiters) in by_event {
            while !waiters.is_empty() {
                let rest = waiters.split_off(waiters.len().min(MAX_JOIN_BATCH));
                tokio::spawn(propose_joins(edge.clone(), event.clone(), waiters));
                waiters = rest;
            }
        }
    }
}

/// One join command for `waiters` of `event`; each gets its own answer.
async fn propose_joins(edge: Arc<Edge>, event: EventId, waiters: Vec<Waiter>) {
    let buyers: Vec<UserId> = waiters.iter().map(|w| w.buyer.clone()).collect();
    let answer = async {
        let route = edge.commands.route(&event).await?;
        let action = EventAction::Room(RoomAction::Join {
            buyers,
            salt: rand::random(),
        });
        // A repeated join keeps the buyer's place: retrying is safe.
        edge.commands
            .execute(&route, Commands::command(&route, None, action))
            .await
            .map(|(reply, _)| reply)
    }
    .await;
    match answer {
        Ok(reply) => match reply.outcome {
            Outcome::Joined(standings) if standings.len() == waiters.len() => {
                edge.metrics.queue_joins.increment(waiters.len() as u64);
                for (w, (_, s)) in waiters.into_iter().zip(standings) {
                    let _ = w.tx.send(Ok((s, reply.epoch, reply.owner.clone())));
                }
            }
            other => {
                let e = ApiError::from_outcome(other, &event).fenced(reply.epoch.0, &reply.owner.0);
                for w in waiters {
                    let _ = w.tx.send(Err(e.clone()));
                }
            }
        },
        Err(e) => {
            let e = ApiError::from(e);
            for w in waiters {
                let _ = w.tx.send(Err(e.clone()));
            }
        }
    }
}

/// `POST /v1/events/{id}/queue`: join (joining again keeps the place).
pub async fn join(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    let caller = req.caller(edge)?;
    let event_id = parse_event_id(id)?;
    let (tx, rx) = oneshot::channel();
    let waiter = Waiter {
        event: event_id.clone(),
        buyer: caller.user.clone(),
        tx,
    };
    edge.joins
        .tx
        .try_send(waiter)
        .map_err(|_| ApiError::TooManyRequests {
            code: "queue_busy",
            message: "too many joins waiting on this edge: retry in a second".into(),
        })?;
    let wait = Duration::from_millis(edge.config.request_timeout_ms);
    let (standing, epoch, owner) = tokio::time::timeout(wait, rx)
        .await
        .map_err(|_| ApiError::unavailable("join_timeout", "the join was not answered in time"))?
        .map_err(|_| ApiError::unavailable("join_failed", "the join worker stopped"))??;
    let now = edge.clock.now_ms();
    Ok(Reply::json(
        StatusCode::OK,
        standing_json(edge, &event_id, &caller.user, standing, None, now),
    )
    .header("x-seatfence-epoch", epoch.0)
    .header("x-seatfence-owner-region", &owner.0)
    .header("cache-control", "no-store"))
}

/// `GET /v1/events/{id}/queue/me`: where the caller stands.
pub async fn me(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    let caller = req.caller(edge)?;
    let event_id = parse_event_id(id)?;
    let now = edge.clock.now_ms();
    let bound = crate::reads::max_stale(req)?;
    let (view, standing) = read(edge, &event_id, Some(&caller.user), now, bound).await?;
    let standing = standing.ok_or_else(|| ApiError::NotFound {
        code: "not_in_queue",
        what: format!("a place of yours in the queue of event {event_id}"),
    })?;
    Ok(Reply::json(
        StatusCode::OK,
        standing_json(edge, &event_id, &caller.user, standing, Some(&view), now),
    )
    .header("cache-control", "no-store"))
}

/// The event's room, from a replica in this region within `bound` (see
/// `crate::reads`), else at the leader (lease read): a hold checks again.
async fn read(
    edge: &Edge,
    event_id: &EventId,
    buyer: Option<&UserId>,
    now: u64,
    bound: std::time::Duration,
) -> Result<(RoomView, Option<Standing>), ApiError> {
    let route = edge.commands.route(event_id).await?;
    let q = Query::Room {
        buyer: buyer.cloned(),
        now_ms: now,
    };
    // A buyer not in the replica's queue may have joined a moment ago:
    // only the leader can say they are not in it.
    let local = crate::reads::local_only(edge, &route, &q, bound)
        .await
        .filter(|a| {
            buyer.is_none()
                || matches!(
                    a,
                    QueryResult::Room {
                        standing: Some(_),
                        ..
                    }
                )
        });
    let answer = match local {
        Some(a) => a,
        None => {
            edge.commands
                .client
                .query_with(route.group, &q, Read::Lease)
                .await
                .map_err(|e| edge.commands.client_error(e))?
                .0
        }
    };
    let QueryResult::Room {
        event_id: found,
        room,
        standing,
    } = answer
    else {
        return Err(ApiError::Internal(
            "the event's group answered oddly".into(),
        ));
    };
    if found.as_ref() != Some(event_id) {
        return Err(ApiError::NotFound {
            code: "event_not_found",
            what: format!("event {event_id}"),
        });
    }
    match room {
        Some(view) if view.settings.enabled => Ok((view, standing)),
        _ => Err(ApiError::from_outcome(Outcome::NoWaitingRoom, event_id)),
    }
}

/// A buyer's standing as the API shows it (positions from 1), with a
/// ticket once admitted.
fn standing_json(
    edge: &Edge,
    event_id: &EventId,
    buyer: &UserId,
    standing: Standing,
    view: Option<&RoomView>,
    now: u64,
) -> Value {
    let mut v = match standing {
        Standing::AwaitingDraw { opens_at_ms } => json!({
            "state": "waiting", "position": null, "ahead": null,
            "estimated_wait_secs": opens_at_ms.saturating_sub(now).div_ceil(1000),
            "draw_at": format_ms(opens_at_ms),
        }),
        Standing::Waiting {
            position,
            ahead,
            admitted_at_ms,
        } => json!({
            "state": "waiting", "position": position + 1, "ahead": ahead,
            "estimated_wait_secs": admitted_at_ms.saturating_sub(now).div_ceil(1000),
        }),
        Standing::Admitted {
            position,
            expires_at_ms,
            ..
        } => json!({
            "state": "admitted", "position": position + 1, "ahead": 0,
            "estimated_wait_secs": 0,
            "ticket": issue(&ticket_key(edge), event_id, buyer, position, expires_at_ms),
            "ticket_expires_at": format_ms(expires_at_ms),
        }),
        Standing::Lapsed { position } => json!({
            "state": "lapsed", "position": position + 1, "ahead": 0,
            "estimated_wait_secs": 0,
        }),
    };
    v["event_id"] = json!(event_id.0);
    if let Some(view) = view {
        v["queue_length"] = json!(view.queue_len);
        v["admit_per_sec"] = json!(view.settings.admit_per_sec);
    }
    v
}

/// The ticket key: derived from the fleet's token secret, so every edge
/// has it and it is not the token key itself.
pub fn ticket_key(edge: &Edge) -> String {
    key_from(edge.config.jwt_secret.expose())
}

fn key_from(jwt_secret: &str) -> String {
    sign::sign(jwt_secret, b"seatfence admission ticket v1")
}

fn ticket_payload(event_id: &EventId, buyer: &UserId, position: u64, expires_at_ms: u64) -> String {
    format!(
        "v1.{}.{}.{position}.{expires_at_ms}",
        hex::encode(&event_id.0),
        hex::encode(&buyer.0)
    )
}

fn issue(key: &str, event_id: &EventId, buyer: &UserId, position: u64, expires: u64) -> String {
    let payload = ticket_payload(event_id, buyer, position, expires);
    let sig = sign::sign(key, payload.as_bytes());
    format!("{payload}.{sig}")
}

/// Check an `Admission-Ticket` for `buyer` and `event_id` at `now` under
/// `key` ([`ticket_key`]): `Err(ticket_invalid)` unless it is this edge
/// fleet's, theirs, and not expired.
pub fn check_ticket(
    key: &str,
    ticket: &str,
    event_id: &EventId,
    buyer: &UserId,
    now: u64,
) -> Result<(), ApiError> {
    let invalid = |why: &str| ApiError::Admission {
        code: "ticket_invalid",
        message: format!("the admission ticket {why}: join the queue again"),
    };
    let (payload, sig) = ticket
        .rsplit_once('.')
        .ok_or_else(|| invalid("is malformed"))?;
    if !sign::verify(key, payload.as_bytes(), sig) {
        return Err(invalid("does not verify"));
    }
    let parts: Vec<&str> = payload.split('.').collect();
    let [_, event, who, _, expires] = parts[..] else {
        return Err(invalid("is malformed"));
    };
    if event != hex::encode(&event_id.0) {
        return Err(invalid("is for another event"));
    }
    if who != hex::encode(&buyer.0) {
        return Err(invalid("is another buyer's"));
    }
    match expires.parse::<u64>() {
        Ok(exp) if now < exp => Ok(()),
        _ => Err(invalid("has expired")),
    }
}

/// The create body's and the operators' room settings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomBody {
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(deserialize_with = "crate::whole::de")]
    admit_per_sec: u32,
    #[serde(default, deserialize_with = "crate::whole::opt")]
    ticket_ttl_secs: Option<u64>,
}

fn yes() -> bool {
    true
}

/// A ticket is good for 10 minutes unless the operator says.
pub const DEFAULT_TICKET_TTL_SECS: u64 = 600;

impl RoomBody {
    /// The room's settings: enabled unless the body says not, tickets valid for
    /// `ticket_ttl_secs` (default [`DEFAULT_TICKET_TTL_SECS`]) as ms.
    pub fn settings(&self) -> RoomSettings {
        RoomSettings {
            enabled: self.enabled,
            admit_per_sec: self.admit_per_sec,
            ticket_ttl_ms: self
                .ticket_ttl_secs
                .unwrap_or(DEFAULT_TICKET_TTL_SECS)
                .saturating_mul(1000),
        }
    }
}

/// The settings as the API shows them.
pub fn settings_json(s: &RoomSettings) -> Value {
    json!({
        "enabled": s.enabled,
        "admit_per_sec": s.admit_per_sec,
        "ticket_ttl_secs": s.ticket_ttl_ms / 1000,
    })
}

/// `POST /v1/admin/events/{id}/waiting-room` (operators): set the room.
pub async fn configure(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let event_id = parse_event_id(id)?;
    let body: RoomBody = req.json()?;
    let mut settings = body.settings();
    settings
        .validate()
        .map_err(|e| ApiError::bad(e.code(), e.to_string()))?;
    let route = edge.commands.route(&event_id).await?;
    if body.ticket_ttl_secs.is_none() {
        // A new rate alone keeps the room's ticket time.
        let q = Query::Room {
            buyer: None,
            now_ms: edge.clock.now_ms(),
        };
        let (answer, _) = edge
            .commands
            .client
            .query_with(route.group, &q, Read::Lease)
            .await
            .map_err(|e| edge.commands.client_error(e))?;
        if let QueryResult::Room { room: Some(r), .. } = answer {
            settings.ticket_ttl_ms = r.settings.ticket_ttl_ms;
        }
    }
    let action = EventAction::Room(RoomAction::Configure(settings));
    let (reply, _) = edge
        .commands
        .execute(&route, Commands::command(&route, None, action))
        .await?;
    match reply.outcome {
        Outcome::RoomSet(s) => Ok(Reply::json(
            StatusCode::OK,
            json!({"event_id": event_id.0, "waiting_room": settings_json(&s)}),
        )
        .header("x-seatfence-epoch", reply.epoch.0)
        .header("x-seatfence-owner-region", &reply.owner.0)),
        other => {
            Err(ApiError::from_outcome(other, &event_id).fenced(reply.epoch.0, &reply.owner.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123";

    fn ids() -> (EventId, UserId) {
        (EventId("show".into()), UserId("ann".into()))
    }

    #[test]
    fn a_ticket_verifies_for_its_buyer_and_event_until_it_expires() {
        let key = key_from(SECRET);
        let (event, ann) = ids();
        let t = issue(&key, &event, &ann, 41, 5_000);
        assert!(check_ticket(&key, &t, &event, &ann, 4_999).is_ok());
        let code = |r: Result<(), ApiError>| r.err().map(|e| e.code());
        assert_eq!(
            code(check_ticket(&key, &t, &event, &ann, 5_000)),
            Some("ticket_invalid")
        );
        let bob = UserId("bob".into());
        assert_eq!(
            code(check_ticket(&key, &t, &event, &bob, 1)),
            Some("ticket_invalid")
        );
        let other = EventId("other".into());
        assert_eq!(
            code(check_ticket(&key, &t, &other, &ann, 1)),
            Some("ticket_invalid")
        );
        // Another fleet's key, a changed expiry, garbage.
        let theirs = key_from("another-secret-of-length");
        assert_eq!(
            code(check_ticket(&theirs, &t, &event, &ann, 1)),
            Some("ticket_invalid")
        );
        let stretched = t.replace(".5000.", ".9999999.");
        assert_eq!(
            code(check_ticket(&key, &stretched, &event, &ann, 1)),
            Some("ticket_invalid")
        );
        for junk in ["", ".", "v1", "v1.a.b.c.d.e.f", "\u{0}"] {
            assert_eq!(
                code(check_ticket(&key, junk, &event, &ann, 1)),
                Some("ticket_invalid")
            );
        }
    }
}
