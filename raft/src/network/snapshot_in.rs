//! What a node holds of the snapshots it is receiving: every stream's
//! chunks stay in memory until the last one arrives, so the bytes are
//! budgeted, per node and per sender, and a stream that stops sending is
//! cut.
//!
//! ```text
//!  InstallSnapshot stream ─▶ first chunk: the sender is the group's leader as this
//!                            replica knows it, or claims a term above this replica's
//!    each chunk: within IDLE of the last ─┐ else DEADLINE_EXCEEDED snapshot_idle
//!    its bytes: Budget::take(sender, n) ──┤ else RESOURCE_EXHAUSTED snapshot_budget
//!    the last chunk ─▶ install; the permit returns every byte
//! ```
//!
//! Without these, one member (or a certificate the directory does not list
//! yet, which may stream group 0's snapshot) could open a stream, send a
//! little and stall: its bytes held the node-wide budget for good, and
//! every learner, move and repair on that node waited behind it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// Most snapshot bytes a node holds in memory at once, over every stream
/// being received.
pub const SNAPSHOT_BUDGET_BYTES: usize = 1 << 30;

/// Most of that one sender may hold (its streams together): a quarter, so
/// a sender that stalls leaves room for three others.
pub const SENDER_BUDGET_BYTES: usize = SNAPSHOT_BUDGET_BYTES / 4;

/// Longest wait for a stream's next chunk.
pub const IDLE: Duration = Duration::from_secs(10);

/// The node-wide and per-sender budgets of bytes held by incoming snapshots.
pub struct Budget {
    node: Arc<Semaphore>,
    per_sender: Mutex<HashMap<u64, usize>>,
    node_bytes: usize,
    sender_bytes: usize,
}

/// Bytes one stream holds; given back when dropped.
pub struct Held {
    budget: Arc<Budget>,
    sender: u64,
    bytes: usize,
    permits: Vec<OwnedSemaphorePermit>,
}

impl Budget {
    /// A budget of `node_bytes` for all streams, `sender_bytes` for one sender's.
    pub fn new(node_bytes: usize, sender_bytes: usize) -> Arc<Budget> {
        Arc::new(Budget {
            node: Arc::new(Semaphore::new(node_bytes >> 10)),
            per_sender: Mutex::new(HashMap::new()),
            node_bytes,
            sender_bytes,
        })
    }

    /// The process's budget.
    pub fn global() -> &'static Arc<Budget> {
        static BUDGET: std::sync::LazyLock<Arc<Budget>> =
            std::sync::LazyLock::new(|| Budget::new(SNAPSHOT_BUDGET_BYTES, SENDER_BUDGET_BYTES));
        &BUDGET
    }

    /// An empty hold for a stream from `sender`.
    pub fn start(self: &Arc<Budget>, sender: u64) -> Held {
        Held {
            budget: self.clone(),
            sender,
            bytes: 0,
            permits: Vec::new(),
        }
    }

    fn sender_lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, usize>> {
        self.per_sender
            .lock()
            .expect("snapshot budget lock poisoned")
    }
}

impl Held {
    /// Take `bytes` more, or RESOURCE_EXHAUSTED `snapshot_budget` (the
    /// sender retries later) when the node's or this sender's share is held.
    pub fn take(&mut self, bytes: usize) -> Result<(), Status> {
        let refused = |what: &str, limit: usize| {
            crate::metrics::METRICS.raft_refused("snapshot_budget");
            Err(Status::resource_exhausted(format!(
                "snapshot_budget: {what} hold {limit} bytes of snapshots on this node already"
            )))
        };
        {
            let mut senders = self.budget.sender_lock();
            let now = senders.entry(self.sender).or_default();
            if *now + bytes > self.budget.sender_bytes {
                return refused(
                    &format!("streams from node {}", self.sender),
                    self.budget.sender_bytes,
                );
            }
            *now += bytes;
        }
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        match self.budget.node.clone().try_acquire_many_owned(kib) {
            Ok(p) => {
                self.permits.push(p);
                self.bytes += bytes;
                Ok(())
            }
            Err(_) => {
                self.give_back(bytes);
                refused("snapshot streams", self.budget.node_bytes)
            }
        }
    }

    fn give_back(&self, bytes: usize) {
        let mut senders = self.budget.sender_lock();
        if let Some(now) = senders.get_mut(&self.sender) {
            *now = now.saturating_sub(bytes);
            if *now == 0 {
                senders.remove(&self.sender);
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.give_back(self.bytes);
    }
}

/// The next chunk of a stream within [`IDLE`], or DEADLINE_EXCEEDED
/// `snapshot_idle`.
pub async fn next<T>(
    idle: Duration,
    next: impl std::future::Future<Output = Result<Option<T>, Status>>,
) -> Result<Option<T>, Status> {
    match tokio::time::timeout(idle, next).await {
        Ok(r) => r,
        Err(_) => {
            crate::metrics::METRICS.raft_refused("snapshot_idle");
            Err(Status::deadline_exceeded(format!(
                "snapshot_idle: no chunk of the snapshot for {} s",
                idle.as_secs()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sender_cannot_take_the_whole_node() {
        let b = Budget::new(4 << 20, 1 << 20);
        let mut a = b.start(1);
        a.take(1 << 20).unwrap();
        let e = a.take(1).unwrap_err();
        assert!(e.message().starts_with("snapshot_budget"), "{e}");
        // A second stream of the same sender shares its share.
        let mut a2 = b.start(1);
        assert!(a2.take(1024).is_err());
        // Others still have room.
        let mut c = b.start(2);
        c.take(1 << 20).unwrap();
        drop(a);
        a2.take(1 << 20).unwrap();
    }

    #[test]
    fn the_node_budget_bounds_every_sender_together() {
        let b = Budget::new(2 << 20, 2 << 20);
        let mut x = b.start(1);
        x.take(1 << 20).unwrap();
        let mut y = b.start(2);
        y.take(1 << 20).unwrap();
        let mut z = b.start(3);
        assert!(z.take(1024).is_err());
        // A refusal took nothing from z's sender share.
        assert!(b.sender_lock().get(&3).is_none());
        drop(x);
        z.take(1 << 20).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_stream_is_cut() {
        let stalled = std::future::pending::<Result<Option<u8>, Status>>();
        let e = next(IDLE, stalled).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::DeadlineExceeded);
        assert!(e.message().starts_with("snapshot_idle"));
    }
}
