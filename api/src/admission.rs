//! Admission control: a bound on mutations in flight per edge and a token
//! bucket per user. Beyond either the edge answers 429 with `Retry-After`;
//! nothing waits in a hidden queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use seatfence_core::UserId;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

struct Bucket {
    tokens: f64,
    at: Instant,
}

pub struct Admission {
    inflight: Arc<Semaphore>,
    /// Every other request (reads, operator calls, callbacks, webhooks).
    other: Arc<Semaphore>,
    rate: f64,
    burst: f64,
    /// Held only for one map update, never across `.await`.
    buckets: Mutex<HashMap<UserId, Bucket>>,
}

impl Admission {
    pub fn new(max_inflight: usize, max_other: usize, rate_per_sec: u32, burst: u32) -> Admission {
        Admission {
            inflight: Arc::new(Semaphore::new(max_inflight.max(1))),
            other: Arc::new(Semaphore::new(max_other.max(1))),
            rate: f64::from(rate_per_sec.max(1)),
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one of `user`'s tokens, or refuse.
    pub fn check_rate(&self, user: &UserId) -> Result<(), ApiError> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("bucket lock poisoned");
        if buckets.len() > 100_000 {
            // Forget full buckets so the map stays bounded.
            let burst = self.burst;
            let rate = self.rate;
            buckets.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * rate < burst);
        }
        let b = buckets.entry(user.clone()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * self.rate).min(self.burst);
        b.at = now;
        if b.tokens < 1.0 {
            return Err(ApiError::TooManyRequests {
                code: "rate_limited",
                message: format!("more than {} requests per second from {user}", self.rate),
            });
        }
        b.tokens -= 1.0;
        Ok(())
    }

    /// A slot for one mutation, released when the permit drops.
    pub fn enter(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        Self::slot(&self.inflight)
    }

    /// A slot for any other request, from its own pool (a flood of reads
    /// or callbacks never takes the buyers' mutation slots).
    pub fn enter_other(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        Self::slot(&self.other)
    }

    fn slot(pool: &Arc<Semaphore>) -> Result<OwnedSemaphorePermit, ApiError> {
        pool.clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::TooManyRequests {
                code: "overloaded",
                message: "too many requests in flight on this edge; retry shortly".into(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_beyond_the_burst_is_refused_and_others_are_not() {
        let a = Admission::new(2, 2, 1, 3);
        let alice = UserId("alice".into());
        for _ in 0..3 {
            a.check_rate(&alice).unwrap();
        }
        assert_eq!(a.check_rate(&alice).unwrap_err().code(), "rate_limited");
        a.check_rate(&UserId("bob".into())).unwrap();
    }

    #[test]
    fn inflight_is_bounded_and_released() {
        let a = Admission::new(1, 1, 1, 1);
        let p = a.enter().unwrap();
        assert_eq!(a.enter().unwrap_err().code(), "overloaded");
        // Reads have their own pool: mutations in flight do not starve them.
        let r = a.enter_other().unwrap();
        assert_eq!(a.enter_other().unwrap_err().code(), "overloaded");
        drop(p);
        drop(r);
        let _again = a.enter().unwrap();
        let _read = a.enter_other().unwrap();
    }
}
