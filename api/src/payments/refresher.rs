//! The single refresher of the fleet's gateway token: runs on every node,
//! grants only while this node leads the directory. One grant at a time,
//! early (a third of the lifetime left), backing off after a failure; the
//! token is written into the directory for every node to read. A node whose
//! calls see the token refused (401, e.g. the provider restarted) reports
//! it in the directory, and the refresher replaces it at once (at most once
//! per `FORCED_EVERY`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use seatfence_core::{Command, GroupId};
use tokio::sync::watch;

use crate::gateway::token::{self, Backoff, SharedToken, REJECTED_KEY, TOKEN_KEY};

/// Refreshes forced by a refusal are at least this far apart.
const FORCED_EVERY: Duration = Duration::from_secs(30);
use crate::Edge;

pub async fn run(edge: Arc<Edge>, mut rx_stop: watch::Receiver<bool>) {
    let Some(p) = edge.payments.clone() else {
        return;
    };
    let http = reqwest::Client::new();
    let backoff = Backoff::default();
    let tokens = p.tokens.clone();
    let mut last_forced: Option<Instant> = None;
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
        let leads = edge
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
                if let Err(e) = edge.write(GroupId::DIRECTORY, put).await {
                    tracing::warn!("reporting a refused gateway token failed: {e}");
                }
            }
            continue;
        }
        let now = edge.clock.now_ms();
        let refused =
            current.is_some() && (seen == current || tokens.rejected_in_directory() == current);
        let forced = refused && last_forced.is_none_or(|at| at.elapsed() >= FORCED_EVERY);
        if let Some(t) = &stored {
            let lifetime = t.expires_at_ms.saturating_sub(t.granted_at_ms);
            if !token::refresh_due(now, t.expires_at_ms, lifetime) && !forced {
                continue;
            }
        }
        if forced {
            last_forced = Some(Instant::now());
            tracing::warn!("the gateway refused the fleet's token: replacing it now");
        }
        let granted = token::grant(
            &http,
            &p.config.gateway_url,
            &p.config.client_id,
            &p.config.client_secret,
        )
        .await;
        let (access_token, ttl) = match granted {
            Ok(t) => t,
            Err(e) => {
                edge.metrics.inc(|m| &m.token_grant_failures);
                wait = backoff.failed();
                tracing::warn!("gateway token grant failed ({e}); next try in {wait:?}");
                continue;
            }
        };
        backoff.succeeded();
        edge.metrics.inc(|m| &m.token_grants);
        let shared = SharedToken {
            access_token,
            granted_at_ms: now,
            expires_at_ms: now + ttl.as_millis() as u64,
        };
        let put = Command::PutShared {
            key: TOKEN_KEY.into(),
            value: serde_json::to_vec(&shared).expect("tokens serialize"),
        };
        match edge.write(GroupId::DIRECTORY, put).await {
            Ok(w)
                if w.response == seatfence_core::Response::Written { existed: true }
                    || w.response == seatfence_core::Response::Written { existed: false } =>
            {
                tracing::info!("gateway token granted, valid {ttl:?}")
            }
            Ok(w) => tracing::error!("the directory refused the gateway token: {:?}", w.response),
            Err(e) => tracing::warn!("storing the gateway token failed: {e}"),
        }
    }
}
