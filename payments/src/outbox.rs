//! The outbox: delivers what a commit promised (confirmation emails,
//! refunds) for a group this node leads, retrying with backoff
//! until delivered, then records `OutboxDone` once. Delivery is at least
//! once (a leader change may repeat one); the record is exactly once.
//!
//! ```text
//!  refunds lane: outbox_page(Refund) ─▶ RefundIntent ─▶ gateway refund(fence) ─▶ OutboxDone
//!                every waiting refund: refund_pending_age, an ALERT once past 5 min
//!  emails lane:  outbox_page(Email) ─▶ .eml files (blocking thread) ─▶ OutboxDone each
//!                a page that failed whole (the mail sink is down) backs the lane off
//! ```
//!
//! Each lane is a pass over one group ([`refunds`], [`emails`]), scheduled
//! per group and lane by `seatfence-duties` (again at once after a busy
//! pass, [`next_pass`]). The lanes run side by side and read their own
//! queues (`Inventory::outbox_page`), so a mail sink that fails, or hangs
//! on a blocking write, never delays a refund, and an item backed off after
//! a failure takes no place in a page.
//!
//! Emails go to a mail sink: one `.eml` file per item in `mail_dir`,
//! written to a temporary name, flushed, then renamed. An email is never
//! proof of a booking: `GET /v1/bookings/{id}` is.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seatfence_core::inventory::{Booking, OutboxItem, OutboxKind, Outcome, PaymentAction};
use seatfence_core::{BookingId, EventId, Fence, GroupId};
use seatfence_raft::registry::GroupHandle;

use crate::gateway::GatewayError;
use crate::Payments;

/// Items delivered per page, lane and group.
const PAGE: usize = 64;

/// The pause between scans while a full page keeps being delivered (at
/// most `outbox_interval_ms`): the outbox keeps up with a sale without
/// spinning.
const BUSY_PAUSE: Duration = Duration::from_millis(10);

/// A refund still undelivered this long after its capture was recorded
/// raises an alert: money kept for nothing.
const REFUND_ALERT_MS: u64 = 5 * 60 * 1000;

/// ALERT lines per scan and group at most; the rest come at the next
/// scans (each refund is alerted on once).
const ALERTS_PER_SCAN: usize = 100;

/// The longest wait after a failure.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// What a group's refunds lane remembers between passes, in memory (a new
/// leader simply starts over).
#[derive(Debug, Default)]
pub struct RefundLane {
    retry: Retry,
    /// The last refund alerted on: each is alerted on once.
    alerted_after: u64,
}

/// What a group's emails lane remembers between passes (in memory).
#[derive(Debug, Default)]
pub struct EmailLane {
    retry: Retry,
}

/// What one pass of a lane saw, for the node's gauges and its next pass.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LaneReport {
    /// Undelivered items of either kind (refunds lane only).
    pub backlog: u64,
    /// How long the oldest waiting refund has waited (refunds lane only).
    pub refund_age_ms: u64,
    /// A full page delivered something: more may wait, pass again soon.
    pub busy: bool,
    /// Items this pass delivered and recorded (emails lane only): the
    /// backlog the refunds lane last counted is that much smaller now.
    pub delivered: u64,
}

/// The pause before a group's next pass of a lane: `outbox_interval_ms`,
/// or [`BUSY_PAUSE`] after a busy pass (the outbox keeps up with a sale
/// without spinning).
pub fn next_pass(p: &Payments, busy: bool) -> Duration {
    let interval = Duration::from_millis(p.config.outbox_interval_ms);
    if busy {
        BUSY_PAUSE.min(interval)
    } else {
        interval
    }
}

/// Failed deliveries: (group, item) → (attempts, next try). In memory: a
/// new leader simply starts over.
#[derive(Debug, Default)]
struct Retry(HashMap<(GroupId, u64), (u32, Instant)>);

impl Retry {
    /// Whether item `id` of `gid` may be tried now.
    fn due(&self, gid: GroupId, id: u64, now: Instant) -> bool {
        self.0.get(&(gid, id)).is_none_or(|(_, at)| now >= *at)
    }

    /// A failed delivery waits 250 ms, doubling up to 5 min, before the
    /// next try; returns the attempts so far and the wait.
    fn failed(&mut self, gid: GroupId, item: u64) -> (u32, Duration) {
        let key = (gid, item);
        let (n, _) = self.0.get(&key).copied().unwrap_or((0, Instant::now()));
        let wait = backoff(n);
        self.0.insert(key, (n + 1, Instant::now() + wait));
        (n + 1, wait)
    }

    /// [`Retry::failed`], logged.
    fn failed_logged(&mut self, gid: GroupId, id: BookingId, item: &OutboxItem, e: &anyhow::Error) {
        let (attempt, wait) = self.failed(gid, item.id);
        tracing::warn!(booking = %id, kind = item.kind.as_str(), attempt, "outbox delivery failed ({e}); retry in {wait:?}");
    }

    fn delivered(&mut self, gid: GroupId, id: u64) {
        self.0.remove(&(gid, id));
    }

    /// Forget items not tried for an hour (delivered by another leader).
    fn tidy(&mut self) {
        self.0
            .retain(|_, (_, at)| at.elapsed() < Duration::from_secs(3600));
    }
}

/// The mail sink's failures in a row, and when it may be tried again
/// (one for the node: a sink that is down is down for every group).
#[derive(Debug, Default)]
pub struct Sink(u32, Option<Instant>);

impl Payments {
    /// Whether the mail sink is backed off now.
    fn sink_waits(&self) -> bool {
        let sink = self.sink.lock().expect("sink lock poisoned");
        sink.1.is_some_and(|at| Instant::now() < at)
    }

    /// The sink failed a whole page: back it off; the failures in a row
    /// and the wait.
    fn sink_failed(&self) -> (u32, Duration) {
        let mut sink = self.sink.lock().expect("sink lock poisoned");
        let wait = backoff(sink.0);
        *sink = Sink(sink.0 + 1, Some(Instant::now() + wait));
        (sink.0, wait)
    }

    /// The sink wrote something: no backoff.
    fn sink_ok(&self) {
        *self.sink.lock().expect("sink lock poisoned") = Sink::default();
    }
}

/// The wait after `failures` failures in a row: 250 ms, doubling, at most 5 min.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(250u64 << failures.min(11)).min(MAX_BACKOFF)
}

/// One pass of the refunds lane over group `gid` (led by this node): every
/// waiting refund is watched (its age, an alert once past
/// [`REFUND_ALERT_MS`]), and a page of those not backed off is issued at
/// the gateway.
pub async fn refunds(
    p: &Payments,
    gid: GroupId,
    g: &GroupHandle,
    lane: &mut RefundLane,
) -> LaneReport {
    let now_ms = p.clock.now_ms();
    let now = Instant::now();
    let mut report = LaneReport::default();
    let (retry, after) = (&lane.retry, lane.alerted_after);
    let scan = g.read(|s| {
        let inv = s.state.inventory();
        let event = inv.event()?.event_id.clone();
        Some(RefundScan {
            event,
            page: inv.outbox_page(OutboxKind::Refund, PAGE, |id| retry.due(gid, id, now)),
            pending: inv.index().outbox_pending.len() as u64,
            oldest_ms: inv.oldest_refund_ms(),
            overdue: inv.refunds_waiting_since(
                after,
                now_ms.saturating_sub(REFUND_ALERT_MS),
                ALERTS_PER_SCAN,
            ),
        })
    });
    let Some(RefundScan {
        event: event_id,
        page,
        pending,
        oldest_ms,
        overdue,
    }) = scan
    else {
        return report;
    };
    report.backlog = pending;
    if let Some(at) = oldest_ms {
        report.refund_age_ms = now_ms.saturating_sub(at);
    }
    for item in &overdue {
        p.metrics.inc(|m| &m.money_alerts);
        tracing::error!(
            group = gid.0, event = %event_id, outbox_item = item.id, booking = item.booking,
            "ALERT: a captured payment is neither booked nor refunded after {} s; refund still failing",
            now_ms.saturating_sub(item.created_ms) / 1000
        );
    }
    if let Some(last) = overdue.last() {
        lane.alerted_after = last.id;
    }
    let full = page.len() >= PAGE;
    let mut delivered = 0;
    for (item, booking) in page {
        let id = BookingId {
            group: gid,
            seq: booking.seq,
        };
        match deliver_refund(p, &event_id, id, &item, &booking).await {
            Ok(()) => {
                delivered += 1;
                lane.retry.delivered(gid, item.id);
            }
            Err(e) => lane.retry.failed_logged(gid, id, &item, &e),
        }
    }
    lane.retry.tidy();
    report.busy = full && delivered > 0;
    report
}

/// What the refunds lane reads of one group, under one read lock.
struct RefundScan {
    event: EventId,
    page: Vec<(OutboxItem, Booking)>,
    /// Undelivered items of either kind.
    pending: u64,
    oldest_ms: Option<u64>,
    overdue: Vec<OutboxItem>,
}

/// Commit a refund intent, refund at the gateway with its fence, then
/// record the delivery.
async fn deliver_refund(
    p: &Payments,
    event_id: &EventId,
    id: BookingId,
    item: &OutboxItem,
    booking: &Booking,
) -> anyhow::Result<()> {
    // A refund carries the fence of a committed intent.
    let intent = PaymentAction::RefundIntent { id: item.id };
    let fence = match p.command(event_id, intent).await {
        Ok((r, f)) if matches!(r.outcome, Outcome::Booking(_)) => f,
        Ok((r, _)) => anyhow::bail!("refund intent answered {:?}", r.outcome),
        Err(e) => anyhow::bail!("refund intent failed: {e}"),
    };
    let refund_id = refund(p, booking, fence).await?;
    let done = PaymentAction::OutboxDone {
        id: item.id,
        refund_id: Some(refund_id),
    };
    // Refunded at the gateway under a stable key: a next try after a
    // failed record gets the same refund, not a second one.
    p.command(event_id, done)
        .await
        .map_err(|e| anyhow::anyhow!("recording the delivered refund failed: {e}"))?;
    p.metrics.inc(|m| &m.refunds_done);
    tracing::info!(booking = %id, kind = item.kind.as_str(), "outbox item delivered");
    Ok(())
}

/// One pass of the confirmation emails lane over group `gid` (led by this
/// node): a page of those not backed off, written and recorded together.
/// A failed item backs off on its own; a page that fails whole (the mail
/// dir cannot be made, every write fails) is also the sink's failure: the
/// lane of every group waits (250 ms doubling to 5 min, reset by a page
/// that writes anything, `Payments::sink`) instead of trying page after
/// page of a sink that is down.
pub async fn emails(
    p: &Arc<Payments>,
    gid: GroupId,
    g: &GroupHandle,
    lane: &mut EmailLane,
) -> LaneReport {
    let report = LaneReport::default();
    if p.sink_waits() {
        return report;
    }
    let term = g.term();
    let now = Instant::now();
    let retry = &lane.retry;
    let scan = g.read(|s| {
        let inv = s.state.inventory();
        let e = inv.event()?;
        let page = inv.outbox_page(OutboxKind::ConfirmationEmail, PAGE, |id| {
            retry.due(gid, id, now)
        });
        Some((e.event_id.clone(), e.epoch, page))
    });
    let Some((event_id, epoch, page)) = scan.filter(|(_, _, page)| !page.is_empty()) else {
        return report;
    };
    let full = page.len() >= PAGE;
    let fence = Fence { epoch, term };
    let r = deliver_emails(p, gid, &event_id, page, fence).await;
    for id in &r.recorded {
        lane.retry.delivered(gid, *id);
    }
    lane.retry.tidy();
    if r.written == 0 && !r.failed.is_empty() {
        // The sink is down: one line for the page, not one per email.
        for (item, _, _) in &r.failed {
            lane.retry.failed(gid, item.id);
        }
        let (attempt, wait) = p.sink_failed();
        let (_, _, e) = &r.failed[0];
        tracing::warn!(
            group = gid.0, emails = r.failed.len(), attempt,
            "outbox: the mail sink failed a whole page ({e}); emails wait {wait:?} (refunds do not)"
        );
        return report;
    }
    p.sink_ok();
    for (item, id, e) in &r.failed {
        lane.retry.failed_logged(gid, *id, item, e);
    }
    LaneReport {
        busy: full && !r.recorded.is_empty(),
        delivered: r.recorded.len() as u64,
        ..report
    }
}

/// What became of a page of emails.
struct EmailPage {
    /// Written and flushed (recorded or not).
    written: usize,
    /// Item ids recorded as delivered.
    recorded: Vec<u64>,
    failed: Vec<(OutboxItem, BookingId, anyhow::Error)>,
}

/// Write a page of confirmation emails (each flushed before it is renamed
/// into place) on a blocking thread, then record every delivered one with
/// its own `OutboxDone`, all at once (the leader batches them into few log
/// entries).
async fn deliver_emails(
    p: &Arc<Payments>,
    gid: GroupId,
    event_id: &EventId,
    emails: Vec<(OutboxItem, Booking)>,
    fence: Fence,
) -> EmailPage {
    let mut page = EmailPage {
        written: 0,
        recorded: Vec::new(),
        failed: Vec::new(),
    };
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
        return page;
    };
    let mut done = Vec::new();
    for (item, id, r) in written {
        match r {
            Ok(()) => done.push((item, id)),
            Err(e) => page.failed.push((item, id, e)),
        }
    }
    page.written = done.len();
    let recorded = futures::future::join_all(done.iter().map(|(item, _)| {
        p.command(
            event_id,
            PaymentAction::OutboxDone {
                id: item.id,
                refund_id: None,
            },
        )
    }))
    .await;
    for ((item, id), r) in done.iter().zip(recorded) {
        match r {
            Ok((reply, _)) if matches!(reply.outcome, Outcome::OutboxDone) => {
                page.recorded.push(item.id);
                p.metrics.inc(|m| &m.emails_sent);
                tracing::debug!(booking = %id, "outbox: confirmation email delivered");
            }
            Ok((reply, _)) => {
                tracing::warn!(booking = %id, outcome = ?reply.outcome, "outbox: delivery not recorded")
            }
            Err(e) => tracing::warn!(booking = %id, "outbox: recording delivery failed: {e}"),
        }
    }
    page
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
    use super::*;

    #[test]
    fn a_failure_waits_longer_each_time_up_to_five_minutes() {
        assert_eq!(backoff(0), Duration::from_millis(250));
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert!(backoff(10) < MAX_BACKOFF);
        assert_eq!(backoff(11), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF, "no overflow");
    }

    #[test]
    fn a_failed_item_is_not_due_until_its_wait_is_over_and_others_are() {
        let mut retry = Retry::default();
        let g = GroupId(3);
        let item = OutboxItem {
            id: 7,
            booking: 1,
            kind: OutboxKind::ConfirmationEmail,
            created_ms: 0,
            done_ms: None,
        };
        let id = BookingId { group: g, seq: 1 };
        retry.failed_logged(g, id, &item, &anyhow::anyhow!("disk full"));
        assert_eq!(retry.failed(g, 9).0, 1, "another item's first failure");
        let now = Instant::now();
        assert!(!retry.due(g, 7, now));
        assert!(retry.due(g, 8, now), "another item");
        assert!(retry.due(GroupId(4), 7, now), "another group's item");
        assert!(retry.due(g, 7, now + Duration::from_secs(1)));
        retry.delivered(g, 7);
        assert!(retry.due(g, 7, now));
    }

    #[test]
    fn amounts_read_as_money() {
        assert_eq!(super::format_amount(10_000), "100.00");
        assert_eq!(super::format_amount(5), "0.05");
        assert_eq!(super::format_amount(123_456), "1234.56");
    }
}
