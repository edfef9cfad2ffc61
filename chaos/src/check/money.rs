//! Money is conserved: at the end of a settled run, every payment the
//! gateway captured belongs to a booking that is confirmed (and was never
//! refunded) or refunded (exactly once); no payment is refunded twice or
//! refunded without a capture. A capture whose booking is expired,
//! pending or still `refund_pending` is money kept for nothing.
//!
//! `captures` asks whether each capture matches a booking at all; this
//! asks whether the buyer ended with either the seat or the money.

use std::collections::BTreeMap;

use seatfence_core::inventory::{Booking, BookingStatus};

use super::{Input, Verdict, Violation};
use crate::run::{group_seq, GatewayPayment};

pub const NAME: &str = "money";

pub fn check(input: &Input<'_>) -> Verdict {
    let mut violations = Vec::new();
    let mut captured = 0;
    let mut refunded = 0;
    for p in &input.finals.gateway {
        if p.refunds > 1 || (p.refunds > 0 && p.captures == 0) {
            violations.push(violation(
                p,
                format!("refunded {} times, captured {}", p.refunds, p.captures),
            ));
        }
        if p.captures == 0 {
            continue;
        }
        captured += 1;
        refunded += u32::from(p.refunds > 0);
        let statuses = booking_statuses(input, p);
        if statuses.is_empty() {
            violations.push(violation(
                p,
                "captured, but no replica has its booking".into(),
            ));
        }
        for (node, status) in statuses {
            let fine = match status {
                Some(BookingStatus::Confirmed) => p.refunds == 0,
                Some(BookingStatus::Refunded) => p.refunds == 1,
                // Refunded, then pruned after its event's retention.
                None => p.refunds == 1 && input.run.prunes(),
                _ => false,
            };
            if !fine {
                let s = status.map_or("missing", BookingStatus::as_str);
                violations.push(violation(
                    p,
                    format!(
                        "captured and refunded {} times, but node {node} has its booking {s}",
                        p.refunds
                    ),
                ));
            }
        }
    }
    Verdict::new(
        NAME,
        format!(
            "{} gateway payments, {captured} captured, {refunded} of them refunded",
            input.finals.gateway.len()
        ),
        violations,
    )
}

fn violation(p: &GatewayPayment, what: String) -> Violation {
    Violation {
        message: format!("payment {} ({}): {what}", p.payment_id, p.invoice),
        ops: vec![],
    }
}

/// The booking of `p` (with that payment) on every member replica.
fn booking_statuses(input: &Input<'_>, p: &GatewayPayment) -> BTreeMap<u64, Option<BookingStatus>> {
    let Some((group, seq)) = group_seq(&p.invoice) else {
        return BTreeMap::new();
    };
    let Some(ev) = input.finals.events.iter().find(|e| e.group == group) else {
        return BTreeMap::new();
    };
    ev.replicas
        .iter()
        .filter(|r| ev.members.contains(&r.node))
        .filter_map(|r| {
            let d = r.dump.as_ref()?;
            let b: Option<&Booking> = d
                .bookings
                .iter()
                .find(|b| b.seq == seq && b.payment.payment_id == p.payment_id);
            Some((r.node, b.map(|b| b.status)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixtures::{booking, finals, good_dump, run, H};
    use crate::check::Status;
    use crate::run::RunInfo;

    fn pay(id: &str, captures: u32, refunds: u32) -> GatewayPayment {
        GatewayPayment {
            payment_id: id.into(),
            invoice: "b5-1".into(),
            status: "completed".into(),
            captures,
            refunds,
        }
    }

    fn verdict(status: BookingStatus, p: GatewayPayment) -> Verdict {
        let run = run();
        let hist = H::default().history();
        let mut d = good_dump();
        d.bookings = vec![booking(1, status, "p1")];
        let mut f = finals(vec![d.clone(), d]);
        f.gateway = vec![p];
        check(&Input::new(&run, &hist, &f))
    }

    #[test]
    fn a_capture_ends_as_a_seat_or_a_refund() {
        assert_eq!(
            verdict(BookingStatus::Confirmed, pay("p1", 1, 0)).status,
            Status::Pass
        );
        assert_eq!(
            verdict(BookingStatus::Refunded, pay("p1", 1, 1)).status,
            Status::Pass
        );
        assert_eq!(
            verdict(BookingStatus::Expired, pay("p1", 0, 0)).status,
            Status::Pass
        );
    }

    #[test]
    fn planted_money_kept_for_nothing_is_caught() {
        for (status, p, what) in [
            (BookingStatus::Expired, pay("p1", 1, 0), "expired"),
            (
                BookingStatus::RefundPending,
                pay("p1", 1, 0),
                "refund_pending",
            ),
            (BookingStatus::Refunded, pay("p1", 1, 2), "refunded 2 times"),
            (BookingStatus::Confirmed, pay("p1", 1, 1), "confirmed"),
        ] {
            let v = verdict(status, p);
            assert_eq!(v.status, Status::Fail, "{what}");
            let all: String = v.violations.iter().map(|x| x.message.clone()).collect();
            assert!(all.contains(what), "{what}: {all}");
        }
    }

    #[test]
    fn only_a_refunded_booking_may_be_missing_and_only_after_pruning() {
        let missing = |run: &RunInfo, p: GatewayPayment| {
            let hist = H::default().history();
            let mut d = good_dump();
            d.bookings.clear();
            let mut f = finals(vec![d.clone(), d]);
            f.gateway = vec![p];
            check(&Input::new(run, &hist, &f)).status
        };
        let mut pruning = run();
        pruning.retention_ms = 10_000;
        assert_eq!(missing(&pruning, pay("p1", 1, 1)), Status::Pass);
        // A captured, unrefunded payment is a seat: its booking never goes.
        assert_eq!(missing(&pruning, pay("p1", 1, 0)), Status::Fail);
        // Events keeping records longer than the run: nothing is pruned.
        assert_eq!(missing(&run(), pay("p1", 1, 1)), Status::Fail);
    }
}
