//! The outbox worker: delivers what a commit promised (confirmation
//! emails, refunds) for the groups this node leads, retrying with backoff
//! until delivered, then records `OutboxDone` once. Delivery is at least
//! once (a leader change may repeat one); the record is exactly once.
//!
//! Emails go to a mail sink: one `.eml` file per item in `mail_dir`,
//! written to a temporary name, flushed, then renamed. An email is never
//! proof of a booking: `GET /v1/bookings/{id}` is.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seatfence_core::inventory::{Booking, OutboxItem, OutboxKind, Outcome, PaymentAction};
use seatfence_core::{BookingId, EventId, Fence, GroupId, Query, QueryResult};
use tokio::sync::watch;

use super::Payments;
use crate::gateway::GatewayError;
use crate::Edge;

/// Items looked at per scan and group.
const SCAN_LIMIT: u32 = 64;

/// The pause between scans while a full page keeps being delivered (at
/// most `outbox_interval_ms`): the outbox keeps up with a sale without
/// spinning.
const BUSY_PAUSE: Duration = Duration::from_millis(10);

/// A refund still undelivered this long after its capture was recorded
/// raises an alert: money kept for nothing.
const REFUND_ALERT_MS: u64 = 5 * 60 * 1000;

pub async fn run(edge: Arc<Edge>, mut rx_stop: watch::Receiver<bool>) {
    let Some(p) = edge.payments.clone() else {
        return;
    };
    let interval = Duration::from_millis(p.config.outbox_interval_ms);
    // Failed deliveries: (group, item) → (attempts, next try). In memory:
    // a new leader simply starts over.
    let mut retry: HashMap<(GroupId, u64), (u32, Instant)> = HashMap::new();
    // Refunds alerted on by this node (one alert each; bounded).
    let mut alerted: HashSet<(GroupId, u64)> = HashSet::new();
    let mut busy = false;
    loop {
        // A scan that found a full page and delivered something goes on
        // after `BUSY_PAUSE`: the outbox keeps up with a sale's booking rate instead of
        // delivering one page per interval.
        let pause = if busy {
            BUSY_PAUSE.min(interval)
        } else {
            interval
        };
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = seatfence_raft::timer::sleep(pause) => {}
        }
        busy = false;
        let mut backlog = 0;
        let mut refund_age = 0;
        let now_ms = edge.clock.now_ms();
        for (gid, g) in edge.led_event_groups() {
            let term = g.term();
            let (epoch, items) = g.sm.read(|s| {
                let epoch = s.state.inventory.event.as_ref().map(|e| e.epoch);
                match s.state.query(&Query::Outbox { limit: SCAN_LIMIT }) {
                    QueryResult::Outbox {
                        event_id: Some(e),
                        items,
                    } => (epoch.map(|ep| (e, ep)), items),
                    _ => (None, Vec::new()),
                }
            });
            let Some((event_id, epoch)) = epoch else {
                continue;
            };
            let full = items.len() as u32 >= SCAN_LIMIT;
            backlog += items.len() as u64;
            for (item, _) in items.iter().filter(|(i, _)| i.kind == OutboxKind::Refund) {
                let age = now_ms.saturating_sub(item.created_ms);
                refund_age = refund_age.max(age);
                if age >= REFUND_ALERT_MS && alerted.insert((gid, item.id)) {
                    edge.metrics.inc(|m| &m.money_alerts);
                    tracing::error!(
                        group = gid.0, event = %event_id, outbox_item = item.id, booking = item.booking,
                        "ALERT: a captured payment is neither booked nor refunded after {} s; refund still failing",
                        age / 1000
                    );
                }
            }
            let fence = Fence { epoch, term };
            let (emails, refunds): (Vec<_>, Vec<_>) = items
                .into_iter()
                .filter(|(item, _)| {
                    retry
                        .get(&(gid, item.id))
                        .is_none_or(|(_, at)| Instant::now() >= *at)
                })
                .partition(|(item, _)| item.kind == OutboxKind::ConfirmationEmail);
            let delivered =
                deliver_emails(&edge, &p, gid, &event_id, emails, fence, &mut retry).await;
            busy |= full && delivered > 0;
            for (item, booking) in refunds {
                let key = (gid, item.id);
                let id = BookingId {
                    group: gid,
                    seq: booking.seq,
                };
                // A refund carries the fence of a committed intent.
                let intent = PaymentAction::RefundIntent { id: item.id };
                let fence = match edge.payment_command(&event_id, intent).await {
                    Ok((r, f)) if matches!(r.outcome, Outcome::Booking(_)) => f,
                    Ok((r, _)) => {
                        let e = anyhow::anyhow!("refund intent answered {:?}", r.outcome);
                        backoff(&mut retry, key, id, &item, &e);
                        continue;
                    }
                    Err(e) => {
                        backoff(
                            &mut retry,
                            key,
                            id,
                            &item,
                            &anyhow::anyhow!("refund intent failed: {e}"),
                        );
                        continue;
                    }
                };
                match refund(&p, &booking, fence).await {
                    Ok(refund_id) => {
                        let done = PaymentAction::OutboxDone {
                            id: item.id,
                            refund_id: Some(refund_id),
                        };
                        match edge.payment_command(&event_id, done).await {
                            Ok(_) => {
                                retry.remove(&key);
                                edge.metrics.inc(|m| &m.refunds_done);
                                tracing::info!(booking = %id, kind = item.kind.as_str(), "outbox item delivered");
                            }
                            Err(e) => {
                                tracing::warn!(booking = %id, "outbox: recording delivery failed: {e}")
                            }
                        }
                    }
                    Err(e) => backoff(&mut retry, key, id, &item, &e),
                }
            }
        }
        if alerted.len() > 10_000 {
            alerted.clear();
        }
        retry.retain(|_, (_, at)| at.elapsed() < Duration::from_secs(3600));
        edge.metrics.outbox_backlog.set(backlog as f64);
        edge.metrics
            .refund_pending_age
            .set(refund_age as f64 / 1000.0);
    }
}

/// A failed delivery waits 250 ms, doubling up to 5 min, before the next try.
fn backoff(
    retry: &mut HashMap<(GroupId, u64), (u32, Instant)>,
    key: (GroupId, u64),
    id: BookingId,
    item: &OutboxItem,
    e: &anyhow::Error,
) {
    let (n, _) = retry.get(&key).copied().unwrap_or((0, Instant::now()));
    let wait = Duration::from_millis((250u64 << n.min(10)).min(300_000));
    retry.insert(key, (n + 1, Instant::now() + wait));
    tracing::warn!(booking = %id, kind = item.kind.as_str(), attempt = n + 1, "outbox delivery failed ({e}); retry in {wait:?}");
}

/// Write a page of confirmation emails (each flushed before it is renamed
/// into place) on a blocking thread, then record every delivered one with
/// its own `OutboxDone`, all at once (the leader batches them into few log
/// entries). Returns how many were recorded.
async fn deliver_emails(
    edge: &Edge,
    p: &Arc<Payments>,
    gid: GroupId,
    event_id: &EventId,
    emails: Vec<(OutboxItem, Booking)>,
    fence: Fence,
    retry: &mut HashMap<(GroupId, u64), (u32, Instant)>,
) -> usize {
    if emails.is_empty() {
        return 0;
    }
    let written = {
        let (p, event_id) = (p.clone(), event_id.clone());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = std::fs::create_dir_all(&p.mail_dir) {
                let e = anyhow::Error::from(e);
                return emails
                    .into_iter()
                    .map(|(item, booking)| {
                        let id = BookingId {
                            group: gid,
                            seq: booking.seq,
                        };
                        (item, id, Err(anyhow::anyhow!("mail dir: {e}")))
                    })
                    .collect::<Vec<_>>();
            }
            // Every file written first, then each flushed and renamed,
            // then the directory flushed once (the renames): only then is
            // any of them recorded as delivered.
            let written: Vec<_> = emails
                .into_iter()
                .map(|(item, booking)| {
                    let id = BookingId {
                        group: gid,
                        seq: booking.seq,
                    };
                    let r = write_email(&p, &event_id, id, &item, &booking, fence);
                    (item, id, r)
                })
                .collect();
            let mut synced: Vec<_> = written
                .into_iter()
                .map(|(item, id, r)| (item, id, r.and_then(Unsynced::sync)))
                .collect();
            if let Err(e) = std::fs::File::open(&p.mail_dir).and_then(|d| d.sync_all()) {
                for (_, _, r) in synced.iter_mut().filter(|(_, _, r)| r.is_ok()) {
                    *r = Err(anyhow::anyhow!("flushing the mail dir: {e}"));
                }
            }
            synced
        })
        .await
    };
    let Ok(written) = written else {
        tracing::warn!("outbox: the email writer panicked");
        return 0;
    };
    let mut done = Vec::new();
    for (item, id, r) in written {
        match r {
            Ok(()) => done.push((item, id)),
            Err(e) => backoff(retry, (gid, item.id), id, &item, &e),
        }
    }
    let recorded = futures::future::join_all(done.iter().map(|(item, _)| {
        edge.payment_command(
            event_id,
            PaymentAction::OutboxDone {
                id: item.id,
                refund_id: None,
            },
        )
    }))
    .await;
    let mut n = 0;
    for ((item, id), r) in done.iter().zip(recorded) {
        match r {
            Ok((reply, _)) if matches!(reply.outcome, Outcome::OutboxDone) => {
                n += 1;
                retry.remove(&(gid, item.id));
                edge.metrics.inc(|m| &m.emails_sent);
                tracing::debug!(booking = %id, "outbox: confirmation email delivered");
            }
            Ok((reply, _)) => {
                tracing::warn!(booking = %id, outcome = ?reply.outcome, "outbox: delivery not recorded")
            }
            Err(e) => tracing::warn!(booking = %id, "outbox: recording delivery failed: {e}"),
        }
    }
    n
}

/// Ask the gateway to refund `booking`'s payment with the fence of the
/// committed refund intent: the refund's id.
async fn refund(p: &Payments, booking: &Booking, fence: Fence) -> anyhow::Result<String> {
    let key = format!("refund-{}", booking.payment.provider_key);
    match p
        .gateway
        .refund(&booking.payment.payment_id, &key, fence)
        .await
    {
        Ok(r) => Ok(r.refund_id),
        Err(GatewayError::StaleFence) => {
            anyhow::bail!("gateway saw a newer fence than {fence}: a newer leader owns this refund")
        }
        Err(e) => Err(e.into()),
    }
}

/// An email written under its temporary name, not flushed yet.
struct Unsynced {
    file: std::fs::File,
    tmp: std::path::PathBuf,
    path: std::path::PathBuf,
}

impl Unsynced {
    /// Flush the email, then give it its real name: delivered.
    fn sync(self) -> anyhow::Result<()> {
        self.file.sync_all()?;
        std::fs::rename(&self.tmp, &self.path)?;
        Ok(())
    }
}

fn write_email(
    p: &Payments,
    event_id: &EventId,
    id: BookingId,
    item: &OutboxItem,
    booking: &Booking,
    fence: Fence,
) -> anyhow::Result<Unsynced> {
    let name = format!("{}-{id}-{}.eml", event_id.0, item.id);
    let path = p.mail_dir.join(&name);
    let tmp = p.mail_dir.join(format!(".{name}.tmp"));
    let body = format!(
        "To: {owner}@users.seatfence.invalid\r\nFrom: tickets@seatfence.invalid\r\nSubject: Booking {id} confirmed ({event})\r\nX-Fencing-Token: {fence}\r\nX-Seatfence-Booking: {id}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nYour booking {id} for {event} is confirmed.\r\nPayment {pid}, transaction {txn}, {amount} {cur}.\r\n\r\nThis email is not proof of the booking: GET /v1/bookings/{id} is.\r\n",
        owner = booking.owner.0,
        event = event_id.0,
        pid = booking.payment.payment_id,
        txn = booking.txn_id.as_deref().unwrap_or("-"),
        amount = format_amount(booking.payment.amount_cents),
        cur = booking.payment.currency,
    );
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(body.as_bytes())?;
    Ok(Unsynced { file, tmp, path })
}

/// Minor units as a decimal amount: 10000 → "100.00".
fn format_amount(cents: u64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

#[cfg(test)]
mod tests {
    #[test]
    fn amounts_read_as_money() {
        assert_eq!(super::format_amount(10_000), "100.00");
        assert_eq!(super::format_amount(5), "0.05");
        assert_eq!(super::format_amount(123_456), "1234.56");
    }
}
