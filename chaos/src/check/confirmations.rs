//! Every confirmation a buyer saw (a callback or booking read answering
//! `confirmed`) is present at the end on every replica of the event's
//! group: the booking confirmed, its seats sold to it.

use seatfence_core::inventory::{BookingStatus, SeatState};

use super::{confirmed_bookings, Input, Verdict, Violation};
use crate::run::group_seq;

pub const NAME: &str = "confirmations_durable";

pub fn check(input: &Input<'_>) -> Verdict {
    let mut violations = Vec::new();
    let acked = confirmed_bookings(&input.ops);
    let mut distinct = std::collections::BTreeSet::new();
    // For the summary, so its numbers add up with the other checkers':
    // the seats of the distinct bookings, the fewest and most of one, and
    // the member replicas looked up.
    let (mut seat_count, mut fewest, mut most, mut lookups) = (0usize, usize::MAX, 0usize, 0usize);
    for (event, booking, seats, op) in &acked {
        if !distinct.insert((event.clone(), booking.clone())) {
            continue;
        }
        seat_count += seats.len();
        fewest = fewest.min(seats.len());
        most = most.max(seats.len());
        let Some(ev) = input.finals.events.iter().find(|e| &e.event_id == event) else {
            violations.push(Violation {
                message: format!("{booking} of {event}: the event is missing from the final state"),
                ops: vec![*op],
            });
            continue;
        };
        let Some((_, seq)) = group_seq(booking) else {
            violations.push(Violation {
                message: format!("{booking}: not a booking id"),
                ops: vec![*op],
            });
            continue;
        };
        for node in &ev.members {
            lookups += 1;
            let replica = ev.replicas.iter().find(|r| r.node == *node);
            let Some(d) = replica.and_then(|r| r.dump.as_ref()) else {
                violations.push(Violation {
                    message: format!(
                        "{booking} of {event}: replica on node {node} could not be read ({})",
                        replica
                            .and_then(|r| r.error.clone())
                            .unwrap_or_else(|| "absent".into())
                    ),
                    ops: vec![*op],
                });
                continue;
            };
            let status = d.bookings.iter().find(|b| b.seq == seq).map(|b| b.status);
            if status != Some(BookingStatus::Confirmed) {
                violations.push(Violation {
                    message: format!(
                        "{booking} of {event} was confirmed to its buyer but is {} on node {node}",
                        status.map_or("missing", |s| s.as_str())
                    ),
                    ops: vec![*op],
                });
                continue;
            }
            for s in seats {
                let st = d.seats.iter().find(|(id, _)| id == s).map(|(_, st)| *st);
                if st != Some(SeatState::Sold(seq)) {
                    violations.push(Violation {
                        message: format!(
                            "{booking} of {event} is confirmed but seat {s} is {st:?} on node {node}"
                        ),
                        ops: vec![*op],
                    });
                }
            }
        }
    }
    let events = distinct
        .iter()
        .map(|(event, _)| event)
        .collect::<std::collections::BTreeSet<_>>();
    let each = match (fewest, most) {
        _ if distinct.is_empty() => String::new(),
        (lo, hi) if lo == hi => format!(" ({hi} each)"),
        (lo, hi) => format!(" ({lo}–{hi} each)"),
    };
    Verdict::new(
        NAME,
        format!(
            "{} bookings confirmed to buyers (a payment callback or a booking read answered \
             confirmed), {seat_count} seats between them{each} in {} events; each looked up on \
             every member of its group: {lookups} member replicas checked",
            distinct.len(),
            events.len()
        ),
        violations,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixtures::{finals, good_dump, run, H};
    use crate::check::Status;

    fn acked() -> H {
        let mut h = H::default();
        h.booking_status(1.0, 1.1, Some(false), "confirmed");
        h
    }

    #[test]
    fn present_everywhere_passes() {
        let run = run();
        let hist = acked().history();
        let f = finals(vec![good_dump(), good_dump(), good_dump()]);
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Pass);
        // One booking of one seat, on each of three members.
        assert!(
            v.summary.starts_with("1 bookings confirmed to buyers"),
            "{}",
            v.summary
        );
        assert!(
            v.summary
                .contains("1 seats between them (1 each) in 1 events")
                && v.summary.ends_with("3 member replicas checked"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn planted_lost_confirmation_is_caught() {
        let run = run();
        let hist = acked().history();
        let mut lost = good_dump();
        lost.bookings.clear();
        lost.seats[0].1 = seatfence_core::inventory::SeatState::Available;
        let f = finals(vec![good_dump(), lost, good_dump()]);
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Fail);
        assert!(v.violations[0].message.contains("node 2"), "{v:?}");
    }
}
