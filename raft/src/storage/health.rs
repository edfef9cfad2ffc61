//! [`Health`]: whether the node's storage may still be written and trusted.
//!
//! Two conditions, both node-wide:
//! - **Failed**: a flush (sled's, or a round of the node-wide log: a
//!   write and its fsync) returned an error. What that
//!   flush covered may or may not be on disk, and a later flush that
//!   succeeds proves nothing about it (Linux may drop the failed pages and
//!   clear the error: PostgreSQL's "fsyncgate"). So the first failure is
//!   final: every later flush fails without touching the disk, nothing it
//!   covered is acknowledged, and the node exits (`seatfence_node::run`);
//!   a restart recovers from what the disk really holds.
//! - **Full**: the data directory's free space is below the reserve
//!   (`[raft] min_free_mb`). The node stops taking new data (proposals are
//!   refused `storage_full`, appends carrying entries and snapshots are
//!   refused to leaders) while it still reads, answers heartbeats and votes
//!   (a few bytes each, which the reserve covers). A watcher rechecks every
//!   [`SPACE_EVERY`] and lifts it once free space is back above the reserve
//!   plus a quarter, so the node recovers by itself.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{watch, Mutex};

use super::io_err;

/// How often the free-space watcher looks.
pub const SPACE_EVERY: Duration = Duration::from_millis(500);

/// The name of the file that makes every flush fail (builds with the
/// `fault-injection` feature only; see [`Health::flush`]).
pub const FAULT_FSYNC_FILE: &str = "FAULT_FSYNC";

/// Whether this build reads [`FAULT_FSYNC_FILE`] at all: the
/// `fault-injection` feature (test builds, and `cargo build --release
/// --features fault-injection`). A release build without it ignores the
/// file, so a drill must not schedule a fault it cannot inject.
pub const FSYNC_FAULT_HOOK: bool = cfg!(any(test, feature = "fault-injection"));

/// Set (to anything) in a node's environment, its storage ignores
/// [`FAULT_FSYNC_FILE`] even in a build with the hook, exactly as a build
/// without it does. Tests only: it proves a drill's coverage notices a
/// fault that had no effect (`tests/t98_chaos.rs`).
pub const IGNORE_FSYNC_HOOK_ENV: &str = "SEATFENCE_TEST_IGNORE_FSYNC_HOOK";

pub(crate) struct Health {
    dir: PathBuf,
    /// Flushes one at a time, so a flush that starts after a failure sees
    /// it (two overlapping flushes: the second could succeed over pages the
    /// first lost).
    flushing: Mutex<()>,
    /// Why the first failed flush failed; `None` while none has.
    tx_failed: watch::Sender<Option<String>>,
    full: AtomicBool,
    /// Drills only: full whatever the free space (`force_full`).
    forced_full: AtomicBool,
    free_bytes: AtomicU64,
    /// Whether flushes read [`FAULT_FSYNC_FILE`] (see [`FSYNC_FAULT_HOOK`]).
    #[cfg_attr(not(any(test, feature = "fault-injection")), allow(dead_code))]
    fsync_hook: bool,
}

impl Health {
    pub fn new(dir: &Path) -> Arc<Health> {
        Arc::new(Health {
            dir: dir.to_path_buf(),
            flushing: Mutex::new(()),
            tx_failed: watch::Sender::new(None),
            full: AtomicBool::new(false),
            forced_full: AtomicBool::new(false),
            free_bytes: AtomicU64::new(u64::MAX),
            fsync_hook: FSYNC_FAULT_HOOK && std::env::var_os(IGNORE_FSYNC_HOOK_ENV).is_none(),
        })
    }

    /// Flush `db` unless an earlier flush failed; a failure here is
    /// recorded and final. `sled::Db::flush` runs on tokio's blocking pool,
    /// not `flush_async`: that runs on sled's own small thread pool, which
    /// stalled completely with 100 groups flushing at once (bench raft
    /// --groups 100 committed nothing).
    pub async fn flush(&self, db: &sled::Db) -> io::Result<()> {
        let db = db.clone();
        self.guarded(move || db.flush().map(drop).map_err(io_err))
            .await
    }

    /// Run `write_and_sync` (blocking: a write and its fsync) on tokio's
    /// blocking pool, one at a time with every other flush, unless an
    /// earlier one failed; a failure here is recorded and final.
    pub async fn guarded<F>(&self, write_and_sync: F) -> io::Result<()>
    where
        F: FnOnce() -> io::Result<()> + Send + 'static,
    {
        let _one = self.flushing.lock().await;
        if let Some(why) = self.failed() {
            return Err(io::Error::other(format!(
                "storage failed earlier ({why}): nothing is flushed after a failed flush"
            )));
        }
        #[cfg(any(test, feature = "fault-injection"))]
        let fault = self.fsync_hook.then(|| self.dir.join(FAULT_FSYNC_FILE));
        let r = tokio::task::spawn_blocking(move || {
            let r = write_and_sync();
            // The write happened; its fsync "failed": the data may or may
            // not be on disk, as after a real EIO.
            #[cfg(any(test, feature = "fault-injection"))]
            if let Some(fault) = fault.filter(|f| r.is_ok() && f.exists()) {
                return Err(io::Error::other(format!(
                    "injected fsync failure ({} exists)",
                    fault.display()
                )));
            }
            r
        })
        .await
        .map_err(io_err)
        .and_then(|r| r);
        if let Err(e) = &r {
            let why = e.to_string();
            tracing::error!(dir = %self.dir.display(), error = %why, "storage flush FAILED: nothing it covered is acknowledged; the node stops");
            self.tx_failed.send_if_modified(|v| {
                let first = v.is_none();
                if first {
                    *v = Some(why);
                }
                first
            });
        }
        r
    }

    /// Why the first failed flush failed, once one has.
    pub fn failed(&self) -> Option<String> {
        self.tx_failed.borrow().clone()
    }

    /// Resolves with the reason once a flush has failed.
    pub fn watch_failed(&self) -> watch::Receiver<Option<String>> {
        self.tx_failed.subscribe()
    }

    /// Whether free space is below the reserve (last look), or a drill
    /// says so.
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::Relaxed) || self.forced_full.load(Ordering::Relaxed)
    }

    /// Drills only: behave as if the disk were full (`true`) until told
    /// otherwise, whatever the free space.
    pub fn force_full(&self, on: bool) {
        if self.forced_full.swap(on, Ordering::Relaxed) != on {
            tracing::warn!(full = on, "storage full forced (drill)");
        }
    }

    /// Free bytes of the data directory's filesystem (last look).
    #[cfg(test)]
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes.load(Ordering::Relaxed)
    }

    /// Look at free space now; set or lift "full" against `reserve`.
    pub fn check_space(&self, reserve: u64) {
        let free = match fs2::available_space(&self.dir) {
            Ok(free) => free,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot read free space");
                return;
            }
        };
        self.free_bytes.store(free, Ordering::Relaxed);
        let was = self.full.load(Ordering::Relaxed);
        let full = if was {
            free < reserve.saturating_add(reserve / 4)
        } else {
            free < reserve
        };
        if full != was {
            self.full.store(full, Ordering::Relaxed);
            if full {
                tracing::error!(dir = %self.dir.display(), free, reserve, "storage FULL: refusing new writes (storage_full) until space returns");
            } else {
                tracing::warn!(dir = %self.dir.display(), free, reserve, "storage has room again: taking writes");
            }
        }
        let m = &crate::metrics::METRICS;
        m.storage_full.set(if self.is_full() { 1.0 } else { 0.0 });
        m.storage_free_bytes.set(free as f64);
    }

    /// Check free space every [`SPACE_EVERY`] until `self` is dropped
    /// (reserve 0: never full, free space still reported).
    pub fn watch_space(self: &Arc<Self>, reserve: u64) {
        self.check_space(reserve);
        let weak: Weak<Health> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SPACE_EVERY).await;
                let Some(h) = weak.upgrade() else { return };
                let h2 = h.clone();
                // statvfs can block on a sick disk: off the runtime.
                let _ = tokio::task::spawn_blocking(move || h2.check_space(reserve)).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_flush_is_final() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path().join("sled"))
            .open()
            .unwrap();
        let h = Health::new(dir.path());
        db.insert(b"a", b"1").unwrap();
        h.flush(&db).await.unwrap();
        assert_eq!(h.failed(), None);

        std::fs::write(dir.path().join(FAULT_FSYNC_FILE), b"").unwrap();
        db.insert(b"b", b"2").unwrap();
        let e = h.flush(&db).await.unwrap_err();
        assert!(e.to_string().contains("injected fsync failure"), "{e}");
        assert!(h.failed().is_some());
        assert!(h.watch_failed().borrow().is_some());

        // The disk "recovers": a flush would succeed now, and must not be
        // taken as proof that the failed one's data is safe.
        std::fs::remove_file(dir.path().join(FAULT_FSYNC_FILE)).unwrap();
        db.insert(b"c", b"3").unwrap();
        let e = h.flush(&db).await.unwrap_err();
        assert!(e.to_string().contains("storage failed earlier"), "{e}");
    }

    #[tokio::test]
    async fn full_below_the_reserve_and_back_above_it_plus_a_quarter() {
        let dir = tempfile::tempdir().unwrap();
        let h = Health::new(dir.path());
        h.check_space(0);
        let free = h.free_bytes();
        assert!(free > 0 && free < u64::MAX && !h.is_full());
        h.check_space(u64::MAX);
        assert!(h.is_full());
        // Free space between the reserve and reserve × 1.25: still full.
        h.check_space(free - free / 10);
        assert!(h.is_full());
        h.check_space(free / 2);
        assert!(!h.is_full());
    }
}
