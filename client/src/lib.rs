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
//! - **Straight to the leader's edge.** Answers about an event name the
//!   edge on the node leading its group (`X-Seatfence-Leader-Edge`); the
//!   client sends that event's next requests there (one gRPC hop fewer),
//!   only to edges it was given, and drops the hint when that edge fails.
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
//! // or every node's edge from the demo: Client::from_demo(path, "us-east", "alice")
//! let hold = client.hold(&HoldRequest::seats("demo-concert", &["A-1-1"])).await?;
//! println!("{} until {}", hold.body["hold_id"], hold.body["expires_at"]);
//! # Ok(()) }
//! ```

pub mod buyer;
pub mod edges;
pub mod error;
pub mod fence;
pub mod operator;
pub mod retry;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use reqwest::Method;
use serde_json::Value;

pub use buyer::{HoldRequest, Standing};
use edges::{Edges, Scope};
pub use error::{ClientError, ErrorCode};
pub use retry::RetryPolicy;

/// The header an answer about an event names its group leader's edge in.
pub const LEADER_EDGE: &str = "x-seatfence-leader-edge";

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
    /// The URL of the edge that answered.
    pub edge: String,
    /// `X-Seatfence-Leader-Edge`: the edge on the node leading the event's
    /// group, when the answer named one.
    pub leader_edge: Option<String>,
    /// How many attempts the call took.
    pub attempts: u32,
}

impl Answer {
    /// Answered by the edge on the group leader's node (no extra hop),
    /// as far as the answer says.
    pub fn at_leader_edge(&self) -> bool {
        self.leader_edge.as_deref() == Some(self.edge.as_str())
    }
}

/// What a client has done so far (all calls, all attempts).
#[derive(Debug, Default)]
pub struct Stats {
    /// Attempts made.
    pub attempts: AtomicU64,
    /// Answers that named a leader edge, by whether the answering edge was it.
    pub at_leader_edge: AtomicU64,
    pub forwarded: AtomicU64,
    /// Attempts sent where a leader hint pointed.
    pub followed_hints: AtomicU64,
    /// Hints naming an edge the client was not given (not followed).
    pub refused_hints: AtomicU64,
}

/// A client of the edges of one deployment, as one user (its bearer token).
///
/// Cheap to copy for another user ([`Client::as_user`]): the copies share
/// connections, edges, leader hints, fences and counts.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    edges: Arc<Edges>,
    token: String,
    policy: RetryPolicy,
    fences: Arc<fence::Fences>,
    follow_hints: bool,
    stats: Arc<Stats>,
}

/// One logical call.
pub(crate) struct Call<'a> {
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
    pub key: Option<String>,
    /// The event the call is about (its answers' epochs are fenced).
    pub event: Option<&'a str>,
    /// What the call is about, for the leader hints.
    pub scopes: Vec<Scope>,
    /// Extra request headers (`Admission-Ticket`).
    pub headers: Vec<(&'static str, String)>,
    /// Only this edge (a URL the gateway sent the buyer to).
    pub pin: Option<edges::Edge>,
}

impl<'a> Call<'a> {
    pub(crate) fn new(method: Method, path: String) -> Call<'a> {
        Call {
            method,
            path,
            body: None,
            key: None,
            event: None,
            scopes: Vec::new(),
            headers: Vec::new(),
            pin: None,
        }
    }

    /// About `event` (fenced, hinted).
    pub(crate) fn event(mut self, event: &'a str) -> Call<'a> {
        self.event = Some(event);
        self.scopes.push(Scope::Event(event.to_string()));
        self
    }

    /// About the group of this hold or booking id (hinted).
    pub(crate) fn of_id(mut self, id: &str) -> Call<'a> {
        self.scopes.extend(Scope::of_id(id));
        self
    }

    pub(crate) fn body(mut self, body: Value) -> Call<'a> {
        self.body = Some(body);
        self
    }

    /// A mutation: under `key`, or a new one (kept across its attempts).
    pub(crate) fn keyed(mut self, key: Option<&str>) -> Call<'a> {
        self.key = Some(key.map(str::to_string).unwrap_or_else(new_key));
        self
    }
}

impl Client {
    /// A client preferring `home`'s edge among `edges` (region → URL),
    /// sending `token`.
    pub fn new(home: &str, edges: BTreeMap<String, String>, token: &str) -> Client {
        Client::with_edges(Edges::by_region(home, edges), token)
    }

    /// A client of these edges (several per region allowed: give every
    /// node's edge, and the client can follow every leader hint).
    pub fn with_edges(edges: Edges, token: &str) -> Client {
        Client {
            http: reqwest::Client::new(),
            edges: Arc::new(edges),
            token: token.to_string(),
            policy: RetryPolicy::default(),
            fences: Arc::default(),
            follow_hints: true,
            stats: Arc::default(),
        }
    }

    /// The same client calling as another user (`token`): a backend
    /// serving many buyers makes one client and a copy per buyer.
    pub fn as_user(&self, token: &str) -> Client {
        Client {
            token: token.to_string(),
            ..self.clone()
        }
    }

    /// A client of the demo's edges (every node's, from `demo.json` at
    /// `path`), preferring `home`, as `user` (`operator`, `alice`, `bob`).
    pub fn from_demo(path: &Path, home: &str, user: &str) -> Result<Client, ClientError> {
        let bad = |m: String| ClientError::Transport(format!("{}: {m}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let demo: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let token = demo["tokens"][user]
            .as_str()
            .ok_or_else(|| bad(format!("no token for {user}")))?;
        let mut list: Vec<(String, String)> = Vec::new();
        for e in demo["node_edges"].as_array().into_iter().flatten() {
            if let (Some(r), Some(u)) = (e["region"].as_str(), e["url"].as_str()) {
                list.push((r.to_string(), u.to_string()));
            }
        }
        for (r, u) in demo["edges"].as_object().into_iter().flatten() {
            if let Some(u) = u.as_str() {
                list.push((r.clone(), u.to_string()));
            }
        }
        Ok(Client::with_edges(Edges::new(home, list), token))
    }

    /// The same client with another retry budget.
    pub fn with_policy(mut self, policy: RetryPolicy) -> Client {
        self.policy = policy;
        self
    }

    /// Whether to follow leader hints (default yes; off: every request
    /// goes to the preferred region's edge, which forwards it).
    pub fn follow_hints(mut self, on: bool) -> Client {
        self.follow_hints = on;
        self
    }

    /// The epochs seen so far, by event.
    pub fn fences(&self) -> &fence::Fences {
        &self.fences
    }

    /// The edges and the leader hints cached.
    pub fn edges(&self) -> &Edges {
        &self.edges
    }

    /// Counts of attempts and hints.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Attempts of `call` until a final answer or the deadline: each to
    /// the hinted leader's edge or the first of [`Edges::order`], under
    /// the call's one key.
    pub(crate) async fn run(&self, call: Call<'_>) -> Result<Answer, ClientError> {
        let start = Instant::now();
        let deadline = self.policy.deadline;
        let mut attempts = 0u32;
        let scopes: &[Scope] = if self.follow_hints { &call.scopes } else { &[] };
        loop {
            let (edge, hinted) = match &call.pin {
                Some(e) => (e.clone(), false),
                None => self
                    .edges
                    .pick(scopes)
                    .ok_or_else(|| ClientError::Transport("no edges".into()))?,
            };
            attempts += 1;
            self.stats.attempts.fetch_add(1, Ordering::Relaxed);
            if hinted {
                self.stats.followed_hints.fetch_add(1, Ordering::Relaxed);
            }
            let left = deadline.saturating_sub(start.elapsed());
            let (last, retry_after) = match self
                .attempt(&call, &edge.url, left.min(self.policy.attempt_timeout))
                .await
            {
                Ok((status, headers, body)) => {
                    self.edges.mark_up(&edge.url);
                    let leader_edge = header(&headers, LEADER_EDGE);
                    if let Some(url) = &leader_edge {
                        self.learn(scopes, &body, &edge.url, url);
                    }
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
                            region: edge.region,
                            edge: edge.url,
                            leader_edge,
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
                        self.edges.mark_down(&edge.url);
                        self.edges.forget(scopes);
                    }
                    let after = retry::retry_after(header(&headers, "retry-after").as_deref());
                    (err.to_string(), after)
                }
                Err(e) => {
                    self.edges.mark_down(&edge.url);
                    self.edges.forget(scopes);
                    (format!("{} ({}): {e}", edge.url, edge.region), None)
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

    /// An answer from `answered` named `leader` as the leader's edge: keep
    /// it for the call's scopes and the group of any hold or booking id
    /// in the answer; count whether this answer took the extra hop.
    fn learn(&self, scopes: &[Scope], body: &Value, answered: &str, leader: &str) {
        let counter = if leader.trim_end_matches('/') == answered {
            &self.stats.at_leader_edge
        } else {
            &self.stats.forwarded
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if !self.follow_hints {
            return;
        }
        let mut all = scopes.to_vec();
        for field in ["hold_id", "booking_id"] {
            all.extend(body[field].as_str().and_then(Scope::of_id));
        }
        if !self.edges.hint(&all, leader) {
            self.stats.refused_hints.fetch_add(1, Ordering::Relaxed);
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
        for (name, value) in &call.headers {
            req = req.header(*name, value);
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
