//! `Idempotency-Key` on requests that are not one event's: `POST
//! /v1/events` and move requests. The first final answer (2xx, or a 4xx
//! other than 429) is recorded in the directory under `(caller, key)` for a
//! day; a retry with the same key and body gets that answer again (with
//! `Idempotent-Replayed: true`), another body under the same key gets 422
//! `idempotency_key_reused` and changes nothing. 5xx and 429 answers are
//! not recorded: a retry runs again. (Bookings keep their keys in their
//! event's group with the booking itself, see `payments::bookings`.)

use std::future::Future;

use hyper::StatusCode;
use seatfence_core::answers::{request_hash, KeyedAnswer};
use seatfence_core::{Command, GroupId, Query, QueryResult, Response};

use crate::error::ApiError;
use crate::http::{Body, Reply, Req};
use crate::Edge;

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
    let asked = Query::Answer {
        owner: owner.to_string(),
        key: key.clone(),
    };
    let (first, _) = edge
        .client
        .query(GroupId::DIRECTORY, &asked, true)
        .await
        .map_err(|e| edge.client_error(e))?;
    if let QueryResult::Answer(Some(first)) = first {
        return replay(first, hash);
    }
    let result = run().await;
    let (status, body, headers) = match &result {
        Ok(Reply {
            status,
            body: Body::Json(v),
            headers,
        }) => (*status, v.to_string(), headers.clone()),
        Ok(_) => return result,
        Err(e) => (e.status(), e.body().to_string(), e.headers()),
    };
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
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
    };
    let remember = Command::RememberAnswer {
        owner: owner.to_string(),
        key,
        answer: answer.clone(),
    };
    match edge.write(GroupId::DIRECTORY, remember).await {
        // Another request with the key answered first: its answer stands.
        Ok(c) => match c.response {
            Response::Answer(first) if first != answer => replay(first, hash),
            _ => result,
        },
        Err(e) => {
            tracing::warn!("recording the answer to a keyed request failed: {e}");
            result
        }
    }
}

/// The recorded answer, if it was to the same request.
fn replay(first: KeyedAnswer, hash: u64) -> Result<Reply, ApiError> {
    if first.request_hash != hash {
        return Err(ApiError::IdempotencyKeyReused);
    }
    let status = StatusCode::from_u16(first.status).unwrap_or(StatusCode::OK);
    let body = serde_json::from_str(&first.body).unwrap_or(serde_json::Value::Null);
    let mut reply = Reply::json(status, body).header("idempotent-replayed", "true");
    for (name, value) in first.headers {
        if let Some(n) = REPLAYED.iter().find(|n| **n == name) {
            reply = reply.header(n, value);
        }
    }
    Ok(reply)
}
