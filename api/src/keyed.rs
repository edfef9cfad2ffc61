//! `Idempotency-Key` on requests that are not one event's: `POST
//! /v1/events` and move requests. The request first reserves `(caller,
//! key)` in the directory, runs, then records its final answer (2xx, or a
//! 4xx other than 429) there for a day; a retry with the same key and body
//! gets that answer again (with `Idempotent-Replayed: true`), another body
//! under the same key gets 422 `idempotency_key_reused` and changes
//! nothing, and a request that meets a reservation still running gets 409
//! `idempotency_request_in_progress` (nothing done; retry later). A 5xx or
//! 429 answer drops the reservation: a retry runs again. (Bookings keep
//! their keys in their event's group with the booking itself, see
//! `payments::bookings`.)

use std::future::Future;

use hyper::StatusCode;
use seatfence_core::answers::{request_hash, KeyedAnswer};
use seatfence_core::{Command, GroupId, Response};
use serde_json::json;

use crate::error::ApiError;
use crate::message::{Body, Reply, Req};
use crate::Edge;

/// Largest answer body kept for replays (answers here are a few hundred
/// bytes; error messages are cut to 300 characters).
const MAX_KEPT: usize = 4096;

/// Headers a replayed answer repeats.
const REPLAYED: [&str; 3] = ["location", "x-seatfence-epoch", "x-seatfence-owner-region"];

/// Answer `req` of `owner` with `run`, at most once per Idempotency-Key.
pub async fn once<F, Fut>(edge: &Edge, req: &Req, owner: &str, run: F) -> Result<Reply, ApiError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Reply, ApiError>>,
{
    let Some(key) = req.idempotency()? else {
        return run().await;
    };
    let hash = request_hash(req.method.as_str(), &req.path, &req.body);
    let request = format!("{:032x}", rand::random::<u128>());
    let reservation = KeyedAnswer {
        request_hash: hash,
        at_ms: edge.clock.now_ms(),
        status: 0,
        body: String::new(),
        headers: Vec::new(),
        request: request.clone(),
    };
    let first = remember(edge, owner, &key, reservation).await?;
    if first.request != request {
        return replay(first, hash);
    }
    let result = run().await;
    let (status, body, headers) = match &result {
        Ok(Reply {
            status,
            body: Body::Json(v),
            headers,
        }) => (*status, v.to_string(), headers.clone()),
        Ok(_) => (StatusCode::INTERNAL_SERVER_ERROR, String::new(), Vec::new()),
        Err(e) => (e.status(), e.body().to_string(), e.headers()),
    };
    // Not final, or too big to keep replicated for a day: a retry runs again.
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS || body.len() > MAX_KEPT
    {
        let forget = Command::ForgetAnswer {
            owner: owner.to_string(),
            key,
            request,
        };
        if let Err(e) = edge.commands.write(GroupId::DIRECTORY, forget).await {
            tracing::warn!("dropping a keyed request's reservation failed: {e}");
        }
        return result;
    }
    let answer = KeyedAnswer {
        request_hash: hash,
        at_ms: edge.clock.now_ms(),
        status: status.as_u16(),
        body,
        headers: headers
            .into_iter()
            .filter(|(n, _)| REPLAYED.contains(n))
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
        request,
    };
    if let Err(e) = remember(edge, owner, &key, answer).await {
        tracing::warn!("recording the answer to a keyed request failed: {e}");
    }
    result
}

/// Reserve or complete `(owner, key)`: the record as it stands after.
async fn remember(
    edge: &Edge,
    owner: &str,
    key: &str,
    answer: KeyedAnswer,
) -> Result<KeyedAnswer, ApiError> {
    let cmd = Command::RememberAnswer {
        owner: owner.to_string(),
        key: key.to_string(),
        answer,
    };
    let done = edge
        .commands
        .write(GroupId::DIRECTORY, cmd)
        .await
        .map_err(|e| edge.commands.client_error(e))?;
    match done.response {
        Response::Answer(a) => Ok(*a),
        other => Err(ApiError::Internal(format!(
            "the directory answered {other:?}"
        ))),
    }
}

/// Another request's record of the key: its answer if it was the same
/// request and has answered.
fn replay(first: KeyedAnswer, hash: u64) -> Result<Reply, ApiError> {
    if first.request_hash != hash {
        return Err(ApiError::IdempotencyKeyReused);
    }
    if first.pending() {
        return Err(ApiError::Conflict {
            code: "idempotency_request_in_progress",
            message: "a request with this Idempotency-Key is still running: retry later".into(),
            extra: json!({}),
        });
    }
    let status = StatusCode::from_u16(first.status).unwrap_or(StatusCode::OK);
    let body = serde_json::from_str(&first.body).unwrap_or(serde_json::Value::Null);
    let mut reply = Reply::json(status, body).replayed(true);
    for (name, value) in first.headers {
        if let Some(n) = REPLAYED.iter().find(|n| **n == name) {
            reply = reply.header(n, value);
        }
    }
    Ok(reply)
}
