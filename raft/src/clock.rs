//! [`Clock`]: the leader's source of `now_ms`, injected so tests and the
//! chaos harness can skew it. Only the leader reads it, just before
//! proposing; `apply` never does.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system clock plus an adjustable skew (0 unless a drill sets one).
#[derive(Debug, Default)]
pub struct SystemClock {
    skew_ms: AtomicI64,
}

impl SystemClock {
    pub fn set_skew_ms(&self, skew: i64) {
        self.skew_ms.store(skew, Ordering::Relaxed);
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        now.saturating_add(self.skew_ms.load(Ordering::Relaxed))
            .max(0) as u64
    }
}
