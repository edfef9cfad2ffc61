//! `seatfence-client`: a client of seatfence's regional HTTP API
//! (docs/DESIGN.md §7) for the booking backends that call `/v1/*`.
//!
//! - **Safe retries.** Every mutation carries an `Idempotency-Key` made once
//!   per logical call and kept across all its attempts, so a retry can
//!   never apply it twice; reads are retried freely. Only answers that did
//!   not decide anything are retried ([`ErrorCode::is_retryable`]: 429,
//!   503, 408, a key still in progress), after an exponential backoff with
//!   full jitter and never sooner than `Retry-After`, within the call's
//!   deadline ([`RetryPolicy`]). A decided "no" (409 `seats_unavailable`,
//!   say) is returned at once.
//! - **Regional failover.** Given the edges by region, the client prefers
//!   its own region's and moves to another's when it stops answering or
//!   says `no_leader`/`overloaded`, coming back once the mark expires
//!   ([`edges::Edges`]).
//! - **Fences.** The highest epoch seen of each event is remembered; an
//!   answer carrying an older one came from a former owner and is refused
//!   ([`ClientError::StaleEpoch`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), seatfence_client::ClientError> {
//! use seatfence_client::{Client, HoldRequest};
//! let edges = [("us-east", "http://127.0.0.1:8080"), ("eu-west", "http://127.0.0.1:8081")]
//!     .into_iter()
//!     .map(|(r, u)| (r.to_string(), u.to_string()))
//!     .collect();
//! let client = Client::new("us-east", edges, "BEARER-TOKEN");
//! let hold = client.hold(&HoldRequest::seats("demo-concert", &["A-1-1"])).await?;
//! println!("{} until {}", hold.body["hold_id"], hold.body["expires_at"]);
//! # Ok(()) }
//! ```

pub mod edges;
pub mod error;
pub mod fence;
pub mod retry;

use std::collections::BTreeMap;
use std::time::Instant;

use reqwest::Method;
use serde_json::{json, Value};

pub use error::{ClientError, ErrorCode};
pub use retry::RetryPolicy;

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    /// The answer came from the key's record (`Idempotent-Replayed`): an
    /// earlier attempt of this call, or an earlier call under its key.
    pub replayed: bool,
    /// `X-Seatfence-Epoch`, on mutations.
    pub epoch: Option<u64>,
    /// `X-Request-Id`: quote it when reporting a problem.
    pub request_id: Option<String>,
    /// The region whose edge answered.
    pub region: String,
    /// How many attempts the call took.
    pub attempts: u32,
}

/// A hold to ask for: seats by id, or a quantity (in a section).
#[derive(Debug, Clone)]
pub struct HoldRequest {
    pub event_id: String,
    pub seats: Option<Vec<String>>,
    pub section: Option<String>,
    pub quantity: Option<u32>,
    /// The call's Idempotency-Key; one is made when `None`. Give your own
    /// to make a retry across processes (after a crash) the same call.
    pub key: Option<String>,
}

impl HoldRequest {
    /// These seats, all or none.
    pub fn seats(event_id: &str, seats: &[&str]) -> HoldRequest {
        HoldRequest {
            event_id: event_id.to_string(),
            seats: Some(seats.iter().map(|s| s.to_string()).collect()),
            section: None,
            quantity: None,
            key: None,
        }
    }

    /// Any `quantity` free seats (of `section`, when given).
    pub fn quantity(event_id: &str, section: Option<&str>, quantity: u32) -> HoldRequest {
        HoldRequest {
            event_id: event_id.to_string(),
            seats: None,
            section: section.map(str::to_string),
            quantity: Some(quantity),
            key: None,
        }
    }

    /// Under this Idempotency-Key.
    pub fn with_key(mut self, key: &str) -> HoldRequest {
        self.key = Some(key.to_string());
        self
    }
}

/// A client of the edges of one deployment, as one user (its bearer token).
pub struct Client {
    http: reqwest::Client,
    edges: edges::Edges,
    token: String,
    policy: RetryPolicy,
    fences: fence::Fences,
}

/// One logical call.
struct Call<'a> {
    method: Method,
    path: String,
    body: Option<Value>,
    key: Option<String>,
    /// The event the call is about (its answers' epochs are fenced).
    event: Option<&'a str>,
}

impl Client {
    /// A client preferring `home`'s edge among `edges` (region → URL),
    /// sending `token`.
    pub fn new(home: &str, edges: BTreeMap<String, String>, token: &str) -> Client {
        Client {
            http: reqwest::Client::new(),
            edges: edges::Edges::new(home, edges),
            token: token.to_string(),
            policy: RetryPolicy::default(),
            fences: fence::Fences::default(),
        }
    }

    /// The same client with another retry budget.
    pub fn with_policy(mut self, policy: RetryPolicy) -> Client {
        self.policy = policy;
        self
    }

    /// The epochs seen so far, by event.
    pub fn fences(&self) -> &fence::Fences {
        &self.fences
    }

    /// `GET /v1/events/{id}`.
    pub async fn event(&self, event_id: &str) -> Result<Answer, ClientError> {
        self.get(format!("/v1/events/{event_id}"), Some(event_id))
            .await
    }

    /// `GET /v1/events/{id}/availability?limit=N`.
    pub async fn availability(&self, event_id: &str, limit: u32) -> Result<Answer, ClientError> {
        self.get(
            format!("/v1/events/{event_id}/availability?limit={limit}"),
            Some(event_id),
        )
        .await
    }

    /// `POST /v1/holds`: 201 with the hold.
    pub async fn hold(&self, req: &HoldRequest) -> Result<Answer, ClientError> {
        let mut body = json!({"event_id": req.event_id});
        if let Some(seats) = &req.seats {
            body["seats"] = json!(seats);
        }
        if let Some(section) = &req.section {
            body["section"] = json!(section);
        }
        if let Some(q) = req.quantity {
            body["quantity"] = json!(q);
        }
        self.run(Call {
            method: Method::POST,
            path: "/v1/holds".into(),
            body: Some(body),
            key: Some(req.key.clone().unwrap_or_else(new_key)),
            event: Some(&req.event_id),
        })
        .await
    }

    /// `GET /v1/holds/{id}` (the caller's own).
    pub async fn get_hold(&self, hold_id: &str) -> Result<Answer, ClientError> {
        self.get(format!("/v1/holds/{hold_id}"), None).await
    }

    /// `DELETE /v1/holds/{id}`: the hold `released` (or `expired`).
    pub async fn cancel_hold(&self, hold_id: &str) -> Result<Answer, ClientError> {
        self.run(Call {
            method: Method::DELETE,
            path: format!("/v1/holds/{hold_id}"),
            body: None,
            key: Some(new_key()),
            event: None,
        })
        .await
    }

    /// `POST /v1/bookings`: 201 with the booking (`pending`, `approve_url`).
    pub async fn book(&self, hold_id: &str) -> Result<Answer, ClientError> {
        self.run(Call {
            method: Method::POST,
            path: "/v1/bookings".into(),
            body: Some(json!({"hold_id": hold_id})),
            key: Some(new_key()),
            event: None,
        })
        .await
    }

    /// `GET /v1/bookings/{id}` (the caller's own).
    pub async fn booking(&self, booking_id: &str) -> Result<Answer, ClientError> {
        self.get(format!("/v1/bookings/{booking_id}"), None).await
    }

    async fn get(&self, path: String, event: Option<&str>) -> Result<Answer, ClientError> {
        self.run(Call {
            method: Method::GET,
            path,
            body: None,
            key: None,
            event,
        })
        .await
    }

    /// Attempts of `call` until a final answer or the deadline: each to
    /// the first edge of [`edges::Edges::order`], under the call's one key.
    async fn run(&self, call: Call<'_>) -> Result<Answer, ClientError> {
        let start = Instant::now();
        let deadline = self.policy.deadline;
        let mut attempts = 0u32;
        loop {
            let (region, url) = self
                .edges
                .order()
                .into_iter()
                .next()
                .ok_or_else(|| ClientError::Transport("no edges".into()))?;
            attempts += 1;
            let left = deadline.saturating_sub(start.elapsed());
            let (last, retry_after) = match self
                .attempt(&call, &url, left.min(self.policy.attempt_timeout))
                .await
            {
                Ok((status, headers, body)) => {
                    self.edges.mark_up(&region);
                    let epoch = header(&headers, "x-seatfence-epoch").and_then(|v| v.parse().ok());
                    if let (Some(event), Some(epoch)) = (call.event, epoch) {
                        self.fences.observe(event, epoch)?;
                    }
                    if (200..300).contains(&status) {
                        return Ok(Answer {
                            status,
                            body,
                            replayed: header(&headers, "idempotent-replayed").as_deref()
                                == Some("true"),
                            epoch,
                            request_id: header(&headers, "x-request-id"),
                            region,
                            attempts,
                        });
                    }
                    let code = ErrorCode::parse(body["error"]["code"].as_str().unwrap_or(""));
                    let err = ClientError::Api {
                        status,
                        message: body["error"]["message"].as_str().unwrap_or("").to_string(),
                        code: code.clone(),
                        body,
                    };
                    if !code.is_retryable() {
                        return Err(err);
                    }
                    if code.moves_region() {
                        self.edges.mark_down(&region);
                    }
                    let after = retry::retry_after(header(&headers, "retry-after").as_deref());
                    (err.to_string(), after)
                }
                Err(e) => {
                    self.edges.mark_down(&region);
                    (format!("{region}: {e}"), None)
                }
            };
            let wait = self.policy.wait(attempts - 1, retry_after);
            if start.elapsed() + wait >= deadline {
                return Err(ClientError::Deadline {
                    deadline,
                    attempts,
                    last,
                });
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// One attempt at `url`: the answer's status, headers and JSON body.
    async fn attempt(
        &self,
        call: &Call<'_>,
        url: &str,
        timeout: std::time::Duration,
    ) -> Result<(u16, reqwest::header::HeaderMap, Value), reqwest::Error> {
        let mut req = self
            .http
            .request(call.method.clone(), format!("{url}{}", call.path))
            .bearer_auth(&self.token)
            .timeout(timeout);
        if let Some(key) = &call.key {
            req = req.header("idempotency-key", key);
        }
        if let Some(body) = &call.body {
            req = req.json(body);
        }
        let resp = req.send().await?;
        let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
        let bytes = resp.bytes().await?;
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok((status, headers, body))
    }
}

/// A header's value as text.
fn header(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A new Idempotency-Key: `sfc-` and 128 random bits.
fn new_key() -> String {
    format!("sfc-{:032x}", rand::random::<u128>())
}
