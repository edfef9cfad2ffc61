//! The hyper server of the edge: connection handling, body limit, auth,
//! routing, and the single place where results become HTTP responses.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::auth::{self, Caller};
use crate::error::ApiError;
use crate::{admin, events, holds, moves, payments, Edge};

/// Bodies above this are refused with 413.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Oversized bodies up to this size are read and dropped before the 413;
/// larger ones get the 413 and a closed connection.
const DRAIN_LIMIT: usize = 16 << 20;

/// A successful answer.
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub headers: Vec<(&'static str, String)>,
}

impl Reply {
    pub fn json(status: StatusCode, body: Value) -> Reply {
        Reply {
            status,
            body,
            headers: Vec::new(),
        }
    }

    pub fn header(mut self, name: &'static str, value: impl ToString) -> Reply {
        self.headers.push((name, value.to_string()));
        self
    }
}

/// What a handler gets: the parsed request parts it may need.
pub struct Req {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub auth: Option<String>,
    pub idempotency_key: Option<String>,
    /// `X-Gateway-Signature` (webhooks).
    pub gateway_signature: Option<String>,
    pub body: Bytes,
}

impl Req {
    pub fn caller(&self, edge: &Edge) -> Result<Caller, ApiError> {
        auth::verify(&edge.config.jwt_secret, self.auth.as_deref())
    }

    pub fn operator(&self, edge: &Edge) -> Result<Caller, ApiError> {
        let c = self.caller(edge)?;
        if !c.operator {
            return Err(ApiError::Forbidden);
        }
        Ok(c)
    }

    /// The JSON body as `T`; unknown fields and bad JSON are 400s.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            let msg = e.to_string();
            let code = if msg.starts_with("unknown field") {
                "unknown_field"
            } else if e.is_data() {
                "invalid_field"
            } else {
                "malformed_json"
            };
            ApiError::bad(code, msg)
        })
    }

    /// `Idempotency-Key`, checked: 1-255 printable ASCII characters; a
    /// leading `~` is reserved for the edge's own keys.
    pub fn idempotency(&self) -> Result<Option<String>, ApiError> {
        match &self.idempotency_key {
            None => Ok(None),
            Some(k)
                if !k.is_empty()
                    && k.len() <= 255
                    && k.bytes().all(|b| b.is_ascii_graphic())
                    && !k.starts_with('~') =>
            {
                Ok(Some(k.clone()))
            }
            Some(_) => Err(ApiError::bad(
                "invalid_idempotency_key",
                "Idempotency-Key must be 1-255 printable ASCII characters, not starting with '~'",
            )),
        }
    }

    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == name).then_some(v)
        })
    }

    /// `?limit=N` of a listing: 100 when absent, 1..=10000, else 400
    /// `invalid_limit`.
    pub fn limit_param(&self) -> Result<u32, ApiError> {
        match self.query_param("limit") {
            None => Ok(100),
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| ApiError::bad("invalid_limit", "limit must be 1..=10000")),
        }
    }
}

/// Serve the edge on `listener` until `rx_stop` turns true.
pub async fn serve(edge: Arc<Edge>, listener: TcpListener, mut rx_stop: watch::Receiver<bool>) {
    loop {
        let (stream, _) = tokio::select! {
            biased;
            _ = stopped(&mut rx_stop) => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("edge accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let edge = edge.clone();
        let mut rx = rx_stop.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let edge = edge.clone();
                async move { Ok::<_, Infallible>(handle(edge, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stopped(&mut rx) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), conn).await;
                }
            }
        });
    }
}

async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

async fn handle(edge: Arc<Edge>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let start = Instant::now();
    let route = route_label(req.uri().path());
    let result = match read_request(req).await {
        Ok(r) => dispatch(&edge, r).await,
        Err(e) => Err(e),
    };
    let response = match result {
        Ok(reply) => {
            let mut resp = Response::new(Full::new(Bytes::from(reply.body.to_string())));
            *resp.status_mut() = reply.status;
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            for (k, v) in reply.headers {
                if let Ok(v) = HeaderValue::from_str(&v) {
                    resp.headers_mut().insert(k, v);
                }
            }
            resp
        }
        Err(PlainOr::Plain(status, text, content_type)) => {
            let mut resp = Response::new(Full::new(Bytes::from(text)));
            *resp.status_mut() = status;
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
            resp
        }
        Err(PlainOr::Api(e)) => {
            e.log();
            let mut resp = Response::new(Full::new(Bytes::from(e.body().to_string())));
            *resp.status_mut() = e.status();
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            for (k, v) in e.headers() {
                if let Ok(v) = HeaderValue::from_str(&v) {
                    resp.headers_mut().insert(k, v);
                }
            }
            resp
        }
    };
    edge.metrics
        .observe(route, response.status().as_u16(), start.elapsed());
    response
}

/// A non-JSON answer (metrics, probes) or an API error.
enum PlainOr {
    Plain(StatusCode, String, &'static str),
    Api(ApiError),
}

impl From<ApiError> for PlainOr {
    fn from(e: ApiError) -> Self {
        PlainOr::Api(e)
    }
}

fn route_label(path: &str) -> &'static str {
    if path.starts_with("/v1/holds") {
        "holds"
    } else if path.ends_with("/availability") {
        "availability"
    } else if path.starts_with("/v1/events") {
        "events"
    } else if path.starts_with("/v1/bookings") || path.starts_with("/v1/payments") {
        "bookings"
    } else if path.starts_with("/v1/admin") {
        "admin"
    } else {
        "other"
    }
}

async fn read_request(req: Request<Incoming>) -> Result<Req, PlainOr> {
    let too_large = ApiError::PayloadTooLarge {
        limit: MAX_BODY_BYTES,
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > MAX_BODY_BYTES as u64) {
        // Read (and drop) a moderately oversized body so the client, still
        // writing it, sees the 413 instead of a broken pipe.
        if n <= DRAIN_LIMIT as u64 {
            let _ = Limited::new(req.into_body(), DRAIN_LIMIT).collect().await;
        }
        return Err(too_large.into());
    }
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let auth = header("authorization");
    let idempotency_key = header("idempotency-key");
    let gateway_signature = header("x-gateway-signature");
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let body = match Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large.into()),
        Err(e) => return Err(ApiError::bad("bad_body", format!("cannot read body: {e}")).into()),
    };
    Ok(Req {
        method,
        path,
        query,
        auth,
        idempotency_key,
        gateway_signature,
        body,
    })
}

/// Route the request; operator actions are recorded in the audit trail
/// (who, what, on what, with what result), refused ones included.
async fn dispatch(edge: &Edge, req: Req) -> Result<Reply, PlainOr> {
    let audited = audited_action(&req);
    let actor = audited
        .as_ref()
        .and_then(|_| req.caller(edge).ok())
        .filter(|c| c.operator);
    let result = route(edge, &req).await;
    if let (Some((action, target)), Some(actor)) = (audited, actor) {
        let outcome = match &result {
            Ok(_) => "ok".to_string(),
            Err(PlainOr::Api(e)) => format!("{}: {}", e.code(), e),
            Err(PlainOr::Plain(status, _, _)) => status.to_string(),
        };
        edge.audit(&actor.user.0, action, target, outcome).await;
    }
    result
}

/// The operator action a request is, with its target, if it is one.
fn audited_action(req: &Req) -> Option<(&'static str, String)> {
    if req.method != Method::POST {
        return None;
    }
    let segs: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    Some(match segs.as_slice() {
        ["v1", "events"] => (
            "create-event",
            format!("event {}", body["event_id"].as_str().unwrap_or("?")),
        ),
        ["v1", "events", id, "open"] => ("open-sale", format!("event {id}")),
        ["v1", "events", id, "close"] => ("close-sale", format!("event {id}")),
        ["v1", "admin", "groups", id, "transfer-leader"] => (
            "transfer-leader",
            format!("group {id} to node {}", body["to"]),
        ),
        ["v1", "admin", "nodes", id, "drain"] => ("drain", format!("node {id}")),
        ["v1", "admin", "nodes", id, "undrain"] => ("undrain", format!("node {id}")),
        ["v1", "admin", "events", id, "move"] => (
            "move",
            format!(
                "event {id} to {}",
                body["to_region"].as_str().unwrap_or("?")
            ),
        ),
        ["v1", "admin", "moves", id, "abort"] => ("abort-move", format!("move {id}")),
        _ => return None,
    })
}

async fn route(edge: &Edge, req: &Req) -> Result<Reply, PlainOr> {
    let path = req.path.clone();
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let m = req.method.clone();
    let reply = match (&m, segs.as_slice()) {
        (&Method::GET, ["healthz"]) => {
            return Err(PlainOr::Plain(StatusCode::OK, "ok\n".into(), "text/plain"))
        }
        (&Method::GET, ["readyz"]) => {
            return Err(if edge.ready() {
                PlainOr::Plain(StatusCode::OK, "ready\n".into(), "text/plain")
            } else {
                PlainOr::Plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no directory leader known\n".into(),
                    "text/plain",
                )
            })
        }
        (&Method::GET, ["metrics"]) => {
            return Err(PlainOr::Plain(
                StatusCode::OK,
                edge.metrics.render(edge.client.redirects()) + &moves::progress_metrics(edge),
                "text/plain; version=0.0.4",
            ))
        }
        (&Method::POST, ["v1", "events"]) => events::create(edge, req).await?,
        (&Method::GET, ["v1", "events", id]) => events::get(edge, req, id).await?,
        (&Method::GET, ["v1", "events", id, "availability"]) => {
            events::availability(edge, req, id).await?
        }
        (&Method::POST, ["v1", "events", id, action @ ("open" | "close")]) => {
            events::set_open(edge, req, id, *action == "open").await?
        }
        (&Method::POST, ["v1", "holds"]) => holds::create(edge, req).await?,
        (&Method::GET, ["v1", "holds", id]) => holds::get(edge, req, id).await?,
        (&Method::DELETE, ["v1", "holds", id]) => holds::cancel(edge, req, id).await?,
        (&Method::POST, ["v1", "bookings"]) => payments::bookings::create(edge, req).await?,
        (&Method::GET, ["v1", "bookings", id]) => payments::bookings::get(edge, req, id).await?,
        (&Method::GET, ["v1", "payments", "callback"]) => {
            payments::callback::handle(edge, req).await?
        }
        (&Method::POST, ["v1", "payments", "webhook"]) => {
            payments::webhook::handle(edge, req).await?
        }
        (&Method::GET, ["v1", "admin", "cluster"]) => admin::cluster(edge, req).await?,
        (&Method::GET, ["v1", "admin", "audit"]) => admin::audit(edge, req).await?,
        (&Method::POST, ["v1", "admin", "groups", id, "transfer-leader"]) => {
            admin::transfer(edge, req, id).await?
        }
        (&Method::POST, ["v1", "admin", "nodes", id, "drain"]) => {
            admin::drain(edge, req, id).await?
        }
        (&Method::POST, ["v1", "admin", "nodes", id, "undrain"]) => {
            admin::undrain(edge, req, id).await?
        }
        (&Method::POST, ["v1", "admin", "events", id, "move"]) => {
            moves::start(edge, req, id).await?
        }
        (&Method::GET, ["v1", "admin", "moves"]) => moves::list(edge, req).await?,
        (&Method::GET, ["v1", "admin", "moves", id]) => moves::get(edge, req, id).await?,
        (&Method::POST, ["v1", "admin", "moves", id, "abort"]) => {
            moves::abort(edge, req, id).await?
        }
        (_, ["healthz" | "readyz" | "metrics"])
        | (_, ["v1", "events"])
        | (_, ["v1", "events", _])
        | (_, ["v1", "events", _, "availability" | "open" | "close"])
        | (_, ["v1", "holds"])
        | (_, ["v1", "holds", _])
        | (_, ["v1", "bookings"])
        | (_, ["v1", "bookings", _])
        | (_, ["v1", "payments", "callback" | "webhook"])
        | (_, ["v1", "admin", "cluster" | "audit"])
        | (_, ["v1", "admin", "groups", _, "transfer-leader"])
        | (_, ["v1", "admin", "nodes", _, "drain" | "undrain"])
        | (_, ["v1", "admin", "events", _, "move"])
        | (_, ["v1", "admin", "moves"])
        | (_, ["v1", "admin", "moves", _])
        | (_, ["v1", "admin", "moves", _, "abort"]) => {
            return Err(ApiError::MethodNotAllowed.into())
        }
        _ => return Err(ApiError::NoRoute(path.clone()).into()),
    };
    Ok(reply)
}

/// Every route the edge serves, as `(method, OpenAPI path)`: the OpenAPI
/// document is tested against this list.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("post", "/v1/events"),
    ("get", "/v1/events/{event_id}"),
    ("get", "/v1/events/{event_id}/availability"),
    ("post", "/v1/events/{event_id}/open"),
    ("post", "/v1/events/{event_id}/close"),
    ("post", "/v1/holds"),
    ("get", "/v1/holds/{hold_id}"),
    ("delete", "/v1/holds/{hold_id}"),
    ("post", "/v1/bookings"),
    ("get", "/v1/bookings/{booking_id}"),
    ("get", "/v1/payments/callback"),
    ("post", "/v1/payments/webhook"),
    ("get", "/v1/admin/cluster"),
    ("get", "/v1/admin/audit"),
    ("post", "/v1/admin/groups/{group_id}/transfer-leader"),
    ("post", "/v1/admin/nodes/{node_id}/drain"),
    ("post", "/v1/admin/nodes/{node_id}/undrain"),
    ("post", "/v1/admin/events/{event_id}/move"),
    ("get", "/v1/admin/moves"),
    ("get", "/v1/admin/moves/{move_id}"),
    ("post", "/v1/admin/moves/{move_id}/abort"),
];

#[cfg(test)]
mod tests {
    use super::ROUTES;

    /// docs/openapi.json lists exactly the routes the router serves.
    #[test]
    fn openapi_document_matches_the_router() {
        let text = include_str!("../../docs/openapi.json");
        let doc: serde_json::Value = serde_json::from_str(text).expect("openapi.json parses");
        let mut documented = Vec::new();
        for (path, ops) in doc["paths"].as_object().expect("paths") {
            for method in ops.as_object().expect("operations").keys() {
                documented.push((method.clone(), path.clone()));
            }
        }
        documented.sort();
        let mut served: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        served.sort();
        assert_eq!(documented, served);
    }
}
