//! The reconciler: the only path that releases a hold with a payment.
//!
//! A sweep ([`sweep`]) is a pass over one event group this node leads
//! (checked before each batch, so it stops when leadership moves),
//! scheduled per group by `seatfence-duties` every `reconcile_interval_ms`.
//! Each sweep takes the holds whose deadline is within the margin or past,
//! most overdue first, and the released bookings still unsettled (going
//! round them from where the last sweep stopped), one of each in turn
//! (`plan`), in small concurrent batches under a time budget, and asks the
//! gateway about each:
//!
//! | gateway says                  | before the deadline    | at/after the deadline |
//! |-------------------------------|------------------------|-----------------------|
//! | completed (the booking's amount and currency) | confirm | confirm        |
//! | completed (another amount, or none) | alert, keep      | alert, keep           |
//! | failed / cancelled / voided   | release                | release               |
//! | approved (callback never came)| intent + execute       | void, then release    |
//! | created                       | leave                  | void, then release    |
//! | (no answer)                   | leave                  | extend (≤ 3), then alert and keep |
//!
//! "Void" commits a void intent (no execute is granted after it) and asks
//! the gateway to void the payment with that commit's fence: only
//! `voided` (or failed / cancelled) releases the seats; `already_captured`
//! confirms; no answer extends, then alerts and keeps the seats. A
//! released booking stays *unsettled* and is asked about again until the
//! gateway calls it terminal (`Settle`) or reports a capture, which
//! confirms into `refund_pending` and the outbox refunds it.
//!
//! A hold that never got a payment is expired by `apply` at its deadline.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use seatfence_core::inventory::{
    Booking, BookingStatus, ConfirmPath, Hold, Outcome, PaymentAction, ReleaseReason,
};
use seatfence_core::{BookingId, EventId, GroupId, Query, QueryResult};

use crate::gateway::{GatewayError, PaymentState, PaymentStatus};
use crate::{Loaded, PaymentError, Payments};

/// Holds looked at per sweep and group, at most.
const SWEEP_LIMIT: u32 = 4096;

/// Holds remembered as alerted on (one alert each); past this many the
/// memory starts over, so a long outage cannot grow it without bound.
const ALERTED_MAX: usize = 10_000;

/// What the reconciler keeps between sweeps of one group, in memory (a
/// new leader simply starts over).
#[derive(Debug, Default)]
pub struct Memory {
    /// Holds whose payment stayed unknown, alerted on (once each).
    alerted: HashSet<u64>,
    /// Holds whose completed payment names another amount, alerted on
    /// (once each).
    mismatched: HashSet<u64>,
    /// The last unsettled booking visited: the next sweep goes on after it.
    unsettled_after: u64,
}

/// What one sweep of one group saw, for the node's gauges (summed, or the
/// largest, over the groups the node leads).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    /// Payments the sweep had to visit (due holds and unsettled bookings).
    pub visits: u64,
    /// Released bookings not yet known to be terminal at the gateway.
    pub unsettled: u64,
    /// Captured payments neither booked nor refunded yet.
    pub captured_unbooked: u64,
    /// How far past its deadline the oldest undecided payment is.
    pub oldest_unknown_ms: u64,
}

/// Which payments one sweep visits, in order: the due holds (most overdue
/// first) and the released bookings still unsettled, one of each in turn.
/// The budget may end the pass anywhere; up to there each kind had half
/// of it (all of it once the other has none left), so a busy sale's due
/// payments never starve the watch of released ones.
fn plan<T>(due: Vec<T>, unsettled: Vec<T>) -> Vec<T> {
    let mut visits = Vec::with_capacity(due.len() + unsettled.len());
    let (mut due, mut unsettled) = (due.into_iter(), unsettled.into_iter());
    loop {
        match (due.next(), unsettled.next()) {
            (None, None) => return visits,
            (a, b) => visits.extend(a.into_iter().chain(b)),
        }
    }
}

/// One sweep of one group this node leads (it stops early when the
/// leadership moves, or at the budget).
pub async fn sweep(
    p: &Payments,
    gid: GroupId,
    g: &seatfence_raft::registry::GroupHandle,
    memory: &mut Memory,
) -> SweepReport {
    let started = Instant::now();
    let budget = Duration::from_millis(p.config.reconcile_budget_ms);
    let now = p.clock.now_ms();
    let after = memory.unsettled_after;
    let (event_id, due, unsettled, counts) = g.read(|s| {
        let inv = s.state.inventory();
        let event = inv.event().map(|e| e.event_id.clone());
        let due = match s.state.query(&Query::DuePayments {
            until_ms: now.saturating_add(p.config.reconcile_margin_ms),
            limit: SWEEP_LIMIT,
        }) {
            QueryResult::DuePayments(d) => d,
            _ => Vec::new(),
        };
        let unsettled = inv.unsettled_after(after, SWEEP_LIMIT as usize);
        let counts = (inv.index().unsettled.len(), inv.refunds_pending());
        (event, due, unsettled, counts)
    });
    let mut report = SweepReport {
        unsettled: counts.0 as u64,
        captured_unbooked: counts.1 as u64,
        ..SweepReport::default()
    };
    let Some(event_id) = event_id else {
        return report;
    };
    let (due_count, unsettled_count) = (due.len(), unsettled.len());
    // Payments the gateway reported for another amount wait for an
    // operator: asked again only after every other due payment, so they
    // never take the due half of each sweep from the rest for good.
    let mut due = due;
    due.sort_by_key(|(hold, _)| memory.mismatched.contains(&hold.seq));
    let plan = plan(due, unsettled);
    let mut oldest_unknown = 0;
    let mut last_unsettled = None;
    for batch in plan.chunks(p.config.reconcile_batch.max(1) as usize) {
        if started.elapsed() > budget || !g.leads() {
            break;
        }
        let now = p.clock.now_ms();
        let results =
            futures::future::join_all(batch.iter().map(|(hold, booking)| {
                reconcile_one(p, loaded(gid, &event_id, hold, booking), now)
            }))
            .await;
        for ((hold, booking), r) in batch.iter().zip(results) {
            if booking.unsettled() {
                last_unsettled = Some(hold.seq);
            }
            match r {
                Ok(Verdict::Done) | Ok(Verdict::Left) => {}
                Ok(Verdict::Mismatch(m)) => {
                    if memory.mismatched.len() >= ALERTED_MAX {
                        memory.mismatched.clear();
                    }
                    if memory.mismatched.insert(hold.seq) {
                        let l = loaded(gid, &event_id, hold, booking);
                        p.amount_alert(&l, ConfirmPath::Reconciler, &m);
                    }
                }
                Ok(Verdict::Unknown { .. }) if booking.unsettled() => {
                    // Released already: counted in `payments_unsettled`.
                }
                Ok(Verdict::Unknown { exhausted }) => {
                    oldest_unknown = oldest_unknown.max(now.saturating_sub(hold.expires_at_ms));
                    if exhausted && memory.alerted.len() >= ALERTED_MAX {
                        memory.alerted.clear();
                    }
                    if exhausted && memory.alerted.insert(hold.seq) {
                        p.metrics.inc(|m| &m.reconcile_alerts);
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
    if let Some(seq) = last_unsettled {
        memory.unsettled_after = seq;
    }
    report.visits = (due_count + unsettled_count) as u64;
    report.oldest_unknown_ms = oldest_unknown;
    report
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
    /// The gateway says completed, but not for the booking's amount and
    /// currency (or without them): nothing is committed, the seats stay
    /// held, an operator is alerted.
    Mismatch(super::amount::AmountMismatch),
    /// Nothing to do yet.
    Left,
    /// The gateway could not be asked; `exhausted` when no extension is left.
    Unknown { exhausted: bool },
}

async fn reconcile_one(p: &Payments, l: Loaded, now: u64) -> Result<Verdict, PaymentError> {
    let b = l.booking.as_ref().expect("due payments have a booking");
    let payment_id = b.payment.payment_id.clone();
    let past = now >= l.hold.expires_at_ms;
    let state = match p.gateway.query(&payment_id).await {
        Ok(s) => s,
        Err(e) => {
            p.metrics.inc(|m| &m.gateway_errors);
            if b.unsettled() {
                return Ok(Verdict::Unknown { exhausted: false });
            }
            if !past {
                return Ok(Verdict::Left);
            }
            tracing::warn!(booking = %l.id, "gateway query failed at the deadline ({e}): extending, not releasing");
            return extend(p, &l).await;
        }
    };
    match state.status {
        PaymentStatus::Completed => confirm_captured(p, &l, state).await,
        s if s.is_dead() => terminal(p, &l, s).await,
        PaymentStatus::Approved if !past && !b.voiding && !b.unsettled() => {
            // The buyer approved but the callback never came: finish it.
            p.execute_and_confirm(&l, true, ConfirmPath::Reconciler)
                .await?;
            Ok(Verdict::Done)
        }
        _ if past || b.unsettled() => void(p, &l).await,
        _ => Ok(Verdict::Left),
    }
}

/// The gateway captured the payment: confirm (a released booking becomes
/// `refund_pending`, and the outbox refunds it).
async fn confirm_captured(
    p: &Payments,
    l: &Loaded,
    state: PaymentState,
) -> Result<Verdict, PaymentError> {
    let b = l.booking.as_ref().expect("due payments have a booking");
    // Checked here first so that a booking visited every sweep alerts
    // once (`sweep`); `Payments::confirm` checks again.
    if let Err(m) = super::amount::check(b, &state) {
        return Ok(Verdict::Mismatch(m));
    }
    p.confirm(l, &state, ConfirmPath::Reconciler, None).await?;
    Ok(Verdict::Done)
}

/// The gateway says the payment can never be captured: release a pending
/// booking's seats, or settle a released one.
async fn terminal(
    p: &Payments,
    l: &Loaded,
    status: PaymentStatus,
) -> Result<Verdict, PaymentError> {
    let b = l.booking.as_ref().expect("due payments have a booking");
    let (hold, payment_id) = (l.id.seq, b.payment.payment_id.clone());
    if b.unsettled() {
        p.command(&l.event_id, PaymentAction::Settle { hold, payment_id })
            .await?;
        tracing::info!(booking = %l.id, status = ?status, "released booking settled: the payment can never be captured");
        return Ok(Verdict::Done);
    }
    // `Unpaid` needs the void intent this reconciler committed; a payment
    // that failed or was cancelled by the buyer needs none.
    let reason = if status == PaymentStatus::Voided && b.voiding {
        ReleaseReason::Unpaid
    } else {
        ReleaseReason::PaymentFailed
    };
    let release = PaymentAction::Release {
        hold,
        payment_id,
        reason,
    };
    let (reply, _) = p.command(&l.event_id, release).await?;
    if let Outcome::Booking(b) = &reply.outcome {
        if b.status == BookingStatus::Expired {
            p.metrics.inc(|m| match reason {
                ReleaseReason::PaymentFailed => &m.released_failed,
                ReleaseReason::Unpaid => &m.released_unpaid,
            });
            tracing::info!(booking = %l.id, ?reason, "hold released by the reconciler");
        }
    }
    Ok(Verdict::Done)
}

/// Past the deadline (or released and still unsettled) and not terminal:
/// commit a void intent, then void at the gateway with its fence.
async fn void(p: &Payments, l: &Loaded) -> Result<Verdict, PaymentError> {
    let b = l.booking.as_ref().expect("due payments have a booking");
    let payment_id = b.payment.payment_id.clone();
    let intent = PaymentAction::VoidIntent {
        hold: l.id.seq,
        payment_id: payment_id.clone(),
    };
    let watched = b.unsettled();
    let (reply, fence) = p.command(&l.event_id, intent).await?;
    let l = match reply.outcome {
        Outcome::Booking(b)
            if b.voiding && (b.status == BookingStatus::Pending || b.unsettled()) =>
        {
            Loaded {
                booking: Some(*b),
                ..l.clone()
            }
        }
        // Decided meanwhile (confirmed, settled): nothing to void.
        Outcome::Booking(_) => return Ok(Verdict::Done),
        // Extended meanwhile: not past the deadline any more.
        Outcome::ReleaseRefused { .. } => return Ok(Verdict::Left),
        other => {
            return Err(PaymentError::Refused {
                outcome: other,
                event_id: l.event_id.clone(),
            })
        }
    };
    match p.gateway.void(&payment_id, fence).await {
        Ok(s) if s.status == PaymentStatus::Completed => confirm_captured(p, &l, s).await,
        Ok(s) if s.status.is_dead() => {
            if s.status == PaymentStatus::Voided {
                p.metrics.inc(|m| &m.voided);
            }
            if watched {
                // Settled only on a query's answer at a later sweep: a
                // void's answer alone does not end the watch.
                return Ok(Verdict::Unknown { exhausted: false });
            }
            terminal(p, &l, s.status).await
        }
        Err(GatewayError::AlreadyCaptured) => {
            tracing::warn!(booking = %l.id, "void came after the capture: confirming");
            match p.gateway.query(&payment_id).await {
                Ok(s) if s.status == PaymentStatus::Completed => confirm_captured(p, &l, s).await,
                // Asked again at the next sweep.
                _ => Ok(Verdict::Unknown { exhausted: false }),
            }
        }
        Err(GatewayError::StaleFence) => {
            tracing::info!(booking = %l.id, "void: a newer leader acts on this payment");
            Ok(Verdict::Left)
        }
        other => {
            p.metrics.inc(|m| &m.gateway_errors);
            tracing::warn!(booking = %l.id, fence = %fence, "void did not answer terminal ({other:?}): keeping the seats");
            if watched {
                return Ok(Verdict::Unknown { exhausted: false });
            }
            extend(p, &l).await
        }
    }
}

/// The payment's fate is unknown past the deadline: push the deadline back
/// (keyed by the extension count seen, so a re-sent extend counts once),
/// or report that none is left.
async fn extend(p: &Payments, l: &Loaded) -> Result<Verdict, PaymentError> {
    let b = l.booking.as_ref().expect("due payments have a booking");
    let extend = PaymentAction::Extend {
        hold: l.id.seq,
        payment_id: b.payment.payment_id.clone(),
        by_ms: p.config.extension_ms,
        attempt: l.hold.extensions,
    };
    let (reply, _) = p.command(&l.event_id, extend).await?;
    Ok(match reply.outcome {
        Outcome::Extended { .. } => {
            p.metrics.inc(|m| &m.extensions);
            Verdict::Unknown { exhausted: false }
        }
        Outcome::ExtensionsExhausted { .. } => Verdict::Unknown { exhausted: true },
        _ => Verdict::Left,
    })
}

#[cfg(test)]
mod tests {
    use super::plan;

    #[test]
    fn due_and_unsettled_payments_take_turns() {
        let due: Vec<String> = (1..=4).map(|i| format!("d{i}")).collect();
        let unsettled = vec!["u1".to_string(), "u2".to_string()];
        assert_eq!(
            plan(due, unsettled),
            ["d1", "u1", "d2", "u2", "d3", "d4"].map(String::from)
        );
    }

    #[test]
    fn a_budget_that_ends_the_pass_early_still_reaches_unsettled_bookings() {
        // 4,096 due payments, a budget for 8 visits: half are unsettled.
        let due: Vec<(bool, u32)> = (0..4096).map(|i| (false, i)).collect();
        let unsettled: Vec<(bool, u32)> = (0..100).map(|i| (true, i)).collect();
        let visited = &plan(due, unsettled)[..8];
        assert_eq!(visited.iter().filter(|(u, _)| *u).count(), 4);
    }

    #[test]
    fn either_kind_alone_is_visited_whole() {
        assert_eq!(plan(vec![1, 2, 3], vec![]), vec![1, 2, 3]);
        assert_eq!(plan(vec![], vec![7, 8]), vec![7, 8]);
        assert!(plan::<u8>(vec![], vec![]).is_empty());
    }
}
