//! The outbox's queues: which undelivered items the outbox worker looks at.
//!
//! ```text
//!  Confirm ─▶ email queued ──▶ outbox_emails  ─┐
//!  late Confirm, operator Refund ─▶ outbox_refunds ─┴▶ OutboxDone ─▶ delivered (pruned later)
//!  booking pruned (refunded, a retention later) ─▶ its undelivered items leave with it
//! ```
//!
//! Emails and refunds queue apart, so a mail sink that fails never keeps a
//! refund waiting behind its emails, and a page is cut from the items the
//! worker may try now (`outbox_page`'s `due`), not from the first items of
//! a mixed queue that it would then skip. An item is kept while its
//! booking is: when the booking's records are pruned its undelivered
//! items go too (an email that failed for a whole retention), so no item
//! without a booking ever takes a place in a page.
//!
//! Item ids are given in apply order and apply time never runs backwards,
//! so within a queue, id order is the order of `created_ms`.

use crate::record_key::RecordKey;

use super::{Booking, Indexes, Inventory, OutboxItem, OutboxKind};

impl Indexes {
    /// Index an undelivered item (its booking exists).
    pub(super) fn index_pending(&mut self, item: &OutboxItem) {
        self.outbox_pending.insert(item.id);
        self.outbox_of.insert((item.booking, item.id));
        match item.kind {
            OutboxKind::ConfirmationEmail => self.outbox_emails.insert(item.id),
            OutboxKind::Refund => self.outbox_refunds.insert(item.id),
        };
    }

    /// Forget a delivered (or dropped) item.
    pub(super) fn unindex_pending(&mut self, item: &OutboxItem) {
        self.outbox_pending.remove(&item.id);
        self.outbox_of.remove(&(item.booking, item.id));
        self.outbox_emails.remove(&item.id);
        self.outbox_refunds.remove(&item.id);
    }
}

impl Inventory {
    /// Up to `limit` undelivered items of `kind` that `due` lets the worker
    /// try now, oldest first, each with its booking. Items `due` refuses
    /// (backed off after a failure) take no place in the page.
    pub fn outbox_page(
        &self,
        kind: OutboxKind,
        limit: usize,
        due: impl Fn(u64) -> bool,
    ) -> Vec<(OutboxItem, Booking)> {
        let queue = match kind {
            OutboxKind::ConfirmationEmail => &self.index.outbox_emails,
            OutboxKind::Refund => &self.index.outbox_refunds,
        };
        queue
            .iter()
            .filter(|id| due(**id))
            .filter_map(|id| {
                let item = self.outbox.get(id)?;
                Some((item.clone(), self.bookings.get(&item.booking)?.clone()))
            })
            .take(limit)
            .collect()
    }

    /// When the oldest undelivered refund was queued.
    pub fn oldest_refund_ms(&self) -> Option<u64> {
        let id = self.index.outbox_refunds.get_min()?;
        Some(self.outbox.get(id)?.created_ms)
    }

    /// Undelivered refunds after item `after` that were queued at or before
    /// `queued_by_ms`, oldest first, at most `limit`: the refunds that have
    /// waited too long, each seen once by a caller that moves `after` on.
    pub fn refunds_waiting_since(
        &self,
        after: u64,
        queued_by_ms: u64,
        limit: usize,
    ) -> Vec<OutboxItem> {
        use std::ops::Bound::{Excluded, Unbounded};
        self.index
            .outbox_refunds
            .range((Excluded(after), Unbounded))
            .filter_map(|id| self.outbox.get(id))
            .take_while(|item| item.created_ms <= queued_by_ms)
            .take(limit)
            .cloned()
            .collect()
    }

    /// Booking `seq` is being pruned: its undelivered items leave with it.
    pub(super) fn drop_outbox_of(&mut self, seq: u64, changed: &mut Vec<RecordKey>) {
        let ids: Vec<u64> = self
            .index
            .outbox_of
            .range((seq, 0)..=(seq, u64::MAX))
            .map(|(_, id)| *id)
            .collect();
        for id in ids {
            if let Some(item) = self.outbox.remove(&id) {
                self.index.unindex_pending(&item);
                changed.push(RecordKey::Outbox(id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::UserId;
    use crate::inventory::{BookingStatus, PaymentAttempt};

    fn booking(seq: u64) -> Booking {
        Booking {
            seq,
            owner: UserId("u".into()),
            payment: PaymentAttempt {
                payment_id: format!("P{seq}"),
                provider_key: format!("k{seq}"),
                signature: "s".into(),
                approve_url: "u".into(),
                amount_cents: 100,
                currency: "EUR".into(),
            },
            status: BookingStatus::Confirmed,
            created_ms: 0,
            updated_ms: 0,
            intents: 0,
            txn_id: None,
            confirmed_via: None,
            refund_id: None,
            intent_by: None,
            voiding: false,
            settled: false,
            refund: None,
        }
    }

    /// An inventory with `emails` emails (bookings 1..) queued first, then
    /// `refunds` refunds, item `i` queued at `i` ms.
    fn queued(emails: u64, refunds: u64) -> Inventory {
        let mut inv = Inventory::default();
        for i in 1..=emails + refunds {
            let kind = if i <= emails {
                OutboxKind::ConfirmationEmail
            } else {
                OutboxKind::Refund
            };
            inv.bookings.insert(i, booking(i));
            inv.outbox.insert(
                i,
                OutboxItem {
                    id: i,
                    booking: i,
                    kind,
                    created_ms: i,
                    done_ms: None,
                },
            );
        }
        inv.rebuild_indexes();
        inv
    }

    fn ids(page: &[(OutboxItem, Booking)]) -> Vec<u64> {
        page.iter().map(|(i, _)| i.id).collect()
    }

    #[test]
    fn a_refund_behind_a_hundred_emails_is_in_the_first_refund_page() {
        let inv = queued(100, 1);
        assert_eq!(
            ids(&inv.outbox_page(OutboxKind::Refund, 64, |_| true)),
            vec![101]
        );
        let emails = inv.outbox_page(OutboxKind::ConfirmationEmail, 64, |_| true);
        assert_eq!(ids(&emails), (1..=64).collect::<Vec<_>>());
    }

    #[test]
    fn backed_off_items_take_no_place_in_a_page() {
        let inv = queued(100, 0);
        // The first 80 failed and wait: the page is the next 20, not empty.
        let page = inv.outbox_page(OutboxKind::ConfirmationEmail, 64, |id| id > 80);
        assert_eq!(ids(&page), (81..=100).collect::<Vec<_>>());
    }

    #[test]
    fn an_item_whose_booking_was_pruned_leaves_the_queue() {
        let mut inv = queued(2, 1);
        let mut changed = Vec::new();
        inv.bookings.remove(&1);
        inv.drop_outbox_of(1, &mut changed);
        assert_eq!(changed, vec![RecordKey::Outbox(1)]);
        assert!(!inv.outbox.contains_key(&1));
        assert_eq!(
            ids(&inv.outbox_page(OutboxKind::ConfirmationEmail, 64, |_| true)),
            vec![2]
        );
        let mut rebuilt = inv.clone();
        rebuilt.rebuild_indexes();
        assert_eq!(rebuilt.index, inv.index);
    }

    #[test]
    fn a_stored_item_without_its_booking_is_not_queued_after_a_load() {
        let mut inv = queued(2, 0);
        inv.bookings.remove(&1);
        inv.rebuild_indexes();
        assert_eq!(
            inv.index.outbox_pending.iter().copied().collect::<Vec<_>>(),
            vec![2]
        );
        assert_eq!(
            ids(&inv.outbox_page(OutboxKind::ConfirmationEmail, 64, |_| true)),
            vec![2]
        );
    }

    #[test]
    fn every_waiting_refund_is_seen_not_only_a_window() {
        let inv = queued(100, 200);
        assert_eq!(inv.refunds_pending(), 200);
        assert_eq!(inv.oldest_refund_ms(), Some(101));
        // Refunds queued by 250 ms: 101..=250, in pages that move on.
        let first = inv.refunds_waiting_since(0, 250, 100);
        assert_eq!(first.first().map(|i| i.id), Some(101));
        assert_eq!(first.len(), 100);
        let next = inv.refunds_waiting_since(200, 250, 100);
        assert_eq!(
            next.iter().map(|i| i.id).collect::<Vec<_>>(),
            (201..=250).collect::<Vec<_>>()
        );
        assert!(inv.refunds_waiting_since(250, 250, 100).is_empty());
    }
}
