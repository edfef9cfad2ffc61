//! The `[edge]` section of a node's config ([`EdgeConfig`], checked by its
//! `check`); `[payments]` is `seatfence_payments`' ([`PaymentsConfig`]).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

pub use seatfence_payments::config::PaymentsConfig;
pub use seatfence_raft::secret::Secret;

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
    /// Per-user token bucket: the burst, in requests (the bucket's size); at least 1.
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
    /// stranger cannot take every connection. Default: a sixteenth of
    /// `max_connections` (the smaller of the two applies). Behind a proxy
    /// or load balancer that connects from one address, raise it to
    /// `max_connections` and limit per client there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_ip: Option<usize>,
    /// MiB of request bodies all of this edge's connections together may
    /// hold in memory at once (a body takes its declared length, or its
    /// route's limit when it declares none, before its first byte is read,
    /// and gives it back with its answer); beyond it, 503 `edge_overloaded`
    /// with `Retry-After`. At least 1.
    #[serde(default = "default_body_buffer_mb")]
    pub max_body_buffer_mb: usize,
    /// How buyers' clients reach this edge (an http(s) URL). Answers about
    /// an event name the edge of its group's leader in
    /// `X-Seatfence-Leader-Edge`, so clients can go there directly.
    /// Default: `[payments] public_url`, else `http://` and the address
    /// the edge is bound to (set it when binding a wildcard address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// `[edge.tls]`: serve HTTPS only, with this certificate and key (the
    /// default `public_url` is then `https://`, and a `public_url` must be
    /// one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<EdgeTls>,
}

/// `[edge.tls]`: the edge's certificate (PEM, the chain from the leaf up)
/// and private key (PEM), read at start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeTls {
    /// The certificate chain's file.
    pub cert: std::path::PathBuf,
    /// The private key's file (keep it owner-only).
    pub key: std::path::PathBuf,
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
fn default_body_buffer_mb() -> usize {
    crate::admission::DEFAULT_BODY_BUDGET >> 20
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
/// `request_timeout_ms` when the config names none (also the deadline of
/// a node's payment side when it serves no HTTP).
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 5000;

fn default_timeout() -> u64 {
    DEFAULT_REQUEST_TIMEOUT_MS
}

impl EdgeConfig {
    /// Connections one address may have open: `max_connections_per_ip`,
    /// else a sixteenth of `max_connections` (so a stranger needs sixteen
    /// addresses, or sixteen IPv6 /64s, to take every slot), never more
    /// than `max_connections` and at least 1.
    pub fn connections_per_ip(&self) -> usize {
        self.max_connections_per_ip
            .unwrap_or(self.max_connections / 16)
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
        if let Some(u) = &self.public_url {
            let rest = u
                .strip_prefix("http://")
                .or_else(|| u.strip_prefix("https://"));
            if rest.is_none_or(|r| r.is_empty() || r.chars().any(|c| c.is_whitespace())) {
                return Err(format!("public_url {u:?} is not an http(s) URL"));
            }
            if self.tls.is_some() && !u.starts_with("https://") {
                return Err(format!(
                    "public_url {u:?} must be https:// when [edge.tls] is set (the edge serves only HTTPS)"
                ));
            }
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
        if self.max_body_buffer_mb == 0 {
            return Err("max_body_buffer_mb must be at least 1".into());
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
