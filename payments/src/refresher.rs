//! The single refresher of the fleet's gateway token: runs on every node,
//! grants only while this node leads the directory. One grant at a time,
//! early (a third of the lifetime left), backing off after a failure; the
//! token is written into the directory for every node to read. A node whose
//! calls see the token refused (401, e.g. the provider restarted) reports
//! it in the directory, and the refresher replaces it at once (at most once
//! per `FORCED_EVERY`).
//!
//! A leader's replica may lag behind what an earlier leader committed, so
//! "is a refresh due?" read locally can be stale. The refresher therefore
//! claims the grant with a compare-and-set on the stored value before it
//! asks the provider, and stores the new token with another against its
//! claim: two leaders in a row that both think a refresh is due spend one
//! of the provider's few grants, not two.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use seatfence_core::{Command, GroupId, Response};
use tokio::sync::watch;

use crate::gateway::token::{self, Backoff, Claim, SharedToken, REJECTED_KEY, TOKEN_KEY};
use crate::Payments;

/// Refreshes forced by a refusal are at least this far apart.
const FORCED_EVERY: Duration = Duration::from_secs(30);

/// A claim older than this is abandoned (its refresher died mid-grant):
/// another may take over.
const CLAIM_TTL_MS: u64 = 30_000;

/// The shared token's slot in the directory, as a refresher sees it.
pub trait TokenStore: Send + Sync {
    /// The stored value (this node's replica: it may lag).
    fn read(&self) -> Option<Vec<u8>>;
    /// Write `value` if the committed value is `expected`; `Ok(false)` when
    /// it was not (nothing written).
    fn put_if(
        &self,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
    ) -> BoxFuture<'_, anyhow::Result<bool>>;
}

struct Directory<'a>(&'a Payments);

impl TokenStore for Directory<'_> {
    fn read(&self) -> Option<Vec<u8>> {
        self.0.tokens.kv(TOKEN_KEY)
    }

    fn put_if(
        &self,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
    ) -> BoxFuture<'_, anyhow::Result<bool>> {
        let cmd = Command::PutSharedIf {
            key: TOKEN_KEY.into(),
            expected,
            value,
        };
        Box::pin(async move {
            match self
                .0
                .commands
                .write(GroupId::DIRECTORY, cmd)
                .await?
                .response
            {
                Response::Written { .. } => Ok(true),
                Response::Changed => Ok(false),
                other => anyhow::bail!("the directory answered {other:?}"),
            }
        })
    }
}

/// What one refresh did.
#[derive(Debug)]
pub enum Refresh {
    /// The stored token has time left.
    NotDue,
    /// Another refresher holds a fresh claim.
    Busy,
    /// The stored value changed under us (another refresher): nothing
    /// granted, or (`granted`) a grant made but not stored.
    Lost {
        /// A grant was made (and spent) before the store was lost.
        granted: bool,
    },
    /// A new token was granted and stored; it lives this long.
    Granted(Duration),
    /// The provider refused or failed the grant (the claim is given back, best effort).
    GrantFailed(anyhow::Error),
    /// The directory could not be written (the claim, or the granted token after every try).
    StoreFailed(anyhow::Error),
}

fn json(t: &SharedToken) -> Vec<u8> {
    serde_json::to_vec(t).expect("tokens serialize")
}

/// One refresh at `now_ms`: claim with a compare-and-set, grant, store the
/// token with a compare-and-set against the claim.
pub async fn refresh_once<G, F>(
    store: &dyn TokenStore,
    me: &str,
    now_ms: u64,
    forced: bool,
    grant: G,
) -> Refresh
where
    G: FnOnce() -> F,
    F: Future<Output = anyhow::Result<(String, Duration)>>,
{
    let raw = store.read();
    let stored: Option<SharedToken> = raw.as_ref().and_then(|v| serde_json::from_slice(v).ok());
    if let Some(t) = &stored {
        if t.claim
            .as_ref()
            .is_some_and(|c| c.by != me && now_ms.saturating_sub(c.at_ms) < CLAIM_TTL_MS)
        {
            return Refresh::Busy;
        }
        let lifetime = t.expires_at_ms.saturating_sub(t.granted_at_ms);
        if !forced && !token::refresh_due(now_ms, t.expires_at_ms, lifetime) {
            return Refresh::NotDue;
        }
    }
    let claimed = SharedToken {
        claim: Some(Claim {
            by: me.to_string(),
            at_ms: now_ms,
        }),
        ..stored.unwrap_or_default()
    };
    let claim = json(&claimed);
    match store.put_if(raw, claim.clone()).await {
        Ok(true) => {}
        Ok(false) => return Refresh::Lost { granted: false },
        Err(e) => return Refresh::StoreFailed(e),
    }
    let (access_token, ttl) = match grant().await {
        Ok(t) => t,
        Err(e) => {
            // Give the slot back so the next try need not wait the claim out.
            let back = SharedToken {
                claim: None,
                ..claimed
            };
            let _ = store.put_if(Some(claim), json(&back)).await;
            return Refresh::GrantFailed(e);
        }
    };
    let fresh = SharedToken {
        access_token,
        granted_at_ms: now_ms,
        expires_at_ms: now_ms + ttl.as_millis() as u64,
        claim: None,
    };
    // The grant is spent: storing it is worth a few tries (a directory
    // leader change right now would otherwise waste it).
    let fresh = json(&fresh);
    let mut last = None;
    for attempt in 0..STORE_TRIES {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
        }
        match store.put_if(Some(claim.clone()), fresh.clone()).await {
            Ok(true) => return Refresh::Granted(ttl),
            Ok(false) => return Refresh::Lost { granted: true },
            Err(e) => last = Some(e),
        }
    }
    Refresh::StoreFailed(last.expect("tried at least once"))
}

/// Tries to store a granted token before giving it up.
const STORE_TRIES: u32 = 4;

/// The refresher loop of this node until `rx_stop` turns true: about once a second (longer
/// after a failed grant), granting only while the node leads the directory.
pub async fn run(p: Arc<Payments>, mut rx_stop: watch::Receiver<bool>) {
    let http = reqwest::Client::new();
    let backoff = Backoff::default();
    let tokens = p.tokens.clone();
    let mut last_forced: Option<Instant> = None;
    // This refresher's name in its claims.
    let me = format!("{:016x}", rand::random::<u64>());
    let mut wait = Duration::from_millis(200);
    loop {
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = Duration::from_secs(1);
        let seen = tokens.take_rejected();
        let stored = tokens.stored();
        let current = stored.as_ref().map(|t| t.access_token.clone());
        let leads = p
            .registry
            .get(GroupId::DIRECTORY)
            .is_some_and(|g| g.leads());
        if !leads {
            // Report a refusal of the current token to the refresher.
            if seen.is_some() && seen == current && tokens.rejected_in_directory() != seen {
                let put = Command::PutShared {
                    key: REJECTED_KEY.into(),
                    value: seen.unwrap_or_default().into_bytes(),
                };
                if let Err(e) = p.commands.write(GroupId::DIRECTORY, put).await {
                    tracing::warn!("reporting a refused gateway token failed: {e}");
                }
            }
            continue;
        }
        let now = p.clock.now_ms();
        let refused =
            current.is_some() && (seen == current || tokens.rejected_in_directory() == current);
        let forced = refused && last_forced.is_none_or(|at| at.elapsed() >= FORCED_EVERY);
        if forced {
            tracing::warn!("the gateway refused the fleet's token: replacing it now");
        }
        let grant = || {
            token::grant(
                &http,
                &p.config.gateway_url,
                &p.config.client_id,
                p.config.client_secret.expose(),
            )
        };
        match refresh_once(&Directory(&p), &me, now, forced, grant).await {
            Refresh::NotDue | Refresh::Busy => {}
            Refresh::Granted(ttl) => {
                if forced {
                    last_forced = Some(Instant::now());
                }
                backoff.succeeded();
                p.metrics.inc(|m| &m.token_grants);
                tracing::info!("gateway token granted, valid {ttl:?}");
            }
            Refresh::Lost { granted } => {
                if granted {
                    p.metrics.inc(|m| &m.token_grants);
                }
                tracing::warn!(granted, "another refresher changed the gateway token first");
            }
            Refresh::GrantFailed(e) => {
                p.metrics.inc(|m| &m.token_grant_failures);
                wait = backoff.failed();
                tracing::warn!("gateway token grant failed ({e}); next try in {wait:?}");
            }
            Refresh::StoreFailed(e) => tracing::warn!("storing the gateway token failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    /// The directory's committed value, read through a replica that may
    /// show an older one.
    struct Fake {
        committed: Mutex<Option<Vec<u8>>>,
        replica: Mutex<Option<Option<Vec<u8>>>>,
    }

    impl TokenStore for Fake {
        fn read(&self) -> Option<Vec<u8>> {
            match self.replica.lock().unwrap().clone() {
                Some(stale) => stale,
                None => self.committed.lock().unwrap().clone(),
            }
        }

        fn put_if(
            &self,
            expected: Option<Vec<u8>>,
            value: Vec<u8>,
        ) -> BoxFuture<'_, anyhow::Result<bool>> {
            let mut c = self.committed.lock().unwrap();
            let ok = *c == expected;
            if ok {
                *c = Some(value);
            }
            Box::pin(async move { Ok(ok) })
        }
    }

    #[tokio::test]
    async fn two_directory_leaders_in_a_row_refresh_the_token_once() {
        let due = json(&SharedToken {
            access_token: "old".into(),
            granted_at_ms: 0,
            expires_at_ms: 3_600_000,
            claim: None,
        });
        let store = Fake {
            committed: Mutex::new(Some(due.clone())),
            replica: Mutex::new(None),
        };
        let grants = AtomicU32::new(0);
        let grant = || async {
            grants.fetch_add(1, Ordering::SeqCst);
            Ok(("new".to_string(), Duration::from_secs(3600)))
        };
        let now = 3_000_000;
        let a = refresh_once(&store, "a", now, false, grant).await;
        assert!(matches!(a, Refresh::Granted(_)), "{a:?}");
        // The next leader's replica has not applied a's token yet.
        *store.replica.lock().unwrap() = Some(Some(due));
        let b = refresh_once(&store, "b", now + 10, false, grant).await;
        assert!(matches!(b, Refresh::Lost { granted: false }), "{b:?}");
        assert_eq!(grants.load(Ordering::SeqCst), 1);
        // Caught up, it sees a fresh token and leaves it.
        *store.replica.lock().unwrap() = None;
        let c = refresh_once(&store, "b", now + 20, false, grant).await;
        assert!(matches!(c, Refresh::NotDue), "{c:?}");
        let t: SharedToken =
            serde_json::from_slice(&store.committed.lock().unwrap().clone().unwrap()).unwrap();
        assert_eq!((t.access_token.as_str(), t.claim), ("new", None));
    }

    #[tokio::test]
    async fn a_failed_grant_gives_the_claim_back() {
        let store = Fake {
            committed: Mutex::new(None),
            replica: Mutex::new(None),
        };
        let failing = || async { anyhow::bail!("429 grant_rate_limited") };
        let r = refresh_once(&store, "a", 1_000, false, failing).await;
        assert!(matches!(r, Refresh::GrantFailed(_)), "{r:?}");
        let ok = || async { Ok(("t".to_string(), Duration::from_secs(60))) };
        let r = refresh_once(&store, "a", 2_000, false, ok).await;
        assert!(
            matches!(r, Refresh::Granted(_)),
            "not blocked by its own claim: {r:?}"
        );
    }
}
