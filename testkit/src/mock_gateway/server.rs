//! The mock's HTTP side: routing a request to the [`Mock`] operation it
//! names, and serving connections.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use serde_json::json;

use super::{err, Answer, Mock};

impl Mock {
    pub(super) async fn handle(self: Arc<Mock>, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let auth = header("authorization");
        let fence = header("x-fencing-token");
        let body = match Limited::new(req.into_body(), 1 << 20).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return respond(err(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    "body over 1 MiB",
                ))
            }
        };
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let browser = matches!(
            (&method, parts.as_slice()),
            (&Method::POST, ["v1", "payments", _, "approve" | "cancel"])
        );
        let open = browser
            || matches!(
                parts.as_slice(),
                ["_faults"] | ["_stats"] | ["_payments"] | ["v1", "token"]
            );
        let known = matches!(
            parts.as_slice(),
            ["_faults"]
                | ["_stats"]
                | ["_payments"]
                | ["v1", "token"]
                | ["v1", "payments"]
                | ["v1", "payments", _]
                | [
                    "v1",
                    "payments",
                    _,
                    "approve" | "cancel" | "execute" | "void"
                ]
                | ["v1", "refunds"]
        );
        if !known {
            return respond(err(StatusCode::NOT_FOUND, "not_found", "no such route"));
        }
        if !open && !self.authorized(auth.as_deref()) {
            return respond(err(
                StatusCode::UNAUTHORIZED,
                "invalid_token",
                "a valid bearer token from POST /v1/token is required",
            ));
        }
        let latency = self.faults().latency_ms;
        if latency > 0 && !open {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        let answer = match (&method, parts.as_slice()) {
            (&Method::POST, ["v1", "token"]) => self.token(&body),
            (&Method::POST, ["v1", "payments"]) => self.create(&body),
            (&Method::POST, ["v1", "payments", id, "approve"]) => self.browser(id, true),
            (&Method::POST, ["v1", "payments", id, "cancel"]) => self.browser(id, false),
            (&Method::POST, ["v1", "payments", id, "execute"]) => {
                self.clone().execute(id, fence.as_deref()).await
            }
            (&Method::POST, ["v1", "payments", id, "void"]) => self.void(id, fence.as_deref()),
            (&Method::GET, ["v1", "payments", id]) => self.query(id),
            (&Method::POST, ["v1", "refunds"]) => self.refund(&body, fence.as_deref()),
            (&Method::PUT, ["_faults"]) => self.set_faults(&body),
            (&Method::GET, ["_faults"]) => (StatusCode::OK, json!(self.faults())),
            (&Method::GET, ["_stats"]) => self.stats(),
            (&Method::GET, ["_payments"]) => {
                let inner = self.inner.lock().expect("mock lock poisoned");
                (
                    StatusCode::OK,
                    json!(inner.payments.values().collect::<Vec<_>>()),
                )
            }
            _ => err(StatusCode::NOT_FOUND, "not_found", "no such route"),
        };
        let answer = match (&method, parts.as_slice()) {
            (&Method::GET, ["v1", "payments", _])
            | (&Method::POST, ["v1", "payments", _, "execute" | "void"]) => {
                super::faults::reported(&self.faults().amount, answer)
            }
            _ => answer,
        };
        respond(answer)
    }
}

pub(super) fn respond((status, body): Answer) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Serve the mock on `listener` until the process ends.
pub async fn serve(mock: Arc<Mock>, listener: TcpListener) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!("gateway accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let mock = mock.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let mock = mock.clone();
                async move { Ok::<_, Infallible>(mock.handle(req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!("gateway connection: {e}");
            }
        });
    }
}
