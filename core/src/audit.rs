//! The operators' audit trail, kept by the directory: who did what, when,
//! with what result. Bounded: the oldest entries beyond [`AUDIT_KEEP`] are
//! dropped.

use serde::{Deserialize, Serialize};

/// Entries kept; older ones are forgotten.
pub const AUDIT_KEEP: usize = 10_000;

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
}
