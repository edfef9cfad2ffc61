//! The reconciler: the only path that releases a hold with a payment.
//!
//! It runs on every node and acts only for the event groups this node
//! leads (checked before each batch, so it stops when leadership moves).
//! Each sweep takes the holds whose deadline is within the margin or past,
//! most overdue first, in small concurrent batches under a time budget,
//! and asks the gateway about each:
//!
//! | gateway says                  | before the deadline    | at/after the deadline |
//! |-------------------------------|------------------------|-----------------------|
//! | completed                     | confirm                | confirm               |
//! | failed / cancelled            | release                | release               |
//! | approved (callback never came)| intent + execute       | release (no charge)   |
//! | created                       | leave                  | release               |
//! | (no answer)                   | leave                  | extend (≤ 3), then alert |
//!
//! A hold that never got a payment is expired by `apply` at its deadline.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seatfence_core::inventory::{
    Booking, ConfirmPath, Hold, Outcome, PaymentAction, ReleaseReason,
};
use seatfence_core::{BookingId, EventId, GroupId, Query, QueryResult};
use tokio::sync::watch;

use super::{Loaded, Payments};
use crate::error::ApiError;
use crate::gateway::PaymentStatus;
use crate::Edge;

/// Holds looked at per sweep and group, at most.
const SWEEP_LIMIT: u32 = 4096;

pub async fn run(edge: Arc<Edge>, mut rx_stop: watch::Receiver<bool>) {
    let Some(p) = edge.payments.clone() else {
        return;
    };
    let interval = Duration::from_millis(p.config.reconcile_interval_ms);
    // Holds already alerted on by this node (one alert each).
    let mut alerted = HashSet::new();
    loop {
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let mut backlog = 0;
        for (gid, g) in edge.led_event_groups() {
            backlog += sweep(&edge, &p, gid, &g, &mut alerted).await;
        }
        edge.metrics.reconcile_backlog.set(backlog as f64);
    }
}

/// One sweep of one group; returns how many holds were due.
async fn sweep(
    edge: &Edge,
    p: &Payments,
    gid: GroupId,
    g: &seatfence_raft::registry::GroupHandle,
    alerted: &mut HashSet<(GroupId, u64)>,
) -> u64 {
    let started = Instant::now();
    let budget = Duration::from_millis(p.config.reconcile_budget_ms);
    let now = edge.clock.now_ms();
    let (event_id, due) = g.sm.read(|s| {
        let event = s.state.inventory.event.as_ref().map(|e| e.event_id.clone());
        let due = match s.state.query(&Query::DuePayments {
            until_ms: now.saturating_add(p.config.reconcile_margin_ms),
            limit: SWEEP_LIMIT,
        }) {
            QueryResult::DuePayments(d) => d,
            _ => Vec::new(),
        };
        (event, due)
    });
    let Some(event_id) = event_id else {
        return 0;
    };
    let mut oldest_unknown = 0;
    for batch in due.chunks(p.config.reconcile_batch as usize) {
        if started.elapsed() > budget || !g.leads() {
            break;
        }
        let now = edge.clock.now_ms();
        let results = futures::future::join_all(batch.iter().map(|(hold, booking)| {
            reconcile_one(edge, p, loaded(gid, &event_id, hold, booking), now)
        }))
        .await;
        for ((hold, _), r) in batch.iter().zip(results) {
            match r {
                Ok(Verdict::Done) | Ok(Verdict::Left) => {}
                Ok(Verdict::Unknown { exhausted }) => {
                    oldest_unknown = oldest_unknown.max(now.saturating_sub(hold.expires_at_ms));
                    if exhausted && alerted.insert((gid, hold.seq)) {
                        edge.metrics.inc(|m| &m.reconcile_alerts);
                        tracing::error!(
                            group = gid.0, event = %event_id, hold = hold.seq,
                            "ALERT: payment state unknown after {} extensions; hold kept, operator attention needed",
                            seatfence_core::inventory::MAX_EXTENSIONS
                        );
                    }
                }
                Err(e) => tracing::warn!(group = gid.0, hold = hold.seq, "reconcile: {e}"),
            }
        }
    }
    edge.metrics
        .unknown_payment_age
        .set(oldest_unknown as f64 / 1000.0);
    due.len() as u64
}

fn loaded(gid: GroupId, event_id: &EventId, hold: &Hold, booking: &Booking) -> Loaded {
    Loaded {
        id: BookingId {
            group: gid,
            seq: hold.seq,
        },
        event_id: event_id.clone(),
        hold: hold.clone(),
        booking: Some(booking.clone()),
        price: None,
        fence: None,
    }
}

enum Verdict {
    /// Confirmed, released or executed.
    Done,
    /// Nothing to do yet.
    Left,
    /// The gateway could not be asked; `exhausted` when no extension is left.
    Unknown { exhausted: bool },
}

async fn reconcile_one(
    edge: &Edge,
    p: &Payments,
    l: Loaded,
    now: u64,
) -> Result<Verdict, ApiError> {
    let b = l.booking.as_ref().expect("due payments have a booking");
    let payment_id = b.payment.payment_id.clone();
    let past = now >= l.hold.expires_at_ms;
    let release = |reason| PaymentAction::Release {
        hold: l.id.seq,
        payment_id: payment_id.clone(),
        reason,
    };
    let state = match p.gateway.query(&payment_id).await {
        Ok(s) => s,
        Err(e) => {
            edge.metrics.inc(|m| &m.gateway_errors);
            if !past {
                return Ok(Verdict::Left);
            }
            tracing::warn!(booking = %l.id, "gateway query failed at the deadline ({e}): extending, not releasing");
            let extend = PaymentAction::Extend {
                hold: l.id.seq,
                payment_id,
                by_ms: p.config.extension_ms,
            };
            let (reply, _) = edge.payment_command(&l.event_id, extend).await?;
            return Ok(match reply.outcome {
                Outcome::Extended { .. } => {
                    edge.metrics.inc(|m| &m.extensions);
                    Verdict::Unknown { exhausted: false }
                }
                Outcome::ExtensionsExhausted { .. } => Verdict::Unknown { exhausted: true },
                _ => Verdict::Left,
            });
        }
    };
    let reason = match state.status {
        PaymentStatus::Completed => {
            let txn = state.txn_id.unwrap_or_default();
            edge.confirm(&l, &payment_id, &txn, ConfirmPath::Reconciler, None)
                .await?;
            return Ok(Verdict::Done);
        }
        PaymentStatus::Approved if !past => {
            // The buyer approved but the callback never came: finish it.
            edge.execute_and_confirm(&l, true, ConfirmPath::Reconciler)
                .await?;
            return Ok(Verdict::Done);
        }
        s if s.is_dead() => ReleaseReason::PaymentFailed,
        _ if past => ReleaseReason::Unpaid,
        _ => return Ok(Verdict::Left),
    };
    let (reply, _) = edge.payment_command(&l.event_id, release(reason)).await?;
    if let Outcome::Booking(b) = &reply.outcome {
        if b.status == seatfence_core::inventory::BookingStatus::Expired {
            edge.metrics.inc(|m| match reason {
                ReleaseReason::PaymentFailed => &m.released_failed,
                ReleaseReason::Unpaid => &m.released_unpaid,
            });
            tracing::info!(booking = %l.id, ?reason, "hold released by the reconciler");
        }
    }
    Ok(Verdict::Done)
}
