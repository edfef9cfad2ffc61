//! Payment commands that are re-sent (a transport error after the commit,
//! a leader change) apply once, and an unpaid payment's seats go back on
//! sale only after a void intent, watched until the gateway settles it.

mod common;

use common::{check, cmd, outcome, pay_action, spec, PayStep, TTL_MS};
use seatfence_core::inventory::{BookingStatus, EventAction, Outcome, SeatPick, SeatState};
use seatfence_core::{GroupId, State, UserId};

const G: GroupId = GroupId(1);

/// An event with alice's hold 1 on A1 and its booking (payment `p1`).
fn booked() -> State {
    let mut s = State::new(GroupId(1));
    s.apply(G, &cmd(0, 0, None, EventAction::Create(Box::new(spec()))));
    let hold = EventAction::Hold {
        owner: UserId("alice".into()),
        pick: SeatPick::Seats(vec!["A1".into()]),
    };
    s.apply(G, &cmd(1, 1, None, hold));
    let attach = pay_action(&s, 1, 0, PayStep::Attach);
    s.apply(G, &cmd(2, 1, None, attach));
    s
}

fn run(s: &mut State, now: u64, what: PayStep) -> Outcome {
    let action = pay_action(s, 1, 0, what);
    outcome(s.apply(G, &cmd(now, 1, None, action)).response)
}

fn granted(o: &Outcome) -> bool {
    matches!(o, Outcome::ExecuteIntent { granted: true, .. })
}

#[test]
fn a_resent_execute_intent_gets_the_same_grant() {
    let mut s = booked();
    let first = PayStep::Intent {
        takeover: false,
        requester: 0,
    };
    assert!(granted(&run(&mut s, 3, first)));
    assert!(
        granted(&run(&mut s, 4, first)),
        "the re-sent intent is granted again"
    );
    assert_eq!(s.inventory().bookings()[&1].intents, 1, "and counted once");
    let other = PayStep::Intent {
        takeover: false,
        requester: 1,
    };
    assert!(
        !granted(&run(&mut s, 5, other)),
        "another path is not granted"
    );
    let takeover = PayStep::Intent {
        takeover: true,
        requester: 1,
    };
    assert!(granted(&run(&mut s, 6, takeover)));
    assert_eq!(s.inventory().bookings()[&1].intents, 2);
    check(&s);
}

#[test]
fn a_resent_extend_counts_once() {
    let mut s = booked();
    let past = TTL_MS + 10;
    let deadline = s.inventory().holds()[&1].expires_at_ms;
    assert!(matches!(
        run(&mut s, past, PayStep::Extend { resend: false }),
        Outcome::Extended { extensions: 1, .. }
    ));
    // The same command again (its attempt is the count it saw: 0).
    assert!(matches!(
        run(&mut s, past, PayStep::Extend { resend: true }),
        Outcome::Extended { extensions: 1, .. }
    ));
    let h = &s.inventory().holds()[&1];
    assert_eq!((h.extensions, h.expires_at_ms), (1, deadline + 1_000));
    check(&s);
}

#[test]
fn no_void_before_the_deadline_and_no_execute_after_one() {
    let mut s = booked();
    assert_eq!(
        run(&mut s, 3, PayStep::Void).error_code(),
        Some("release_refused"),
        "a void intent waits for the deadline"
    );
    assert!(!s.inventory().bookings()[&1].voiding);
    let past = TTL_MS + 10;
    assert!(matches!(run(&mut s, past, PayStep::Void), Outcome::Booking(b) if b.voiding));
    // Extended after a void that did not answer: still no execute.
    run(&mut s, past, PayStep::Extend { resend: false });
    let intent = PayStep::Intent {
        takeover: true,
        requester: 0,
    };
    assert!(!granted(&run(&mut s, past + 1, intent)));
    // The void said `already_captured`: the booking is confirmed.
    assert!(matches!(
        run(&mut s, past + 2, PayStep::Confirm),
        Outcome::Confirmed { changed: true, .. }
    ));
    assert_eq!(s.inventory().seats()["A1"].state, SeatState::Sold(1));
    check(&s);
}

#[test]
fn a_released_booking_is_watched_until_the_gateway_settles_it() {
    let mut s = booked();
    let past = TTL_MS + 10;
    run(&mut s, past, PayStep::Void);
    run(&mut s, past, PayStep::Release { unpaid: true });
    let b = &s.inventory().bookings()[&1];
    assert_eq!(b.status, BookingStatus::Expired);
    assert!(b.unsettled());
    assert_eq!(
        s.inventory()
            .index()
            .unsettled
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![1]
    );
    // Settling twice is settling once; a late capture after it still refunds.
    run(&mut s, past + 1, PayStep::Settle);
    run(&mut s, past + 2, PayStep::Settle);
    assert!(!s.inventory().bookings()[&1].unsettled());
    assert!(s.inventory().index().unsettled.is_empty());
    run(&mut s, past + 3, PayStep::Confirm);
    assert_eq!(
        s.inventory().bookings()[&1].status,
        BookingStatus::RefundPending
    );
    check(&s);
}

#[test]
fn a_keyed_replay_says_it_is_one() {
    let mut s = State::new(GroupId(1));
    s.apply(G, &cmd(0, 0, None, EventAction::Create(Box::new(spec()))));
    let key = Some((UserId("alice".into()), "k1".into()));
    let hold = EventAction::Hold {
        owner: UserId("alice".into()),
        pick: SeatPick::Seats(vec!["A1".into()]),
    };
    let reply = |r: seatfence_core::Response| match r {
        seatfence_core::Response::Event(e) => e,
        other => panic!("{other:?}"),
    };
    let first = reply(s.apply(G, &cmd(1, 1, key.clone(), hold.clone())).response);
    let again = reply(s.apply(G, &cmd(2, 1, key, hold)).response);
    assert!(!first.replayed);
    assert!(again.replayed, "the second answer repeats the first");
    assert_eq!(first.outcome, again.outcome);
}

#[test]
fn the_unsettled_watch_goes_round_every_released_booking() {
    let mut s = State::new(GroupId(1));
    s.apply(G, &cmd(0, 0, None, EventAction::Create(Box::new(spec()))));
    let past = TTL_MS + 10;
    for (seq, seat) in [(1, "A1"), (2, "A2"), (3, "A3")] {
        let hold = EventAction::Hold {
            owner: UserId(format!("buyer{seq}")),
            pick: SeatPick::Seats(vec![seat.into()]),
        };
        s.apply(G, &cmd(1, 1, None, hold));
        s.apply(G, &cmd(2, 1, None, pay_action(&s, seq, 0, PayStep::Attach)));
    }
    for seq in 1..=3 {
        s.apply(
            G,
            &cmd(past, 1, None, pay_action(&s, seq, 0, PayStep::Void)),
        );
        let release = pay_action(&s, seq, 0, PayStep::Release { unpaid: true });
        s.apply(G, &cmd(past, 1, None, release));
    }
    check(&s);
    let seqs = |after, limit| {
        s.inventory()
            .unsettled_after(after, limit)
            .iter()
            .map(|(h, b)| {
                assert_eq!(h.seq, b.seq);
                b.seq
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(seqs(0, 2), vec![1, 2], "from the start");
    assert_eq!(
        seqs(2, 2),
        vec![3, 1],
        "on after the last visited, wrapping"
    );
    assert_eq!(seqs(3, 10), vec![1, 2, 3], "each once");
    assert_eq!(
        seqs(99, 10),
        vec![1, 2, 3],
        "after a settled one: from the start"
    );
}
