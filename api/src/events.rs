//! Event handlers: create (operator), read, availability, open/close.

use seatfence_regions::{CommandError, Commands};
use std::time::{Duration, Instant, UNIX_EPOCH};

use hyper::StatusCode;
use seatfence_core::inventory::{
    EventAction, EventSpec, Outcome, Section, Survival, DEFAULT_CHANGES_RETENTION_MS,
    DEFAULT_RETENTION_MS, MAX_CAPACITY,
};
use seatfence_core::{Command, EventId, GroupId, Query, QueryResult, RegionId, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::message::{Reply, Req};
use crate::Edge;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SectionBody {
    name: String,
    #[serde(deserialize_with = "crate::whole::de")]
    rows: u32,
    #[serde(deserialize_with = "crate::whole::de")]
    seats_per_row: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    event_id: String,
    name: String,
    home_region: String,
    #[serde(default)]
    seats: Vec<String>,
    #[serde(default)]
    sections: Vec<SectionBody>,
    #[serde(default, deserialize_with = "crate::whole::opt")]
    hold_ttl_secs: Option<u64>,
    #[serde(default, deserialize_with = "crate::whole::opt")]
    max_seats_per_hold: Option<u32>,
    #[serde(default, deserialize_with = "crate::whole::opt")]
    max_seats_per_buyer: Option<u32>,
    survival: Option<String>,
    /// Never `null`: a waiting room needs it (the schema's
    /// `dependentRequired`), and a `null` there would pass the schema's
    /// presence check while meaning "absent" here.
    #[serde(default, deserialize_with = "present")]
    opens_at: Option<String>,
    closes_at: Option<String>,
    #[serde(default, deserialize_with = "crate::whole::opt")]
    price_cents: Option<u64>,
    currency: Option<String>,
    #[serde(default, deserialize_with = "crate::whole::opt")]
    retention_secs: Option<u64>,
    #[serde(default, deserialize_with = "crate::whole::opt")]
    changes_retention_secs: Option<u64>,
    waiting_room: Option<crate::room::RoomBody>,
    /// Move the event to the region whose buyers send most of its holds
    /// (`seatfence_regions::follow`).
    #[serde(default)]
    follow_buyers: bool,
}

/// A field that may be absent (`#[serde(default)]`) but not `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    <String as serde::Deserialize>::deserialize(d).map(Some)
}

/// Seat price when the operator gives none.
pub const DEFAULT_PRICE_CENTS: u64 = 5_000;
/// Currency (ISO 4217 code) when the operator gives none.
pub const DEFAULT_CURRENCY: &str = "EUR";

/// An RFC 3339 time (any offset) as ms since the Unix epoch.
fn rfc3339_ms(s: &str, field: &str) -> Result<i64, ApiError> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| ApiError::bad("invalid_field", format!("{field} is not an RFC 3339 time")))
}

/// The sale window in ms since the epoch, kept from 1970 on: a time before
/// the epoch is as far in the past as the epoch for a sale, so it is
/// stored as the epoch (a window that closed before 1970 closes 1 ms
/// after its stored opening; `EventSpec::validate` still sees the order
/// the operator gave).
fn sale_window(body: &CreateBody) -> Result<(Option<u64>, Option<u64>), ApiError> {
    let parse = |s: &Option<String>, field| s.as_deref().map(|s| rfc3339_ms(s, field)).transpose();
    let (opens, closes) = (
        parse(&body.opens_at, "opens_at")?,
        parse(&body.closes_at, "closes_at")?,
    );
    let stored = |ms: i64| u64::try_from(ms).unwrap_or(0);
    Ok(match (opens, closes) {
        (Some(o), Some(c)) if o < c => (Some(stored(o)), Some(stored(c).max(stored(o) + 1))),
        // Out of order: stored as given (clamped) so validation refuses it.
        (o, c) => (o.map(stored), c.map(stored)),
    })
}

/// An RFC 3339 UTC time with milliseconds.
pub fn format_ms(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

pub(crate) fn parse_event_id(id: &str) -> Result<EventId, ApiError> {
    if EventId::is_valid(id) {
        Ok(EventId(id.to_string()))
    } else {
        Err(ApiError::NotFound {
            code: "event_not_found",
            what: format!("event {id:?}"),
        })
    }
}

fn spec_from(body: CreateBody) -> Result<EventSpec, ApiError> {
    let survival = match body.survival.as_deref() {
        None | Some("zone") => Survival::Zone,
        Some("region") => Survival::Region,
        Some(other) => {
            return Err(ApiError::bad(
                "invalid_field",
                format!("survival must be zone or region, not {other:?}"),
            ))
        }
    };
    let (opens_at_ms, closes_at_ms) = sale_window(&body)?;
    let spec = EventSpec {
        event_id: EventId(body.event_id),
        name: body.name,
        home_region: RegionId(body.home_region),
        seats: body.seats,
        sections: body
            .sections
            .into_iter()
            .map(|s| Section {
                name: s.name,
                rows: s.rows,
                seats_per_row: s.seats_per_row,
            })
            .collect(),
        hold_ttl_ms: body.hold_ttl_secs.unwrap_or(600).saturating_mul(1000),
        max_seats_per_hold: body.max_seats_per_hold.unwrap_or(8),
        max_seats_per_buyer: body.max_seats_per_buyer,
        price_cents: body.price_cents.unwrap_or(DEFAULT_PRICE_CENTS),
        currency: body.currency.unwrap_or_else(|| DEFAULT_CURRENCY.into()),
        opens_at_ms,
        closes_at_ms,
        survival,
        retention_ms: body
            .retention_secs
            .map_or(DEFAULT_RETENTION_MS, |s| s.saturating_mul(1000)),
        changes_retention_ms: body
            .changes_retention_secs
            .map_or(DEFAULT_CHANGES_RETENTION_MS, |s| s.saturating_mul(1000)),
        waiting_room: body.waiting_room.as_ref().map(|r| r.settings()),
    };
    spec.validate()
        .map_err(|e| ApiError::bad(e.code(), e.to_string()))?;
    Ok(spec)
}

/// `POST /v1/events` (operator): register the event in the directory
/// (which places its group), then create its seats in the group.
/// Repeating a create with the same body answers 201 again; with an
/// Idempotency-Key, the first answer (see `keyed`).
pub async fn create(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    let caller = req.operator(edge)?;
    crate::keyed::once(edge, req, &caller.user.0, || create_event(edge, req)).await
}

async fn create_event(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    let body: CreateBody = req.json()?;
    let follow_buyers = body.follow_buyers;
    let spec = spec_from(body)?;
    if !edge.commands.region_exists(&spec.home_region).await? {
        return Err(ApiError::bad(
            "unknown_region",
            format!("no node is in region {}", spec.home_region),
        ));
    }
    let registered = edge
        .commands
        .client
        .write(
            GroupId::DIRECTORY,
            &Command::RegisterEvent {
                event_id: spec.event_id.clone(),
                home_region: spec.home_region.clone(),
                survival: spec.survival,
            },
        )
        .await
        .map_err(|e| edge.commands.client_error(e))?;
    let route = match registered.response {
        Response::EventRegistered(r) => r,
        Response::PlacementFailed { reason } => {
            return Err(ApiError::bad("placement_failed", reason))
        }
        // A backup is being restored into this cluster (DESIGN §2.3).
        Response::Restore(Err(reason)) => {
            return Err(ApiError::Conflict {
                code: "restore_running",
                message: reason,
                extra: serde_json::json!({}),
            })
        }
        other => return Err(ApiError::Internal(format!("directory answered {other:?}"))),
    };
    if route.home_region != spec.home_region || route.survival != spec.survival {
        return Err(event_exists(&spec.event_id));
    }
    edge.commands.routes.learn(route.clone());
    let cmd = Commands::command(&route, None, EventAction::Create(Box::new(spec.clone())));
    // The group was just placed: its replicas open it and elect a leader
    // as they see the directory entry. Give that a while (the create is
    // idempotent, so retrying is safe) before answering 503.
    // A new group elects in tens of milliseconds: ask again soon, then
    // less often.
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    let (reply, _) = loop {
        match edge.commands.execute(&route, cmd.clone()).await {
            Err(
                CommandError::NoLeader(_)
                | CommandError::StorageFull(_)
                | CommandError::Unavailable(_),
            ) if started.elapsed() < GROUP_START_PATIENCE => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            other => break other?,
        }
    };
    if matches!(reply.outcome, Outcome::Created { .. }) && follow_buyers {
        crate::moves::set_follow_buyers(edge, &route, true).await?;
    }
    match reply.outcome {
        Outcome::Created { capacity } => Ok(Reply::json(
            StatusCode::CREATED,
            json!({
                "event_id": spec.event_id.0,
                "group_id": route.group.0,
                "owner_region": reply.owner.0,
                "home_region": route.home_region.0,
                "epoch": reply.epoch.0,
                "capacity": capacity,
                "follow_buyers": follow_buyers,
            }),
        )
        .header("x-seatfence-epoch", reply.epoch.0)
        .header("x-seatfence-owner-region", &reply.owner.0)),
        Outcome::EventExists => Err(event_exists(&spec.event_id)),
        Outcome::InvalidEvent(e) => Err(ApiError::bad(e.code(), e.to_string())),
        other => Err(ApiError::Internal(format!("create answered {other:?}"))),
    }
}

/// How long a create waits for a new event group to elect its leader.
const GROUP_START_PATIENCE: Duration = Duration::from_secs(20);

fn event_exists(id: &EventId) -> ApiError {
    ApiError::Conflict {
        code: "event_exists",
        message: format!("event {id} exists with other settings"),
        extra: json!({}),
    }
}

/// `GET /v1/events/{id}`.
pub async fn get(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    req.caller(edge)?;
    let event_id = parse_event_id(id)?;
    let bound = crate::reads::max_stale(req)?;
    let route = edge.commands.route(&event_id).await?;
    let room_query = Query::Room {
        buyer: None,
        now_ms: edge.clock.now_ms(),
    };
    let (answer, room) = tokio::join!(
        crate::reads::ask(edge, &route, &Query::Event, bound),
        crate::reads::ask(edge, &route, &room_query, bound),
    );
    let answer = answer?;
    let (term, stale, served) = (answer.term, answer.stale, answer.served);
    let room = match room.map(|a| a.result) {
        Ok(QueryResult::Room { room: Some(r), .. }) => json!({
            "enabled": r.settings.enabled,
            "admit_per_sec": r.settings.admit_per_sec,
            "ticket_ttl_secs": r.settings.ticket_ttl_ms / 1000,
            "opened": r.opened,
            "queue_length": r.queue_len,
            "admitted": r.admitted,
            "tickets_used": r.tickets_used,
            "tickets_lapsed": r.lapsed,
        }),
        _ => Value::Null,
    };
    let QueryResult::Event(Some(ev)) = answer.result else {
        return Err(ApiError::NotFound {
            code: "event_not_found",
            what: format!("event {event_id}"),
        });
    };
    let open = {
        use seatfence_raft::clock::{Clock, SystemClock};
        ev.sale_open(SystemClock::default().now_ms()).is_ok()
    };
    Ok(Reply::json(
        StatusCode::OK,
        json!({
            "event_id": ev.event_id.0,
            "name": ev.name,
            "owner_region": ev.owner.0,
            "home_region": ev.home_region.0,
            "epoch": ev.epoch.0,
            "term": term,
            "group_id": route.group.0,
            "state": route.state.name(),
            "capacity": ev.capacity,
            "sections": ev.sections,
            "hold_ttl_secs": ev.hold_ttl_ms / 1000,
            "max_seats_per_hold": ev.max_seats_per_hold,
            "max_seats_per_buyer": ev.max_seats_per_buyer,
            "survival": match ev.survival { Survival::Zone => "zone", Survival::Region => "region" },
            "opens_at": ev.opens_at_ms.map(format_ms),
            "closes_at": ev.closes_at_ms.map(format_ms),
            "sale_open": open,
            "price_cents": ev.price_cents,
            "currency": ev.currency,
            "retention_secs": ev.retention_ms / 1000,
            "changes_retention_secs": ev.changes_retention_ms / 1000,
            "waiting_room": room,
            "served_by": served.as_str(),
            "stale_ms": stale.as_millis() as u64,
        }),
    ))
}

/// `GET /v1/admin/events/{id}/payments` (operators): the event's pending
/// payments and how far past its deadline the oldest is, unsettled
/// releases and refunds not yet issued, read at the leader.
pub async fn payments(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let event_id = parse_event_id(id)?;
    let route = edge.commands.route(&event_id).await?;
    let (answer, _) = edge
        .commands
        .client
        .query(route.group, &Query::Payments, true)
        .await
        .map_err(|e| edge.commands.client_error(e))?;
    let QueryResult::Payments(p) = answer else {
        return Err(ApiError::Internal(
            "the event's group answered oddly".into(),
        ));
    };
    if p.event_id.as_ref() != Some(&event_id) {
        return Err(ApiError::NotFound {
            code: "event_not_found",
            what: format!("event {event_id}"),
        });
    }
    let now = edge.clock.now_ms();
    Ok(Reply::json(
        StatusCode::OK,
        json!({
            "event_id": event_id.0,
            "pending_payments": p.pending,
            "oldest_pending_deadline": p.oldest_deadline_ms.map(format_ms),
            "oldest_pending_overdue_secs": p
                .oldest_deadline_ms
                .map_or(0, |d| now.saturating_sub(d) / 1000),
            "unsettled": p.unsettled,
            "refunds_pending": p.refunds_pending,
        }),
    ))
}

/// `GET /v1/events/{id}/availability[?limit=N][&max_stale_ms=M]`: counts
/// and free seats at most `max_stale_ms` old (`stale_ms` says how old at
/// most): from a replica in this edge's region when one can prove it,
/// else as the leader had them (reused for up to `AVAILABILITY_CACHE`).
/// Never permission to sell: holds decide at the leader.
pub async fn availability(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    req.caller(edge)?;
    let event_id = parse_event_id(id)?;
    // 0 asks for the counts only.
    let limit = req.limit_in(1000, 0..=MAX_CAPACITY as u32)?;
    let bound = crate::reads::max_stale(req)?;
    let cached = edge
        .availability
        .get(&event_id, limit)
        .filter(|(_, at)| at.elapsed() <= bound);
    let (mut body, at) = match cached {
        Some(hit) => hit,
        None => {
            let route = edge.commands.route(&event_id).await?;
            let fetch = limit.max(crate::AVAILABILITY_FETCH);
            let q = Query::Availability { max_seats: fetch };
            let answer = crate::reads::ask(edge, &route, &q, bound).await?;
            let (stale, served) = (answer.stale, answer.served);
            let QueryResult::Availability {
                event: Some(ev),
                free_seats,
            } = answer.result
            else {
                return Err(ApiError::NotFound {
                    code: "event_not_found",
                    what: format!("event {event_id}"),
                });
            };
            let body = json!({
                "event_id": ev.event_id.0,
                "capacity": ev.capacity,
                "available": ev.available,
                "held": ev.held,
                "sold": ev.sold,
                "available_seats": free_seats,
                "available_seats_truncated": (free_seats.len() as u64) < ev.available,
                "owner_region": ev.owner.0,
                "epoch": ev.epoch.0,
                "limit": fetch,
                "served_by": served.as_str(),
            });
            // As old as the point that proves a replica's answer, or as
            // the question the leader answered.
            let now = Instant::now();
            let at = now.checked_sub(stale).unwrap_or(now);
            edge.availability.store(&event_id, at, body.clone());
            (crate::availability::cut(&body, limit), at)
        }
    };
    body["stale_ms"] = json!(at.elapsed().as_millis() as u64);
    body["max_stale_ms"] = json!(bound.as_millis() as u64);
    Ok(Reply::json(StatusCode::OK, body))
}

/// `POST /v1/events/{id}/open|close` (operator).
pub async fn set_open(edge: &Edge, req: &Req, id: &str, open: bool) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let event_id = parse_event_id(id)?;
    let route = edge.commands.route(&event_id).await?;
    let cmd = Commands::command(&route, None, EventAction::SetOpen { open });
    let (reply, _) = edge.commands.execute(&route, cmd).await?;
    match reply.outcome {
        Outcome::OpenSet { open } => Ok(Reply::json(
            StatusCode::OK,
            json!({"event_id": event_id.0, "sale_open": open}),
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
    use super::{rfc3339_ms, sale_window, CreateBody};

    fn window(opens: &str, closes: &str) -> Option<(Option<u64>, Option<u64>)> {
        let body: CreateBody = serde_json::from_value(serde_json::json!({
            "event_id": "e", "name": "e", "home_region": "r", "seats": ["s"],
            "opens_at": opens, "closes_at": closes,
        }))
        .unwrap();
        sale_window(&body).ok()
    }

    #[test]
    fn one_cached_answer_serves_every_smaller_limit() {
        let cached = serde_json::json!({
            "available": 3, "available_seats": ["A1", "A2", "A3"],
            "available_seats_truncated": false, "limit": 1000,
        });
        let two = crate::availability::cut(&cached, 2);
        assert_eq!(two["available_seats"], serde_json::json!(["A1", "A2"]));
        assert_eq!(two["available_seats_truncated"], true);
        assert_eq!(two["limit"], 2);
        let counts = crate::availability::cut(&cached, 0);
        assert_eq!(counts["available_seats"], serde_json::json!([]));
        let all = crate::availability::cut(&cached, 1000);
        assert_eq!(all["available_seats_truncated"], false);
    }

    #[test]
    fn a_window_before_1970_keeps_its_order() {
        assert_eq!(
            window("0026-12-30T10:16:48Z", "1923-02-03T17:57:33Z"),
            Some((Some(0), Some(1)))
        );
        assert_eq!(
            window("1960-01-01T00:00:00Z", "1970-01-01T00:00:02Z"),
            Some((Some(0), Some(2000)))
        );
        // Out of order stays out of order, so validation refuses it.
        assert_eq!(
            window("1923-02-03T17:57:33Z", "0026-12-30T10:16:48Z"),
            Some((Some(0), Some(0)))
        );
    }

    #[test]
    fn sale_window_times_take_any_rfc3339_offset() {
        let utc = rfc3339_ms("2026-12-01T12:00:00Z", "opens_at").unwrap();
        assert_eq!(utc, 1_796_126_400_000);
        assert_eq!(
            rfc3339_ms("2026-12-01T13:30:00+01:30", "opens_at").unwrap(),
            utc
        );
        assert_eq!(
            rfc3339_ms("2026-12-01t12:00:00.000z", "opens_at").unwrap(),
            utc
        );
        assert_eq!(
            rfc3339_ms("1969-12-31T23:59:59Z", "opens_at").unwrap(),
            -1000
        );
        let e = rfc3339_ms("tomorrow", "closes_at").unwrap_err();
        assert!(
            e.to_string().contains("closes_at is not an RFC 3339 time"),
            "{e}"
        );
    }
}
