//! How long to wait before asking again: exponential backoff with full
//! jitter, bounded, and never less than the edge's `Retry-After`.

use std::time::Duration;

use rand::Rng;

/// A call's retry budget.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// The first wait's upper bound; doubled each attempt.
    pub base: Duration,
    /// The largest wait.
    pub max: Duration,
    /// The whole call, every attempt and wait included.
    pub deadline: Duration,
    /// One attempt's own bound.
    pub attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(50),
            max: Duration::from_secs(2),
            deadline: Duration::from_secs(15),
            attempt_timeout: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1` (`attempt` from 0): a random
    /// share of `base * 2^attempt` (at most `max`), but at least what the
    /// edge asked for (`retry_after`).
    pub fn wait(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let cap = self
            .base
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max);
        let jittered = cap.mul_f64(rand::thread_rng().gen_range(0.0..=1.0));
        jittered.max(retry_after.unwrap_or_default())
    }
}

/// `Retry-After` in whole seconds (the edge's form); an HTTP date or
/// garbage is ignored, and a huge value is cut to a minute.
pub fn retry_after(value: Option<&str>) -> Option<Duration> {
    let secs: u64 = value?.trim().parse().ok()?;
    Some(Duration::from_secs(secs.min(60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_stay_bounded_and_honour_retry_after() {
        let p = RetryPolicy::default();
        for attempt in 0..40 {
            let w = p.wait(attempt, None);
            assert!(w <= p.max, "{attempt}: {w:?}");
            assert!(w <= p.base * 2u32.pow(attempt.min(16)), "{attempt}: {w:?}");
        }
        assert!(p.wait(0, Some(Duration::from_secs(1))) >= Duration::from_secs(1));
        assert_eq!(retry_after(Some("1")), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(Some("86400")), Some(Duration::from_secs(60)));
        assert_eq!(retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(None), None);
    }
}
