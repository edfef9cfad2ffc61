//! The operator: every few seconds, move the next live event (the hot
//! ones, and the cold one now and then) to another region through any edge
//! that answers, and wait for the move to finish. A finished move raises
//! the event's epoch, which the zombie then replays stale writes under.

use std::sync::Arc;
use std::time::Duration;

use crate::drill::World;
use crate::history::{Call, Reply};
use hyper::Method;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use seatfence_testkit::cluster::REGIONS;
use serde_json::json;

use super::{code_of, send, Answer};

/// The operator: every `every_ms` (and with `on_fault`, also as soon as a
/// fault starts, so moves meet faults however rare both are), move the
/// next live event to another region through any edge that answers, and
/// wait for the move to finish.
pub async fn operator(w: Arc<World>, seed: u64, every_ms: u64, on_fault: bool) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0BE7_A70B);
    let token = w.token("chaos-operator", true);
    let edges: Vec<String> = w.edges.values().cloned().collect();
    let mut k = 0usize;
    while next_turn(&w, every_ms, on_fault).await {
        // The hot events, and the cold one now and then.
        let mut live = w.live(true);
        live.extend(w.live(false));
        let Some(ev) = live.get(k % live.len().max(1)) else {
            continue;
        };
        k += 1;
        let mut order = edges.clone();
        order.shuffle(&mut rng);
        let Some(owner) = owner_region(&w, &order, &token, &ev.event_id).await else {
            continue;
        };
        let targets: Vec<&str> = REGIONS.iter().copied().filter(|r| *r != owner).collect();
        let to = targets.choose(&mut rng).expect("three regions").to_string();
        let op = w.rec.invoke(
            "operator",
            Call::Move {
                event: ev.event_id.clone(),
                to: to.clone(),
            },
        );
        let move_id = match start_move(&w, &order, &token, &ev.event_id, &to, op).await {
            Some(Ok(id)) => id,
            Some(Err(code)) => {
                w.rec.fail("operator", op, &code, vec![]);
                continue;
            }
            None => {
                w.rec
                    .info("operator", op, "no edge answered the move request");
                continue;
            }
        };
        // Wait for it (even past the end of the load: a move left running
        // would be settled anyway), up to a minute.
        let outcome = wait_for_move(&w, &order, &token, move_id).await;
        record_move(&w, op, &ev.event_id, outcome);
    }
}

/// Wait for the next move: `every_ms`, or (`on_fault`) until a fault
/// starts if one does first. False when the drill stops.
async fn next_turn(w: &World, every_ms: u64, on_fault: bool) -> bool {
    if !on_fault {
        return w.pause(every_ms).await;
    }
    let faults = w.rec.tally().faults;
    let until = std::time::Instant::now() + Duration::from_millis(every_ms);
    while std::time::Instant::now() < until {
        if !w.pause(250).await {
            return false;
        }
        if w.rec.tally().faults > faults {
            return true;
        }
    }
    !w.stopped()
}

/// The region that owns `event`, as the first of the edges `order` that
/// answers says; `None` if none does.
async fn owner_region(w: &World, order: &[String], token: &str, event: &str) -> Option<String> {
    for e in order {
        let url = format!("{e}/v1/events/{event}");
        if let Answer::Http(a) = send(w, Method::GET, &url, Some(token), None, None, 1).await {
            if a.status.is_success() {
                return a.body["owner_region"].as_str().map(str::to_string);
            }
        }
    }
    None
}

/// Ask the edges `order`, in turn, to move `event` to region `to`
/// (Idempotency-Key `operator-{op}`) until one answers: the move's id when
/// it started (202), else the refusal's code; `None` if no edge answered.
async fn start_move(
    w: &World,
    order: &[String],
    token: &str,
    event: &str,
    to: &str,
    op: u64,
) -> Option<Result<u64, String>> {
    let key = format!("operator-{op}");
    let body = json!({"to_region": to});
    for e in order {
        let url = format!("{e}/v1/admin/events/{event}/move");
        match send(
            w,
            Method::POST,
            &url,
            Some(token),
            Some(&key),
            Some(&body),
            1,
        )
        .await
        {
            Answer::Http(a) if a.status.as_u16() == 202 => {
                return Some(Ok(a.body["move_id"].as_u64().unwrap_or(0)));
            }
            Answer::Http(a) => return Some(Err(code_of(&a))),
            Answer::Unknown(_) => {}
        }
    }
    None
}

/// Poll move `move_id` (through the first of the edges `order` that
/// answers) every 200 ms for up to a minute: the event's new epoch once
/// the move is done, its state if it was aborted or failed, `None` if it
/// did not finish in time.
async fn wait_for_move(
    w: &World,
    order: &[String],
    token: &str,
    move_id: u64,
) -> Option<Result<u64, String>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut outcome = None;
    while tokio::time::Instant::now() < deadline {
        for e in order {
            let url = format!("{e}/v1/admin/moves/{move_id}");
            let Answer::Http(a) = send(w, Method::GET, &url, Some(token), None, None, 1).await
            else {
                continue;
            };
            if !a.status.is_success() {
                continue;
            }
            match a.body["state"].as_str() {
                Some("done") => {
                    let epoch = a.body["from_epoch"].as_u64().unwrap_or(0) + 1;
                    outcome = Some(Ok(epoch));
                }
                Some("aborted") | Some("failed") => {
                    outcome = Some(Err(a.body["state"].as_str().unwrap_or("").to_string()))
                }
                _ => {}
            }
            break;
        }
        if outcome.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    outcome
}

/// Record how move op `op` of `event` ended; a finished move raises the
/// highest epoch known for the event.
fn record_move(w: &World, op: u64, event: &str, outcome: Option<Result<u64, String>>) {
    match outcome {
        Some(Ok(epoch)) => {
            w.rec.ok("operator", op, Reply::Moved { epoch });
            let mut epochs = w.epochs.lock().expect("epochs lock poisoned");
            let e = epochs.entry(event.to_string()).or_insert(1);
            *e = (*e).max(epoch);
        }
        Some(Err(state)) => w.rec.fail("operator", op, &format!("move_{state}"), vec![]),
        None => w.rec.info("operator", op, "move not finished within 60 s"),
    }
}
