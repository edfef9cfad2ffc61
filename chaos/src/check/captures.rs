//! Money: the gateway captured each payment at most once; every capture
//! belongs to a booking that every replica holds as confirmed or refunded
//! (`refund_pending`, `refunded`) with that payment; and every confirmed
//! booking's payment was captured.

use std::collections::{BTreeMap, BTreeSet};

use seatfence_core::inventory::BookingStatus;

use super::{Input, Verdict, Violation};
use crate::run::{group_seq, EventFinal, GatewayPayment};

pub const NAME: &str = "captures";

pub fn check(input: &Input<'_>) -> Verdict {
    let mut violations = Vec::new();
    let mut captured = 0;
    for p in &input.finals.gateway {
        if p.captures > 1 {
            violations.push(Violation {
                message: format!(
                    "payment {} ({}) captured {} times",
                    p.payment_id, p.invoice, p.captures
                ),
                ops: vec![],
            });
        }
        if p.captures == 0 {
            continue;
        }
        captured += 1;
        check_capture(input, p, &mut violations);
    }
    let confirmed = check_confirmed(input, &mut violations);
    Verdict::new(
        NAME,
        format!(
            "{} gateway payments, {captured} captured; {} confirmed booking records on the \
             groups' members: {} bookings confirmed on the replicas, each counted once per \
             member replica that has it confirmed ({} replicas)",
            input.finals.gateway.len(),
            confirmed.records,
            confirmed.bookings,
            confirmed.replicas
        ),
        violations,
    )
}

/// A captured payment `p` must belong to a booking of a drill event that
/// every member's replica holds as confirmed or refunded with that payment
/// (or no longer holds, refunded and pruned).
fn check_capture(input: &Input<'_>, p: &GatewayPayment, violations: &mut Vec<Violation>) {
    let Some((ev, seq)) = booking_of(&input.finals.events, &p.invoice) else {
        violations.push(Violation {
            message: format!(
                "payment {} captured for {}, which is no booking of a drill event",
                p.payment_id, p.invoice
            ),
            ops: vec![],
        });
        return;
    };
    for r in ev.replicas.iter().filter(|r| ev.members.contains(&r.node)) {
        let Some(d) = &r.dump else { continue };
        let b = d.bookings.iter().find(|b| b.seq == seq);
        // A refunded booking leaves after its event's retention.
        let pruned = b.is_none() && p.refunds == 1 && input.run.prunes();
        let fine = pruned
            || b.is_some_and(|b| {
                b.payment.payment_id == p.payment_id
                    && matches!(
                        b.status,
                        BookingStatus::Confirmed
                            | BookingStatus::RefundPending
                            | BookingStatus::Refunded
                    )
            });
        if !fine {
            violations.push(Violation {
                message: format!(
                    "payment {} captured for {}, but node {} has that booking as {}",
                    p.payment_id,
                    p.invoice,
                    r.node,
                    b.map_or("missing".to_string(), |b| format!(
                        "{} with payment {}",
                        b.status.as_str(),
                        b.payment.payment_id
                    ))
                ),
                ops: vec![],
            });
        }
    }
}

/// The event of `events` and the booking seq that a booking id (a payment's
/// invoice, `b{group}-{seq}`) names; `None` when it names none of them.
fn booking_of<'a>(events: &'a [EventFinal], invoice: &str) -> Option<(&'a EventFinal, u64)> {
    group_seq(invoice).and_then(|(g, seq)| events.iter().find(|e| e.group == g).map(|e| (e, seq)))
}

/// Confirmed booking records on the groups' members' replicas: how many,
/// of how many distinct bookings, on how many replicas.
#[derive(Debug, Default)]
struct Confirmed {
    records: usize,
    bookings: usize,
    replicas: usize,
}

/// Every confirmed booking record, on every member's replica, must have
/// had its payment captured exactly once. How many such records there
/// are, of how many bookings, on how many replicas.
fn check_confirmed(input: &Input<'_>, violations: &mut Vec<Violation>) -> Confirmed {
    let by_payment: BTreeMap<&str, _> = input
        .finals
        .gateway
        .iter()
        .map(|p| (p.payment_id.as_str(), p))
        .collect();
    let mut confirmed = Confirmed::default();
    let mut bookings = BTreeSet::new();
    for ev in &input.finals.events {
        for r in ev.replicas.iter().filter(|r| ev.members.contains(&r.node)) {
            let Some(d) = &r.dump else { continue };
            let records_before = confirmed.records;
            for b in d
                .bookings
                .iter()
                .filter(|b| b.status == BookingStatus::Confirmed)
            {
                confirmed.records += 1;
                bookings.insert((ev.group, b.seq));
                let caps = by_payment
                    .get(b.payment.payment_id.as_str())
                    .map_or(0, |p| p.captures);
                if caps != 1 {
                    violations.push(Violation {
                        message: format!(
                            "b{}-{} is confirmed on node {} but its payment {} was captured {caps} times",
                            ev.group, b.seq, r.node, b.payment.payment_id
                        ),
                        ops: vec![],
                    });
                }
            }
            confirmed.replicas += usize::from(confirmed.records > records_before);
        }
    }
    confirmed.bookings = bookings.len();
    confirmed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixtures::{finals, good_dump, run, H};
    use crate::check::Status;
    use crate::run::GatewayPayment;

    fn pay(id: &str, invoice: &str, captures: u32) -> GatewayPayment {
        GatewayPayment {
            payment_id: id.into(),
            invoice: invoice.into(),
            status: "completed".into(),
            captures,
            refunds: 0,
        }
    }

    #[test]
    fn one_capture_per_confirmed_booking_passes() {
        let run = run();
        let hist = H::default().history();
        let mut f = finals(vec![good_dump(), good_dump()]);
        f.gateway = vec![pay("p1", "b5-1", 1), pay("p9", "b5-9", 0)];
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Pass);
        // One booking, confirmed on both members.
        assert!(
            v.summary.starts_with(
                "2 gateway payments, 1 captured; 2 confirmed booking records on the groups' \
                 members: 1 bookings confirmed on the replicas"
            ),
            "{}",
            v.summary
        );
        assert!(v.summary.ends_with("(2 replicas)"), "{}", v.summary);
    }

    #[test]
    fn planted_double_capture_and_orphan_capture_are_caught() {
        let run = run();
        let hist = H::default().history();
        let mut f = finals(vec![good_dump()]);
        f.gateway = vec![pay("p1", "b5-1", 2), pay("p7", "b5-7", 1)];
        let v = check(&Input::new(&run, &hist, &f));
        assert_eq!(v.status, Status::Fail);
        let all: String = v.violations.iter().map(|x| x.message.clone()).collect();
        assert!(all.contains("captured 2 times"), "{all}");
        assert!(all.contains("b5-7") && all.contains("missing"), "{all}");
    }
}
