//! The drill's verdict: `summary.json` (verdict per checker, ops, faults;
//! built here) and a self-contained `report.html` (PASS/FAIL and the
//! checkers; then throughput, latency, faults and moves on one time axis;
//! the violating ops in full; leader changes per group, named by their
//! events): the page and its tables in `page`; the timeline's SVGs drawn
//! on the canvas in `timeline`, their top in `overview`, the leader rows
//! in `leaders` (all of it also written as one SVG, `timeline.svg`).

mod leaders;
mod overview;
mod page;
pub mod resources;
mod series;
mod timeline;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::check::{Status, Verdict};
use crate::history::{Call, Entry, History, Op, Outcome};
use crate::run::RunInfo;

pub use page::{html, timeline_svg, timeline_svg_for};

/// Ops by how they ended: `ok`; `refused`, a definite "no" the system is
/// meant to give (seats taken, a stale epoch, a move in progress...);
/// `fail`, a definite failure (no leader in time, overloaded, a gateway
/// down); `info`, unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub ok: u64,
    #[serde(default)]
    pub refused: u64,
    pub fail: u64,
    pub info: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.ok + self.refused + self.fail + self.info
    }
}

/// Whether an op answered with `code` was refused by design rather than
/// failed: every stable code but those saying the system could not serve.
pub fn is_refusal(code: &str) -> bool {
    !matches!(
        code,
        "no_leader"
            | "group_unavailable"
            | "gateway_unavailable"
            | "payments_disabled"
            | "overloaded"
            | "rate_limited"
            | "internal"
            | "request_timeout"
            | "transfer_failed"
            | "transfer_timeout"
    )
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckerLine {
    pub checker: String,
    pub verdict: Status,
    pub summary: String,
    pub violations: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub verdict: Status,
    pub seed: u64,
    pub duration_s: u64,
    pub partition_mechanism: String,
    pub unavailable_mechanisms: Vec<(String, String)>,
    pub planted_bug: Option<String>,
    pub checkers: Vec<CheckerLine>,
    pub ops: Counts,
    pub ops_by_call: BTreeMap<String, Counts>,
    pub faults_scheduled: usize,
    pub faults_injected: usize,
    pub faults_by_kind: BTreeMap<String, u32>,
    pub leader_changes: u64,
    pub moves_done: u64,
    pub moves_started: u64,
    /// Whether the cluster settled after the heal (replicas equal, moves
    /// finished, payments resolved), and what was still pending if not.
    pub settled: bool,
    pub unsettled: Vec<String>,
}

pub fn overall(verdicts: &[Verdict]) -> Status {
    if verdicts.iter().any(|v| v.status == Status::Fail) {
        Status::Fail
    } else if verdicts.iter().any(|v| v.status == Status::Unknown) {
        Status::Unknown
    } else {
        Status::Pass
    }
}

/// Leader changes seen by the observer: each new `(term, leader)` per group
/// after the first.
fn leader_changes(history: &History) -> u64 {
    let mut seen: BTreeMap<u64, BTreeSet<(u64, u64)>> = BTreeMap::new();
    for e in &history.entries {
        if let Entry::Leader {
            group,
            leader,
            term,
            ..
        } = e
        {
            seen.entry(*group).or_default().insert((*term, *leader));
        }
    }
    seen.values()
        .map(|s| s.len().saturating_sub(1) as u64)
        .sum()
}

pub fn summarize(
    run: &RunInfo,
    history: &History,
    ops: &[Op],
    verdicts: &[Verdict],
    finals: &crate::run::FinalState,
) -> Summary {
    let mut total = Counts::default();
    let mut by_call: BTreeMap<String, Counts> = BTreeMap::new();
    let (mut moves_started, mut moves_done) = (0, 0);
    for o in ops {
        let c = by_call.entry(o.call.name().to_string()).or_default();
        for c in [&mut total, c] {
            match o.outcome {
                Outcome::Ok(_) => c.ok += 1,
                Outcome::Fail { ref code, .. } if is_refusal(code) => c.refused += 1,
                Outcome::Fail { .. } => c.fail += 1,
                Outcome::Unknown(_) => c.info += 1,
            }
        }
        if let Call::Move { .. } = o.call {
            moves_started += 1;
            if matches!(o.outcome, Outcome::Ok(_)) {
                moves_done += 1;
            }
        }
    }
    let mut by_kind = BTreeMap::new();
    // A fault found to have had no effect was not injected.
    let mut injected = 0usize;
    for e in &history.entries {
        match e {
            Entry::Fault { kind, .. } => {
                injected += 1;
                *by_kind.entry(kind.clone()).or_insert(0) += 1;
            }
            Entry::NoEffect { kind, .. } => {
                injected = injected.saturating_sub(1);
                if let Some(n) = by_kind.get_mut(kind.as_str()) {
                    *n -= 1;
                    if *n == 0 {
                        by_kind.remove(kind.as_str());
                    }
                }
            }
            _ => {}
        }
    }
    Summary {
        verdict: overall(verdicts),
        seed: run.seed,
        duration_s: run.duration_s,
        partition_mechanism: run.partition_mechanism.clone(),
        unavailable_mechanisms: run.unavailable_mechanisms.clone(),
        planted_bug: run.planted_bug.clone(),
        checkers: verdicts
            .iter()
            .map(|v| CheckerLine {
                checker: v.checker.clone(),
                verdict: v.status,
                summary: v.summary.clone(),
                violations: v.violations.len(),
            })
            .collect(),
        ops: total,
        ops_by_call: by_call,
        faults_scheduled: run.schedule.len(),
        faults_injected: injected,
        faults_by_kind: by_kind,
        leader_changes: leader_changes(history),
        moves_done,
        moves_started,
        settled: finals.converged,
        unsettled: finals.notes.iter().take(20).cloned().collect(),
    }
}

/// The colour a verdict is shown in.
fn color(s: Status) -> &'static str {
    match s {
        Status::Pass => "#5cb85c",
        Status::Fail => "#d9534f",
        Status::Unknown => "#f0ad4e",
    }
}

/// `1 group`, `7 groups`: `n` and what it counts.
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `s` escaped for HTML text and attribute values.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::is_refusal;

    #[test]
    fn refusals_by_design_are_not_failures() {
        for code in [
            "seats_unavailable",
            "stale_epoch",
            "move_in_progress",
            "sale_closed",
        ] {
            assert!(is_refusal(code), "{code}");
        }
        for code in ["no_leader", "overloaded", "gateway_unavailable", "internal"] {
            assert!(!is_refusal(code), "{code}");
        }
    }
}
