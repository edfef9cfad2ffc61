//! No seat sold twice: on every replica each sold seat belongs to exactly
//! one confirmed booking whose hold names it; replicas of one event never
//! disagree about who bought a seat; and buyers were never told two
//! different bookings of the same seat are confirmed.

use std::collections::{BTreeMap, BTreeSet};

use seatfence_core::inventory::{BookingStatus, SeatState};

use super::{confirmed_bookings, Input, Verdict, Violation};

pub const NAME: &str = "no_double_sale";

pub fn check(input: &Input<'_>) -> Verdict {
    let mut violations = Vec::new();
    // Sold-seat records over every replica; the distinct seats sold, the
    // events they are in and the replicas that have any sold (for the
    // summary, so its numbers add up).
    let mut sold_seats = 0usize;
    let (mut seats_sold, mut events_sold, mut replicas_sold) = (0usize, 0usize, 0usize);
    for ev in &input.finals.events {
        // seat → (booking seq, node) as each replica says.
        let mut owner: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for r in &ev.replicas {
            let Some(d) = &r.dump else { continue };
            let holds: BTreeMap<u64, _> = d.holds.iter().map(|h| (h.seq, h)).collect();
            let bookings: BTreeMap<u64, _> = d.bookings.iter().map(|b| (b.seq, b)).collect();
            // Seats per confirmed booking, to find two bookings of one seat.
            let mut confirmed_for: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
            for b in d
                .bookings
                .iter()
                .filter(|b| b.status == BookingStatus::Confirmed)
            {
                if let Some(h) = holds.get(&b.seq) {
                    for s in &h.seats {
                        confirmed_for.entry(s.as_str()).or_default().push(b.seq);
                    }
                }
            }
            for (seat, seqs) in &confirmed_for {
                if seqs.len() > 1 {
                    violations.push(Violation {
                        message: format!(
                            "{}/{seat} on node {}: sold to {} confirmed bookings {:?}",
                            ev.event_id,
                            r.node,
                            seqs.len(),
                            seqs.iter()
                                .map(|s| format!("b{}-{s}", ev.group))
                                .collect::<Vec<_>>()
                        ),
                        ops: vec![],
                    });
                }
            }
            let sold_before = sold_seats;
            for (seat, state) in &d.seats {
                let SeatState::Sold(seq) = state else {
                    continue;
                };
                sold_seats += 1;
                let ok = bookings
                    .get(seq)
                    .is_some_and(|b| b.status == BookingStatus::Confirmed)
                    && holds.get(seq).is_some_and(|h| h.seats.contains(seat));
                if !ok {
                    violations.push(Violation {
                        message: format!(
                            "{}/{seat} on node {}: sold to b{}-{seq}, which is not a confirmed booking of a hold on that seat",
                            ev.event_id, r.node, ev.group
                        ),
                        ops: vec![],
                    });
                }
                match owner.get(seat.as_str()) {
                    Some((other, node)) if other != seq => violations.push(Violation {
                        message: format!(
                            "{}/{seat}: node {node} says sold to b{g}-{other}, node {} says b{g}-{seq}",
                            ev.event_id,
                            r.node,
                            g = ev.group
                        ),
                        ops: vec![],
                    }),
                    _ => {
                        owner.insert(seat, (*seq, r.node));
                    }
                }
            }
            replicas_sold += usize::from(sold_seats > sold_before);
        }
        seats_sold += owner.len();
        events_sold += usize::from(!owner.is_empty());
    }
    // What buyers were told.
    let mut told: BTreeMap<(String, String), (String, u64)> = BTreeMap::new();
    for (event, booking, seats, op) in confirmed_bookings(&input.ops) {
        for s in seats {
            match told.get(&(event.clone(), s.clone())) {
                Some((other, other_op)) if *other != booking => violations.push(Violation {
                    message: format!(
                        "{event}/{s}: buyers were told both {other} and {booking} are confirmed"
                    ),
                    ops: vec![*other_op, op],
                }),
                _ => {
                    told.insert((event.clone(), s), (booking.clone(), op));
                }
            }
        }
    }
    let told_events = told.keys().map(|(event, _)| event).collect::<BTreeSet<_>>();
    Verdict::new(
        NAME,
        format!(
            "{} seats confirmed to buyers (the seats of the bookings buyers were told are \
             confirmed, in {} events); on the replicas {seats_sold} seats sold in {events_sold} \
             events, {sold_seats} sold-seat records (a sold seat counts once per replica that \
             has it sold: {replicas_sold} replicas)",
            told.len(),
            told_events.len()
        ),
        violations,
    )
}

#[cfg(test)]
mod tests {
    use seatfence_core::inventory::{BookingStatus, HoldStatus, SeatState};

    use super::*;
    use crate::check::fixtures::{booking, finals, good_dump, hold, run, H};
    use crate::check::Status;

    #[test]
    fn consistent_replicas_pass() {
        let run = run();
        let hist = H::default().history();
        let f = finals(vec![good_dump(), good_dump(), good_dump()]);
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Pass);
        // One seat sold, held by each of three replicas.
        assert!(
            v.summary.contains(
                "1 seats sold in 1 events, 3 sold-seat records (a sold seat counts once per \
                 replica that has it sold: 3 replicas)"
            ),
            "{}",
            v.summary
        );
    }

    #[test]
    fn planted_second_buyer_is_caught() {
        let run = run();
        let hist = H::default().history();
        // Replica 2 confirmed a second booking of S1 as well.
        let mut bad = good_dump();
        bad.holds.push(hold(2, &["S1"], HoldStatus::Booked));
        bad.bookings
            .push(booking(2, BookingStatus::Confirmed, "p2"));
        let f = finals(vec![good_dump(), bad]);
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.violations[0].message.contains("2 confirmed bookings"),
            "{v:?}"
        );
    }

    #[test]
    fn replicas_disagreeing_on_the_buyer_are_caught() {
        let run = run();
        let hist = H::default().history();
        let mut other = good_dump();
        other.holds = vec![hold(2, &["S1"], HoldStatus::Booked)];
        other.bookings = vec![booking(2, BookingStatus::Confirmed, "p2")];
        other.seats[0].1 = SeatState::Sold(2);
        let f = finals(vec![good_dump(), other]);
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.violations
                .iter()
                .any(|x| x.message.contains("node 1 says")),
            "{v:?}"
        );
    }
}
