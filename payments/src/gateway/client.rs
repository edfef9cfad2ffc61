//! [`HttpGateway`]: the gateway client over HTTP (reqwest), with a
//! deadline per call and the fleet's shared bearer token.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use seatfence_core::Fence;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::token::TokenSource;
use super::{CreatePayment, CreatedPayment, Gateway, GatewayError, PaymentState, Refund};

/// The [`Gateway`] over HTTP: every call carries the current bearer token and a deadline.
pub struct HttpGateway {
    http: reqwest::Client,
    base: String,
    timeout: Duration,
    tokens: Arc<dyn TokenSource>,
}

impl HttpGateway {
    /// A client of the gateway at `base` (`http://host:port`); every call
    /// gives up after `timeout`.
    pub fn new(base: &str, timeout: Duration, tokens: Arc<dyn TokenSource>) -> HttpGateway {
        HttpGateway {
            http: reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_secs(30))
                .build()
                .expect("a plain HTTP client always builds"),
            base: base.trim_end_matches('/').to_string(),
            timeout,
            tokens,
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        fence: Option<Fence>,
    ) -> Result<T, GatewayError> {
        let token = self.tokens.current().ok_or(GatewayError::NoToken)?;
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&token)
            .timeout(self.timeout);
        if let Some(f) = fence {
            req = req.header("x-fencing-token", f.to_string());
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(transport)?;
        if status.is_success() {
            return serde_json::from_slice(&bytes)
                .map_err(|e| GatewayError::BadAnswer(format!("{path}: {e}")));
        }
        if status.as_u16() == 401 {
            self.tokens.reject(&token);
        }
        let err: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let code = err["error"]["code"].as_str().unwrap_or("").to_string();
        match code.as_str() {
            "stale_fencing_token" => return Err(GatewayError::StaleFence),
            "already_captured" => return Err(GatewayError::AlreadyCaptured),
            _ => {}
        }
        if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 401 {
            return Err(GatewayError::Unavailable(format!(
                "{path}: {status} {code}"
            )));
        }
        Err(GatewayError::Rejected {
            status: status.as_u16(),
            code,
            message: err["error"]["message"].as_str().unwrap_or("").to_string(),
        })
    }
}

fn transport(e: reqwest::Error) -> GatewayError {
    if e.is_timeout() {
        GatewayError::Timeout
    } else {
        GatewayError::Unavailable(e.to_string())
    }
}

impl Gateway for HttpGateway {
    fn create(&self, req: CreatePayment) -> BoxFuture<'_, Result<CreatedPayment, GatewayError>> {
        let body = serde_json::to_value(req).expect("requests always serialize");
        self.call(reqwest::Method::POST, "/v1/payments", Some(body), None)
            .boxed()
    }

    fn execute<'a>(
        &'a self,
        payment_id: &'a str,
        fence: Fence,
    ) -> BoxFuture<'a, Result<PaymentState, GatewayError>> {
        let path = format!("/v1/payments/{payment_id}/execute");
        async move {
            self.call(reqwest::Method::POST, &path, Some(json!({})), Some(fence))
                .await
        }
        .boxed()
    }

    fn query<'a>(
        &'a self,
        payment_id: &'a str,
    ) -> BoxFuture<'a, Result<PaymentState, GatewayError>> {
        let path = format!("/v1/payments/{payment_id}");
        async move { self.call(reqwest::Method::GET, &path, None, None).await }.boxed()
    }

    fn void<'a>(
        &'a self,
        payment_id: &'a str,
        fence: Fence,
    ) -> BoxFuture<'a, Result<PaymentState, GatewayError>> {
        let path = format!("/v1/payments/{payment_id}/void");
        async move {
            self.call(reqwest::Method::POST, &path, Some(json!({})), Some(fence))
                .await
        }
        .boxed()
    }

    fn refund<'a>(
        &'a self,
        payment_id: &'a str,
        idempotency_key: &'a str,
        fence: Fence,
    ) -> BoxFuture<'a, Result<Refund, GatewayError>> {
        let body = json!({"payment_id": payment_id, "idempotency_key": idempotency_key});
        async move {
            self.call(
                reqwest::Method::POST,
                "/v1/refunds",
                Some(body),
                Some(fence),
            )
            .await
        }
        .boxed()
    }
}
