//! Finished records leave after the event's retention; nothing a seat, the
//! reconciler or the outbox still needs ever does.

mod common;

use common::{check, cmd, outcome, pay_action, spec, PayStep, TTL_MS};
use seatfence_core::inventory::{
    BookingStatus, EventAction, HoldStatus, Outcome, SeatPick, SeatState, MIN_RETENTION_MS,
};
use seatfence_core::{GroupId, RecordKey, State, UserId};

const R: u64 = MIN_RETENTION_MS;

fn event() -> State {
    let mut s = State::new(GroupId(1));
    let mut spec = spec();
    spec.retention_ms = R;
    s.apply(
        GroupId(1),
        &cmd(0, 0, None, EventAction::Create(Box::new(spec))),
    );
    s
}

fn hold(s: &mut State, now: u64, who: &str, seat: &str, key: Option<&str>) -> u64 {
    let owner = UserId(who.into());
    let key = key.map(|k| (owner.clone(), k.to_string()));
    let action = EventAction::Hold {
        owner,
        pick: SeatPick::Seats(vec![seat.into()]),
    };
    match outcome(s.apply(GroupId(1), &cmd(now, 1, key, action)).response) {
        Outcome::Held(h) => h.seq,
        other => panic!("hold refused: {other:?}"),
    }
}

fn tick(s: &mut State, now: u64) {
    s.apply(GroupId(1), &cmd(now, 1, None, EventAction::Tick));
    check(s);
}

fn pay(s: &mut State, now: u64, seq: u64, step: PayStep) -> Outcome {
    let action = pay_action(s, seq, 0, step);
    let got = outcome(s.apply(GroupId(1), &cmd(now, 1, None, action)).response);
    check(s);
    got
}

/// The one outbox item waiting for delivery.
fn pending_item(s: &State, what: &str) -> u64 {
    let pending: Vec<u64> = s
        .inventory()
        .index()
        .outbox_pending
        .iter()
        .copied()
        .collect();
    assert_eq!(pending.len(), 1, "one {what} queued: {pending:?}");
    pending[0]
}

/// Whether the state still stores `key` (what a restart would load).
fn stored(s: &State, key: RecordKey) -> bool {
    s.records().any(|(k, _)| k == key.encode())
}

#[test]
fn an_ended_hold_and_its_key_leave_after_the_retention_and_a_replay_still_answers() {
    let mut s = event();
    let seq = hold(&mut s, 1_000, "a", "A1", Some("k1"));
    let cancel = EventAction::Cancel {
        owner: UserId("a".into()),
        hold: seq,
    };
    s.apply(GroupId(1), &cmd(2_000, 1, None, cancel));
    check(&s);
    // Within the key's lifetime a replay answers the first outcome even
    // though the hold has ended.
    let replay = EventAction::Hold {
        owner: UserId("a".into()),
        pick: SeatPick::Seats(vec!["A1".into()]),
    };
    let key = Some((UserId("a".into()), "k1".to_string()));
    let again = outcome(
        s.apply(GroupId(1), &cmd(3_000, 1, key.clone(), replay.clone()))
            .response,
    );
    assert!(matches!(again, Outcome::Held(h) if h.seq == seq && h.status == HoldStatus::Held));
    // The hold is kept until its own deadline plus the retention.
    let expires = 1_000 + TTL_MS;
    tick(&mut s, expires + R - 1);
    assert!(s.inventory().holds().contains_key(&seq));
    assert!(
        s.inventory().ops().is_empty(),
        "the key lapsed at 1 s + retention"
    );
    tick(&mut s, expires + R);
    assert!(!s.inventory().holds().contains_key(&seq), "pruned");
    assert!(!stored(&s, RecordKey::Hold(seq)), "and gone from storage");
    // The key is forgotten too: the same request now is a new hold.
    let fresh = outcome(
        s.apply(GroupId(1), &cmd(expires + R + 1, 1, key, replay))
            .response,
    );
    assert!(matches!(fresh, Outcome::Held(h) if h.seq != seq));
    check(&s);
}

#[test]
fn an_unsettled_booking_is_kept_until_settled_then_pruned_with_its_hold() {
    let mut s = event();
    let seq = hold(&mut s, 1, "a", "A1", None);
    assert!(matches!(
        pay(&mut s, 2, seq, PayStep::Attach),
        Outcome::Booking(_)
    ));
    // Voided past the deadline and released: expired but unsettled.
    pay(&mut s, TTL_MS + 5, seq, PayStep::Void);
    pay(&mut s, TTL_MS + 6, seq, PayStep::Release { unpaid: true });
    assert!(s.inventory().bookings()[&seq].unsettled());
    // However long it waits, the reconciler still needs it.
    tick(&mut s, TTL_MS + 10 * R);
    assert!(
        s.inventory().bookings()[&seq].unsettled(),
        "never pruned unsettled"
    );
    assert_eq!(s.inventory().holds()[&seq].status, HoldStatus::Expired);
    // The gateway says the payment can never be captured: settled now,
    // pruned a retention later, hold and booking together.
    let settled_at = TTL_MS + 10 * R + 1;
    pay(&mut s, settled_at, seq, PayStep::Settle);
    assert!(!s.inventory().bookings()[&seq].unsettled());
    tick(&mut s, settled_at + R - 1);
    assert!(s.inventory().bookings().contains_key(&seq));
    tick(&mut s, settled_at + R);
    assert!(!s.inventory().bookings().contains_key(&seq));
    assert!(!s.inventory().holds().contains_key(&seq));
    assert!(!stored(&s, RecordKey::Booking(seq)));
}

#[test]
fn a_confirmed_booking_stays_and_its_delivered_email_leaves() {
    let mut s = event();
    let seq = hold(&mut s, 1, "a", "A1", None);
    pay(&mut s, 2, seq, PayStep::Attach);
    pay(&mut s, 3, seq, PayStep::Confirm);
    assert_eq!(
        s.inventory().bookings()[&seq].status,
        BookingStatus::Confirmed
    );
    let item = pending_item(&s, "email");
    // Undelivered: kept however long it takes.
    tick(&mut s, 10 * R);
    assert!(s.inventory().outbox().contains_key(&item));
    pay(&mut s, 10 * R + 1, item, PayStep::OutboxDone { id: item });
    assert!(s.inventory().outbox()[&item].done_ms.is_some());
    tick(&mut s, 11 * R + 1);
    assert!(
        !s.inventory().outbox().contains_key(&item),
        "delivered, pruned"
    );
    assert!(!stored(&s, RecordKey::Outbox(item)));
    // The sold seat's hold and booking stay for good.
    tick(&mut s, 100 * R);
    assert_eq!(s.inventory().holds()[&seq].status, HoldStatus::Booked);
    assert_eq!(
        s.inventory().bookings()[&seq].status,
        BookingStatus::Confirmed
    );
    assert_eq!(s.inventory().seats()["A1"].state, SeatState::Sold(seq));
}

#[test]
fn a_refunded_booking_leaves_a_retention_after_its_refund() {
    let mut s = event();
    let seq = hold(&mut s, 1, "a", "A1", None);
    pay(&mut s, 2, seq, PayStep::Attach);
    pay(&mut s, TTL_MS + 5, seq, PayStep::Void);
    pay(&mut s, TTL_MS + 6, seq, PayStep::Release { unpaid: true });
    // The capture lands late: refund_pending, kept while the refund waits.
    pay(&mut s, TTL_MS + 7, seq, PayStep::Confirm);
    assert_eq!(
        s.inventory().bookings()[&seq].status,
        BookingStatus::RefundPending
    );
    tick(&mut s, 10 * R);
    assert!(s.inventory().bookings().contains_key(&seq));
    let item = pending_item(&s, "refund");
    let done = 10 * R + 1;
    pay(&mut s, done, item, PayStep::OutboxDone { id: item });
    assert_eq!(
        s.inventory().bookings()[&seq].status,
        BookingStatus::Refunded
    );
    tick(&mut s, done + R - 1);
    assert!(s.inventory().bookings().contains_key(&seq));
    tick(&mut s, done + R);
    assert!(!s.inventory().bookings().contains_key(&seq));
    assert!(!s.inventory().outbox().contains_key(&item));
}

#[test]
fn an_email_undelivered_when_its_refunded_booking_leaves_leaves_with_it() {
    let mut s = event();
    let seq = hold(&mut s, 1, "a", "A1", None);
    pay(&mut s, 2, seq, PayStep::Attach);
    pay(&mut s, 3, seq, PayStep::Confirm);
    let email = pending_item(&s, "email");
    // An operator refunds it (seats back on sale); the mail sink keeps
    // failing, so the email is never delivered.
    pay(
        &mut s,
        4,
        seq,
        PayStep::Refund {
            release_seats: true,
        },
    );
    let refund = *s
        .inventory()
        .index()
        .outbox_refunds
        .iter()
        .next()
        .expect("refund queued");
    pay(&mut s, 5, refund, PayStep::OutboxDone { id: refund });
    assert_eq!(
        s.inventory().bookings()[&seq].status,
        BookingStatus::Refunded
    );
    assert_eq!(pending_item(&s, "email"), email, "the email still waits");
    tick(&mut s, 1 + TTL_MS + R);
    assert!(
        !s.inventory().bookings().contains_key(&seq),
        "booking pruned"
    );
    assert!(
        s.inventory().index().outbox_pending.is_empty(),
        "its email left the queue"
    );
    assert!(!s.inventory().outbox().contains_key(&email));
    assert!(!stored(&s, RecordKey::Outbox(email)));
}

#[test]
fn the_retention_is_bounded_and_the_default_is_a_day() {
    let mut bad = spec();
    bad.retention_ms = MIN_RETENTION_MS - 1;
    assert_eq!(bad.validate().unwrap_err().code(), "invalid_event");
    assert_eq!(
        spec().retention_ms,
        24 * 3600 * 1000,
        "the test spec keeps the default"
    );
}
