//! Hold handlers: create, read (owner only), cancel (owner only).

use hyper::StatusCode;
use seatfence_core::inventory::{EventAction, Hold, Outcome, RoomAction, SeatPick};
use seatfence_core::{EventId, HoldId};
use seatfence_regions::Commands;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::events::format_ms;
use crate::message::{Reply, Req};
use crate::Edge;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldBody {
    event_id: String,
    seats: Option<Vec<String>>,
    section: Option<String>,
    #[serde(default, deserialize_with = "crate::whole::opt")]
    quantity: Option<u32>,
}

fn hold_json(id: HoldId, event_id: &EventId, h: &Hold) -> Value {
    json!({
        "hold_id": id.to_string(),
        "event_id": event_id.0,
        "seats": h.seats,
        "expires_at": format_ms(h.expires_at_ms),
        "status": h.status.as_str(),
        "created_at": format_ms(h.created_ms),
    })
}

/// A fresh idempotency key for a request that came without one, so the
/// edge's own retries can never apply it twice.
fn auto_key() -> String {
    format!(
        "{}{:032x}",
        seatfence_core::inventory::AUTO_KEY_PREFIX,
        rand::random::<u128>()
    )
}

/// `POST /v1/holds`.
pub async fn create(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    let caller = req.caller(edge)?;
    let key = req.idempotency()?.unwrap_or_else(auto_key);
    let body: HoldBody = req.json()?;
    let pick = match (body.seats, body.quantity) {
        (Some(seats), None) if body.section.is_none() => SeatPick::Seats(seats),
        (None, Some(quantity)) => SeatPick::Quantity {
            section: body.section,
            quantity,
        },
        (seats, quantity) => {
            let why = match (seats.is_some(), quantity.is_some()) {
                (true, true) => "give seats or quantity, not both: seats holds exactly those seats, quantity any free ones",
                (true, false) => "section goes with quantity (any free seats in it), not with a list of seats",
                _ => "give seats (a list of seat ids) or quantity (with an optional section)",
            };
            return Err(ApiError::bad("invalid_request", why));
        }
    };
    // The same bound every replica checks (`Command::check_bounds`), here
    // so that a seat id or section name no event can have is a 400 before
    // any group is asked (the message names the field, not its value).
    pick.check_bounds()
        .map_err(|reason| ApiError::bad("invalid_field", reason))?;
    if !EventId::is_valid(&body.event_id) {
        return Err(ApiError::NotFound {
            code: "event_not_found",
            what: format!("event {:?}", body.event_id),
        });
    }
    let event_id = EventId(body.event_id);
    // A forged, foreign or expired ticket goes no further than the edge;
    // with a valid one the group still checks the buyer's place, and a hold
    // without one in an event with a waiting room is its `ticket_required`.
    let action = match &req.admission_ticket {
        Some(ticket) => {
            let now = edge.clock.now_ms();
            let tk = crate::room::ticket_key(edge);
            if let Err(e) = crate::room::check_ticket(&tk, ticket, &event_id, &caller.user, now) {
                edge.metrics.inc(|m| &m.tickets_refused);
                return Err(e);
            }
            EventAction::Room(RoomAction::Hold {
                owner: caller.user.clone(),
                pick,
            })
        }
        None => EventAction::Hold {
            owner: caller.user.clone(),
            pick,
        },
    };
    let route = edge.commands.route(&event_id).await?;
    let cmd = Commands::command(&route, Some((caller.user, key)), action);
    let (reply, _) = edge.commands.execute(&route, cmd).await?;
    match reply.outcome {
        Outcome::Held(h) => {
            if !reply.replayed {
                edge.metrics.inc(|m| &m.holds_created);
            }
            let id = HoldId {
                group: route.group,
                seq: h.seq,
            };
            Ok(
                Reply::json(StatusCode::CREATED, hold_json(id, &event_id, &h))
                    .header("x-seatfence-epoch", reply.epoch.0)
                    .header("x-seatfence-owner-region", &reply.owner.0)
                    .header("location", format!("/v1/holds/{id}"))
                    .header("cache-control", "no-store")
                    .replayed(reply.replayed),
            )
        }
        other => {
            if matches!(other, Outcome::SeatsUnavailable { .. }) {
                edge.metrics.inc(|m| &m.hold_conflicts);
            }
            Err(ApiError::from_outcome(other, &event_id).fenced(reply.epoch.0, &reply.owner.0))
        }
    }
}

fn not_found() -> ApiError {
    ApiError::NotFound {
        code: "hold_not_found",
        what: "hold".into(),
    }
}

/// Read a hold at its group's leader; anyone but its owner gets 404.
async fn load(edge: &Edge, req: &Req, id: &str) -> Result<(HoldId, EventId, Hold), ApiError> {
    let caller = req.caller(edge)?;
    let id = HoldId::parse(id).ok_or_else(not_found)?;
    let booking = seatfence_core::BookingId {
        group: id.group,
        seq: id.seq,
    };
    match seatfence_payments::load_booking(&edge.commands, booking).await? {
        Some(l) if l.hold.owner == caller.user => Ok((id, l.event_id, l.hold)),
        _ => Err(not_found()),
    }
}

/// `GET /v1/holds/{id}` (owner only).
pub async fn get(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    let (id, event_id, h) = load(edge, req, id).await?;
    Ok(Reply::json(StatusCode::OK, hold_json(id, &event_id, &h))
        .header("cache-control", "no-store"))
}

/// `DELETE /v1/holds/{id}` (owner only, before payment).
pub async fn cancel(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    let (id, event_id, h) = load(edge, req, id).await?;
    let key = req.idempotency()?.unwrap_or_else(auto_key);
    let route = edge.commands.route(&event_id).await?;
    let cmd = Commands::command(
        &route,
        Some((h.owner.clone(), key)),
        EventAction::Cancel {
            owner: h.owner,
            hold: id.seq,
        },
    );
    let (reply, _) = edge.commands.execute(&route, cmd).await?;
    match reply.outcome {
        Outcome::Cancelled(h) => Ok(Reply::json(StatusCode::OK, hold_json(id, &event_id, &h))
            .header("x-seatfence-epoch", reply.epoch.0)
            .header("x-seatfence-owner-region", &reply.owner.0)
            .header("cache-control", "no-store")),
        other => {
            Err(ApiError::from_outcome(other, &event_id).fenced(reply.epoch.0, &reply.owner.0))
        }
    }
}
