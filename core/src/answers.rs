//! Answers to keyed requests that are not one event's (`Idempotency-Key`
//! on `POST /v1/events` and on move requests), kept by the directory: a
//! retry with the same key and body gets the first answer, another body
//! under the same key is refused. Kept a day ([`ANSWER_TTL_MS`]), like the
//! event groups' own idempotency records.

use serde::{Deserialize, Serialize};

/// A recorded answer is forgotten this long after it was made.
pub const ANSWER_TTL_MS: u64 = crate::inventory::OPERATION_TTL_MS;

/// The first answer to a keyed request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyedAnswer {
    /// A hash of the request (method, path and body).
    pub request_hash: u64,
    /// The edge's clock when it answered.
    pub at_ms: u64,
    pub status: u16,
    /// The answer's JSON body, as text.
    pub body: String,
    /// The answer's headers worth repeating (`location`, fences).
    pub headers: Vec<(String, String)>,
}

/// A request's hash for [`KeyedAnswer::request_hash`].
pub fn request_hash(method: &str, path: &str, body: &[u8]) -> u64 {
    let bytes = [method.as_bytes(), b" ", path.as_bytes(), b"\n", body].concat();
    crate::inventory::apply_fnv(&bytes)
}
