//! The hyper server of the edge: the gate on each request's head (route,
//! caller, admission, body budget) before its body is read, the body's
//! limits, routing, and the single place where results become HTTP
//! responses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body as _, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use tokio::sync::OwnedSemaphorePermit;

pub use crate::conn::serve;
use crate::error::ApiError;
use crate::message::{Body, Reply, Req};
use crate::routes::{self, Matched, Route, Who};
use crate::{admin, events, holds, lifecycle, moves, payments, Edge};

/// A body declared oversized but no larger than this is read and dropped
/// (frame by frame, never buffered) before the 413, within the body
/// timeout; a larger one gets the 413 and a closed connection at once.
const DRAIN_LIMIT: u64 = 16 << 20;

pub(crate) async fn handle(
    edge: Arc<Edge>,
    req: Request<Incoming>,
    peer: crate::conn::Peer,
) -> Response<Full<Bytes>> {
    let start = Instant::now();
    let matched = routes::find(req.method(), req.uri().path());
    let label = matched.label();
    let request_id = request_id(req.headers().get("x-request-id"));
    let (parts, body) = req.into_parts();
    // Boxed: the handler's future is large (every route's state), and each
    // move of it showed as memmove in the profile.
    let dispatched = dispatch(&edge, matched, head(&parts), body, peer);
    let (result, group) = seatfence_regions::hint::scope(Box::pin(dispatched)).await;
    let (status, body, content_type, headers) = match result {
        Ok(reply) => match reply.body {
            Body::Json(v) => (reply.status, v.to_string(), JSON, reply.headers),
            Body::Text(t, content_type) => (reply.status, t, content_type, reply.headers),
        },
        Err(e) => {
            e.log(request_id.to_str().unwrap_or_default());
            (e.status(), e.body().to_string(), JSON, e.headers())
        }
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(&v) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp.headers_mut().insert("x-request-id", request_id);
    // The request was about an event group: name the edge on the node
    // leading it, for clients that go there directly (a hint, DESIGN §7).
    if let Some(url) = group.and_then(|g| edge.commands.client.leader_edge(g)) {
        if let Ok(v) = HeaderValue::from_str(&url) {
            resp.headers_mut().insert(LEADER_EDGE, v);
        }
    }
    edge.metrics
        .observe(label, status.as_u16(), start.elapsed());
    resp
}

const JSON: &str = "application/json";

/// The header naming the edge of the event group's leader.
pub const LEADER_EDGE: &str = "x-seatfence-leader-edge";

/// The answer's `X-Request-Id`: the caller's own (1–128 of `A-Za-z0-9._:-`,
/// so a log line or a support ticket can name the request: the edge logs it
/// with every 5xx, and at debug level with every other refusal), else a
/// new random one.
fn request_id(given: Option<&HeaderValue>) -> HeaderValue {
    let ok = |v: &&HeaderValue| {
        let b = v.as_bytes();
        (1..=128).contains(&b.len())
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"._:-".contains(c))
    };
    match given.filter(ok) {
        Some(v) => v.clone(),
        None => HeaderValue::from_str(&format!("{:016x}", rand::random::<u64>()))
            .expect("hex is a valid header value"),
    }
}

/// The request's head as a [`Req`] with no body yet: everything the gate
/// (the caller, admission, the body budget) decides on.
fn head(parts: &hyper::http::request::Parts) -> Req {
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    Req {
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        auth: header("authorization"),
        // Not `header`: a key with non-ASCII bytes must be refused (400
        // `invalid_idempotency_key`), not read as "no key".
        idempotency_key: parts
            .headers
            .get("idempotency-key")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        gateway_signature: header("x-gateway-signature"),
        admission_ticket: header("admission-ticket"),
        body: Bytes::new(),
        verified: None,
    }
}

/// The request's whole body, read only once the gate let the request in,
/// bounded in size (`limit`, the route's: a declared larger body is 413 at
/// once, [`DRAIN_LIMIT`] of it read and dropped), in memory (its declared
/// length, or `limit` when it declares none, taken from the edge's body
/// budget before the first byte: 503 `edge_overloaded` when there is no
/// room; the permit is held until the answer) and in time
/// (`body_timeout_ms`, the same deadline for a body within the limit and
/// for the drain of an oversized one; a body that runs out of time counts
/// as a body timeout).
async fn read_body(
    edge: &Edge,
    body: Incoming,
    limit: usize,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), ApiError> {
    let declared = body.size_hint().exact();
    if declared == Some(0) {
        return Ok((Bytes::new(), None));
    }
    let body_timeout = Duration::from_millis(edge.config.body_timeout_ms);
    let too_large = ApiError::PayloadTooLarge { limit };
    if let Some(n) = declared.filter(|n| *n > limit as u64) {
        // A moderately oversized body is read and dropped, so that a client
        // still writing it sees the 413 instead of a reset; but only within
        // the body timeout, like any body (a client that declares 2 MiB and
        // sends nothing held its connection forever, issue 39). Either way
        // the answer is the 413, with `Connection: close`.
        if n <= DRAIN_LIMIT
            && tokio::time::timeout(body_timeout, drain(body, DRAIN_LIMIT))
                .await
                .is_err()
        {
            edge.metrics.inc(|m| &m.body_timeouts);
        }
        return Err(too_large);
    }
    let permit = edge.admit_body(declared.map_or(limit, |n| n as usize))?;
    let collect = Limited::new(body, limit).collect();
    match tokio::time::timeout(body_timeout, collect).await {
        Err(_) => {
            edge.metrics.inc(|m| &m.body_timeouts);
            Err(ApiError::RequestTimeout {
                ms: body_timeout.as_millis() as u64,
            })
        }
        Ok(Ok(b)) => Ok((b.to_bytes(), Some(permit))),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large),
        Ok(Err(e)) => Err(ApiError::bad("bad_body", format!("cannot read body: {e}"))),
    }
}

/// Read `body`'s frames and drop them, until it ends, fails or has
/// brought more than `limit` bytes: nothing is kept.
async fn drain(mut body: Incoming, limit: u64) {
    let mut read = 0u64;
    while let Some(Ok(frame)) = body.frame().await {
        if let Some(data) = frame.data_ref() {
            read += data.len() as u64;
            if read > limit {
                return;
            }
        }
    }
}

/// Route the request through [`routes::ROUTES`]: the gate on its head
/// (the caller its route needs: 401, 403), admission (buyer mutations: a
/// rate token and a mutation slot; every other request but probes and
/// `/metrics`: a slot of its own pool; the routes anyone may call: their
/// address's rate), then its body ([`read_body`]: nothing of it is read
/// before all that let it in), the handler, and an audit record for
/// operator actions (who, what, on what, with what result), refused ones
/// included.
async fn dispatch(
    edge: &Edge,
    matched: Matched,
    mut req: Req,
    body: Incoming,
    peer: crate::conn::Peer,
) -> Result<Reply, ApiError> {
    let def = match matched {
        Matched::Route(def) => def,
        Matched::WrongMethod => {
            return Err(ApiError::MethodNotAllowed {
                allow: routes::allowed(&req.path),
            })
        }
        Matched::NoRoute => return Err(ApiError::NoRoute(req.path.clone())),
    };
    let params = routes::params(def, &req.path);
    // The caller is verified once, here, from the headers; handlers reuse
    // it (and check it again for what they need).
    match def.who() {
        Who::Anyone => {}
        Who::Token => req.verified = Some(req.caller(edge)?),
        Who::Operator => req.verified = Some(req.operator(edge)?),
    }
    let _permit = match &req.verified {
        Some(caller) if def.admitted => Some(edge.admit(&caller.user)?),
        _ => {
            // The routes anyone may call without a token cost an address
            // at most its rate (before any work: the callback and webhook
            // are checked against the gateway only after).
            if matches!(
                def.route,
                Route::Healthz
                    | Route::Readyz
                    | Route::Metrics
                    | Route::PaymentCallback
                    | Route::PaymentWebhook
            ) {
                edge.admit_anonymous(peer)?;
            }
            // Probes and /metrics answer even when the edge is saturated.
            let probe = matches!(def.route, Route::Healthz | Route::Readyz | Route::Metrics);
            (!probe).then(|| edge.admit_other()).transpose()?
        }
    };
    let (bytes, _held) = read_body(edge, body, def.body_limit()).await?;
    req.body = bytes;
    let result = call(edge, &req, def.route, &params).await;
    if let Some(audit) = def.audit {
        if let Some(actor) = req.verified.as_ref().filter(|c| c.operator) {
            let outcome = match &result {
                // A keyed retry answered from the record: nothing ran again.
                Ok(r) if r.is_replay() => "ok (replay: nothing done again)".to_string(),
                Ok(_) => "ok".to_string(),
                Err(e) => format!("{}: {}", e.code(), e),
            };
            let target = audit.target(def, &params, &req.body);
            edge.operators
                .audit(&actor.user.0, audit.action, target, outcome)
                .await;
        }
    }
    result
}

/// The handler of `route`; `p` are its path parameters in order.
async fn call(edge: &Edge, req: &Req, route: Route, p: &[&str]) -> Result<Reply, ApiError> {
    let id = p.first().copied().unwrap_or_default();
    match route {
        Route::Healthz => Ok(Reply::text(StatusCode::OK, "ok\n".into(), "text/plain")),
        Route::Readyz if edge.commands.ready() => {
            Ok(Reply::text(StatusCode::OK, "ready\n".into(), "text/plain"))
        }
        Route::Readyz => Ok(Reply::text(
            StatusCode::SERVICE_UNAVAILABLE,
            "no directory leader known\n".into(),
            "text/plain",
        )),
        Route::Metrics => Ok(Reply::text(
            StatusCode::OK,
            edge.metrics_text(),
            "text/plain; version=0.0.4",
        )),
        Route::FleetMetrics => crate::fleet::metrics(edge, req).await,
        Route::Console => Ok(console(seatfence_console::page())),
        Route::ConsoleAsset => seatfence_console::asset(id)
            .map(console)
            .ok_or_else(|| ApiError::NoRoute(format!("/console/{id}"))),
        Route::CreateEvent => events::create(edge, req).await,
        Route::GetEvent => events::get(edge, req, id).await,
        Route::Availability => events::availability(edge, req, id).await,
        Route::EventPayments => events::payments(edge, req, id).await,
        Route::Changes => crate::changes::list(edge, req).await,
        Route::OpenSale => events::set_open(edge, req, id, true).await,
        Route::CloseSale => events::set_open(edge, req, id, false).await,
        Route::CreateHold => holds::create(edge, req).await,
        Route::JoinQueue => crate::room::join(edge, req, id).await,
        Route::QueueStanding => crate::room::me(edge, req, id).await,
        Route::SetWaitingRoom => crate::room::configure(edge, req, id).await,
        Route::GetHold => holds::get(edge, req, id).await,
        Route::CancelHold => holds::cancel(edge, req, id).await,
        Route::CreateBooking => payments::bookings::create(edge, req).await,
        Route::GetBooking => payments::bookings::get(edge, req, id).await,
        Route::RefundBooking => payments::refunds::refund(edge, req, id).await,
        Route::PaymentCallback => payments::callback::handle(edge, req).await,
        Route::PaymentWebhook => payments::webhook::handle(edge, req).await,
        Route::Cluster => admin::cluster(edge, req).await,
        Route::Audit => admin::audit(edge, req).await,
        Route::Version => crate::version::get(edge, req).await,
        Route::SetFormat => crate::version::set(edge, req).await,
        Route::TransferLeader => admin::transfer(edge, req, id).await,
        Route::Drain => admin::drain(edge, req, id).await,
        Route::Undrain => admin::undrain(edge, req, id).await,
        Route::Decommission => lifecycle::decommission(edge, req, id).await,
        Route::Recommission => lifecycle::recommission(edge, req, id).await,
        Route::DeclareDead => lifecycle::declare_dead(edge, req, id).await,
        Route::StartMove => moves::start(edge, req, id).await,
        Route::FollowBuyers => moves::follow_buyers(edge, req, id).await,
        Route::ListMoves => moves::list(edge, req).await,
        Route::GetMove => moves::get(edge, req, id).await,
        Route::AbortMove => moves::abort(edge, req, id).await,
    }
}

/// A console answer (`seatfence_console`) as a reply, with its headers.
fn console(served: seatfence_console::Served) -> Reply {
    seatfence_console::Served::HEADERS.iter().fold(
        Reply::text(StatusCode::OK, served.body.to_string(), served.content_type),
        |reply, (name, value)| reply.header(name, *value),
    )
}
