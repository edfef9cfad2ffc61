//! No write accepted under a stale epoch. Once a move of an event has
//! finished (the operator saw it `done`) with epoch `e`, any write invoked
//! after that and answered ok must carry an epoch of at least `e`; the
//! zombie client's holds, stamped with an epoch a finished move replaced,
//! must all be refused. At the end, every replica holds the directory's
//! epoch for its event.

use std::collections::BTreeMap;

use super::{Input, Verdict, Violation};
use crate::history::{Call, Outcome, Reply};

pub const NAME: &str = "no_stale_epoch";

pub fn check(input: &Input<'_>) -> Verdict {
    // Per event: (time the move was seen done, the epoch it established).
    let mut done: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for o in &input.ops {
        if let (Call::Move { event, .. }, Outcome::Ok(Reply::Moved { epoch })) =
            (&o.call, &o.outcome)
        {
            if let Some(t) = o.completed {
                done.entry(event).or_default().push((t, *epoch));
            }
        }
    }
    let current_at = |event: &str, t: u64| -> u64 {
        done.get(event)
            .map(|v| {
                v.iter()
                    .filter(|(at, _)| *at < t)
                    .map(|(_, e)| *e)
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    };
    let mut violations = Vec::new();
    let mut writes = 0usize;
    let mut zombies = (0usize, 0usize);
    for o in &input.ops {
        let known = current_at(o.call.event(), o.invoked);
        match (&o.call, &o.outcome) {
            (Call::StaleHold { epoch, .. }, outcome) => {
                zombies.0 += 1;
                if matches!(outcome, Outcome::Fail { code, .. } if code == "stale_epoch") {
                    zombies.1 += 1;
                }
                if matches!(outcome, Outcome::Ok(_)) && *epoch < known {
                    violations.push(Violation {
                        message: format!(
                            "zombie hold on {} with epoch {epoch} accepted after the move to epoch {known} finished",
                            o.call.event()
                        ),
                        ops: vec![o.op],
                    });
                }
            }
            (
                _,
                Outcome::Ok(
                    Reply::Held { epoch, .. }
                    | Reply::Cancelled { epoch, .. }
                    | Reply::Booked { epoch, .. },
                ),
            ) => {
                writes += 1;
                if *epoch < known {
                    violations.push(Violation {
                        message: format!(
                            "{} on {} answered with epoch {epoch}, after the move to epoch {known} finished",
                            o.call.name(),
                            o.call.event()
                        ),
                        ops: vec![o.op],
                    });
                }
            }
            _ => {}
        }
    }
    for ev in &input.finals.events {
        for r in &ev.replicas {
            let Some(e) = r.dump.as_ref().and_then(|d| d.event.as_ref()) else {
                continue;
            };
            if ev.members.contains(&r.node) && e.epoch.0 != ev.epoch {
                violations.push(Violation {
                    message: format!(
                        "{} on node {}: epoch {} at the end, the directory says {}",
                        ev.event_id, r.node, e.epoch.0, ev.epoch
                    ),
                    ops: vec![],
                });
            }
        }
    }
    Verdict::new(
        NAME,
        format!(
            "{writes} acknowledged writes checked against {} finished moves; {} zombie holds with stale epochs, {} refused as stale",
            done.values().map(Vec::len).sum::<usize>(),
            zombies.0,
            zombies.1
        ),
        violations,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixtures::{finals, good_dump, run, Done, H};
    use crate::check::Status;

    fn moved(h: &mut H) {
        h.op(
            "operator",
            Call::Move {
                event: "e".into(),
                to: "eu-west".into(),
            },
            1.0,
            2.0,
            Done::Ok(Reply::Moved { epoch: 2 }),
        );
    }

    fn zombie(h: &mut H, t: f64, done: Done) -> u64 {
        h.op(
            "zombie",
            Call::StaleHold {
                event: "e".into(),
                seats: vec!["S2".into()],
                epoch: 1,
            },
            t,
            t + 0.1,
            done,
        )
    }

    #[test]
    fn refused_zombie_passes() {
        let mut h = H::default();
        moved(&mut h);
        zombie(&mut h, 3.0, Done::Fail("stale_epoch", vec![]));
        let run = run();
        let hist = h.history();
        let f = finals(vec![good_dump()]);
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Pass, "{v:?}");
    }

    #[test]
    fn planted_accepted_zombie_is_caught() {
        let mut h = H::default();
        moved(&mut h);
        let bad = zombie(
            &mut h,
            3.0,
            Done::Ok(Reply::Held {
                hold: "h5-4".into(),
                seats: vec!["S2".into()],
                epoch: 1,
                expires_at_ms: None,
            }),
        );
        let run = run();
        let hist = h.history();
        let f = finals(vec![good_dump()]);
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Fail);
        assert_eq!(v.violations[0].ops, vec![bad]);
    }

    #[test]
    fn old_epoch_answer_after_move_is_caught_but_not_before() {
        let mut h = H::default();
        moved(&mut h);
        // Invoked during the move: epoch 1 is fine.
        h.hold("c1", "S1", 1.5, 1.6, Some("h5-1"));
        // Invoked after the move finished, answered at epoch 1: stale.
        let bad = h.hold("c2", "S2", 2.5, 2.6, Some("h5-2"));
        let run = run();
        let hist = h.history();
        let f = finals(vec![good_dump()]);
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Fail);
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert_eq!(v.violations[0].ops, vec![bad]);
    }
}
