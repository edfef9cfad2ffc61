//! The changefeed: each business change a command makes is one numbered
//! change, in commit order; a replayed or refused command makes none;
//! changes leave after the event's changes retention, oldest first, and the
//! range kept stays contiguous across a restart (records reloaded).

mod common;

use common::{check, cmd, outcome, pay_action, spec, PayStep, TTL_MS};
use seatfence_core::inventory::{
    BookingStatus, ChangeKind, ChangeSubject, EventAction, HoldStatus, OutboxKind, Outcome,
    PaymentAction, SeatPick, SeatState, MIN_CHANGES_RETENTION_MS,
};
use seatfence_core::{Epoch, GroupId, Query, QueryResult, RegionId, State, UserId};

fn event(changes_retention_ms: u64) -> State {
    let mut s = State::new(GroupId(1));
    let mut spec = spec();
    spec.changes_retention_ms = changes_retention_ms;
    s.apply(
        GroupId(1),
        &cmd(0, 0, None, EventAction::Create(Box::new(spec))),
    );
    s
}

fn run(s: &mut State, now: u64, epoch: u64, key: Option<&str>, action: EventAction) -> Outcome {
    let key = key.map(|k| (UserId("u1".into()), k.to_string()));
    let got = outcome(s.apply(GroupId(1), &cmd(now, epoch, key, action)).response);
    check(s);
    got
}

fn hold_action(seat: &str) -> EventAction {
    EventAction::Hold {
        owner: UserId("u1".into()),
        pick: SeatPick::Seats(vec![seat.into()]),
    }
}

fn hold(s: &mut State, now: u64, seat: &str, key: Option<&str>) -> u64 {
    match run(s, now, 1, key, hold_action(seat)) {
        Outcome::Held(h) => h.seq,
        other => panic!("hold refused: {other:?}"),
    }
}

fn kinds(s: &State, after: u64) -> Vec<&'static str> {
    s.inventory()
        .change_page(after, 1_000)
        .changes
        .iter()
        .map(|c| c.kind.as_str())
        .collect()
}

#[test]
fn each_transition_is_one_change_in_commit_order() {
    let mut s = event(MIN_CHANGES_RETENTION_MS * 60);
    assert_eq!(kinds(&s, 0), ["event.created"]);
    // A hold cancelled, one that lapses, one booked and paid.
    let a = hold(&mut s, 10, "A1", Some("k1"));
    run(
        &mut s,
        20,
        1,
        None,
        EventAction::Cancel {
            owner: UserId("u1".into()),
            hold: a,
        },
    );
    hold(&mut s, 30, "A2", None);
    let c = hold(&mut s, 40, "A3", None);
    for step in [PayStep::Attach, PayStep::Confirm] {
        let action = pay_action(&s, c, 0, step);
        run(&mut s, 50, 1, None, action);
    }
    run(&mut s, 30 + TTL_MS, 1, None, EventAction::Tick);
    assert_eq!(
        kinds(&s, 0),
        [
            "event.created",
            "hold.created",
            "hold.released",
            "hold.created",
            "hold.created",
            "booking.created",
            "booking.confirmed",
            "hold.expired",
        ]
    );
    let page = s.inventory().change_page(0, 1_000);
    let seqs: Vec<u64> = page.changes.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    assert_eq!((page.oldest_seq, page.next_seq), (1, 9));
    // The confirmation carries what finance needs: seats, amount, txn.
    let ChangeSubject::Booking(b) = &page.changes[6].subject else {
        panic!("a booking change");
    };
    assert_eq!(b.seats, ["A3"]);
    assert_eq!((b.amount_cents, b.txn_id.as_deref()), (1_000, Some("t3")));
    // The same keyed hold again answers its recorded outcome: no change.
    let next = s.inventory().change_page(0, 0).next_seq;
    run(&mut s, 60 + TTL_MS, 1, Some("k1"), hold_action("A1"));
    // A refused hold (taken seat) makes none either.
    run(&mut s, 60 + TTL_MS, 1, None, hold_action("A3"));
    assert_eq!(s.inventory().change_page(0, 0).next_seq, next);
    // Paging: after 6, at most 1.
    let page = s.inventory().change_page(6, 1);
    assert_eq!(page.changes.len(), 1);
    assert_eq!(page.changes[0].kind, ChangeKind::BookingConfirmed);
}

#[test]
fn close_open_and_move_are_event_changes() {
    let mut s = event(MIN_CHANGES_RETENTION_MS * 60);
    run(&mut s, 10, 1, None, EventAction::SetOpen { open: false });
    run(&mut s, 20, 1, None, EventAction::SetOpen { open: true });
    let bump = EventAction::BumpEpoch {
        epoch: Epoch(2),
        owner: RegionId("eu-west".into()),
    };
    run(&mut s, 30, 1, None, bump);
    assert_eq!(
        kinds(&s, 0),
        [
            "event.created",
            "event.closed",
            "event.opened",
            "event.moved"
        ]
    );
    let last = s.inventory().change_page(3, 1).changes.remove(0);
    let ChangeSubject::Event(e) = last.subject else {
        panic!("an event change");
    };
    assert_eq!((e.epoch, e.owner.0.as_str()), (Epoch(2), "eu-west"));
    // A stale-epoch command is refused and makes no change.
    let before = s.inventory().change_page(0, 0).next_seq;
    run(&mut s, 40, 1, None, hold_action("A1"));
    assert_eq!(s.inventory().change_page(0, 0).next_seq, before);
}

#[test]
fn changes_leave_after_their_retention_and_numbers_are_never_reused() {
    let keep = MIN_CHANGES_RETENTION_MS;
    let mut s = event(keep);
    hold(&mut s, 1_000, "A1", None);
    // An idle event asks for a tick when its oldest change is due.
    assert_eq!(s.inventory().next_cleanup_ms(), Some(keep));
    run(&mut s, keep + 500, 1, None, EventAction::Tick);
    // The creation (at 0) left; the hold (at 1 000) and its expiry stay.
    let page = s.inventory().change_page(0, 100);
    assert_eq!(page.oldest_seq, 2);
    assert_eq!(kinds(&s, 0), ["hold.created", "hold.expired"]);
    // A restart reloads the records: the same range, the same numbers.
    let mut reloaded = State::new(GroupId(1));
    for (k, v) in s.records() {
        reloaded.load_record(&k, &v).unwrap();
    }
    reloaded.rebuild_indexes();
    let QueryResult::Changes(again) = reloaded.query(&Query::Changes {
        after: 0,
        limit: 100,
    }) else {
        panic!("a change page");
    };
    assert_eq!(*again, page);
    // Long after: every change gone, the next one still numbered on.
    run(&mut s, 10 * keep, 1, None, EventAction::Tick);
    let page = s.inventory().change_page(0, 100);
    assert!(page.changes.is_empty());
    assert_eq!((page.oldest_seq, page.next_seq), (4, 4));
    hold(&mut s, 10 * keep + 1, "A2", None);
    assert_eq!(s.inventory().change_page(0, 100).changes[0].seq, 4);
}

fn refund(s: &mut State, now: u64, hold: u64, key: &str, release_seats: bool) -> Outcome {
    let action = EventAction::Payment(PaymentAction::Refund {
        hold,
        by: "ops".into(),
        reason: "show cancelled".into(),
        release_seats,
    });
    let key = Some((UserId("ops".into()), key.to_string()));
    let got = outcome(s.apply(GroupId(1), &cmd(now, 1, key, action)).response);
    check(s);
    got
}

#[test]
fn an_operator_refund_is_once_per_booking_and_in_the_feed() {
    let mut s = event(MIN_CHANGES_RETENTION_MS * 60);
    // Two confirmed bookings, one pending.
    let (a, b, c) = (
        hold(&mut s, 10, "A1", None),
        hold(&mut s, 10, "A2", None),
        hold(&mut s, 10, "A3", None),
    );
    for (seq, steps) in [
        (a, &[PayStep::Attach, PayStep::Confirm][..]),
        (b, &[PayStep::Attach, PayStep::Confirm][..]),
        (c, &[PayStep::Attach][..]),
    ] {
        for step in steps {
            let action = pay_action(&s, seq, 0, *step);
            run(&mut s, 20, 1, None, action);
        }
    }
    let sold = s.inventory().event().unwrap().sold;
    // A pending booking is not refundable: nothing changes.
    let next = s.inventory().change_page(0, 0).next_seq;
    assert_eq!(
        refund(&mut s, 30, c, "r0", true),
        Outcome::BookingNotRefundable {
            status: BookingStatus::Pending
        }
    );
    assert_eq!(s.inventory().change_page(0, 0).next_seq, next);
    // Refund a, seats back on sale; the same key again: the same answer.
    let first = refund(&mut s, 40, a, "r1", true);
    let Outcome::Booking(bk) = &first else {
        panic!("refunded: {first:?}");
    };
    assert_eq!(bk.status, BookingStatus::RefundPending);
    assert_eq!(refund(&mut s, 50, a, "r1", true), first);
    assert_eq!(s.inventory().seats()["A1"].state, SeatState::Available);
    assert_eq!(s.inventory().holds()[&a].status, HoldStatus::Released);
    // Another key for the same booking: refused, it is refunding already.
    assert_eq!(
        refund(&mut s, 50, a, "r2", true),
        Outcome::BookingNotRefundable {
            status: BookingStatus::RefundPending
        }
    );
    // Refund b, seats kept off sale (the show is cancelled).
    refund(&mut s, 60, b, "r3", false);
    assert_eq!(s.inventory().seats()["A2"].state, SeatState::Sold(b));
    assert_eq!(s.inventory().event().unwrap().sold, sold - 1);
    // One refund queued per booking; delivering them ends both refunded.
    let refunds: Vec<u64> = s
        .inventory()
        .outbox()
        .values()
        .filter(|i| i.kind == OutboxKind::Refund)
        .map(|i| i.id)
        .collect();
    assert_eq!(refunds.len(), 2);
    for id in refunds {
        let action = pay_action(&s, 0, 0, PayStep::OutboxDone { id });
        run(&mut s, 70, 1, None, action);
    }
    assert_eq!(
        &kinds(&s, next - 1),
        &[
            "hold.released",
            "booking.refund_pending",
            "booking.refund_pending",
            "booking.refunded",
            "booking.refunded",
        ]
    );
    let page = s.inventory().change_page(next, 100);
    let ChangeSubject::Booking(facts) = &page.changes[0].subject else {
        panic!("a booking change");
    };
    let r = facts.refund.as_ref().expect("the operator's refund");
    assert_eq!(
        (r.by.as_str(), r.reason.as_str(), r.release_seats),
        ("ops", "show cancelled", true)
    );
}
