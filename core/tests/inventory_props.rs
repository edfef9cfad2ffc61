//! Property tests for the seat inventory: random sequences of holds,
//! cancels, retries with reused idempotency keys and time advancing past
//! hold deadlines, with the invariants checked after every step. The test
//! event, command builders and the invariant check are in `common/mod.rs`.

mod common;

use common::{check, cmd, outcome, pay_action, spec, spec_with, PayStep, SEATS, TTL_MS};
use proptest::prelude::*;
use seatfence_core::inventory::{
    BookingStatus, EventAction, HoldStatus, Outcome, SeatPick, SeatState, INBOX_TTL_MS,
    MIN_RETENTION_MS,
};
use seatfence_core::{Epoch, GroupId, RegionId, State, UserId};

#[derive(Debug, Clone)]
enum Step {
    Hold {
        owner: u8,
        pick: SeatPick,
        key: Option<u8>,
    },
    Cancel {
        owner: u8,
        hold: u64,
        key: Option<u8>,
    },
    /// Re-send the `n`th earlier keyed command, optionally with another payload.
    Replay {
        n: usize,
        other_payload: bool,
    },
    Advance(u64),
    StaleEpoch,
    /// A payment step on hold `hold`, with payment `pay` ("p<hold>" when 0,
    /// another id otherwise).
    Pay {
        hold: u64,
        pay: u8,
        what: PayStep,
    },
}

fn pay_step() -> impl Strategy<Value = PayStep> {
    prop_oneof![
        3 => Just(PayStep::Attach),
        1 => (any::<bool>(), 0u8..2).prop_map(|(takeover, requester)| PayStep::Intent { takeover, requester }),
        2 => Just(PayStep::Confirm),
        2 => any::<bool>().prop_map(|unpaid| PayStep::Release { unpaid }),
        1 => any::<bool>().prop_map(|resend| PayStep::Extend { resend }),
        1 => Just(PayStep::Void),
        1 => Just(PayStep::Settle),
        1 => (1u64..6).prop_map(|id| PayStep::OutboxDone { id }),
        1 => any::<bool>().prop_map(|release_seats| PayStep::Refund { release_seats }),
    ]
}

fn pick() -> impl Strategy<Value = SeatPick> {
    prop_oneof![
        prop::collection::vec(prop::sample::select(&SEATS[..]), 1..4)
            .prop_map(|s| SeatPick::Seats(s.into_iter().map(String::from).collect())),
        (1u32..4).prop_map(|quantity| SeatPick::Quantity {
            section: None,
            quantity
        }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..5, pick(), prop::option::of(0u8..6))
            .prop_map(|(owner, pick, key)| Step::Hold { owner, pick, key }),
        2 => (0u8..5, 1u64..12, prop::option::of(0u8..6))
            .prop_map(|(owner, hold, key)| Step::Cancel { owner, hold, key }),
        2 => (0usize..64, any::<bool>()).prop_map(|(n, other_payload)| Step::Replay { n, other_payload }),
        1 => (0u64..4 * TTL_MS).prop_map(Step::Advance),
        1 => Just(Step::StaleEpoch),
        4 => (1u64..12, 0u8..4, pay_step()).prop_map(|(hold, pay, what)| Step::Pay { hold, pay, what }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn inventory_invariants_hold_after_every_step(
        steps in prop::collection::vec(step(), 1..80),
        buyer_limit in any::<bool>(),
        short_retention in any::<bool>(),
    ) {
        let g = GroupId(1);
        let mut s = State::new(GroupId(1));
        let mut now = 1_000u64;
        let mut spec = spec_with(buyer_limit.then_some(5));
        if short_retention {
            // Keys are forgotten and finished records pruned within a run.
            spec.retention_ms = MIN_RETENTION_MS;
        }
        let retention = spec.retention_ms;
        let created = outcome(s.apply(g, &cmd(now, 0, None, EventAction::Create(Box::new(spec)))).response);
        prop_assert_eq!(created, Outcome::Created { capacity: 8 });
        // Keyed commands sent so far with their first outcome, while the
        // event still remembers them (it forgets them after `retention`).
        let mut sent: Vec<(UserId, String, EventAction, Outcome, u64)> = Vec::new();
        for st in steps {
            let (key, action) = match st {
                Step::Hold { owner, pick, key } => {
                    let owner = UserId(format!("u{owner}"));
                    (key.map(|k| (owner.clone(), format!("k{k}"))), EventAction::Hold { owner, pick })
                }
                Step::Cancel { owner, hold, key } => {
                    let owner = UserId(format!("u{owner}"));
                    (key.map(|k| (owner.clone(), format!("k{k}"))), EventAction::Cancel { owner, hold })
                }
                Step::Replay { n, other_payload } => {
                    sent.retain(|c| c.4 + retention > now);
                    if sent.is_empty() { continue; }
                    let (owner, key, action, first, _) = sent[n % sent.len()].clone();
                    let action2 = if other_payload {
                        EventAction::Hold { owner: owner.clone(), pick: SeatPick::Quantity { section: None, quantity: 99 } }
                    } else {
                        action.clone()
                    };
                    let before = s.clone();
                    let got = outcome(s.apply(g, &cmd(now, 1, Some((owner, key)), action2.clone())).response);
                    if action2 == action {
                        prop_assert_eq!(got, first, "replay returned another result");
                    } else {
                        prop_assert_eq!(got, Outcome::IdempotencyKeyReused);
                    }
                    // A replay changes no seat or hold (time may expire holds).
                    let mut b = before;
                    b.apply(g, &cmd(now, 1, None, EventAction::Tick));
                    prop_assert_eq!(&b.inventory().seats(), &s.inventory().seats());
                    check(&s);
                    continue;
                }
                Step::Advance(ms) => { now += ms; continue; }
                Step::Pay { hold, pay, what } => {
                    // What time alone does (any command expires due holds).
                    let mut before = s.clone();
                    before.apply(g, &cmd(now, 1, None, EventAction::Tick));
                    let action = pay_action(&s, hold, pay, what);
                    let got = outcome(s.apply(g, &cmd(now, 1, None, action.clone())).response);
                    let was = before.inventory().bookings().get(&hold).map(|b| b.status);
                    let is = s.inventory().bookings().get(&hold).map(|b| b.status);
                    // Paid stays paid unless an operator refunds it; a
                    // release needs the booking's own payment.
                    let refund = matches!(what, PayStep::Refund { .. });
                    if was == Some(BookingStatus::Confirmed) {
                        let want = if refund { BookingStatus::RefundPending } else { BookingStatus::Confirmed };
                        prop_assert_eq!(is, Some(want));
                    } else if refund {
                        // Only a confirmed booking is refunded.
                        prop_assert_eq!(was, is);
                        prop_assert_eq!(&before.inventory().seats(), &s.inventory().seats());
                    }
                    let payment_id = if pay == 0 { format!("p{hold}") } else { format!("x{pay}") };
                    let foreign = before.inventory().bookings().get(&hold).is_some_and(|b| b.payment.payment_id != payment_id);
                    if foreign && !matches!(what, PayStep::OutboxDone { .. } | PayStep::Refund { .. }) {
                        prop_assert!(got.error_code().is_some() || was.is_none() || was == is, "{:?}", got);
                        prop_assert_eq!(&before.inventory().seats(), &s.inventory().seats(), "another payment id moved seats");
                    }
                    let voiding = before.inventory().bookings().get(&hold).is_some_and(|b| b.voiding);
                    if let PayStep::Release { unpaid: true } = what {
                        // An unpaid payment is released only after a void
                        // intent, which is committed only past the deadline.
                        if !voiding {
                            prop_assert_eq!(&before.inventory().seats(), &s.inventory().seats(), "unpaid released without a void");
                        }
                    }
                    if let (PayStep::Void, Some(h)) = (what, before.inventory().holds().get(&hold)) {
                        if now < h.expires_at_ms && was == Some(BookingStatus::Pending) {
                            prop_assert!(!s.inventory().bookings()[&hold].voiding, "voided before the deadline");
                        }
                    }
                    if let (PayStep::Intent { .. }, Outcome::ExecuteIntent { granted: true, .. }) = (what, &got) {
                        prop_assert!(!voiding, "execute granted after a void intent");
                    }
                    if let PayStep::Extend { .. } | PayStep::Intent { .. } = what {
                        // The same command re-sent (a transport error after
                        // its commit) changes nothing more.
                        let mut again = s.clone();
                        let resent = outcome(again.apply(g, &cmd(now, 1, None, action)).response);
                        prop_assert_eq!(&again.inventory().holds(), &s.inventory().holds(), "a re-sent extend counted twice");
                        prop_assert_eq!(&again.inventory().bookings(), &s.inventory().bookings());
                        if let Outcome::ExecuteIntent { granted: true, .. } = &got {
                            prop_assert!(matches!(resent, Outcome::ExecuteIntent { granted: true, .. }), "a re-sent intent lost its grant");
                        }
                    }
                    check(&s);
                    continue;
                }
                Step::StaleEpoch => {
                    let before = s.clone();
                    let got = outcome(s.apply(g, &cmd(now, 7, None, EventAction::Hold {
                        owner: UserId("z".into()),
                        pick: SeatPick::Quantity { section: None, quantity: 1 },
                    })).response);
                    prop_assert_eq!(got, Outcome::StaleEpoch { current: Epoch(1), owner: RegionId("us-east".into()) });
                    prop_assert_eq!(before, s.clone(), "a stale command changed state");
                    continue;
                }
            };
            sent.retain(|c| c.4 + retention > now);
            let reused = key.as_ref().and_then(|k| sent.iter().find(|(o, kk, ..)| (o, kk) == (&k.0, &k.1)).cloned());
            let got = outcome(s.apply(g, &cmd(now, 1, key.clone(), action.clone())).response);
            match reused {
                Some((_, _, a, first, _)) if a == action => prop_assert_eq!(&got, &first),
                Some(_) => prop_assert_eq!(&got, &Outcome::IdempotencyKeyReused),
                None => {
                    if let Outcome::Held(h) = &got {
                        prop_assert_eq!(h.status, HoldStatus::Held);
                        prop_assert_eq!(h.expires_at_ms, now + TTL_MS);
                    }
                    if let Some((o, k)) = key {
                        sent.push((o, k, action, got.clone(), now));
                    }
                }
            }
            check(&s);
            // Past every deadline, only holds waiting on a payment keep
            // seats: nothing but the reconciler releases those.
            if s.inventory().holds().values().all(|h| h.expires_at_ms <= now) {
                let mut t = s.clone();
                t.apply(g, &cmd(now, 1, None, EventAction::Tick));
                let waiting: u64 = t.inventory().bookings().values()
                    .filter(|b| b.status == BookingStatus::Pending)
                    .map(|b| t.inventory().holds()[&b.seq].seats.len() as u64)
                    .sum();
                prop_assert_eq!(t.inventory().event().unwrap().held, waiting);
            }
        }
        // The stored records load back into an equal state.
        let mut loaded = State::new(GroupId(1));
        for (k, v) in s.records() {
            loaded.load_record(&k, &v).unwrap();
        }
        loaded.rebuild_indexes();
        prop_assert_eq!(loaded, s);
    }
}

#[test]
fn a_hold_of_several_seats_is_all_or_none() {
    let g = GroupId(1);
    let mut s = State::new(GroupId(1));
    s.apply(g, &cmd(0, 0, None, EventAction::Create(Box::new(spec()))));
    let hold = |s: &mut State, owner: &str, seats: &[&str]| {
        outcome(
            s.apply(
                g,
                &cmd(
                    1,
                    1,
                    None,
                    EventAction::Hold {
                        owner: UserId(owner.into()),
                        pick: SeatPick::Seats(seats.iter().map(|x| x.to_string()).collect()),
                    },
                ),
            )
            .response,
        )
    };
    assert!(matches!(hold(&mut s, "a", &["A1", "A2"]), Outcome::Held(_)));
    let before = s.clone();
    match hold(&mut s, "b", &["A3", "A2"]) {
        Outcome::SeatsUnavailable { unavailable, .. } => assert_eq!(unavailable, ["A2"]),
        other => panic!("{other:?}"),
    }
    // A3 stays available: nothing was taken.
    assert_eq!(s.inventory().seats(), before.inventory().seats());
    assert!(matches!(hold(&mut s, "b", &["A3"]), Outcome::Held(_)));
}

#[test]
fn only_the_owner_cancels_and_a_stranger_learns_nothing() {
    let g = GroupId(1);
    let mut s = State::new(GroupId(1));
    s.apply(g, &cmd(0, 0, None, EventAction::Create(Box::new(spec()))));
    let held = outcome(
        s.apply(
            g,
            &cmd(
                1,
                1,
                None,
                EventAction::Hold {
                    owner: UserId("a".into()),
                    pick: SeatPick::Quantity {
                        section: None,
                        quantity: 2,
                    },
                },
            ),
        )
        .response,
    );
    let Outcome::Held(h) = held else {
        panic!("{held:?}")
    };
    let by = |who: &str| EventAction::Cancel {
        owner: UserId(who.into()),
        hold: h.seq,
    };
    assert_eq!(
        outcome(s.apply(g, &cmd(2, 1, None, by("b"))).response),
        Outcome::HoldNotFound
    );
    assert_eq!(s.inventory().event().unwrap().held, 2);
    let c = outcome(s.apply(g, &cmd(2, 1, None, by("a"))).response);
    assert!(matches!(c, Outcome::Cancelled(h) if h.status == HoldStatus::Released));
    assert_eq!(s.inventory().event().unwrap().available, 8);
}

#[test]
fn the_edges_own_keys_are_forgotten_after_minutes_clients_keys_after_a_day() {
    use seatfence_core::inventory::{AUTO_KEY_PREFIX, AUTO_OPERATION_TTL_MS, OPERATION_TTL_MS};
    let g = GroupId(1);
    let mut s = State::new(GroupId(1));
    s.apply(g, &cmd(0, 0, None, EventAction::Create(Box::new(spec()))));
    let hold = |who: &str| EventAction::Hold {
        owner: UserId(who.into()),
        pick: SeatPick::Quantity {
            section: None,
            quantity: 1,
        },
    };
    let auto = format!("{AUTO_KEY_PREFIX}1");
    s.apply(g, &cmd(1, 1, Some((UserId("a".into()), auto)), hold("a")));
    s.apply(
        g,
        &cmd(1, 1, Some((UserId("b".into()), "mine".into())), hold("b")),
    );
    assert_eq!(s.inventory().ops().len(), 2);
    s.apply(
        g,
        &cmd(1 + AUTO_OPERATION_TTL_MS, 1, None, EventAction::Tick),
    );
    let owners: Vec<&str> = s
        .inventory()
        .ops()
        .keys()
        .map(|k| k.owner.0.as_str())
        .collect();
    assert_eq!(
        owners,
        ["b"],
        "the auto key's record lapsed, the client's did not"
    );
    s.apply(g, &cmd(1 + OPERATION_TTL_MS, 1, None, EventAction::Tick));
    assert!(s.inventory().ops().is_empty());
    let mut rebuilt = s.inventory().clone();
    rebuilt.rebuild_indexes();
    assert_eq!(rebuilt.index(), s.inventory().index());
}

#[test]
fn a_payment_keeps_its_seats_past_the_deadline_and_late_success_is_refunded() {
    let g = GroupId(1);
    let mut s = State::new(GroupId(1));
    s.apply(g, &cmd(0, 0, None, EventAction::Create(Box::new(spec()))));
    let hold = |who: &str| EventAction::Hold {
        owner: UserId(who.into()),
        pick: SeatPick::Seats(vec!["A1".into()]),
    };
    assert!(matches!(
        outcome(s.apply(g, &cmd(1, 1, None, hold("alice"))).response),
        Outcome::Held(_)
    ));
    let attach = pay_action(&s, 1, 0, PayStep::Attach);
    assert!(matches!(
        outcome(s.apply(g, &cmd(2, 1, None, attach)).response),
        Outcome::Booking(_)
    ));
    // The owner can no longer cancel, and the deadline does not free it.
    let cancel = EventAction::Cancel {
        owner: UserId("alice".into()),
        hold: 1,
    };
    assert_eq!(
        outcome(s.apply(g, &cmd(3, 1, None, cancel)).response).error_code(),
        Some("hold_not_cancellable")
    );
    s.apply(g, &cmd(TTL_MS + 5, 1, None, EventAction::Tick));
    assert_eq!(s.inventory().seats()["A1"].state, SeatState::Held(1));
    // Not released unpaid without a void intent.
    let release = pay_action(&s, 1, 0, PayStep::Release { unpaid: true });
    assert_eq!(
        outcome(
            s.apply(g, &cmd(TTL_MS + 6, 1, None, release.clone()))
                .response
        )
        .error_code(),
        Some("release_refused")
    );
    // Voided past the deadline, released by the reconciler; resold to bob.
    let void = pay_action(&s, 1, 0, PayStep::Void);
    s.apply(g, &cmd(TTL_MS + 6, 1, None, void));
    s.apply(g, &cmd(TTL_MS + 6, 1, None, release));
    assert!(
        s.inventory().bookings()[&1].unsettled(),
        "watched after release"
    );
    assert!(matches!(
        outcome(s.apply(g, &cmd(TTL_MS + 7, 1, None, hold("bob"))).response),
        Outcome::Held(_)
    ));
    // The payment completes late: refund, never alice's seat back.
    let confirm = pay_action(&s, 1, 0, PayStep::Confirm);
    let Outcome::Confirmed {
        changed: true,
        booking: b,
    } = outcome(s.apply(g, &cmd(TTL_MS + 8, 1, None, confirm)).response)
    else {
        panic!("a late confirm changes the booking")
    };
    assert_eq!(b.status, BookingStatus::RefundPending);
    assert!(
        s.inventory().index().unsettled.is_empty(),
        "a refund settles it"
    );
    assert_eq!(s.inventory().seats()["A1"].state, SeatState::Held(2));
    let item = *s
        .inventory()
        .index()
        .outbox_pending
        .iter()
        .next()
        .expect("refund queued");
    s.apply(
        g,
        &cmd(
            TTL_MS + 9,
            1,
            None,
            pay_action(&s, 1, 0, PayStep::OutboxDone { id: item }),
        ),
    );
    assert_eq!(s.inventory().bookings()[&1].status, BookingStatus::Refunded);
    check(&s);
}

#[test]
fn webhook_ids_are_remembered_for_a_week_then_forgotten() {
    let g = GroupId(1);
    let mut s = State::new(GroupId(1));
    s.apply(g, &cmd(0, 0, None, EventAction::Create(Box::new(spec()))));
    let hold = EventAction::Hold {
        owner: UserId("alice".into()),
        pick: SeatPick::Seats(vec!["A1".into()]),
    };
    s.apply(g, &cmd(1, 1, None, hold));
    s.apply(g, &cmd(2, 1, None, pay_action(&s, 1, 0, PayStep::Attach)));
    s.apply(g, &cmd(3, 1, None, pay_action(&s, 1, 0, PayStep::Confirm)));
    assert!(s.inventory().inbox().contains_key("ev1"));
    s.apply(g, &cmd(3 + INBOX_TTL_MS - 1, 1, None, EventAction::Tick));
    assert!(
        s.inventory().inbox().contains_key("ev1"),
        "kept for the whole week"
    );
    s.apply(g, &cmd(3 + INBOX_TTL_MS, 1, None, EventAction::Tick));
    assert!(s.inventory().inbox().is_empty());
    assert_eq!(
        s.inventory().bookings()[&1].status,
        BookingStatus::Confirmed
    );
    check(&s);
}

#[test]
fn after_an_epoch_bump_every_command_with_the_old_epoch_is_refused() {
    let g = GroupId(1);
    let mut s = State::new(GroupId(1));
    s.apply(g, &cmd(0, 0, None, EventAction::Create(Box::new(spec()))));
    let hold = |epoch: u64, seat: &str| {
        cmd(
            1,
            epoch,
            None,
            EventAction::Hold {
                owner: UserId("a".into()),
                pick: SeatPick::Seats(vec![seat.to_string()]),
            },
        )
    };
    assert!(matches!(
        outcome(s.apply(g, &hold(1, "A1")).response),
        Outcome::Held(_)
    ));
    let bump = |to: u64| {
        cmd(
            2,
            1,
            None,
            EventAction::BumpEpoch {
                epoch: seatfence_core::Epoch(to),
                owner: "b".into(),
            },
        )
    };
    // Only one step up.
    assert!(matches!(
        outcome(s.apply(g, &bump(3)).response),
        Outcome::InvalidRequest { .. }
    ));
    assert!(matches!(
        outcome(s.apply(g, &bump(2)).response),
        Outcome::EpochBumped { .. }
    ));
    // A repeat of the bump is refused with the new epoch: nothing changes.
    let after = s.clone();
    for c in [bump(2), hold(1, "A2"), hold(1, "A1")] {
        match outcome(s.apply(g, &c).response) {
            Outcome::StaleEpoch { current, owner } => {
                assert_eq!((current.0, owner.0.as_str()), (2, "b"))
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(s, after);
    assert!(matches!(
        outcome(s.apply(g, &hold(2, "A2")).response),
        Outcome::Held(_)
    ));
    check(&s);
}

#[test]
fn an_unknown_seats_refusal_names_only_the_first_few_seats() {
    let g = GroupId(1);
    let mut s = State::new(GroupId(1));
    let mut big = spec();
    big.max_seats_per_hold = seatfence_core::inventory::MAX_SEATS_PER_HOLD_LIMIT;
    s.apply(g, &cmd(0, 0, None, EventAction::Create(Box::new(big))));
    let bytes = |s: &State| s.records().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    let before = bytes(&s);
    // Fifty unknown seats, each as long as a hold may name, and a real one.
    let max = seatfence_core::inventory::MAX_PICK_NAME_BYTES;
    let mut asked: Vec<String> = (0..50).map(|i| format!("{i:0>max$}")).collect();
    asked.push("A1".into());
    let r = s.apply(
        g,
        &cmd(
            1,
            1,
            Some((UserId("b".into()), "k1".into())),
            EventAction::Hold {
                owner: UserId("b".into()),
                pick: SeatPick::Seats(asked.clone()),
            },
        ),
    );
    match outcome(r.response) {
        Outcome::UnknownSeats { seats } => {
            assert_eq!(seats.len(), seatfence_core::inventory::MAX_ECHOED_SEATS);
            assert_eq!(seats, asked[..seats.len()], "the first ones asked");
        }
        other => panic!("{other:?}"),
    }
    // What the key keeps is a few ids, not the fifty asked (3 KB).
    let grown = bytes(&s) - before;
    assert!(grown < 1_500, "the refusal added {grown} bytes");
    check(&s);
}
