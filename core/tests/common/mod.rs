//! Helpers shared by the seat inventory's tests: the test event, commands
//! and their outcomes, and the invariant check run after every step.

#![allow(dead_code)]

use std::collections::BTreeMap;

use seatfence_core::inventory::{
    BookingStatus, ChangeKind, ChangeSubject, ConfirmPath, EventAction, EventCommand, EventSpec,
    HoldStatus, OutboxKind, Outcome, PaymentAction, PaymentAttempt, ReleaseReason, SeatState,
    Survival,
};
use seatfence_core::{Command, Epoch, EventId, RegionId, Response, State, UserId};

pub const SEATS: [&str; 8] = ["A1", "A2", "A3", "A4", "B1", "B2", "B3", "B4"];
pub const TTL_MS: u64 = 10_000;

/// One payment step of a random sequence (see `pay_action`).
#[derive(Debug, Clone, Copy)]
pub enum PayStep {
    Attach,
    /// `requester` picks one of a few requesters (the same one again is a
    /// re-sent intent).
    Intent {
        takeover: bool,
        requester: u8,
    },
    Confirm,
    Release {
        unpaid: bool,
    },
    /// `resend`: the extension count before the last one (a re-sent extend).
    Extend {
        resend: bool,
    },
    OutboxDone {
        id: u64,
    },
    Void,
    Settle,
    /// An operator's refund.
    Refund {
        release_seats: bool,
    },
}

pub fn spec() -> EventSpec {
    spec_with(Some(5))
}

pub fn spec_with(max_seats_per_buyer: Option<u32>) -> EventSpec {
    EventSpec {
        event_id: EventId("e".into()),
        name: "e".into(),
        home_region: RegionId("us-east".into()),
        seats: SEATS.iter().map(|s| s.to_string()).collect(),
        sections: vec![],
        hold_ttl_ms: TTL_MS,
        max_seats_per_hold: 3,
        max_seats_per_buyer,
        opens_at_ms: None,
        closes_at_ms: None,
        survival: Survival::Zone,
        price_cents: 1_000,
        currency: "EUR".into(),
        retention_ms: seatfence_core::inventory::DEFAULT_RETENTION_MS,
        changes_retention_ms: seatfence_core::inventory::DEFAULT_CHANGES_RETENTION_MS,
        waiting_room: None,
    }
}

/// The payment action of a `Step::Pay`, from the hold's owner when it has one.
pub fn pay_action(s: &State, hold: u64, pay: u8, what: PayStep) -> EventAction {
    let payment_id = if pay == 0 {
        format!("p{hold}")
    } else {
        format!("x{pay}")
    };
    EventAction::Payment(match what {
        PayStep::Attach => PaymentAction::Attach {
            owner: s
                .inventory()
                .holds()
                .get(&hold)
                .map(|h| h.owner.clone())
                .unwrap_or(UserId("u0".into())),
            hold,
            payment: PaymentAttempt {
                payment_id,
                provider_key: format!("k{hold}"),
                signature: "sig".into(),
                approve_url: "http://gw/approve".into(),
                amount_cents: 1_000,
                currency: "EUR".into(),
            },
        },
        PayStep::Intent {
            takeover,
            requester,
        } => PaymentAction::ExecuteIntent {
            hold,
            payment_id,
            takeover,
            requester: format!("r{requester}"),
        },
        PayStep::Confirm => PaymentAction::Confirm {
            hold,
            payment_id,
            txn_id: format!("t{hold}"),
            via: ConfirmPath::Webhook,
            inbox: Some(format!("ev{hold}")),
        },
        PayStep::Release { unpaid } => PaymentAction::Release {
            hold,
            payment_id,
            reason: if unpaid {
                ReleaseReason::Unpaid
            } else {
                ReleaseReason::PaymentFailed
            },
        },
        PayStep::Extend { resend } => {
            let seen = s.inventory().holds().get(&hold).map_or(0, |h| h.extensions);
            PaymentAction::Extend {
                hold,
                payment_id,
                by_ms: 1_000,
                attempt: if resend { seen.saturating_sub(1) } else { seen },
            }
        }
        PayStep::Void => PaymentAction::VoidIntent { hold, payment_id },
        PayStep::Settle => PaymentAction::Settle { hold, payment_id },
        PayStep::Refund { release_seats } => PaymentAction::Refund {
            hold,
            by: "ops".into(),
            reason: "show cancelled".into(),
            release_seats,
        },
        PayStep::OutboxDone { id } => PaymentAction::OutboxDone {
            id,
            refund_id: Some(format!("r{id}")),
        },
    })
}

pub fn cmd(now: u64, epoch: u64, key: Option<(UserId, String)>, action: EventAction) -> Command {
    Command::event(EventCommand {
        event_id: EventId("e".into()),
        epoch: Epoch(epoch),
        now_ms: now,
        idempotency: key,
        action,
    })
}

pub fn outcome(r: Response) -> Outcome {
    match r {
        Response::Event(r) => r.outcome,
        other => panic!("not an event reply: {other:?}"),
    }
}

/// Every invariant the inventory promises, checked against its records.
pub fn check(s: &State) {
    let inv = s.inventory();
    let ev = inv.event().expect("created");
    // Each seat held or sold belongs to one live hold that lists it.
    for (id, seat) in inv.seats() {
        if let SeatState::Held(h) | SeatState::Sold(h) = seat.state {
            let hold = &inv.holds()[&h];
            assert!(hold.status.is_live(), "seat {id} points at ended hold {h}");
            assert!(hold.seats.contains(id), "hold {h} does not list {id}");
        }
    }
    // Each live hold owns exactly its seats: no seat in two live holds.
    let mut owner_of = BTreeMap::new();
    for h in inv.holds().values().filter(|h| h.status.is_live()) {
        for seat in &h.seats {
            let want = if h.status == HoldStatus::Booked {
                SeatState::Sold(h.seq)
            } else {
                SeatState::Held(h.seq)
            };
            assert_eq!(inv.seats()[seat].state, want, "hold {} lost {seat}", h.seq);
            assert!(
                owner_of.insert(seat.clone(), h.seq).is_none(),
                "{seat} in two holds"
            );
        }
    }
    let (a, h, sold) = inv.count_seats();
    assert_eq!(
        (ev.available, ev.held, ev.sold),
        (a, h, sold),
        "counters differ from records"
    );
    assert_eq!(a + h + sold, ev.capacity);
    // Derived indexes equal a rebuild from the records.
    let mut rebuilt = inv.clone();
    rebuilt.rebuild_indexes();
    assert_eq!(rebuilt.index(), inv.index(), "indexes drifted from records");
    // Bookings agree with their holds: sold seats ⇔ confirmed booking;
    // a pending payment keeps its seats held; paid money after a release
    // is owed back through the outbox.
    for (seq, b) in inv.bookings() {
        let hold = &inv.holds()[seq];
        // An operator's refund ends the hold only when it returns the
        // seats; a late payment's refund follows a release.
        let expected = match (b.status, &b.refund) {
            (BookingStatus::Pending, _) => HoldStatus::Held,
            (BookingStatus::Confirmed, _) => HoldStatus::Booked,
            (BookingStatus::RefundPending | BookingStatus::Refunded, Some(r)) => {
                if r.release_seats {
                    HoldStatus::Released
                } else {
                    HoldStatus::Booked
                }
            }
            (
                BookingStatus::Expired | BookingStatus::RefundPending | BookingStatus::Refunded,
                _,
            ) => HoldStatus::Expired,
        };
        assert_eq!(hold.status, expected, "booking {seq} {:?}", b.status);
        let kinds: Vec<OutboxKind> = inv
            .outbox()
            .values()
            .filter(|x| x.booking == *seq)
            .map(|x| x.kind)
            .collect();
        let want: &[OutboxKind] = match (b.status, &b.refund) {
            (BookingStatus::Pending | BookingStatus::Expired, _) => &[],
            (BookingStatus::Confirmed, _) => &[OutboxKind::ConfirmationEmail],
            (BookingStatus::RefundPending | BookingStatus::Refunded, Some(_)) => {
                &[OutboxKind::ConfirmationEmail, OutboxKind::Refund]
            }
            (BookingStatus::RefundPending | BookingStatus::Refunded, None) => &[OutboxKind::Refund],
        };
        // A delivered item leaves after the retention (`retention.rs`); an
        // undelivered one never does (an email may be delivered while its
        // booking is refunded).
        let may_be_gone = |k: OutboxKind| {
            k == OutboxKind::ConfirmationEmail || b.status == BookingStatus::Refunded
        };
        assert!(
            kinds.iter().all(|k| want.contains(k))
                && want.iter().all(|k| kinds.contains(k) || may_be_gone(*k)),
            "outbox of booking {seq}: {kinds:?}"
        );
        assert!(hold.extensions <= seatfence_core::inventory::MAX_EXTENSIONS);
    }
    for h in inv.holds().values() {
        let sold = h
            .seats
            .iter()
            .all(|s| inv.seats()[s].state == SeatState::Sold(h.seq));
        assert_eq!(
            h.status == HoldStatus::Booked,
            sold && !h.seats.is_empty(),
            "hold {}",
            h.seq
        );
    }
    // Nothing finished outlives its retention past the last command.
    if let Some((at, key)) = inv.index().prune_queue.get_min() {
        assert!(*at > ev.clock_ms, "{key:?} overdue since {at}");
    }
    check_changes(s);
    // Buyer limit respected.
    for (_, n) in &inv.index().buyer_seats {
        assert!(*n <= 5);
    }
}

/// The changefeed: numbered without gaps up to the event's next number,
/// and folding it in order gives every hold's and booking's current status
/// and the event's epoch (what a sink that applied every change holds).
pub fn check_changes(s: &State) {
    let inv = s.inventory();
    let ev = inv.event().expect("created");
    let seqs: Vec<u64> = inv.changes().keys().copied().collect();
    let first = seqs.first().copied().unwrap_or(ev.next_change_seq);
    assert_eq!(
        seqs,
        (first..ev.next_change_seq).collect::<Vec<_>>(),
        "changes are not one contiguous range"
    );
    let (mut holds, mut bookings, mut epoch) = (BTreeMap::new(), BTreeMap::new(), None);
    for c in inv.changes().values() {
        match &c.subject {
            ChangeSubject::Hold(h) => {
                holds.insert(h.seq, h.status);
            }
            ChangeSubject::Booking(b) => {
                bookings.insert(b.seq, b.status);
            }
            ChangeSubject::Event(e) => {
                epoch = Some(e.epoch);
                if c.kind == ChangeKind::EventMoved {
                    assert!(e.epoch.0 > 1);
                }
            }
        }
    }
    let complete = first == 1;
    if complete {
        assert_eq!(epoch, Some(ev.epoch), "the feed's last epoch");
    }
    for (seq, b) in inv.bookings() {
        match bookings.get(seq) {
            Some(st) => assert_eq!(*st, b.status, "booking {seq} in the feed"),
            None => assert!(!complete, "booking {seq} has no change"),
        }
    }
    for (seq, h) in inv.holds() {
        // Held → booked is told by the booking's confirmation.
        let want = match h.status {
            HoldStatus::Booked => HoldStatus::Held,
            other => other,
        };
        match holds.get(seq) {
            Some(st) => assert_eq!(*st, want, "hold {seq} in the feed"),
            None => assert!(!complete, "hold {seq} has no change"),
        }
    }
}
