//! The fleet's one gateway access token. The provider grants only a few
//! tokens per hour, so nodes never ask for their own: the directory's
//! leader is the single refresher (one grant at a time, early, backing off
//! after a failure) and writes the token into the directory, where every
//! node reads it from its local replica.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

/// Directory key of the shared token.
pub const TOKEN_KEY: &str = "gateway/token";

/// Directory key of a token some node saw the gateway refuse (401): the
/// refresher replaces it before its time.
pub const REJECTED_KEY: &str = "gateway/token-rejected";

/// Where calls get the current bearer token.
pub trait TokenSource: Send + Sync {
    /// The bearer token to send now; `None` when there is none (or it expired).
    fn current(&self) -> Option<String>;
    /// The gateway refused `token` (401).
    fn reject(&self, _token: &str) {}
}

/// A fixed token (tests, benchmarks, tools).
pub struct StaticToken(pub String);

impl TokenSource for StaticToken {
    fn current(&self) -> Option<String> {
        Some(self.0.clone())
    }
}

/// The token as stored in the directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedToken {
    /// The bearer token itself (empty while only a claim was ever stored).
    pub access_token: String,
    /// When the token was granted, in ms since the Unix epoch (the refresher's clock).
    pub granted_at_ms: u64,
    /// When the token expires, in ms since the Unix epoch (the refresher's clock).
    pub expires_at_ms: u64,
    /// A refresher is asking the provider for the next token (claimed by
    /// a compare-and-set, so two refreshers never both ask).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
}

/// Who claimed the next grant, and when (their clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The claiming refresher's random name (16 hex digits, new at each start).
    pub by: String,
    /// When it claimed, in ms since the Unix epoch.
    pub at_ms: u64,
}

/// Reads the shared token from this node's directory replica, and notes
/// the gateway's refusals of it for the refresher.
pub struct DirectoryToken {
    registry: Arc<seatfence_raft::registry::Registry>,
    clock: Arc<dyn seatfence_raft::clock::Clock>,
    /// A token this node's calls saw refused, not yet reported. Held only
    /// to swap the value, never across `.await`.
    rejected: Mutex<Option<String>>,
}

impl DirectoryToken {
    /// A reader of the token in `registry`'s directory replica; `clock` judges its expiry.
    pub fn new(
        registry: Arc<seatfence_raft::registry::Registry>,
        clock: Arc<dyn seatfence_raft::clock::Clock>,
    ) -> DirectoryToken {
        DirectoryToken {
            registry,
            clock,
            rejected: Mutex::new(None),
        }
    }

    /// `key`'s value in this node's directory replica (it may lag).
    pub fn kv(&self, key: &str) -> Option<Vec<u8>> {
        let dir = self.registry.get(seatfence_core::GroupId::DIRECTORY)?;
        dir.read(|s| s.state.kv().get(key).cloned())
    }

    /// The shared token in this node's directory replica (it may lag); `None` if absent
    /// or unreadable.
    pub fn stored(&self) -> Option<SharedToken> {
        self.kv(TOKEN_KEY)
            .and_then(|v| serde_json::from_slice(&v).ok())
    }

    /// The token a node reported refused, as the directory has it.
    pub fn rejected_in_directory(&self) -> Option<String> {
        self.kv(REJECTED_KEY)
            .and_then(|v| String::from_utf8(v).ok())
    }

    /// A refusal this node saw since the last call.
    pub fn take_rejected(&self) -> Option<String> {
        self.rejected.lock().expect("token lock poisoned").take()
    }
}

impl TokenSource for DirectoryToken {
    fn current(&self) -> Option<String> {
        self.stored()
            .filter(|t| t.expires_at_ms > self.clock.now_ms())
            .map(|t| t.access_token)
    }

    fn reject(&self, token: &str) {
        *self.rejected.lock().expect("token lock poisoned") = Some(token.to_string());
    }
}

/// Ask the gateway for a token: `(access_token, lifetime)`.
pub async fn grant(
    http: &reqwest::Client,
    base: &str,
    client_id: &str,
    client_secret: &str,
) -> anyhow::Result<(String, Duration)> {
    let resp = http
        .post(format!("{}/v1/token", base.trim_end_matches('/')))
        .json(&json!({"client_id": client_id, "client_secret": client_secret}))
        .timeout(Duration::from_secs(5))
        .send()
        .await?;
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    anyhow::ensure!(status.is_success(), "token grant refused: {status} {body}");
    let token = body["access_token"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("token grant without access_token"))?;
    let secs = body["expires_in"].as_u64().unwrap_or(3600);
    Ok((token.to_string(), Duration::from_secs(secs)))
}

/// When to refresh a token that expires at `expires_at_ms`: once a third
/// of a lifetime `ttl_ms` is left.
pub fn refresh_due(now_ms: u64, expires_at_ms: u64, ttl_ms: u64) -> bool {
    expires_at_ms.saturating_sub(now_ms) <= ttl_ms / 3
}

/// Back-off after failed grants: doubles from 1 s up to 5 min.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<u32>,
}

impl Backoff {
    /// Count one more failed grant and return the wait before the next try.
    pub fn failed(&self) -> Duration {
        let mut f = self.failures.lock().expect("backoff lock poisoned");
        *f = (*f + 1).min(10);
        Duration::from_secs((1u64 << (*f - 1)).min(300))
    }

    /// A grant succeeded: the next failure waits 1 s again.
    pub fn succeeded(&self) {
        *self.failures.lock().expect("backoff lock poisoned") = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_early_and_back_off_after_failures() {
        assert!(!refresh_due(0, 3_600_000, 3_600_000));
        assert!(refresh_due(2_400_000, 3_600_000, 3_600_000));
        let b = Backoff::default();
        let waits: Vec<u64> = (0..10).map(|_| b.failed().as_secs()).collect();
        assert_eq!(&waits[..4], &[1, 2, 4, 8]);
        assert_eq!(waits[9], 300);
        b.succeeded();
        assert_eq!(b.failed().as_secs(), 1);
    }
}
