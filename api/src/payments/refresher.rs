//! The single refresher of the fleet's gateway token: runs on every node,
//! acts only while this node leads the directory. One grant at a time,
//! early (a third of the lifetime left), backing off after a failure; the
//! token is written into the directory for every node to read.

use std::sync::Arc;
use std::time::Duration;

use seatfence_core::{Command, GroupId};
use tokio::sync::watch;

use crate::gateway::token::{self, Backoff, DirectoryToken, SharedToken, TOKEN_KEY};
use crate::Edge;

pub async fn run(edge: Arc<Edge>, mut rx_stop: watch::Receiver<bool>) {
    let Some(p) = edge.payments.clone() else {
        return;
    };
    let http = reqwest::Client::new();
    let backoff = Backoff::default();
    let stored = DirectoryToken {
        registry: edge.registry.clone(),
        clock: edge.clock.clone(),
    };
    let mut wait = Duration::from_millis(200);
    loop {
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = Duration::from_secs(1);
        let leads = edge
            .registry
            .get(GroupId::DIRECTORY)
            .is_some_and(|g| g.raft.is_leader());
        if !leads {
            continue;
        }
        let now = edge.clock.now_ms();
        if let Some(t) = stored.stored() {
            let lifetime = t.expires_at_ms.saturating_sub(t.granted_at_ms);
            if !token::refresh_due(now, t.expires_at_ms, lifetime) {
                continue;
            }
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
