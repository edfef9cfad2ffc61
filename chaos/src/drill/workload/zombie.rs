//! The zombie: holds sent straight to an event's group over gRPC (no edge
//! to correct them), stamped with the epoch before the event's last
//! finished move. Every one must be refused; the `no_stale_epoch` checker
//! looks for any that was not.

use std::sync::Arc;
use std::time::Duration;

use crate::drill::World;
use crate::history::{Call, Reply};
use crate::run::EventInfo;
use hyper::Method;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use seatfence_core::inventory::{EventAction, EventCommand, Outcome, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, Response, UserId};
use seatfence_raft::{ClientError, Committed};

use super::{send, strings, Answer};

/// The zombie: replays holds with the epoch before the last finished move,
/// straight to the group's nodes over gRPC (no edge to correct it).
pub async fn zombie(w: Arc<World>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x2053_B1E5);
    let client = w.client.clone().with_deadline(Duration::from_secs(4));
    let token = w.token("zombie", false);
    while w.pause(300).await {
        let known = w.epochs.lock().expect("epochs lock poisoned").clone();
        let events = w.all_events();
        let stale: Vec<(&EventInfo, u64)> = events
            .iter()
            .filter_map(|e| {
                known
                    .get(&e.event_id)
                    .filter(|k| **k >= 2)
                    .map(|k| (e, *k - 1))
            })
            .collect();
        let Some((ev, epoch)) = stale.choose(&mut rng).copied() else {
            continue;
        };
        let seat = free_seat(&w, &token, ev, &mut rng).await;
        let op = w.rec.invoke(
            "zombie",
            Call::StaleHold {
                event: ev.event_id.clone(),
                seats: vec![seat.clone()],
                epoch,
            },
        );
        let cmd = stale_hold(ev, epoch, seat, op);
        let answer = tokio::time::timeout(
            Duration::from_secs(6),
            client.write(GroupId(ev.group), &cmd),
        )
        .await
        .ok();
        record_answer(&w, op, ev.group, answer);
    }
}

/// A seat of `ev` to aim at: one a random edge's availability read says is
/// free (a stale write that could not succeed anyway would prove
/// nothing), else any.
async fn free_seat(w: &World, token: &str, ev: &EventInfo, rng: &mut StdRng) -> String {
    let edge = w.edges.values().nth(rng.gen_range(0..w.edges.len()));
    let mut free = Vec::new();
    if let Some(edge) = edge {
        let url = format!("{edge}/v1/events/{}/availability", ev.event_id);
        if let Answer::Http(a) = send(w, Method::GET, &url, Some(token), None, None, 1).await {
            free = strings(&a.body["available_seats"]);
        }
    }
    free.choose(&mut *rng)
        .or_else(|| ev.seats.choose(&mut *rng))
        .expect("seats")
        .clone()
}

/// A hold of `seat` by user `zombie`, stamped with `epoch`, idempotent
/// under `zombie-{op}`.
fn stale_hold(ev: &EventInfo, epoch: u64, seat: String, op: u64) -> Command {
    let owner = UserId("zombie".into());
    Command::event(EventCommand {
        event_id: EventId(ev.event_id.clone()),
        epoch: Epoch(epoch),
        now_ms: 0,
        idempotency: Some((owner.clone(), format!("zombie-{op}"))),
        action: EventAction::Hold {
            owner,
            pick: SeatPick::Seats(vec![seat]),
        },
    })
}

/// Record what group `group` answered stale hold op `op` (`None`: no
/// answer within the timeout).
fn record_answer(w: &World, op: u64, group: u64, answer: Option<Result<Committed, ClientError>>) {
    match answer {
        Some(Ok(out)) => match out.response {
            Response::Event(reply) => match reply.outcome {
                Outcome::Held(h) => w.rec.ok(
                    "zombie",
                    op,
                    Reply::Held {
                        hold: format!("h{group}-{}", h.seq),
                        seats: h.seats,
                        epoch: reply.epoch.0,
                        expires_at_ms: Some(h.expires_at_ms),
                    },
                ),
                Outcome::StaleEpoch { .. } => w.rec.fail("zombie", op, "stale_epoch", vec![]),
                Outcome::SeatsUnavailable { unavailable, .. } => {
                    w.rec.fail("zombie", op, "seats_unavailable", unavailable)
                }
                other => w.rec.fail(
                    "zombie",
                    op,
                    &format!("{other:?}").chars().take(40).collect::<String>(),
                    vec![],
                ),
            },
            other => w
                .rec
                .info("zombie", op, &format!("unexpected response {other:?}")),
        },
        Some(Err(e)) => w.rec.info("zombie", op, e.code()),
        None => w.rec.info("zombie", op, "timeout"),
    }
}
