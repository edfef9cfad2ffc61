//! The `[payments]` section of a node's config: how the node reaches the
//! payment gateway and runs the payment duties for the groups it leads.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use seatfence_raft::secret::Secret;

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
    /// Reconciler: holds whose deadline falls within this many ms of now are looked at.
    #[serde(default = "default_margin")]
    pub reconcile_margin_ms: u64,
    /// Reconciler: holds reconciled concurrently in one batch (at least 1).
    #[serde(default = "default_batch")]
    pub reconcile_batch: u32,
    /// Reconciler: time budget of one sweep, in ms; no new batch starts past it.
    #[serde(default = "default_budget")]
    pub reconcile_budget_ms: u64,
    /// Reconciler: how far a deadline is pushed back, in ms, when the payment's state is
    /// unknown.
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

    /// Why these settings cannot run (a non-http(s) URL, a webhook secret under 16 bytes, a
    /// timeout or interval under 10 ms, an empty batch), if they cannot.
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
