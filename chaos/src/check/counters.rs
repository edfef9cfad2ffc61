//! Counters equal records on every replica: `available + held + sold ==
//! capacity`, and each counter equals the number of seat records in that
//! state.

use seatfence_core::inventory::SeatState;

use super::{Input, Verdict, Violation};

pub const NAME: &str = "counters";

pub fn check(input: &Input<'_>) -> Verdict {
    let mut violations = Vec::new();
    let mut replicas = 0;
    for ev in &input.finals.events {
        for r in &ev.replicas {
            let Some(d) = &r.dump else { continue };
            let Some(e) = &d.event else {
                violations.push(Violation {
                    message: format!("{} on node {}: no event record", ev.event_id, r.node),
                    ops: vec![],
                });
                continue;
            };
            replicas += 1;
            let count =
                |f: fn(&SeatState) -> bool| d.seats.iter().filter(|(_, s)| f(s)).count() as u64;
            let records = (
                count(|s| *s == SeatState::Available),
                count(|s| matches!(s, SeatState::Held(_))),
                count(|s| matches!(s, SeatState::Sold(_))),
            );
            let counters = (e.available, e.held, e.sold);
            if counters != records
                || e.available + e.held + e.sold != e.capacity
                || d.seats.len() as u64 != e.capacity
            {
                violations.push(Violation {
                    message: format!(
                        "{} on node {}: counters (available, held, sold) = {counters:?} of capacity {}, seat records say {records:?} of {}",
                        ev.event_id,
                        r.node,
                        e.capacity,
                        d.seats.len()
                    ),
                    ops: vec![],
                });
            }
        }
    }
    Verdict::new(NAME, format!("{replicas} replicas compared"), violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixtures::{finals, good_dump, run, H};
    use crate::check::Status;

    #[test]
    fn matching_counters_pass_and_a_drifted_one_is_caught() {
        let run = run();
        let hist = H::default().history();
        let f = finals(vec![good_dump()]);
        assert_eq!(check(&Input::new(&run, &hist, &f)).status, Status::Pass);
        let mut drift = good_dump();
        let e = drift.event.as_mut().unwrap();
        e.sold = 2;
        e.available = 0;
        let f = finals(vec![good_dump(), drift]);
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Fail);
        assert!(v.violations[0].message.contains("node 2"), "{v:?}");
    }
}
