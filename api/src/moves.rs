//! Ownership moves, for operators (DESIGN.md §6, §7).
//!
//! ```text
//!  POST /v1/admin/events/{id}/move {"to_region"}  → 202 {"move_id", ...}   recorded in the directory
//!  GET  /v1/admin/moves/{id}                      → {"move_id","event_id","from_region","to_region","step","state", ...}
//!  GET  /v1/admin/moves[?limit=N]                 → newest first
//!  POST /v1/admin/moves/{id}/abort                → 200 aborted; 409 move_not_abortable after the membership change
//! ```
//!
//! The edge only records the request in the directory: the coordinator on
//! the directory's leader performs the steps (`seatfence_duties::directory::moves`).
//! Reads go to the directory's leader, so a move read right after its
//! start is always found.

use hyper::StatusCode;
use seatfence_core::{MoveOp, MoveRecord, MoveRefused};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::message::{Reply, Req};
use crate::Edge;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveBody {
    to_region: String,
}

/// A move as the API shows it.
pub fn move_json(m: &MoveRecord) -> Value {
    json!({
        "move_id": m.move_id,
        "event_id": m.event_id.0,
        "group_id": m.group.0,
        "from_region": m.from_region.0,
        "to_region": m.to_region.0,
        "step": m.step.name(),
        "step_number": m.step.number(),
        "steps": seatfence_core::MoveStep::ALL.len(),
        "state": m.state.name(),
        "from_epoch": m.from_epoch.0,
        "from_members": m.from_members.iter().map(|n| n.0).collect::<Vec<_>>(),
        "to_members": m.to_members.iter().map(|n| n.0).collect::<Vec<_>>(),
        "started_ms": m.started_ms,
        "updated_ms": m.updated_ms,
        "duration_ms": m.duration_ms(),
        "pause_ms": m.pause_ms,
        "history": m.history.iter().map(|(s, at)| json!({"step": s.name(), "at_ms": at})).collect::<Vec<_>>(),
        "actor": m.actor,
        "reason": m.reason,
    })
}

/// The event's fence while the move has not bumped it (start, abort):
/// its epoch and owner before the move (DESIGN §7 mutation headers).
fn fenced(reply: Reply, m: &MoveRecord) -> Reply {
    reply
        .header("x-seatfence-epoch", m.from_epoch.0)
        .header("x-seatfence-owner-region", &m.from_region.0)
}

fn refused(r: MoveRefused) -> ApiError {
    let current = r.current.as_ref().map(|m| move_json(m));
    let conflict = |code: &'static str| ApiError::Conflict {
        code,
        message: r.message.clone(),
        extra: json!({ "move": current }),
    };
    match r.code.as_str() {
        "event_not_found" => ApiError::NotFound {
            code: "event_not_found",
            what: r.message,
        },
        "move_not_found" => ApiError::NotFound {
            code: "move_not_found",
            what: r.message,
        },
        "unknown_region" => ApiError::bad("unknown_region", r.message),
        "move_in_progress" => conflict("move_in_progress"),
        "already_owner" => conflict("already_owner"),
        "move_not_abortable" => conflict("move_not_abortable"),
        "placement_failed" => conflict("placement_failed"),
        "step_mismatch" => conflict("step_mismatch"),
        _ => ApiError::Internal(format!("{}: {}", r.code, r.message)),
    }
}

async fn propose(edge: &Edge, op: MoveOp) -> Result<MoveRecord, ApiError> {
    seatfence_regions::ops::propose_move(&edge.commands.client, edge.clock.now_ms(), op)
        .await
        .map_err(|e| edge.commands.client_error(e))?
        .map_err(refused)
}

/// `POST /v1/admin/events/{id}/move {"to_region"}` → 202 `{move_id, ...}`
/// (with an Idempotency-Key, the first answer: see `keyed`).
pub async fn start(edge: &Edge, req: &Req, event: &str) -> Result<Reply, ApiError> {
    let caller = req.operator(edge)?;
    let owner = caller.user.0.clone();
    crate::keyed::once(edge, req, &owner, || start_move(edge, req, event, caller)).await
}

async fn start_move(
    edge: &Edge,
    req: &Req,
    event: &str,
    caller: crate::auth::Caller,
) -> Result<Reply, ApiError> {
    let body: MoveBody = req.json()?;
    // The start's request id: the operator's key (so a retry after any
    // failure finds the move it started), else one of its own (so the
    // client's re-send of a committed start does too).
    let request = match req.idempotency()? {
        Some(k) => format!("key:{}:{k}", caller.user.0),
        None => format!("auto:{:032x}", rand::random::<u128>()),
    };
    let m = propose(
        edge,
        MoveOp::Start {
            event_id: seatfence_core::EventId(event.to_string()),
            to_region: seatfence_core::RegionId(body.to_region),
            actor: caller.user.0.clone(),
            request,
        },
    )
    .await?;
    seatfence_raft::metrics::RaftMetrics::inc(&seatfence_raft::metrics::METRICS.moves_started);
    tracing::info!(move_id = m.move_id, event = %m.event_id, from = %m.from_region, to = %m.to_region, "operator: move started");
    Ok(fenced(Reply::json(StatusCode::ACCEPTED, move_json(&m)), &m)
        .header("location", format!("/v1/admin/moves/{}", m.move_id)))
}

/// `POST /v1/admin/moves/{id}/abort`: only before the membership change
/// (with an Idempotency-Key, the first answer: see `keyed`).
pub async fn abort(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    let caller = req.operator(edge)?;
    let owner = caller.user.0.clone();
    crate::keyed::once(edge, req, &owner, || abort_move(edge, id, caller)).await
}

async fn abort_move(edge: &Edge, id: &str, caller: crate::auth::Caller) -> Result<Reply, ApiError> {
    let move_id = crate::admin::parse_id(id, "move_not_found")?;
    let m = propose(
        edge,
        MoveOp::Abort {
            move_id,
            reason: format!("aborted by {}", caller.user.0),
        },
    )
    .await?;
    seatfence_raft::metrics::RaftMetrics::inc(&seatfence_raft::metrics::METRICS.moves_aborted);
    Ok(fenced(Reply::json(StatusCode::OK, move_json(&m)), &m))
}

/// `GET /v1/admin/moves/{id}`.
pub async fn get(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let move_id = crate::admin::parse_id(id, "move_not_found")?;
    let dir = edge.commands.directory_at_leader().await?;
    let m = dir.moves.get(&move_id).ok_or_else(|| ApiError::NotFound {
        code: "move_not_found",
        what: format!("move {move_id}"),
    })?;
    Ok(Reply::json(StatusCode::OK, move_json(m)).header("cache-control", "no-store"))
}

/// `GET /v1/admin/moves[?limit=N]`: newest first.
pub async fn list(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let limit = req.limit_param()? as usize;
    let dir = edge.commands.directory_at_leader().await?;
    let moves: Vec<Value> = dir
        .moves
        .values()
        .rev()
        .take(limit)
        .map(move_json)
        .collect();
    Ok(Reply::json(StatusCode::OK, json!({ "moves": moves })).header("cache-control", "no-store"))
}

/// `seatfence_move_step`: the step number (1..=6) of every running move, as
/// this node's directory replica has it.
pub fn progress_metrics(edge: &Edge) -> String {
    use std::fmt::Write;
    let name = "seatfence_move_step";
    let mut out = format!(
        "# HELP {name} Step (1 add_learners .. 6 done) of each running ownership move.\n# TYPE {name} gauge\n"
    );
    let running: Vec<MoveRecord> = edge
        .commands
        .directory(|d| {
            d.moves
                .values()
                .filter(|m| m.is_running())
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    for m in running {
        let _ = writeln!(
            out,
            "{name}{{move_id=\"{}\",event=\"{}\",to_region=\"{}\"}} {}",
            m.move_id,
            m.event_id.0,
            m.to_region.0,
            m.step.number()
        );
    }
    out
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FollowBody {
    enabled: bool,
}

/// Turn `event`'s `follow_buyers` policy on or off: written to the event
/// group's key-value table (`seatfence_regions::follow::POLICY_KEY`), read
/// by the duty of whichever node leads the group.
pub async fn set_follow_buyers(
    edge: &Edge,
    route: &seatfence_core::EventRoute,
    enabled: bool,
) -> Result<(), ApiError> {
    use seatfence_regions::follow::{ON, POLICY_KEY};
    let value = if enabled { ON.to_vec() } else { b"0".to_vec() };
    edge.commands
        .client
        .write(
            route.group,
            &seatfence_core::Command::Put {
                key: POLICY_KEY.to_string(),
                value,
            },
        )
        .await
        .map_err(|e| edge.commands.client_error(e))?;
    Ok(())
}

/// `POST /v1/admin/events/{id}/follow-buyers {"enabled"}` → 200
/// `{event_id, follow_buyers}`.
pub async fn follow_buyers(edge: &Edge, req: &Req, event: &str) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let event_id = crate::events::parse_event_id(event)?;
    let body: FollowBody = req.json()?;
    let route = edge.commands.route(&event_id).await?;
    set_follow_buyers(edge, &route, body.enabled).await?;
    Ok(Reply::json(
        StatusCode::OK,
        json!({"event_id": event_id.0, "follow_buyers": body.enabled}),
    ))
}
