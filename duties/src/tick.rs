//! The `Tick` duty: once a hold's deadline has passed, propose a `Tick` so
//! the hold is expired and its seats counted free again even when no
//! other command arrives (any command expires due holds first; this only
//! keeps idle events current). Holds with a payment are never expired by
//! time; only the reconciler releases those. The same tick draws a waiting
//! room at its opening (on time), forgets idempotency records and prunes
//! finished records whose retention ended ([`CLEANUP_LAG_MS`] late at
//! most).

use seatfence_core::inventory::{EventAction, EventCommand, Inventory};
use seatfence_core::{Command, Epoch, EventId, GroupId};
use seatfence_raft::registry::GroupHandle;
use seatfence_raft::Proposer;

/// How long finished records may wait past their time on an idle event
/// before a `Tick` is proposed for them alone: one tick a minute at most
/// per idle event (a busy one forgets them with its next command anyway).
pub const CLEANUP_LAG_MS: u64 = 60_000;

/// When `inv` next needs a tick: its earliest hold deadline, its waiting
/// room's draw, or its cleanup ([`CLEANUP_LAG_MS`] late); `None` when
/// nothing is scheduled (or there is no event).
pub fn due_ms(inv: &Inventory) -> Option<u64> {
    inv.event()?;
    let expiry = inv.index().deadlines.get_min().map(|(at, _)| *at);
    let cleanup = inv
        .next_cleanup_ms()
        .map(|at| at.saturating_add(CLEANUP_LAG_MS));
    expiry
        .into_iter()
        .chain(cleanup)
        .chain(inv.room_due_ms())
        .min()
}

/// When `inv` next needs a tick ([`due_ms`]), with its event and epoch.
pub fn next(inv: &Inventory) -> Option<(u64, EventId, Epoch)> {
    let e = inv.event()?;
    due_ms(inv).map(|at| (at, e.event_id.clone(), e.epoch))
}

/// Propose the tick at `g`'s leader, in-process and fenced to the term
/// this node leads in (a leader change meanwhile refuses it).
pub async fn propose(
    proposer: &Proposer,
    gid: GroupId,
    g: &GroupHandle,
    event: (EventId, Epoch),
    now_ms: u64,
) {
    let (event_id, epoch) = event;
    let cmd = Command::event(EventCommand {
        event_id,
        epoch,
        now_ms,
        idempotency: None,
        action: EventAction::Tick,
    });
    if let Err(e) = proposer.write(gid, cmd, Some(g.term())).await {
        tracing::debug!(group = gid.0, "tick: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seatfence_core::inventory::{EventSpec, SeatPick, Section, Survival};
    use seatfence_core::{RegionId, UserId};

    const TTL: u64 = 600_000;

    fn spec() -> EventSpec {
        EventSpec {
            event_id: EventId("e1".into()),
            name: "Show".into(),
            home_region: RegionId("us-east".into()),
            seats: vec![],
            sections: vec![Section {
                name: "A".into(),
                rows: 1,
                seats_per_row: 4,
            }],
            hold_ttl_ms: TTL,
            max_seats_per_hold: 4,
            max_seats_per_buyer: None,
            opens_at_ms: None,
            closes_at_ms: None,
            survival: Survival::Zone,
            price_cents: 5_000,
            currency: "EUR".into(),
            retention_ms: seatfence_core::inventory::MIN_RETENTION_MS,
            changes_retention_ms: seatfence_core::inventory::DEFAULT_CHANGES_RETENTION_MS,
            waiting_room: None,
        }
    }

    fn run(inv: &mut Inventory, now_ms: u64, action: EventAction) {
        let cmd = EventCommand {
            event_id: EventId("e1".into()),
            epoch: Epoch(1),
            now_ms,
            idempotency: None,
            action,
        };
        inv.apply(&cmd, &mut Vec::new());
    }

    #[test]
    fn no_event_no_tick() {
        assert_eq!(due_ms(&Inventory::default()), None);
    }

    #[test]
    fn a_hold_makes_its_deadline_due_and_the_tick_expires_it() {
        let mut inv = Inventory::default();
        run(&mut inv, 1_000, EventAction::Create(Box::new(spec())));
        assert!(
            due_ms(&inv).is_none_or(|at| at > 1_000 + TTL + CLEANUP_LAG_MS),
            "an event without holds needs no tick but a late cleanup"
        );
        let pick = SeatPick::Quantity {
            section: None,
            quantity: 2,
        };
        let owner = UserId("u".into());
        run(&mut inv, 2_000, EventAction::Hold { owner, pick });
        assert_eq!(
            due_ms(&inv),
            Some(2_000 + TTL),
            "due at the hold's deadline"
        );
        run(&mut inv, 2_000 + TTL, EventAction::Tick);
        let due = due_ms(&inv).expect("the expired hold is pruned later");
        assert!(
            due > 2_000 + TTL + CLEANUP_LAG_MS,
            "after the tick only the cleanup is due, a retention and a lag later: {due}"
        );
    }
}
