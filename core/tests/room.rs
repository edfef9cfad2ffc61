//! The waiting room in the state machine: the opening's draw, admission by
//! the schedule, holds only by admitted buyers, lapses and re-joins, a
//! schedule bounded without dropping usable tickets, and what one ticket
//! may hold.

mod common;

use common::{cmd, outcome, spec_with};
use seatfence_core::inventory::{
    EventAction, Outcome, RoomAction, RoomSettings, SeatPick, Section, Standing, MAX_SEGMENTS,
    MAX_TICKET_TTL_MS, MIN_SEGMENT_MS,
};
use seatfence_core::query::{Query, QueryResult, RoomView};
use seatfence_core::{Command, GroupId, State, UserId};

const OPENS: u64 = 100_000;
const TTL: u64 = 30_000;

fn room(per_sec: u32) -> RoomSettings {
    RoomSettings {
        enabled: true,
        admit_per_sec: per_sec,
        ticket_ttl_ms: TTL,
    }
}

fn run(s: &mut State, c: Command) -> Outcome {
    outcome(s.apply(GroupId(1), &c).response)
}

/// An event opening at `OPENS` with a room admitting `per_sec`.
fn event(per_sec: u32) -> State {
    let mut spec = spec_with(None);
    spec.opens_at_ms = Some(OPENS);
    spec.waiting_room = Some(room(per_sec));
    let mut s = State::new(GroupId(1));
    let created = run(&mut s, cmd(0, 0, None, EventAction::Create(Box::new(spec))));
    assert!(matches!(created, Outcome::Created { .. }), "{created:?}");
    s
}

/// An event opening at `OPENS` with `seats` seats in one section and a
/// room admitting `per_sec`, tickets lasting `ttl_ms`.
fn big_event(per_sec: u32, ttl_ms: u64, seats: u32) -> State {
    let mut spec = spec_with(None);
    spec.seats = vec![];
    spec.sections = vec![Section {
        name: "S".into(),
        rows: seats.div_ceil(100),
        seats_per_row: 100,
    }];
    spec.opens_at_ms = Some(OPENS);
    spec.waiting_room = Some(RoomSettings {
        enabled: true,
        admit_per_sec: per_sec,
        ticket_ttl_ms: ttl_ms,
    });
    let mut s = State::new(GroupId(1));
    let created = run(&mut s, cmd(0, 0, None, EventAction::Create(Box::new(spec))));
    assert!(matches!(created, Outcome::Created { .. }), "{created:?}");
    s
}

fn segments(s: &State) -> usize {
    s.inventory().room().expect("a room").segments.len()
}

/// A hold of any one seat through `buyer`'s ticket.
fn hold_any(s: &mut State, now: u64, buyer: &UserId) -> Outcome {
    let action = EventAction::Room(RoomAction::Hold {
        owner: buyer.clone(),
        pick: SeatPick::Quantity {
            section: None,
            quantity: 1,
        },
    });
    run(s, cmd(now, 1, None, action))
}

fn user(i: usize) -> UserId {
    UserId(format!("buyer-{i}"))
}

fn join(s: &mut State, now: u64, buyers: &[UserId], salt: u64) -> Vec<(UserId, Standing)> {
    let action = EventAction::Room(RoomAction::Join {
        buyers: buyers.to_vec(),
        salt,
    });
    match run(s, cmd(now, 1, None, action)) {
        Outcome::Joined(v) => v,
        other => panic!("join refused: {other:?}"),
    }
}

fn view(s: &State, buyer: Option<&UserId>, now: u64) -> (RoomView, Option<Standing>) {
    let q = Query::Room {
        buyer: buyer.cloned(),
        now_ms: now,
    };
    match s.query(&q) {
        QueryResult::Room {
            room: Some(room),
            standing,
            ..
        } => (room, standing),
        other => panic!("no room: {other:?}"),
    }
}

fn position(s: &State, buyer: &UserId, now: u64) -> u64 {
    match view(s, Some(buyer), now).1 {
        Some(Standing::Waiting { position, .. })
        | Some(Standing::Admitted { position, .. })
        | Some(Standing::Lapsed { position }) => position,
        other => panic!("{buyer:?} has no position: {other:?}"),
    }
}

/// A hold with a ticket the edge verified.
fn hold(s: &mut State, now: u64, buyer: &UserId, seat: &str) -> Outcome {
    let action = EventAction::Room(RoomAction::Hold {
        owner: buyer.clone(),
        pick: SeatPick::Seats(vec![seat.into()]),
    });
    run(s, cmd(now, 1, None, action))
}

fn tick(s: &mut State, now: u64) {
    run(s, cmd(now, 1, None, EventAction::Tick));
}

/// 300 buyers join before the opening in three batches (three regions'
/// edges), then 3 after it.
fn rush(salts: [u64; 3]) -> State {
    let mut s = event(10);
    for (r, salt) in salts.into_iter().enumerate() {
        let batch: Vec<UserId> = (r * 100..(r + 1) * 100).map(user).collect();
        for (_, st) in join(&mut s, 1_000 + r as u64, &batch, salt) {
            assert_eq!(st, Standing::AwaitingDraw { opens_at_ms: OPENS });
        }
    }
    tick(&mut s, OPENS);
    let late: Vec<UserId> = (300..303).map(user).collect();
    join(&mut s, OPENS + 10, &late, 7);
    s
}

#[test]
fn early_joiners_are_drawn_at_random_and_later_ones_follow_by_arrival() {
    let s = rush([1, 2, 3]);
    let order: Vec<u64> = (0..300).map(|i| position(&s, &user(i), OPENS)).collect();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..300).collect::<Vec<_>>(),
        "positions 0..300, once each"
    );
    // Not by arrival, and not by region (batch): each region's buyers are
    // spread over the whole queue.
    assert_ne!(order, (0..300).collect::<Vec<_>>());
    for r in 0..3 {
        let first_third = order[r * 100..(r + 1) * 100]
            .iter()
            .filter(|p| **p < 100)
            .count();
        assert!(
            (15..=55).contains(&first_third),
            "region {r} has {first_third} of the first 100 places"
        );
    }
    // Later joiners by arrival, after every early one.
    for (k, i) in (300..303).enumerate() {
        assert_eq!(position(&s, &user(i), OPENS + 10), 300 + k as u64);
    }
    // Other salts, another draw; the same salts, the same one.
    let other = rush([4, 5, 6]);
    assert_ne!(
        order,
        (0..300)
            .map(|i| position(&other, &user(i), OPENS))
            .collect::<Vec<_>>()
    );
    let again = rush([1, 2, 3]);
    assert_eq!(
        order,
        (0..300)
            .map(|i| position(&again, &user(i), OPENS))
            .collect::<Vec<_>>()
    );
}

#[test]
fn buyers_are_admitted_at_the_rate_in_queue_order() {
    let s = rush([1, 2, 3]);
    // 10 a second from the opening: positions 0..=10 by one second in.
    assert_eq!(view(&s, None, OPENS).0.admitted, 1);
    assert_eq!(view(&s, None, OPENS + 1_000).0.admitted, 11);
    assert_eq!(view(&s, None, OPENS + 20_000).0.admitted, 201);
    assert_eq!(view(&s, None, OPENS + 20_000).0.queue_len, 303 - 201);
    let first = (0..300)
        .find(|i| position(&s, &user(*i), OPENS) == 0)
        .unwrap();
    let last = (0..300)
        .find(|i| position(&s, &user(*i), OPENS) == 299)
        .unwrap();
    assert!(matches!(
        view(&s, Some(&user(first)), OPENS).1,
        Some(Standing::Admitted { .. })
    ));
    match view(&s, Some(&user(last)), OPENS + 1_000).1 {
        Some(Standing::Waiting {
            ahead,
            admitted_at_ms,
            ..
        }) => {
            assert_eq!(ahead, 299 - 11);
            assert_eq!(admitted_at_ms, OPENS + 29_900);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_an_admitted_buyer_holds_and_a_lapsed_one_joins_again_at_the_back() {
    let mut s = rush([1, 2, 3]);
    let first = (0..300)
        .find(|i| position(&s, &user(*i), OPENS) == 0)
        .unwrap();
    let last = (0..300)
        .find(|i| position(&s, &user(*i), OPENS) == 299)
        .unwrap();
    assert_eq!(
        hold(&mut s, OPENS + 1, &user(999), "A1"),
        Outcome::TicketRequired
    );
    // Without a ticket, even the first in line is refused.
    let plain = EventAction::Hold {
        owner: user(first),
        pick: SeatPick::Seats(vec!["A1".into()]),
    };
    assert_eq!(
        run(&mut s, cmd(OPENS + 1, 1, None, plain)),
        Outcome::TicketRequired
    );
    assert_eq!(
        hold(&mut s, OPENS + 1, &user(last), "A1"),
        Outcome::NotAdmittedYet
    );
    assert!(matches!(
        hold(&mut s, OPENS + 2, &user(first), "A1"),
        Outcome::Held(_)
    ));
    assert!(matches!(
        hold(&mut s, OPENS + 3, &user(first), "A2"),
        Outcome::Held(_)
    ));
    assert_eq!(
        view(&s, None, OPENS + 3).0.tickets_used,
        1,
        "one place, used once"
    );
    // Position 0 was admitted at the opening: its time ends TTL later.
    assert_eq!(
        hold(&mut s, OPENS + TTL, &user(first), "A3"),
        Outcome::TicketInvalid
    );
    // Joining twice keeps the first place while it lasts ...
    let second = (0..300)
        .find(|i| position(&s, &user(*i), OPENS) == 1)
        .unwrap();
    let again = join(&mut s, OPENS + 200, &[user(second)], 9);
    assert!(matches!(again[0].1, Standing::Admitted { position: 1, .. }));
    // ... and a lapsed buyer joins at the back.
    let back = join(&mut s, OPENS + TTL + 1, &[user(first)], 9);
    assert!(
        matches!(back[0].1, Standing::Waiting { position: 303, .. }),
        "{back:?}"
    );
    assert_eq!(view(&s, None, OPENS + TTL + 1).0.rejoined, 1);
    // Lapsed unused: every position admitted at least TTL ago but the one
    // used (position 0, whose buyer joined again).
    let at = OPENS + TTL + 5_000;
    let expired = view(&s, None, at - TTL).0.admitted;
    assert_eq!(view(&s, None, at).0.lapsed, expired - 1);
    // The count survives a reload (the used index is rebuilt).
    let mut loaded = State::new(GroupId(1));
    for (k, v) in s.records() {
        loaded.load_record(&k, &v).expect("record loads");
    }
    loaded.rebuild_indexes();
    assert_eq!(view(&loaded, None, at).0.lapsed, expired - 1);
    assert_eq!(loaded.inventory().index(), s.inventory().index());
}

#[test]
fn a_new_rate_paces_from_the_first_buyer_not_yet_admitted() {
    let mut s = rush([1, 2, 3]);
    assert_eq!(view(&s, None, OPENS + 5_000).0.admitted, 51);
    let set = EventAction::Room(RoomAction::Configure(room(100)));
    assert_eq!(
        run(&mut s, cmd(OPENS + 5_000, 1, None, set)),
        Outcome::RoomSet(room(100))
    );
    assert_eq!(view(&s, None, OPENS + 5_000).0.admitted, 52);
    assert_eq!(view(&s, None, OPENS + 6_000).0.admitted, 152);
}

#[test]
fn a_rush_after_a_drained_queue_is_paced() {
    let mut s = rush([1, 2, 3]);
    // Everyone admitted by 40 s; credit piles up until 100 s.
    let now = OPENS + 100_000;
    assert_eq!(view(&s, None, now).0.queue_len, 0);
    let rush: Vec<UserId> = (400..420).map(user).collect();
    let standings = join(&mut s, now, &rush, 11);
    assert!(matches!(
        standings[0].1,
        Standing::Admitted { position: 303, .. }
    ));
    assert!(
        matches!(standings[1].1, Standing::Waiting { position: 304, .. }),
        "{standings:?}"
    );
    assert_eq!(view(&s, None, now + 1_000).0.admitted, 303 + 11);
}

#[test]
fn the_room_survives_a_reload_from_its_records() {
    let mut s = rush([1, 2, 3]);
    hold(&mut s, OPENS + 2, &user(0), "A1");
    let mut loaded = State::new(GroupId(1));
    for (k, v) in s.records() {
        loaded.load_record(&k, &v).expect("record loads");
    }
    loaded.rebuild_indexes();
    assert_eq!(loaded.inventory().room(), s.inventory().room());
    assert_eq!(loaded.inventory().places(), s.inventory().places());
}

#[test]
fn a_room_needs_an_opening_time_and_sane_settings() {
    let mut spec = spec_with(None);
    spec.waiting_room = Some(room(10));
    assert!(spec.validate().is_err(), "no opens_at");
    spec.opens_at_ms = Some(OPENS);
    assert!(spec.validate().is_ok());
    spec.waiting_room = Some(room(0));
    assert!(spec.validate().is_err(), "zero rate");
    let mut s = event(10);
    let bad = EventAction::Room(RoomAction::Join {
        buyers: vec![],
        salt: 0,
    });
    assert!(matches!(
        run(&mut s, cmd(1, 1, None, bad)),
        Outcome::InvalidRequest { .. }
    ));
    // An operator's room on an event without an opening time.
    let mut plain = State::new(GroupId(1));
    let create = EventAction::Create(Box::new(spec_with(None)));
    run(&mut plain, cmd(0, 0, None, create));
    let set = EventAction::Room(RoomAction::Configure(room(10)));
    assert_eq!(
        run(&mut plain, cmd(1, 1, None, set)),
        Outcome::OpensAtRequired
    );
}

/// Joins that each find the queue drained (a buyer every 500 ms, faster
/// admission) used to start a segment each, and past `MAX_SEGMENTS` the
/// oldest went while their tickets were still good.
#[test]
fn a_drained_queue_joined_again_and_again_keeps_every_valid_ticket() {
    const JOINS: usize = MAX_SEGMENTS + 1_000;
    const EVERY_MS: u64 = 500;
    let mut s = big_event(1_000, MAX_TICKET_TTL_MS, JOINS as u32);
    tick(&mut s, OPENS);
    for i in 0..JOINS {
        let now = OPENS + 1 + i as u64 * EVERY_MS;
        let st = join(&mut s, now, &[user(i)], i as u64);
        assert!(
            matches!(st[0].1, Standing::Admitted { .. }),
            "buyer {i} on a drained queue: {st:?}"
        );
    }
    let end = OPENS + 1 + JOINS as u64 * EVERY_MS;
    assert!(
        end - OPENS < MAX_TICKET_TTL_MS,
        "every ticket is still good"
    );
    for i in 0..JOINS {
        let st = view(&s, Some(&user(i)), end).1;
        assert!(
            matches!(st, Some(Standing::Admitted { .. })),
            "buyer {i}: {st:?}"
        );
        let held = hold_any(&mut s, end, &user(i));
        assert!(matches!(held, Outcome::Held(_)), "buyer {i}: {held:?}");
    }
    // A segment a second at most, whatever the joins.
    let kept = segments(&s);
    assert!(
        kept <= ((end - OPENS) / MIN_SEGMENT_MS) as usize + 2 && kept <= MAX_SEGMENTS,
        "{kept} segments"
    );
}

/// Over many ticket times, segments whose every ticket ran out go, the
/// rest stay: the schedule never holds more than a ticket time's worth,
/// and a buyer who joined a drained queue has the whole ticket time.
#[test]
fn segments_go_once_their_tickets_ran_out_and_no_sooner() {
    const EVERY_MS: u64 = 250;
    let bound = (TTL / MIN_SEGMENT_MS) as usize + 2;
    let mut s = big_event(1_000, TTL, 2_000);
    tick(&mut s, OPENS);
    let joined_at = |i: usize| OPENS + 1 + i as u64 * EVERY_MS;
    let joins = (10 * TTL / EVERY_MS) as usize;
    for i in 0..joins {
        join(&mut s, joined_at(i), &[user(i)], i as u64);
        assert!(segments(&s) <= bound, "{} segments", segments(&s));
    }
    let end = joined_at(joins - 1);
    for i in 0..joins {
        let st = view(&s, Some(&user(i)), end).1;
        match st {
            Some(Standing::Admitted { expires_at_ms, .. }) => {
                assert!(joined_at(i) + TTL > end, "buyer {i} kept too long: {st:?}");
                assert!(expires_at_ms >= joined_at(i) + TTL, "buyer {i}: {st:?}");
            }
            Some(Standing::Lapsed { .. }) => {
                assert!(joined_at(i) + TTL <= end, "buyer {i} lapsed early")
            }
            other => panic!("buyer {i}: {other:?}"),
        }
    }
}

#[test]
fn a_rate_change_within_a_second_of_the_last_is_refused() {
    let mut s = rush([1, 2, 3]);
    let set = |per_sec| EventAction::Room(RoomAction::Configure(room(per_sec)));
    assert_eq!(
        run(&mut s, cmd(OPENS + 5_000, 1, None, set(100))),
        Outcome::RoomSet(room(100))
    );
    let again = run(&mut s, cmd(OPENS + 5_500, 1, None, set(50)));
    assert!(matches!(again, Outcome::InvalidRequest { .. }), "{again:?}");
    assert_eq!(view(&s, None, OPENS + 5_500).0.settings, room(100));
    assert_eq!(
        run(&mut s, cmd(OPENS + 6_000, 1, None, set(50))),
        Outcome::RoomSet(room(50))
    );
}

fn hold_seats(s: &mut State, now: u64, buyer: &UserId, seats: &[&str]) -> Outcome {
    let action = EventAction::Room(RoomAction::Hold {
        owner: buyer.clone(),
        pick: SeatPick::Seats(seats.iter().map(|s| s.to_string()).collect()),
    });
    run(s, cmd(now, 1, None, action))
}

/// The buyer admitted first of `rush`.
fn front(s: &State) -> UserId {
    (0..300)
        .map(user)
        .find(|u| position(s, u, OPENS) == 0)
        .expect("a first place")
}

#[test]
fn a_ticket_holds_the_per_buyer_limit_then_is_used() {
    // Two seats a buyer: cancelling one does not give the ticket it back.
    let mut s = State::new(GroupId(1));
    let mut spec = spec_with(Some(2));
    spec.opens_at_ms = Some(OPENS);
    spec.waiting_room = Some(room(10));
    run(&mut s, cmd(0, 0, None, EventAction::Create(Box::new(spec))));
    join(&mut s, OPENS + 1, &[user(1)], 1);
    let Outcome::Held(first) = hold_seats(&mut s, OPENS + 2, &user(1), &["A1"]) else {
        panic!("the first hold")
    };
    let cancel = EventAction::Cancel {
        owner: user(1),
        hold: first.seq,
    };
    assert!(matches!(
        run(&mut s, cmd(OPENS + 3, 1, None, cancel)),
        Outcome::Cancelled(_)
    ));
    assert!(matches!(
        hold_seats(&mut s, OPENS + 4, &user(1), &["A2"]),
        Outcome::Held(_)
    ));
    // The buyer holds one seat of two, and the ticket has held two.
    assert_eq!(
        hold_seats(&mut s, OPENS + 5, &user(1), &["A3"]),
        Outcome::TicketUsed { limit: 2, held: 2 }
    );
    assert_eq!(
        Outcome::TicketUsed { limit: 2, held: 2 }.error_code(),
        Some("ticket_used")
    );
    assert_eq!(view(&s, None, OPENS + 5).0.tickets_used, 1);
}

#[test]
fn without_a_per_buyer_limit_a_ticket_holds_the_per_hold_one() {
    // `max_seats_per_hold` is 3 and there is no per-buyer limit.
    let mut s = rush([1, 2, 3]);
    let buyer = front(&s);
    assert!(matches!(
        hold_seats(&mut s, OPENS + 1, &buyer, &["A1", "A2"]),
        Outcome::Held(_)
    ));
    assert_eq!(
        hold_seats(&mut s, OPENS + 2, &buyer, &["A3", "A4"]),
        Outcome::TicketUsed { limit: 3, held: 2 },
        "two more would make four"
    );
    // Over the per-hold limit is the hold's own refusal, as without a room.
    assert_eq!(
        hold_seats(&mut s, OPENS + 2, &buyer, &["A3", "A4", "B1", "B2"]),
        Outcome::TooManySeats { max: 3 }
    );
    assert!(matches!(
        hold_seats(&mut s, OPENS + 3, &buyer, &["A3"]),
        Outcome::Held(_)
    ));
    assert_eq!(
        hold_seats(&mut s, OPENS + 4, &buyer, &["A4"]),
        Outcome::TicketUsed { limit: 3, held: 3 }
    );
    // What the ticket held survives a reload.
    let mut loaded = State::new(GroupId(1));
    for (k, v) in s.records() {
        loaded.load_record(&k, &v).expect("record loads");
    }
    loaded.rebuild_indexes();
    assert_eq!(
        hold_seats(&mut loaded, OPENS + 4, &buyer, &["A4"]),
        Outcome::TicketUsed { limit: 3, held: 3 }
    );
}

#[test]
fn a_retried_hold_answers_as_before_and_counts_once() {
    let mut s = rush([1, 2, 3]);
    let buyer = front(&s);
    let keyed = |seats: &[&str]| {
        EventAction::Room(RoomAction::Hold {
            owner: buyer.clone(),
            pick: SeatPick::Seats(seats.iter().map(|s| s.to_string()).collect()),
        })
    };
    let key = Some((buyer.clone(), "k1".to_string()));
    let first = run(&mut s, cmd(OPENS + 1, 1, key.clone(), keyed(&["A1", "A2"])));
    assert!(matches!(first, Outcome::Held(_)), "{first:?}");
    let again = run(&mut s, cmd(OPENS + 2, 1, key, keyed(&["A1", "A2"])));
    assert_eq!(again, first, "the recorded answer");
    assert!(
        matches!(
            hold_seats(&mut s, OPENS + 3, &buyer, &["A3"]),
            Outcome::Held(_)
        ),
        "the retry did not count: one seat left on the ticket"
    );
}

#[test]
fn a_lapsed_buyer_who_joins_again_gets_a_new_allowance() {
    let mut s = rush([1, 2, 3]);
    let buyer = front(&s);
    assert!(matches!(
        hold_seats(&mut s, OPENS + 1, &buyer, &["A1", "A2", "A3"]),
        Outcome::Held(_)
    ));
    // The holds expire (10 s), the ticket lapses, the buyer joins again
    // and waits for its new place (303: behind everyone).
    let back = join(&mut s, OPENS + TTL + 1, std::slice::from_ref(&buyer), 5);
    let Standing::Waiting { admitted_at_ms, .. } = back[0].1 else {
        panic!("{back:?}")
    };
    assert!(matches!(
        hold_seats(&mut s, admitted_at_ms, &buyer, &["A1", "A2", "A3"]),
        Outcome::Held(_)
    ));
}
