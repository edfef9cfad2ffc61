//! The availability cache: answers reused for [`AVAILABILITY_CACHE`] to
//! absorb refresh storms, each asked of the leader for at least
//! [`AVAILABILITY_FETCH`] free seats and cut to the `limit` a request asks.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use seatfence_core::EventId;

/// How long an availability answer is reused.
pub const AVAILABILITY_CACHE: Duration = Duration::from_millis(250);

/// The fewest free seats an availability answer asks the leader for: any
/// smaller `limit` is served from the same cached answer, so varying
/// `limit` does not reach the leader more often.
pub const AVAILABILITY_FETCH: u32 = 1000;

/// A cached availability answer cut to `limit` free seats.
pub(crate) fn cut(body: &serde_json::Value, limit: u32) -> serde_json::Value {
    let mut body = body.clone();
    if let Some(seats) = body["available_seats"].as_array_mut() {
        seats.truncate(limit as usize);
    }
    let listed = body["available_seats"].as_array().map_or(0, |a| a.len()) as u64;
    body["available_seats_truncated"] = (listed < body["available"].as_u64().unwrap_or(0)).into();
    body["limit"] = limit.into();
    body
}

/// Availability answers by event, with when each was fetched. The lock is
/// held only for a lookup or insert, never across `.await`.
#[derive(Default)]
pub struct AvailabilityCache {
    entries: Mutex<HashMap<EventId, (Instant, serde_json::Value)>>,
}

impl AvailabilityCache {
    /// A fresh enough answer for `event` covering `limit` seats, cut to
    /// `limit`, with when it was fetched.
    pub fn get(&self, event: &EventId, limit: u32) -> Option<(serde_json::Value, Instant)> {
        let cache = self.entries.lock().expect("availability lock poisoned");
        let (at, body) = cache.get(event).filter(|(at, body)| {
            at.elapsed() < AVAILABILITY_CACHE && body["limit"].as_u64() >= Some(u64::from(limit))
        })?;
        Some((cut(body, limit), *at))
    }

    /// Keep `body` (fetched at `at`) for `event`; past 10,000 entries the
    /// expired ones are dropped first.
    pub fn store(&self, event: &EventId, at: Instant, body: serde_json::Value) {
        let mut cache = self.entries.lock().expect("availability lock poisoned");
        if cache.len() > 10_000 {
            cache.retain(|_, (t, _)| t.elapsed() < AVAILABILITY_CACHE);
        }
        cache.insert(event.clone(), (at, body));
    }
}
