//! Coverage: a drill proves nothing about faults that did not happen. It
//! fails if a scheduled fault was never injected or had no effect (a
//! failing fsync on a node whose build ignores the hook), if a kind of
//! fault the run set out to cover (`RunInfo::fault_kinds`) was never
//! injected, if no group's leader ever changed, or if no ownership move
//! overlapped a fault.

use std::collections::{BTreeMap, BTreeSet};

use super::{Input, Verdict, Violation};
use crate::history::{Call, Entry};

pub const NAME: &str = "coverage";

pub fn check(input: &Input<'_>) -> Verdict {
    let mut violations = Vec::new();
    let mut injected: BTreeMap<u32, u64> = BTreeMap::new();
    let mut healed: BTreeMap<u32, u64> = BTreeMap::new();
    let mut skipped: BTreeMap<u32, String> = BTreeMap::new();
    let mut no_effect: BTreeMap<u32, String> = BTreeMap::new();
    let mut leaders: BTreeMap<u64, BTreeSet<(u64, u64)>> = BTreeMap::new();
    let end = input
        .history
        .entries
        .iter()
        .map(Entry::t)
        .max()
        .unwrap_or(0);
    for e in &input.history.entries {
        match e {
            Entry::Fault { t, id, .. } => {
                injected.insert(*id, *t);
            }
            Entry::Heal { t, id } => {
                healed.insert(*id, *t);
            }
            Entry::Skipped { id, reason, .. } => {
                skipped.insert(*id, reason.clone());
            }
            Entry::NoEffect { id, reason, .. } => {
                no_effect.insert(*id, reason.clone());
            }
            Entry::Leader {
                group,
                leader,
                term,
                ..
            } => {
                leaders.entry(*group).or_default().insert((*term, *leader));
            }
            _ => {}
        }
    }
    let mut covered = BTreeSet::new();
    for f in &input.run.schedule {
        if let Some(why) = no_effect.get(&f.id) {
            violations.push(Violation {
                message: format!(
                    "scheduled fault {} ({}) at {:.1}s had no effect: {why}",
                    f.id,
                    f.fault.kind(),
                    f.at_ms as f64 / 1e3,
                ),
                ops: vec![],
            });
        } else if injected.contains_key(&f.id) {
            covered.insert(f.fault.kind());
        } else {
            violations.push(Violation {
                message: format!(
                    "scheduled fault {} ({}) at {:.1}s never happened: {}",
                    f.id,
                    f.fault.name(),
                    f.at_ms as f64 / 1e3,
                    skipped
                        .get(&f.id)
                        .map_or("the drill ended first", String::as_str)
                ),
                ops: vec![],
            });
        }
    }
    let claimed = &input.run.fault_kinds;
    let missing: Vec<&str> = claimed
        .iter()
        .filter(|k| !covered.contains(*k))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        violations.push(Violation {
            message: format!(
                "{} of the {} kinds of fault this run set out to cover never took effect: {} \
                 (a run shorter than a full round does not reach them all: the drill says at \
                 start how long one needs; or choose kinds with --faults)",
                missing.len(),
                claimed.len(),
                missing.join(", ")
            ),
            ops: vec![],
        });
    }
    let changed: Vec<u64> = leaders
        .iter()
        .filter(|(_, seen)| seen.len() > 1)
        .map(|(g, _)| *g)
        .collect();
    if changed.is_empty() {
        violations.push(Violation {
            message: "no group's leader ever changed".into(),
            ops: vec![],
        });
    }
    let faults: Vec<(u64, u64)> = injected
        .iter()
        .filter(|(id, _)| !no_effect.contains_key(id))
        .map(|(id, t)| (*t, healed.get(id).copied().unwrap_or(end)))
        .collect();
    let mut moves = 0;
    let mut overlapping = Vec::new();
    for o in &input.ops {
        if let Call::Move { .. } = o.call {
            moves += 1;
            let until = o.completed.unwrap_or(end);
            if faults.iter().any(|(a, b)| o.invoked < *b && *a < until) {
                overlapping.push(o.op);
            }
        }
    }
    if overlapping.is_empty() {
        violations.push(Violation {
            message: format!("none of the {moves} ownership moves overlapped a fault"),
            ops: vec![],
        });
    }
    Verdict::new(
        NAME,
        format!(
            "{}/{} scheduled faults injected{}; {}; leaders changed in {} groups; {}/{moves} moves overlapped a fault",
            injected.len().saturating_sub(no_effect.len()),
            input.run.schedule.len(),
            if no_effect.is_empty() {
                String::new()
            } else {
                format!(" ({} more had no effect)", no_effect.len())
            },
            kinds_line(claimed.len(), &missing, &input.run.cannot_inject),
            changed.len(),
            overlapping.len()
        ),
        violations,
    )
}

/// "17/18 kinds covered (not reached: disk-full; cannot inject here:
/// fsync-fail)", or a note that the run recorded no kinds to cover (runs
/// from before they were kept).
fn kinds_line(claimed: usize, missing: &[&str], cannot: &[(String, String)]) -> String {
    if claimed == 0 {
        return "no kinds of fault recorded to cover".into();
    }
    let mut s = format!("{}/{claimed} kinds covered", claimed - missing.len());
    let mut notes = Vec::new();
    if !missing.is_empty() {
        notes.push(format!("not reached: {}", missing.join(", ")));
    }
    if !cannot.is_empty() {
        let kinds: Vec<&str> = cannot.iter().map(|(k, _)| k.as_str()).collect();
        notes.push(format!("cannot inject here: {}", kinds.join(", ")));
    }
    if !notes.is_empty() {
        s.push_str(&format!(" ({})", notes.join("; ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixtures::{finals, good_dump, run, Done, H};
    use crate::check::Status;
    use crate::history::Reply;
    use crate::schedule::{Fault, ScheduledFault};

    fn base(with_move: bool, second_leader: bool) -> (crate::run::RunInfo, H) {
        let mut run = run();
        run.schedule = vec![ScheduledFault {
            id: 0,
            at_ms: 1_000,
            duration_ms: 3_000,
            fault: Fault::IsolateLeader,
        }];
        let mut h = H::default();
        h.entries.push(Entry::Leader {
            t: 0,
            group: 5,
            leader: 1,
            term: 1,
        });
        h.entries.push(Entry::Fault {
            t: 1_000_000,
            id: 0,
            kind: "isolate-leader".into(),
            detail: "node 1".into(),
        });
        if second_leader {
            h.entries.push(Entry::Leader {
                t: 2_000_000,
                group: 5,
                leader: 2,
                term: 2,
            });
        }
        h.entries.push(Entry::Heal {
            t: 4_000_000,
            id: 0,
        });
        if with_move {
            h.op(
                "operator",
                Call::Move {
                    event: "e".into(),
                    to: "eu-west".into(),
                },
                3.0,
                5.0,
                Done::Ok(Reply::Moved { epoch: 2 }),
            );
        }
        (run, h)
    }

    #[test]
    fn everything_covered_passes() {
        let (run, h) = base(true, true);
        let hist = h.history();
        let f = finals(vec![good_dump()]);
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Pass, "{v:?}");
    }

    #[test]
    fn missing_fault_leader_change_or_move_each_fail() {
        let f = finals(vec![good_dump()]);
        let (run, h) = base(true, false);
        let hist = h.history();
        let v = check(&Input::new(&run, &hist, &f));
        assert!(
            v.violations
                .iter()
                .any(|x| x.message.contains("leader ever changed")),
            "{v:?}"
        );

        let (run, h) = base(false, true);
        let hist = h.history();
        let v = check(&Input::new(&run, &hist, &f));
        assert!(
            v.violations
                .iter()
                .any(|x| x.message.contains("overlapped")),
            "{v:?}"
        );

        let (mut run, h) = base(true, true);
        run.schedule.push(ScheduledFault {
            id: 1,
            at_ms: 9_000,
            duration_ms: 3_000,
            fault: Fault::Bridge,
        });
        let hist = h.history();
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Fail);
        assert!(v.violations[0].message.contains("never happened"), "{v:?}");
    }

    #[test]
    fn a_fault_without_effect_or_a_kind_never_reached_fails() {
        let f = finals(vec![good_dump()]);
        // Every kind claimed was injected: pass.
        let (mut run, h) = base(true, true);
        run.fault_kinds = vec!["isolate-leader".into()];
        let hist = h.history();
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(v.summary.contains("1/1 kinds covered"), "{}", v.summary);

        // A kind claimed but not in the schedule: named, and a failure.
        run.fault_kinds.push("pause-leader".into());
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.violations
                .iter()
                .any(|x| x.message.contains("pause-leader")),
            "{v:?}"
        );
        assert!(
            v.summary.contains("not reached: pause-leader"),
            "{}",
            v.summary
        );

        // Injected, then found to have had no effect (a release build's
        // ignored fsync hook): neither the fault nor its kind counts.
        let (mut run, mut h) = base(true, true);
        run.schedule[0].fault = Fault::FsyncFail;
        run.fault_kinds = vec!["fsync-fail".into()];
        h.entries.push(Entry::NoEffect {
            t: 4_000_000,
            id: 0,
            kind: "fsync-fail".into(),
            reason: "node 1 was still running at the heal".into(),
        });
        let hist = h.history();
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.violations
                .iter()
                .any(|x| x.message.contains("had no effect")),
            "{v:?}"
        );
        assert!(
            v.violations
                .iter()
                .any(|x| x.message.contains("fsync-fail")),
            "{v:?}"
        );
        assert!(
            v.summary.starts_with("0/1 scheduled faults injected"),
            "{}",
            v.summary
        );
    }
}
