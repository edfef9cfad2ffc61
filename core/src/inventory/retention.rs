//! Finished records leave the state after the event's retention.
//!
//! Without this, every hold ever made, every booking that expired or was
//! refunded and every delivered outbox item stayed in every replica's
//! memory and on its disk for good: a long sale grew each node by a few
//! KiB per request (docs/CHAOS.md, "Soak").
//!
//! ```text
//!  hold released|expired, no booking                    ─┐
//!  hold released|expired, booking expired+settled        ├─▶ pruned at max(expires_at, booking.updated) + retention
//!  hold released|expired, booking refunded              ─┘     (the hold and its booking)
//!  outbox item delivered                                 ──▶ pruned at done + retention
//!  outbox item undelivered, its booking pruned           ──▶ pruned with the booking
//! ```
//!
//! Never pruned: held or booked holds (a seat names them), pending,
//! confirmed or refund-pending bookings, unsettled ones (the reconciler
//! still watches them), undelivered outbox items of a kept booking.
//!
//! Which records are finished, and when they go, is a function of the
//! records alone, so the queue is a derived index: rebuilt after loading,
//! kept in step by `apply` from the records each command changed, and every
//! replica prunes the same records at the same command. Idempotency records
//! follow the same retention (`OpKey::forget_at`); a replayed key whose
//! hold was pruned still answers its recorded outcome (it holds a copy).

use serde::{Deserialize, Serialize};

use crate::record_key::RecordKey;

use super::{BookingStatus, HoldStatus, Inventory, DEFAULT_RETENTION_MS};

/// A finished record `apply` removes once its time comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PruneKey {
    /// A hold that ended, with its booking if it had one.
    Hold(u64),
    /// A delivered outbox item.
    Outbox(u64),
}

impl Inventory {
    /// How long this event keeps finished records.
    pub fn retention_ms(&self) -> u64 {
        self.event
            .as_ref()
            .map_or(DEFAULT_RETENTION_MS, |e| e.retention_ms)
    }

    /// When `key`'s record is pruned, or `None` while it is not finished
    /// (or absent).
    fn prune_time(&self, key: PruneKey) -> Option<u64> {
        let retention = self.retention_ms();
        let ended = match key {
            PruneKey::Hold(seq) => {
                let hold = self.holds.get(&seq)?;
                if hold.status.is_live() {
                    return None;
                }
                debug_assert!(matches!(
                    hold.status,
                    HoldStatus::Released | HoldStatus::Expired
                ));
                match self.bookings.get(&seq) {
                    None => hold.expires_at_ms,
                    Some(b) => {
                        let finished = match b.status {
                            BookingStatus::Expired => b.settled,
                            BookingStatus::Refunded => true,
                            _ => false,
                        };
                        if !finished {
                            return None;
                        }
                        hold.expires_at_ms.max(b.updated_ms)
                    }
                }
            }
            PruneKey::Outbox(id) => self.outbox.get(&id)?.done_ms?,
        };
        Some(ended.saturating_add(retention))
    }

    /// Put `key` in the prune queue at its time, or take it out.
    pub(super) fn refresh_prune(&mut self, key: PruneKey) {
        let want = self.prune_time(key);
        let had = self.index.prune_at.get(&key).copied();
        if had == want {
            return;
        }
        if let Some(at) = had {
            self.index.prune_queue.remove(&(at, key));
            self.index.prune_at.remove(&key);
        }
        if let Some(at) = want {
            self.index.prune_queue.insert((at, key));
            self.index.prune_at.insert(key, at);
        }
    }

    /// Keep the queue in step with the records one command changed.
    pub(super) fn refresh_prunes(&mut self, changed: &[RecordKey]) {
        for key in changed {
            let key = match key {
                RecordKey::Hold(seq) | RecordKey::Booking(seq) => PruneKey::Hold(*seq),
                RecordKey::Outbox(id) => PruneKey::Outbox(*id),
                _ => continue,
            };
            self.refresh_prune(key);
        }
    }

    /// Remove every finished record whose time has come.
    pub(super) fn prune_finished(&mut self, now: u64, changed: &mut Vec<RecordKey>) {
        while let Some(&(at, key)) = self.index.prune_queue.get_min() {
            if at > now {
                break;
            }
            self.index.prune_queue.remove(&(at, key));
            self.index.prune_at.remove(&key);
            match key {
                PruneKey::Hold(seq) => {
                    self.holds.remove(&seq);
                    changed.push(RecordKey::Hold(seq));
                    if self.bookings.remove(&seq).is_some() {
                        changed.push(RecordKey::Booking(seq));
                        // An email still undelivered a retention after its
                        // booking was refunded: nobody is owed it now.
                        self.drop_outbox_of(seq, changed);
                    }
                }
                PruneKey::Outbox(id) => {
                    self.outbox.remove(&id);
                    changed.push(RecordKey::Outbox(id));
                }
            }
        }
    }

    /// The earliest time a command would forget or prune something: an idle
    /// event's leader proposes a `Tick` some time after it, so finished
    /// records leave even when no buyer comes back.
    pub fn next_cleanup_ms(&self) -> Option<u64> {
        let prune = self.index.prune_queue.get_min().map(|(at, _)| *at);
        let forget = self.index.op_times.get_min().map(|(at, _)| *at);
        let inbox = self
            .index
            .inbox_times
            .get_min()
            .map(|(at, _)| at.saturating_add(super::INBOX_TTL_MS));
        let changes = self.next_change_prune_ms();
        [prune, forget, inbox, changes].into_iter().flatten().min()
    }
}
