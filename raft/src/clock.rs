//! [`Clock`]: the leader's source of `now_ms`, injected so tests and the
//! chaos harness can skew it. Only the leader reads it, just before
//! proposing; `apply` never does.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where a leader reads the wall-clock time; a trait so tests and drills can skew it.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system clock, plus a skew (0 unless a drill sets one).
#[derive(Debug, Default)]
pub struct SystemClock {
    skew_ms: AtomicI64,
}

impl SystemClock {
    /// Shift every later reading by `ms` (negative: behind).
    pub fn set_skew(&self, ms: i64) {
        self.skew_ms.store(ms, Ordering::Relaxed);
    }

    /// The current skew, in ms (negative: behind).
    pub fn skew(&self) -> i64 {
        self.skew_ms.load(Ordering::Relaxed)
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        now.saturating_add(self.skew()).max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_shifts_readings() {
        let c = SystemClock::default();
        let base = c.now_ms();
        c.set_skew(60_000);
        let ahead = c.now_ms();
        assert!(
            ahead >= base + 60_000 && ahead < base + 70_000,
            "{base} {ahead}"
        );
        c.set_skew(-60_000);
        assert!(c.now_ms() < base);
    }
}
