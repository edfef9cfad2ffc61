//! Answers to keyed requests that are not one event's (`Idempotency-Key`
//! on `POST /v1/events` and on move requests), kept by the directory: a
//! retry with the same key and body gets the first answer, another body
//! under the same key is refused. Kept a day ([`ANSWER_TTL_MS`]), like the
//! event groups' own idempotency records.
//!
//! A request first *reserves* its key (a pending answer, `status == 0`,
//! naming the request), runs, then records its answer under the same
//! request id, or forgets the reservation when the answer is not final:
//! of two concurrent requests with one key only one runs. A reservation
//! older than [`PENDING_TTL_MS`] (its edge died mid-request) may be taken
//! over.

use serde::{Deserialize, Serialize};

/// A recorded answer is forgotten this long after it was made.
pub const ANSWER_TTL_MS: u64 = crate::inventory::OPERATION_TTL_MS;

/// A reservation whose request never answered is abandoned after this.
pub const PENDING_TTL_MS: u64 = 60_000;

/// The first answer to a keyed request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyedAnswer {
    /// A hash of the request (method, path and body).
    pub request_hash: u64,
    /// The edge's clock when it answered.
    pub at_ms: u64,
    /// The answer's HTTP status; 0 while the key is only reserved.
    pub status: u16,
    /// The answer's JSON body, as text.
    pub body: String,
    /// The answer's headers worth repeating (`location`, fences).
    pub headers: Vec<(String, String)>,
    /// The request that reserved the key (unique per request).
    pub request: String,
}

impl KeyedAnswer {
    /// Reserved: its request is still running.
    pub fn pending(&self) -> bool {
        self.status == 0
    }

    /// Whether `self` (recorded) yields to `new` at `new.at_ms`: the same
    /// request completing it, or a record that lapsed.
    pub fn replaced_by(&self, new: &KeyedAnswer) -> bool {
        let ttl = if self.pending() {
            PENDING_TTL_MS
        } else {
            ANSWER_TTL_MS
        };
        self.request == new.request || self.at_ms.saturating_add(ttl) <= new.at_ms
    }
}

/// A request's hash for [`KeyedAnswer::request_hash`].
pub fn request_hash(method: &str, path: &str, body: &[u8]) -> u64 {
    let bytes = [method.as_bytes(), b" ", path.as_bytes(), b"\n", body].concat();
    crate::inventory::apply_fnv(&bytes)
}
