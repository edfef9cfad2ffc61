//! Admission control: a bound on mutations in flight per edge, a token
//! bucket per user, and a budget of request body bytes held in memory at
//! once. Beyond a slot or a rate the edge answers 429 with `Retry-After`,
//! beyond the budget 503 `edge_overloaded`; nothing waits in a hidden
//! queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use seatfence_core::UserId;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// The body budget when none is configured: 64 MiB.
pub const DEFAULT_BODY_BUDGET: usize = 64 << 20;

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// One edge's admission control: in-flight slots for mutations and for other
/// requests, and token buckets per user and per anonymous caller's address.
pub struct Admission {
    /// The anonymous routes' buckets, per address (see
    /// [`Admission::check_anonymous`]).
    anonymous: Mutex<HashMap<crate::conn::Peer, Bucket>>,
    anonymous_rate: f64,
    inflight: Arc<Semaphore>,
    /// Every other request (reads, operator calls, callbacks, webhooks).
    other: Arc<Semaphore>,
    rate: f64,
    burst: f64,
    /// Held only for one map update, never across `.await`.
    buckets: Mutex<HashMap<UserId, Bucket>>,
    /// Request body bytes every connection together may hold: one permit
    /// per byte, taken before a body is read and held until its answer.
    bodies: Arc<Semaphore>,
    body_budget: usize,
}

/// The most body bytes one permit call takes (a [`Semaphore`] counts in `u32`).
const MAX_ONE_BODY: usize = u32::MAX as usize;

/// Take a token of `key`'s bucket (`rate` per second, up to `burst`);
/// whether there was one. The mutex is held for this one update only.
fn take<K: std::hash::Hash + Eq + Clone>(
    buckets: &Mutex<HashMap<K, Bucket>>,
    key: &K,
    rate: f64,
    burst: f64,
) -> bool {
    let now = Instant::now();
    let mut buckets = buckets.lock().expect("bucket lock poisoned");
    if buckets.len() > 100_000 {
        // Forget full buckets so the map stays bounded.
        buckets.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * rate < burst);
    }
    let b = buckets.entry(key.clone()).or_insert(Bucket {
        tokens: burst,
        at: now,
    });
    b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rate).min(burst);
    b.at = now;
    if b.tokens < 1.0 {
        return false;
    }
    b.tokens -= 1.0;
    true
}

impl Admission {
    /// `max_inflight` mutation slots, `max_other` slots for other requests, and
    /// per-user buckets of `rate_per_sec` tokens per second up to `burst`; each at least 1.
    pub fn new(max_inflight: usize, max_other: usize, rate_per_sec: u32, burst: u32) -> Admission {
        Admission {
            anonymous: Mutex::new(HashMap::new()),
            anonymous_rate: 5_000.0,
            inflight: Arc::new(Semaphore::new(max_inflight.max(1))),
            other: Arc::new(Semaphore::new(max_other.max(1))),
            rate: f64::from(rate_per_sec.max(1)),
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
            bodies: Arc::new(Semaphore::new(DEFAULT_BODY_BUDGET)),
            body_budget: DEFAULT_BODY_BUDGET,
        }
    }

    /// Every connection together holds at most `bytes` of request bodies
    /// (at least 1 MiB, the largest body a route reads).
    pub fn with_body_budget(mut self, bytes: usize) -> Admission {
        let bytes = bytes.clamp(crate::message::MAX_BODY_BYTES, MAX_ONE_BODY);
        self.bodies = Arc::new(Semaphore::new(bytes));
        self.body_budget = bytes;
        self
    }

    /// Room for a body of `bytes` (a declared length, or the route's limit
    /// when none is declared), held until the permit drops; 503
    /// `edge_overloaded` when the budget has no room now. `bytes` is at
    /// most the budget: a route's limit is never larger.
    pub fn enter_body(&self, bytes: usize) -> Result<OwnedSemaphorePermit, ApiError> {
        let n = bytes.min(self.body_budget) as u32;
        self.bodies.clone().try_acquire_many_owned(n).map_err(|_| {
            ApiError::unavailable(
                "edge_overloaded",
                "request bodies on this edge are at their memory budget; retry shortly",
            )
        })
    }

    /// Body bytes held now (reserved by requests being read or handled).
    pub fn body_bytes_held(&self) -> usize {
        self.body_budget - self.bodies.available_permits()
    }

    /// The anonymous routes' rate per address (burst: twice that).
    pub fn with_anonymous_rate(mut self, per_sec: u32) -> Admission {
        self.anonymous_rate = f64::from(per_sec.max(1));
        self
    }

    /// Take one of `user`'s tokens, or refuse.
    pub fn check_rate(&self, user: &UserId) -> Result<(), ApiError> {
        if take(&self.buckets, user, self.rate, self.burst) {
            return Ok(());
        }
        Err(ApiError::TooManyRequests {
            code: "rate_limited",
            message: format!("more than {} requests per second from {user}", self.rate),
        })
    }

    /// Take one of `peer`'s tokens for a route anyone may call without a
    /// token (payment callback and webhook, probes, `/metrics`), or
    /// refuse: one address cannot make those routes' work its own.
    pub(crate) fn check_anonymous(&self, peer: crate::conn::Peer) -> Result<(), ApiError> {
        let rate = self.anonymous_rate;
        if take(&self.anonymous, &peer, rate, 2.0 * rate) {
            return Ok(());
        }
        Err(ApiError::TooManyRequests {
            code: "rate_limited",
            message: format!("more than {rate} requests per second from one address"),
        })
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
    fn an_address_beyond_its_anonymous_burst_is_refused_and_others_are_not() {
        let a = Admission::new(2, 2, 1, 3).with_anonymous_rate(2);
        let one = crate::conn::Peer::of("198.51.100.7".parse().unwrap());
        for _ in 0..4 {
            a.check_anonymous(one).unwrap();
        }
        assert_eq!(a.check_anonymous(one).unwrap_err().code(), "rate_limited");
        a.check_anonymous(crate::conn::Peer::of("198.51.100.8".parse().unwrap()))
            .unwrap();
    }

    #[test]
    fn body_bytes_beyond_the_budget_are_refused_until_released() {
        let mib = crate::message::MAX_BODY_BYTES;
        let a = Admission::new(1, 1, 1, 1).with_body_budget(2 * mib);
        let big = a.enter_body(mib).unwrap();
        let small = a.enter_body(mib - 10).unwrap();
        assert_eq!(a.body_bytes_held(), 2 * mib - 10);
        let e = a.enter_body(11).unwrap_err();
        assert_eq!((e.code(), e.retry_after()), ("edge_overloaded", Some(1)));
        assert_eq!(e.status().as_u16(), 503);
        let _fits = a.enter_body(10).unwrap();
        drop(big);
        let _again = a.enter_body(mib).unwrap();
        drop(small);
        // A budget below the largest body is raised to it.
        let tiny = Admission::new(1, 1, 1, 1).with_body_budget(1);
        let _whole = tiny.enter_body(mib).unwrap();
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
