//! The `[edge]` and `[payments]` sections of a node's config: the HTTP
//! edge ([`EdgeConfig`]) and the payment gateway and workers
//! ([`PaymentsConfig`]), each checked by its own `check`.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::secret::Secret;

/// How the node reaches the payment gateway and runs the payment workers
/// (reconciler, outbox) for the groups it leads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentsConfig {
    /// `http://host:port` of the gateway.
    pub gateway_url: String,
    /// Credentials for the gateway's token grant.
    pub client_id: String,
    /// The value, `env:NAME` or `file:/path` ([`Secret`]), as every secret.
    pub client_secret: Secret,
    /// HMAC secret of the gateway's webhooks (at least 16 bytes).
    pub webhook_secret: Secret,
    /// Base URL of this edge as the gateway and browsers reach it (for
    /// `return_url` and `webhook_url`); default `http://{edge.http_addr}`.
    #[serde(default)]
    pub public_url: Option<String>,
    /// Deadline of one gateway call.
    #[serde(default = "default_call_timeout")]
    pub call_timeout_ms: u64,
    /// Reconciler: time between sweeps, how close to its deadline a hold
    /// is looked at, holds per batch, time budget of one sweep, and how
    /// far a deadline is pushed back when the payment's state is unknown.
    #[serde(default = "default_sweep")]
    pub reconcile_interval_ms: u64,
    #[serde(default = "default_margin")]
    pub reconcile_margin_ms: u64,
    #[serde(default = "default_batch")]
    pub reconcile_batch: u32,
    #[serde(default = "default_budget")]
    pub reconcile_budget_ms: u64,
    #[serde(default = "default_extension")]
    pub extension_ms: u64,
    /// Outbox: time between scans for undelivered items.
    #[serde(default = "default_outbox_interval")]
    pub outbox_interval_ms: u64,
    /// Confirmation emails are written here as `.eml` files (default
    /// `{data_dir}/mail`).
    #[serde(default)]
    pub mail_dir: Option<PathBuf>,
}

fn default_call_timeout() -> u64 {
    2_000
}
fn default_sweep() -> u64 {
    20_000
}
fn default_margin() -> u64 {
    360_000
}
fn default_batch() -> u32 {
    8
}
fn default_budget() -> u64 {
    45_000
}
fn default_extension() -> u64 {
    120_000
}
fn default_outbox_interval() -> u64 {
    1_000
}

/// The HTTP edge every node runs for its region (served by `seatfence-api`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeConfig {
    /// `host:port` the HTTP edge listens on.
    pub http_addr: String,
    /// HS256 secret for bearer tokens (at least 16 bytes; the value,
    /// `env:NAME` or `file:/path`).
    pub jwt_secret: Secret,
    /// Mutations in flight on this edge before it answers 429.
    #[serde(default = "default_inflight")]
    pub max_inflight_mutations: usize,
    /// Every other request in flight (reads, operator calls, the payment
    /// callback and webhook) before it answers 429 `overloaded`; probes
    /// and `/metrics` are never refused.
    #[serde(default = "default_inflight")]
    pub max_inflight_other: usize,
    /// Per-user token bucket: sustained requests per second, and burst.
    #[serde(default = "default_rate")]
    pub user_rate_per_sec: u32,
    #[serde(default = "default_burst")]
    pub user_burst: u32,
    /// Per-address token bucket (an IPv4 address or an IPv6 /64) for the
    /// routes anyone may call without a token: the payment callback and
    /// webhook, the probes and `/metrics`. Sustained requests per second;
    /// the burst is twice that. More answer 429 `rate_limited`.
    #[serde(default = "default_anonymous_rate")]
    pub anonymous_rate_per_ip: u32,
    /// How long a request may look for a leader before 503.
    #[serde(default = "default_timeout")]
    pub request_timeout_ms: u64,
    /// A request's headers must arrive within this, else the connection
    /// is closed.
    #[serde(default = "default_header_timeout")]
    pub header_timeout_ms: u64,
    /// A request's body must arrive within this, else 408
    /// `request_timeout` and the connection is closed.
    #[serde(default = "default_body_timeout")]
    pub body_timeout_ms: u64,
    /// A keep-alive connection with no request for this long is closed
    /// (the header timer also runs between requests, so the smaller of the
    /// two applies).
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_ms: u64,
    /// Open connections this edge serves at once; more are closed on
    /// accept.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Open connections from one address (an IPv4 address, or an IPv6
    /// /64) this edge serves at once; more are closed on accept, so one
    /// stranger cannot take every connection. Default: half of
    /// `max_connections` (the smaller of the two applies). Behind a proxy
    /// or load balancer that connects from one address, raise it to
    /// `max_connections` and limit per client there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_ip: Option<usize>,
}

fn default_header_timeout() -> u64 {
    10_000
}
fn default_body_timeout() -> u64 {
    30_000
}
fn default_idle_timeout() -> u64 {
    60_000
}
fn default_max_connections() -> usize {
    10_000
}

fn default_inflight() -> usize {
    4096
}
fn default_rate() -> u32 {
    20
}
fn default_burst() -> u32 {
    40
}
fn default_anonymous_rate() -> u32 {
    5_000
}
fn default_timeout() -> u64 {
    5000
}

impl EdgeConfig {
    /// Connections one address may have open: `max_connections_per_ip`,
    /// else half of `max_connections`, never more than `max_connections`
    /// and at least 1.
    pub fn connections_per_ip(&self) -> usize {
        self.max_connections_per_ip
            .unwrap_or(self.max_connections / 2)
            .min(self.max_connections)
            .max(1)
    }

    /// Read `env:` and `file:` secrets (at start, before [`check`](Self::check)).
    pub fn resolve_secrets(&mut self) -> Result<(), String> {
        self.jwt_secret = self
            .jwt_secret
            .resolve()
            .map_err(|e| format!("jwt_secret: {e}"))?;
        Ok(())
    }

    /// Why this edge cannot start, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.http_addr.parse::<SocketAddr>().is_err() {
            return Err(format!("http_addr {:?} is not ip:port", self.http_addr));
        }
        if self.jwt_secret.len() < 16 {
            return Err("jwt_secret must be at least 16 bytes".into());
        }
        if self.header_timeout_ms == 0
            || self.body_timeout_ms == 0
            || self.idle_timeout_ms == 0
            || self.max_connections == 0
        {
            return Err(
                "header_timeout_ms, body_timeout_ms, idle_timeout_ms and max_connections must be positive"
                    .into(),
            );
        }
        if self.max_connections_per_ip == Some(0) {
            return Err("max_connections_per_ip must be at least 1".into());
        }
        if self.max_inflight_mutations == 0
            || self.max_inflight_other == 0
            || self.user_rate_per_sec == 0
            || self.user_burst == 0
            || self.anonymous_rate_per_ip == 0
        {
            return Err(
                "max_inflight_mutations, max_inflight_other, user_rate_per_sec and user_burst must be at least 1"
                    .into(),
            );
        }
        if self.request_timeout_ms < 100 {
            return Err("request_timeout_ms must be at least 100".into());
        }
        Ok(())
    }
}

impl PaymentsConfig {
    /// Why these payments settings cannot run, if they cannot.
    /// Read `env:` and `file:` secrets (at start, before [`check`](Self::check)).
    pub fn resolve_secrets(&mut self) -> Result<(), String> {
        self.client_secret =
            (self.client_secret.resolve()).map_err(|e| format!("client_secret: {e}"))?;
        self.webhook_secret =
            (self.webhook_secret.resolve()).map_err(|e| format!("webhook_secret: {e}"))?;
        Ok(())
    }

    pub fn check(&self) -> Result<(), String> {
        let url_ok = |u: &str| u.starts_with("http://") || u.starts_with("https://");
        if !url_ok(&self.gateway_url) || self.public_url.as_deref().is_some_and(|u| !url_ok(u)) {
            return Err("gateway_url and public_url must be http(s) URLs".into());
        }
        if self.webhook_secret.len() < 16 {
            return Err("webhook_secret must be at least 16 bytes".into());
        }
        if self.call_timeout_ms < 10
            || self.reconcile_interval_ms < 10
            || self.reconcile_batch == 0
            || self.reconcile_budget_ms < 10
            || self.extension_ms < 10
            || self.outbox_interval_ms < 10
        {
            return Err(
                "timeouts and intervals must be at least 10 ms, the batch at least 1".into(),
            );
        }
        Ok(())
    }
}
