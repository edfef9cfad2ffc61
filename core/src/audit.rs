//! The operators' audit trail, kept by the directory: who did what, when,
//! with what result. Bounded: the oldest entries beyond [`AUDIT_KEEP`] are
//! dropped.

use serde::{Deserialize, Serialize};

/// Entries kept; older ones are forgotten.
pub const AUDIT_KEEP: usize = 10_000;

/// A re-sent entry (same `id`) among this many newest is not appended
/// again. Re-sends come within a client's deadline, seconds apart.
pub const AUDIT_DEDUP_WINDOW: usize = 1_000;

/// One operator action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Position in the trail (increasing).
    pub seq: u64,
    /// When the edge saw the action (its clock).
    pub at_ms: u64,
    /// The operator (the token's `sub`).
    pub actor: String,
    /// What was done, e.g. `transfer-leader`, `drain`, `create-event`.
    pub action: String,
    /// What it was done to, e.g. `group 4 -> node 2`.
    pub target: String,
    /// `ok` or the error.
    pub result: String,
    /// Unique per action (chosen by the edge): a re-sent entry with an id
    /// among the newest [`AUDIT_DEDUP_WINDOW`] is recorded once.
    #[serde(default)]
    pub id: String,
}
