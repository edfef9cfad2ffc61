//! The mock payment provider (`seatfence gateway`): a real HTTP server with
//! the provider's contract (DESIGN.md §8), fault switches, and counters the
//! tests and drills read (`GET /_stats`, `GET /_payments`).
//!
//! It keeps the promises a real provider keeps and the ones seatfence
//! relies on: the same idempotency key gives the same payment; a payment
//! is captured at most once; a voided payment is never captured, and a
//! void after a capture answers `already_captured`; an execute, void or
//! refund with a fencing token
//! lower than the highest seen for that payment is refused (409
//! `stale_fencing_token`); webhooks are signed; tokens are granted only a
//! few times per hour. State is in memory: restarting the mock forgets it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::StatusCode;
use serde::Serialize;
use serde_json::{json, Value};

use seatfence_payments::gateway::sign;

mod cli;
mod faults;
mod server;

pub use cli::GatewayArgs;
pub use faults::Faults;
pub use server::serve;

/// How the mock is set up.
#[derive(Debug, Clone)]
pub struct MockConfig {
    /// Base URL clients reach it at (for `approve_url`).
    pub public_url: String,
    /// Signs payments (the callback's `signature`).
    pub signing_secret: String,
    /// Signs webhook bodies.
    pub webhook_secret: String,
    pub client_id: String,
    pub client_secret: String,
    pub token_ttl: Duration,
    pub grants_per_hour: u32,
}

#[derive(Debug, Clone, Serialize)]
struct Payment {
    payment_id: String,
    amount_cents: u64,
    currency: String,
    invoice: String,
    idempotency_key: String,
    return_url: String,
    webhook_url: String,
    signature: String,
    status: &'static str,
    txn_id: Option<String>,
    /// Highest fencing token seen for this payment.
    highest_fence: Option<(u64, u64)>,
    captures: u32,
    execute_calls: u32,
    refund_id: Option<String>,
    refunds: u32,
    voids: u32,
}

#[derive(Default)]
struct Inner {
    payments: BTreeMap<String, Payment>,
    by_key: HashMap<String, String>,
    refunds_by_key: HashMap<String, (String, String)>,
    tokens: HashMap<String, Instant>,
    grants: VecDeque<Instant>,
    grants_total: u64,
    webhooks_sent: u64,
    next_id: u64,
    /// Captures waiting in `execute: hold` right now.
    captures_held: u64,
}

/// The mock's shared state. The `std::sync::Mutex` is held only for
/// in-memory updates, never across `.await`.
pub struct Mock {
    config: MockConfig,
    inner: Mutex<Inner>,
    faults: Mutex<Faults>,
    http: reqwest::Client,
}

type Answer = (StatusCode, Value);

fn err(status: StatusCode, code: &str, message: &str) -> Answer {
    (status, json!({"error": {"code": code, "message": message}}))
}

impl Mock {
    pub fn new(config: MockConfig) -> Arc<Mock> {
        Arc::new(Mock {
            config,
            inner: Mutex::new(Inner::default()),
            faults: Mutex::new(Faults::default()),
            http: reqwest::Client::new(),
        })
    }

    fn faults(&self) -> Faults {
        self.faults.lock().expect("faults lock poisoned").clone()
    }

    fn authorized(&self, auth: Option<&str>) -> bool {
        let Some(token) = auth.and_then(|a| a.strip_prefix("Bearer ")) else {
            return false;
        };
        let inner = self.inner.lock().expect("mock lock poisoned");
        inner
            .tokens
            .get(token)
            .is_some_and(|exp| *exp > Instant::now())
    }

    fn token(&self, body: &Bytes) -> Answer {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        if v["client_id"] != self.config.client_id.as_str()
            || v["client_secret"] != self.config.client_secret.as_str()
        {
            return err(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                "unknown client credentials",
            );
        }
        let mut inner = self.inner.lock().expect("mock lock poisoned");
        let hour = Duration::from_secs(3600);
        while inner.grants.front().is_some_and(|t| t.elapsed() > hour) {
            inner.grants.pop_front();
        }
        if inner.grants.len() >= self.config.grants_per_hour as usize {
            return err(
                StatusCode::TOO_MANY_REQUESTS,
                "grant_rate_limited",
                "too many token grants this hour",
            );
        }
        inner.grants.push_back(Instant::now());
        inner.grants_total += 1;
        let token = format!("tok_{:032x}", rand::random::<u128>());
        inner
            .tokens
            .insert(token.clone(), Instant::now() + self.config.token_ttl);
        (
            StatusCode::OK,
            json!({"access_token": token, "expires_in": self.config.token_ttl.as_secs(), "token_type": "Bearer"}),
        )
    }

    fn create(&self, body: &Bytes) -> Answer {
        let req: seatfence_payments::gateway::CreatePayment = match serde_json::from_slice(body) {
            Ok(r) => r,
            Err(e) => return err(StatusCode::BAD_REQUEST, "invalid_request", &e.to_string()),
        };
        if let Some(a) = injected(&self.faults().create, "create") {
            return a;
        }
        let mut inner = self.inner.lock().expect("mock lock poisoned");
        if let Some(id) = inner.by_key.get(&req.idempotency_key) {
            return (StatusCode::CREATED, self.created(&inner.payments[id]));
        }
        inner.next_id += 1;
        let payment_id = format!("PAY-{:06}-{:08x}", inner.next_id, rand::random::<u32>());
        let p = Payment {
            signature: sign::sign(&self.config.signing_secret, payment_id.as_bytes()),
            payment_id: payment_id.clone(),
            amount_cents: req.amount_cents,
            currency: req.currency,
            invoice: req.invoice,
            idempotency_key: req.idempotency_key.clone(),
            return_url: req.return_url,
            webhook_url: req.webhook_url,
            status: "created",
            txn_id: None,
            highest_fence: None,
            captures: 0,
            execute_calls: 0,
            refund_id: None,
            refunds: 0,
            voids: 0,
        };
        let answer = self.created(&p);
        inner.by_key.insert(req.idempotency_key, payment_id.clone());
        inner.payments.insert(payment_id, p);
        (StatusCode::CREATED, answer)
    }

    fn created(&self, p: &Payment) -> Value {
        json!({
            "payment_id": p.payment_id,
            "signature": p.signature,
            "approve_url": format!("{}/v1/payments/{}/approve", self.config.public_url, p.payment_id),
        })
    }

    /// The buyer approves or cancels on the gateway's page.
    fn browser(&self, id: &str, approve: bool) -> Answer {
        let mut inner = self.inner.lock().expect("mock lock poisoned");
        let Some(p) = inner.payments.get_mut(id) else {
            return no_payment();
        };
        match (p.status, approve) {
            ("created" | "approved", true) => p.status = "approved",
            ("created" | "approved", false) => p.status = "cancelled",
            (s, _) => {
                return err(
                    StatusCode::CONFLICT,
                    "invalid_state",
                    &format!("payment is {s}"),
                )
            }
        }
        let sep = if p.return_url.contains('?') { '&' } else { '?' };
        let status = if approve { "success" } else { "cancel" };
        let redirect = format!(
            "{}{sep}paymentID={}&status={status}&signature={}",
            p.return_url, p.payment_id, p.signature
        );
        (StatusCode::OK, json!({"redirect": redirect}))
    }

    /// Check and record a fencing token for a payment.
    fn fence(p: &mut Payment, token: Option<&str>) -> Result<(u64, u64), Answer> {
        let parsed = token.and_then(|t| {
            let (e, t) = t.split_once('.')?;
            Some((e.parse::<u64>().ok()?, t.parse::<u64>().ok()?))
        });
        let Some(f) = parsed else {
            return Err(err(
                StatusCode::BAD_REQUEST,
                "fencing_token_required",
                "X-Fencing-Token: {epoch}.{term} is required",
            ));
        };
        if p.highest_fence.is_some_and(|h| f < h) {
            return Err(err(
                StatusCode::CONFLICT,
                "stale_fencing_token",
                "a newer fencing token was seen for this payment",
            ));
        }
        p.highest_fence = Some(f);
        Ok(f)
    }

    async fn execute(self: Arc<Mock>, id: &str, token: Option<&str>) -> Answer {
        let fence = {
            let mut inner = self.inner.lock().expect("mock lock poisoned");
            let Some(p) = inner.payments.get_mut(id) else {
                return no_payment();
            };
            let fence = match Self::fence(p, token) {
                Ok(f) => f,
                Err(a) => return a,
            };
            p.execute_calls += 1;
            match p.status {
                "approved" => {}
                "voided" => {
                    return err(
                        StatusCode::CONFLICT,
                        "payment_voided",
                        "the payment was voided: it can no longer be captured",
                    )
                }
                "completed" | "failed" | "cancelled" => return (StatusCode::OK, state(p)),
                s => {
                    return err(
                        StatusCode::CONFLICT,
                        "not_approved",
                        &format!("payment is {s}"),
                    )
                }
            }
            fence
        };
        // The capture runs on its own task: a caller that gives up (a
        // timeout, a killed node) does not stop it, as with a real provider.
        let id = id.to_string();
        let task = tokio::spawn(self.clone().capture(id, fence));
        task.await.unwrap_or_else(|_| {
            err(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "capture task failed",
            )
        })
    }

    async fn capture(self: Arc<Mock>, id: String, fence: (u64, u64)) -> Answer {
        let mode = self.faults().execute;
        if mode == "hold" {
            self.inner.lock().expect("mock lock poisoned").captures_held += 1;
            while self.faults().execute == "hold" {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let answer = self.clone().capture_now(&id, fence, &mode).await;
        if mode == "hold" {
            self.inner.lock().expect("mock lock poisoned").captures_held -= 1;
        }
        answer
    }

    async fn capture_now(self: Arc<Mock>, id: &str, fence: (u64, u64), mode: &str) -> Answer {
        let (answer, webhook) = {
            let mut inner = self.inner.lock().expect("mock lock poisoned");
            let p = inner
                .payments
                .get_mut(id)
                .expect("payments are never removed");
            // Checked again at capture: a newer leader may have come meanwhile.
            if p.highest_fence.is_some_and(|h| fence < h) {
                return err(
                    StatusCode::CONFLICT,
                    "stale_fencing_token",
                    "a newer fencing token was seen for this payment",
                );
            }
            if p.status != "approved" {
                return (StatusCode::OK, state(p));
            }
            if mode == "fail" {
                p.status = "failed";
                return (StatusCode::OK, state(p));
            }
            p.status = "completed";
            p.captures += 1;
            p.txn_id = Some(format!("TXN-{:016x}", rand::random::<u64>()));
            (state(p), p.clone())
        };
        self.clone().send_webhook(webhook);
        if mode == "timeout" {
            tokio::time::sleep(Duration::from_millis(self.faults().timeout_ms)).await;
        }
        (StatusCode::OK, answer)
    }

    fn query(&self, id: &str) -> Answer {
        if let Some(a) = injected(&self.faults().query, "query") {
            return a;
        }
        let inner = self.inner.lock().expect("mock lock poisoned");
        match inner.payments.get(id) {
            Some(p) => (StatusCode::OK, state(p)),
            None => no_payment(),
        }
    }

    /// Void: an uncaptured payment can never be captured from here on (a
    /// capture still held in `execute` finds it voided); a captured one
    /// answers 409 `already_captured`.
    fn void(&self, id: &str, token: Option<&str>) -> Answer {
        let mode = self.faults().void;
        if let Some(a) = injected(&mode, "void") {
            return a;
        }
        let mut inner = self.inner.lock().expect("mock lock poisoned");
        let Some(p) = inner.payments.get_mut(id) else {
            return no_payment();
        };
        if let Err(a) = Self::fence(p, token) {
            return a;
        }
        match (p.status, mode.as_str()) {
            ("approved", "lose") if p.execute_calls > 0 => {
                p.status = "completed";
                p.captures += 1;
                p.txn_id = Some(format!("TXN-{:016x}", rand::random::<u64>()));
                return err(
                    StatusCode::CONFLICT,
                    "already_captured",
                    "the payment was captured: refund it instead",
                );
            }
            ("created" | "approved", "ignore") => {
                let mut answer = state(p);
                answer["status"] = json!("voided");
                return (StatusCode::OK, answer);
            }
            ("created" | "approved", _) => {
                p.status = "voided";
                p.voids += 1;
            }
            ("completed", _) => {
                return err(
                    StatusCode::CONFLICT,
                    "already_captured",
                    "the payment was captured: refund it instead",
                )
            }
            _ => {}
        }
        (StatusCode::OK, state(p))
    }

    fn refund(&self, body: &Bytes, token: Option<&str>) -> Answer {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let (Some(id), Some(key)) = (v["payment_id"].as_str(), v["idempotency_key"].as_str())
        else {
            return err(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "payment_id and idempotency_key are required",
            );
        };
        if let Some(a) = injected(&self.faults().refund, "refund") {
            return a;
        }
        let mut inner = self.inner.lock().expect("mock lock poisoned");
        if let Some((pid, rid)) = inner.refunds_by_key.get(key) {
            if pid == id {
                return (
                    StatusCode::OK,
                    json!({"refund_id": rid, "status": "refunded"}),
                );
            }
            return err(
                StatusCode::CONFLICT,
                "idempotency_key_reused",
                "key used for another payment",
            );
        }
        let Some(p) = inner.payments.get_mut(id) else {
            return no_payment();
        };
        if let Err(a) = Self::fence(p, token) {
            return a;
        }
        if p.status != "completed" {
            return err(
                StatusCode::CONFLICT,
                "not_completed",
                "only a completed payment is refunded",
            );
        }
        if p.refund_id.is_some() {
            return err(
                StatusCode::CONFLICT,
                "already_refunded",
                "payment already refunded under another key",
            );
        }
        let rid = format!("REF-{:012x}", rand::random::<u64>() >> 16);
        p.refund_id = Some(rid.clone());
        p.refunds += 1;
        inner
            .refunds_by_key
            .insert(key.to_string(), (id.to_string(), rid.clone()));
        (
            StatusCode::OK,
            json!({"refund_id": rid, "status": "refunded"}),
        )
    }

    fn stats(&self) -> Answer {
        let inner = self.inner.lock().expect("mock lock poisoned");
        let captures: u64 = inner.payments.values().map(|p| u64::from(p.captures)).sum();
        let executes: u64 = inner
            .payments
            .values()
            .map(|p| u64::from(p.execute_calls))
            .sum();
        let refunds: u64 = inner.payments.values().map(|p| u64::from(p.refunds)).sum();
        let voids: u64 = inner.payments.values().map(|p| u64::from(p.voids)).sum();
        (
            StatusCode::OK,
            json!({
                "payments": inner.payments.len(),
                "captures": captures,
                "execute_calls": executes,
                "refunds": refunds,
                "voids": voids,
                "captures_held": inner.captures_held,
                "token_grants": inner.grants_total,
                "webhooks_sent": inner.webhooks_sent,
            }),
        )
    }

    /// Deliver `payment.completed` as the webhook switch says, retrying
    /// failed deliveries a few times like a real provider.
    fn send_webhook(self: Arc<Mock>, p: Payment) {
        let faults = self.faults();
        let copies = match faults.webhook.as_str() {
            "drop" => return,
            "duplicate" => 2,
            _ => 1,
        };
        let delay = if faults.webhook == "delay" {
            Duration::from_millis(faults.webhook_delay_ms)
        } else {
            Duration::ZERO
        };
        let body = json!({
            "id": format!("EVT-{:016x}", rand::random::<u64>()),
            "type": "payment.completed",
            "payment_id": p.payment_id,
            "invoice": p.invoice,
            "txn_id": p.txn_id,
            "amount_cents": p.amount_cents,
            "currency": p.currency,
        });
        let bytes = serde_json::to_vec(&body).expect("json serializes");
        let header = sign::webhook_header(&self.config.webhook_secret, &bytes);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            for _ in 0..copies {
                for attempt in 0..5u32 {
                    let sent = self
                        .http
                        .post(&p.webhook_url)
                        .header("content-type", "application/json")
                        .header("x-gateway-signature", &header)
                        .body(bytes.clone())
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await;
                    if sent.is_ok_and(|r| r.status().is_success()) {
                        self.inner.lock().expect("mock lock poisoned").webhooks_sent += 1;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                }
            }
        });
    }
}

/// The 500 a switch set to `error` injects.
fn injected(switch: &str, call: &str) -> Option<Answer> {
    (switch == "error").then(|| {
        err(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &format!("injected {call} failure"),
        )
    })
}

fn no_payment() -> Answer {
    err(
        StatusCode::NOT_FOUND,
        "payment_not_found",
        "no such payment",
    )
}

fn state(p: &Payment) -> Value {
    json!({
        "payment_id": p.payment_id,
        "status": p.status,
        "txn_id": p.txn_id,
        "invoice": p.invoice,
        "amount_cents": p.amount_cents,
        "currency": p.currency,
        "refund_id": p.refund_id,
    })
}
