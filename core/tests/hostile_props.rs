//! Hostile input to `State::apply`: whatever a sender puts in a command
//! (nested batches, oversized owners and keys, event sizes that overflow),
//! no replica panics, a refused command changes nothing, and two replicas
//! stay identical.

use proptest::prelude::*;
use seatfence_core::inventory::{EventAction, EventCommand, EventSpec, SeatPick, Section};
use seatfence_core::{Command, Epoch, EventId, GroupId, RegionId, Response, State, UserId};

fn spec(sections: Vec<(u32, u32)>) -> EventSpec {
    EventSpec {
        event_id: EventId("e".into()),
        name: "e".into(),
        home_region: RegionId("us-east".into()),
        seats: Vec::new(),
        sections: sections
            .into_iter()
            .enumerate()
            .map(|(i, (rows, seats_per_row))| Section {
                name: format!("S{i}"),
                rows,
                seats_per_row,
            })
            .collect(),
        hold_ttl_ms: 60_000,
        max_seats_per_hold: 4,
        max_seats_per_buyer: None,
        opens_at_ms: None,
        closes_at_ms: None,
        survival: Default::default(),
        price_cents: 100,
        currency: "EUR".into(),
        retention_ms: seatfence_core::inventory::DEFAULT_RETENTION_MS,
        changes_retention_ms: seatfence_core::inventory::DEFAULT_CHANGES_RETENTION_MS,
        waiting_room: None,
    }
}

fn event(action: EventAction, key: Option<(String, String)>, now_ms: u64) -> Command {
    Command::event(EventCommand {
        event_id: EventId("e".into()),
        epoch: Epoch(1),
        now_ms,
        idempotency: key.map(|(o, k)| (UserId(o), k)),
        action,
    })
}

/// Strings from empty to well past every bound.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,8}",
        (1000usize..70_000).prop_map(|n| "x".repeat(n)),
    ]
}

fn hostile() -> impl Strategy<Value = Command> {
    let one = prop_oneof![
        prop::collection::vec((any::<u32>(), any::<u32>()), 1..5).prop_map(|s| event(
            EventAction::Create(Box::new(spec(s))),
            None,
            1
        )),
        (text(), prop::option::of((text(), text())), any::<u64>()).prop_map(|(owner, key, now)| {
            event(
                EventAction::Hold {
                    owner: UserId(owner),
                    pick: SeatPick::Quantity {
                        section: None,
                        quantity: 1,
                    },
                },
                key,
                now,
            )
        }),
        (text(), any::<u64>()).prop_map(|(owner, hold)| event(
            EventAction::Cancel {
                owner: UserId(owner),
                hold
            },
            None,
            2
        )),
        (text(), text()).prop_map(|(key, value)| Command::Put {
            key,
            value: value.into_bytes()
        }),
    ];
    one.prop_recursive(3, 12, 3, |inner| {
        prop::collection::vec(inner, 0..3).prop_map(Command::Batch)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn no_input_panics_a_replica_and_refusals_change_nothing(
        cmds in prop::collection::vec(hostile(), 1..12),
    ) {
        let group = GroupId(7);
        let (mut a, mut b) = (State::new(group), State::new(group));
        // A real event to act on first.
        let create = event(EventAction::Create(Box::new(spec(vec![(2, 3)]))), None, 1);
        a.apply(group, &create);
        b.apply(group, &create);
        for cmd in &cmds {
            let before = a.clone();
            let ra = a.apply(group, cmd);
            let rb = b.apply(group, cmd);
            prop_assert_eq!(&ra, &rb);
            prop_assert_eq!(&a, &b);
            if let Response::Invalid { reason } = &ra.response {
                prop_assert!(!reason.is_empty());
                prop_assert_eq!(&a, &before, "a refused command changed nothing");
            }
            let ev = a.inventory().event().expect("the event stays");
            prop_assert!(ev.capacity <= seatfence_core::inventory::MAX_CAPACITY);
        }
    }
}

/// Issue 39: a hold naming long unknown seats (or a long unknown section)
/// was refused `unknown_seats` and its names were kept whole under its
/// idempotency key on every replica, for a day.
#[test]
fn a_hold_naming_long_unknown_seats_leaves_the_state_as_it_was() {
    let group = GroupId(7);
    let mut s = State::new(group);
    let create = event(EventAction::Create(Box::new(spec(vec![(2, 3)]))), None, 1);
    s.apply(group, &create);
    let size = |s: &State| {
        s.records()
            .map(|(k, v)| k.len() + v.len())
            .fold((0, 0), |(n, b), l| (n + 1, b + l))
    };
    let before = size(&s);
    let long = |i: usize| format!("{i}{}", "x".repeat(100_000));
    let picks = [
        SeatPick::Seats((0..4).map(long).collect()),
        SeatPick::Seats(vec!["S0-1-1".into(), long(9)]),
        SeatPick::Quantity {
            section: Some(long(0)),
            quantity: 1,
        },
    ];
    for (i, pick) in picks.into_iter().enumerate() {
        let holds = [
            EventAction::Hold {
                owner: UserId("b".into()),
                pick: pick.clone(),
            },
            EventAction::Room(seatfence_core::inventory::RoomAction::Hold {
                owner: UserId("b".into()),
                pick,
            }),
        ];
        for (j, action) in holds.into_iter().enumerate() {
            let key = Some(("b".to_string(), format!("k{i}-{j}")));
            let r = s.apply(group, &event(action, key, 2));
            assert!(
                matches!(&r.response, Response::Invalid { reason } if reason.len() < 200),
                "{:.300}",
                format!("{:?}", r.response)
            );
            assert!(r.changed.is_empty());
            assert_eq!(size(&s), before, "records and their bytes");
        }
    }
}
