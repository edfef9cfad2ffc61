//! When the system may free a hold by itself, from the hold's own
//! `expires_at` and the leader clocks' skew at the time.
//!
//! A hold's leader stamps `expires_at` with its clock (skewed or not: the
//! stamp says what it says). A leader frees the hold once *its* clock reads
//! `expires_at`; a clock running `s` ms ahead reads it `s` ms early. So the
//! earliest free is `expires_at` minus the largest forward skew any clock
//! had around then, minus a small tolerance for placing wall-clock times
//! on the history's clock. The drill skews clocks only through its
//! `clock-skew` faults, recorded in the history with their times.

use crate::history::{Entry, History};
use crate::run::RunInfo;
use crate::schedule::Fault;

/// Placing a wall-clock time on the history's clock: both are read once at
/// the start, on one machine, and slewed alike, so only rounding (ms) and
/// a step of the wall clock could separate them.
pub const TOLERANCE_US: u64 = 250_000;

/// A skew file is re-read every 100 ms: a skew starts up to then after its
/// fault is recorded and ends up to then after its heal.
const SKEW_LAG_US: u64 = 300_000;

/// What the checker knows of the clocks of one run.
pub(super) struct Clocks {
    /// Wall-clock ms at history time 0 (0: unknown).
    started_unix_ms: u64,
    /// Forward (positive) clock skews: from, to (µs), ms ahead.
    ahead: Vec<(u64, u64, u64)>,
    max_skew_ms: u64,
}

impl Clocks {
    pub fn of(run: &RunInfo, history: &History) -> Clocks {
        let skew_ms = |id: u32| {
            run.schedule
                .iter()
                .find(|f| f.id == id)
                .and_then(|f| match f.fault {
                    Fault::ClockSkew { ms } if ms > 0 => Some(ms as u64),
                    _ => None,
                })
        };
        let mut ahead: Vec<(u32, u64, u64, u64)> = Vec::new();
        for e in &history.entries {
            match e {
                Entry::Fault { t, id, .. } => {
                    if let Some(ms) = skew_ms(*id) {
                        ahead.push((*id, *t, u64::MAX, ms));
                    }
                }
                Entry::Heal { t, id } => {
                    for a in ahead.iter_mut().filter(|a| a.0 == *id && a.2 == u64::MAX) {
                        a.2 = *t;
                    }
                }
                _ => {}
            }
        }
        Clocks {
            started_unix_ms: run.started_unix_ms,
            ahead: ahead
                .into_iter()
                .map(|(_, from, to, ms)| (from, to.saturating_add(SKEW_LAG_US), ms))
                .collect(),
            max_skew_ms: run.max_skew_ms,
        }
    }

    /// The earliest history time (µs) the system may free a hold stamped
    /// to expire at `expires_at_ms`; `None` when the run did not record
    /// its wall-clock start.
    pub fn free_from(&self, expires_at_ms: u64) -> Option<u64> {
        if self.started_unix_ms == 0 {
            return None;
        }
        let due = expires_at_ms.saturating_sub(self.started_unix_ms) * 1_000;
        // Clocks ahead at any time from which they could reach `due`.
        let from = due.saturating_sub(self.max_skew_ms * 1_000);
        let ahead = self
            .ahead
            .iter()
            .filter(|(start, end, _)| *start <= due && *end >= from)
            .map(|a| a.2)
            .max()
            .unwrap_or(0);
        Some(due.saturating_sub(ahead * 1_000 + TOLERANCE_US))
    }
}
