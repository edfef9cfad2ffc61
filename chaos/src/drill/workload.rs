//! The drill's clients. Every operation is recorded as an invoke and its
//! completion; an answer that does not settle the outcome (a 5xx, a
//! timeout, a dropped connection) is retried with the same
//! Idempotency-Key a few times and, if still unsettled, recorded as
//! unknown (`info`), never as failed.
//! - buyers: holds on hot and cold events, then cancel, book and pay
//!   (approve at the gateway, the browser callback), read bookings back;
//! - the operator: moves a live event (mostly hot ones) to another region
//!   every few seconds;
//! - the zombie: holds sent straight to a group over gRPC, stamped with an
//!   epoch a finished move replaced (all must be refused);
//! - the observer: every node's view of who leads which group.

use std::sync::Arc;
use std::time::Duration;

use crate::history::{Call, Entry, Reply};
use crate::run::EventInfo;
use anyhow::Context;
use hyper::Method;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use seatfence_core::inventory::{EventAction, EventCommand, Outcome, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, Response, UserId};
use serde_json::{json, Value};

use super::World;
use seatfence_testkit::cluster::REGIONS;
use seatfence_testkit::http_client::HttpAnswer;

/// An answer that settles the outcome, or why none came.
enum Answer {
    Http(HttpAnswer),
    Unknown(String),
}

/// Send until an answer settles the outcome (anything but a 5xx or a
/// transport error), at most `attempts` times.
async fn send(
    w: &World,
    method: Method,
    url: &str,
    token: Option<&str>,
    key: Option<&str>,
    body: Option<&Value>,
    attempts: u32,
) -> Answer {
    let mut why = String::from("not sent");
    for i in 0..attempts {
        match w.http.send(method.clone(), url, token, key, body).await {
            Ok(a) if a.status.is_server_error() => {
                why = format!("{} {}", a.status.as_u16(), a.code().unwrap_or(""));
            }
            Ok(a) => return Answer::Http(a),
            Err(e) => why = format!("{e:#}").chars().take(160).collect(),
        }
        if i + 1 < attempts && !w.pause(250 * u64::from(i + 1)).await {
            break;
        }
    }
    Answer::Unknown(why)
}

fn code_of(a: &HttpAnswer) -> String {
    a.code()
        .map(str::to_string)
        .unwrap_or_else(|| format!("http_{}", a.status.as_u16()))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// One buyer: `c{i}`, user `buyer{i}`, always through the same edge (so a
/// cut edge keeps its clients).
pub async fn buyer(w: Arc<World>, i: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ (0x5EA7_F3BC_u64.wrapping_mul(i as u64 + 1)));
    let process = format!("c{i}");
    let token = w.token(&format!("buyer{i}"), false);
    let nodes: Vec<u64> = w.edges.keys().copied().collect();
    let node = nodes[i % nodes.len()];
    let edge = w.edges[&node].clone();
    let mut bookings: Vec<(String, String, String, Vec<String>)> = Vec::new();
    let b = Buyer {
        w: &w,
        process: &process,
        token: &token,
        edge: &edge,
        node,
    };
    while !w.stopped() {
        if !bookings.is_empty() && rng.gen_bool(0.1) {
            let (ev, hold, booking, seats) = bookings.choose(&mut rng).expect("not empty").clone();
            b.read_booking(&ev, &hold, &booking, &seats).await;
            continue;
        }
        let (hot, cold) = (w.live(true), w.live(false));
        let ev = if cold.is_empty() || rng.gen_bool(0.75) {
            hot.choose(&mut rng)
        } else {
            cold.choose(&mut rng)
        };
        let Some(ev) = ev.cloned() else {
            if !w.pause(100).await {
                break;
            }
            continue;
        };
        let ev = &ev;
        let k = if rng.gen_bool(0.8) { 1 } else { 2 }.min(ev.seats.len());
        let seats: Vec<String> = ev.seats.choose_multiple(&mut rng, k).cloned().collect();
        // Hot events sell slowly (most payments are abandoned at the
        // gateway, and only the reconciler may release those), so their
        // few seats stay contended for a whole generation.
        let pay_share = if ev.hot { 0.15 } else { 0.7 };
        if let Some((hold, got)) = b.hold(ev, seats).await {
            let r: f64 = rng.gen();
            if r < 0.25 {
                if !w.pause(rng.gen_range(0..800)).await {
                    break;
                }
                b.cancel(ev, &hold, &got).await;
            } else if r < 0.65 {
                if let Some((booking, approve)) = b.book(ev, &hold, &got).await {
                    let abandon = !rng.gen_bool(pay_share);
                    b.pay(ev, &hold, &booking, &got, &approve, abandon).await;
                    bookings.push((
                        ev.event_id.clone(),
                        hold.clone(),
                        booking.clone(),
                        got.clone(),
                    ));
                    if w.pause(rng.gen_range(0..500)).await {
                        b.read_booking(&ev.event_id, &hold, &booking, &got).await;
                    }
                }
            }
        }
        if !w.pause(rng.gen_range(10..120)).await {
            break;
        }
    }
}

struct Buyer<'a> {
    w: &'a World,
    process: &'a str,
    token: &'a str,
    edge: &'a str,
    node: u64,
}

impl Buyer<'_> {
    /// A mutation of this buyer's: its token, Idempotency-Key `{process}-{op}`,
    /// up to three tries while the outcome is unknown.
    async fn mutate(&self, method: Method, path: &str, op: u64, body: Option<&Value>) -> Answer {
        let key = format!("{}-{op}", self.process);
        let url = format!("{}{path}", self.edge);
        send(self.w, method, &url, Some(self.token), Some(&key), body, 3).await
    }

    /// Record an answer that is not the op's success: a definite refusal
    /// (`fail`, with the seats a 409 names) or an unknown outcome (`info`).
    fn record_other(&self, op: u64, answer: Answer) {
        match answer {
            Answer::Http(a) => {
                let unavailable = strings(&a.body["error"]["unavailable"]);
                self.w.rec.fail(self.process, op, &code_of(&a), unavailable);
            }
            Answer::Unknown(why) => self.w.rec.info(self.process, op, &why),
        }
    }

    async fn hold(&self, ev: &EventInfo, seats: Vec<String>) -> Option<(String, Vec<String>)> {
        let w = self.w;
        let call = Call::Hold {
            event: ev.event_id.clone(),
            seats: seats.clone(),
            edge: format!("n{}", self.node),
        };
        let op = w.rec.invoke(self.process, call);
        let body = json!({"event_id": ev.event_id, "seats": seats});
        match self
            .mutate(Method::POST, "/v1/holds", op, Some(&body))
            .await
        {
            Answer::Http(a) if a.status.as_u16() == 201 => {
                let hold = a.body["hold_id"].as_str().unwrap_or_default().to_string();
                let got = strings(&a.body["seats"]);
                w.rec.ok(
                    self.process,
                    op,
                    Reply::Held {
                        hold: hold.clone(),
                        seats: got.clone(),
                        epoch: a.epoch.unwrap_or(0),
                    },
                );
                Some((hold, got))
            }
            other => {
                self.record_other(op, other);
                None
            }
        }
    }

    async fn cancel(&self, ev: &EventInfo, hold: &str, seats: &[String]) {
        let w = self.w;
        let op = w.rec.invoke(
            self.process,
            Call::Cancel {
                event: ev.event_id.clone(),
                hold: hold.to_string(),
                seats: seats.to_vec(),
            },
        );
        let path = format!("/v1/holds/{hold}");
        match self.mutate(Method::DELETE, &path, op, None).await {
            Answer::Http(a) if a.status.is_success() => w.rec.ok(
                self.process,
                op,
                Reply::Cancelled {
                    epoch: a.epoch.unwrap_or(0),
                    status: a.body["status"].as_str().map(str::to_string),
                },
            ),
            other => self.record_other(op, other),
        }
    }

    /// `POST /v1/bookings`; the booking id and approve URL when created.
    async fn book(&self, ev: &EventInfo, hold: &str, seats: &[String]) -> Option<(String, String)> {
        let w = self.w;
        let op = w.rec.invoke(
            self.process,
            Call::Book {
                event: ev.event_id.clone(),
                hold: hold.to_string(),
                seats: seats.to_vec(),
            },
        );
        let body = json!({"hold_id": hold});
        match self
            .mutate(Method::POST, "/v1/bookings", op, Some(&body))
            .await
        {
            Answer::Http(a) if a.status.as_u16() == 201 => {
                let booking = a.body["booking_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let approve = a.body["approve_url"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                w.rec.ok(
                    self.process,
                    op,
                    Reply::Booked {
                        booking: booking.clone(),
                        payment_id: a.body["payment_id"].as_str().unwrap_or_default().into(),
                        epoch: a.epoch.unwrap_or(0),
                    },
                );
                Some((booking, approve))
            }
            other => {
                self.record_other(op, other);
                None
            }
        }
    }

    /// Approve (or, abandoning, cancel) at the gateway as the buyer's
    /// browser would, then follow the redirect to the callback.
    async fn pay(
        &self,
        ev: &EventInfo,
        hold: &str,
        booking: &str,
        seats: &[String],
        approve: &str,
        abandon: bool,
    ) {
        let w = self.w;
        let op = w.rec.invoke(
            self.process,
            Call::Pay {
                event: ev.event_id.clone(),
                hold: hold.to_string(),
                booking: booking.to_string(),
                seats: seats.to_vec(),
                abandon,
            },
        );
        let page = if abandon {
            approve.replace("/approve", "/cancel")
        } else {
            approve.to_string()
        };
        let redirect = match send(w, Method::POST, &page, None, None, Some(&json!({})), 2).await {
            Answer::Http(a) if a.status.is_success() => {
                a.body["redirect"].as_str().map(str::to_string)
            }
            _ => None,
        };
        let Some(redirect) = redirect else {
            // The browser never reached the callback: nothing was asked of
            // seatfence (the gateway may still send its webhook).
            w.rec.fail(self.process, op, "approve_failed", vec![]);
            return;
        };
        match send(w, Method::GET, &redirect, None, None, None, 3).await {
            Answer::Http(a) if a.status.is_success() => w.rec.ok(
                self.process,
                op,
                Reply::Booking {
                    status: a.body["status"].as_str().unwrap_or_default().to_string(),
                },
            ),
            other => self.record_other(op, other),
        }
    }

    async fn read_booking(&self, event: &str, hold: &str, booking: &str, seats: &[String]) {
        let w = self.w;
        let op = w.rec.invoke(
            self.process,
            Call::ReadBooking {
                event: event.to_string(),
                hold: hold.to_string(),
                booking: booking.to_string(),
                seats: seats.to_vec(),
            },
        );
        let url = format!("{}/v1/bookings/{booking}", self.edge);
        match send(w, Method::GET, &url, Some(self.token), None, None, 2).await {
            Answer::Http(a) if a.status.is_success() => w.rec.ok(
                self.process,
                op,
                Reply::Booking {
                    status: a.body["status"].as_str().unwrap_or_default().to_string(),
                },
            ),
            other => self.record_other(op, other),
        }
    }
}

/// The operator: every `every_ms`, move the next live event to another
/// region through any edge that answers, and wait for the move to finish.
pub async fn operator(w: Arc<World>, seed: u64, every_ms: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0BE7_A70B);
    let token = w.token("chaos-operator", true);
    let edges: Vec<String> = w.edges.values().cloned().collect();
    let mut k = 0usize;
    while w.pause(every_ms).await {
        // The hot events, and the cold one now and then.
        let mut live = w.live(true);
        live.extend(w.live(false));
        let Some(ev) = live.get(k % live.len().max(1)) else {
            continue;
        };
        k += 1;
        let mut order = edges.clone();
        order.shuffle(&mut rng);
        let mut owner = None;
        for e in &order {
            let url = format!("{e}/v1/events/{}", ev.event_id);
            if let Answer::Http(a) = send(&w, Method::GET, &url, Some(&token), None, None, 1).await
            {
                if a.status.is_success() {
                    owner = a.body["owner_region"].as_str().map(str::to_string);
                    break;
                }
            }
        }
        let Some(owner) = owner else { continue };
        let targets: Vec<&str> = REGIONS.iter().copied().filter(|r| *r != owner).collect();
        let to = targets.choose(&mut rng).expect("three regions").to_string();
        let op = w.rec.invoke(
            "operator",
            Call::Move {
                event: ev.event_id.clone(),
                to: to.clone(),
            },
        );
        let key = format!("operator-{op}");
        let body = json!({"to_region": to});
        let mut started = None;
        for e in &order {
            let url = format!("{e}/v1/admin/events/{}/move", ev.event_id);
            match send(
                &w,
                Method::POST,
                &url,
                Some(&token),
                Some(&key),
                Some(&body),
                1,
            )
            .await
            {
                Answer::Http(a) if a.status.as_u16() == 202 => {
                    started = Some(Ok(a.body["move_id"].as_u64().unwrap_or(0)));
                    break;
                }
                Answer::Http(a) => {
                    started = Some(Err(code_of(&a)));
                    break;
                }
                Answer::Unknown(_) => {}
            }
        }
        let move_id = match started {
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
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut outcome = None;
        while tokio::time::Instant::now() < deadline {
            for e in &order {
                let url = format!("{e}/v1/admin/moves/{move_id}");
                let Answer::Http(a) =
                    send(&w, Method::GET, &url, Some(&token), None, None, 1).await
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
        match outcome {
            Some(Ok(epoch)) => {
                w.rec.ok("operator", op, Reply::Moved { epoch });
                let mut epochs = w.epochs.lock().expect("epochs lock poisoned");
                let e = epochs.entry(ev.event_id.clone()).or_insert(1);
                *e = (*e).max(epoch);
            }
            Some(Err(state)) => w.rec.fail("operator", op, &format!("move_{state}"), vec![]),
            None => w.rec.info("operator", op, "move not finished within 60 s"),
        }
    }
}

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
        // Aim at a seat the availability read says is free (a stale write
        // that could not succeed anyway would prove nothing).
        let edge = w.edges.values().nth(rng.gen_range(0..w.edges.len()));
        let mut free = Vec::new();
        if let Some(edge) = edge {
            let url = format!("{edge}/v1/events/{}/availability", ev.event_id);
            if let Answer::Http(a) = send(&w, Method::GET, &url, Some(&token), None, None, 1).await
            {
                free = strings(&a.body["available_seats"]);
            }
        }
        let seat = free
            .choose(&mut rng)
            .or_else(|| ev.seats.choose(&mut rng))
            .expect("seats")
            .clone();
        let op = w.rec.invoke(
            "zombie",
            Call::StaleHold {
                event: ev.event_id.clone(),
                seats: vec![seat.clone()],
                epoch,
            },
        );
        let owner = UserId("zombie".into());
        let cmd = Command::Event(EventCommand {
            event_id: EventId(ev.event_id.clone()),
            epoch: Epoch(epoch),
            now_ms: 0,
            idempotency: Some((owner.clone(), format!("zombie-{op}"))),
            action: EventAction::Hold {
                owner,
                pick: SeatPick::Seats(vec![seat]),
            },
        });
        let answer = tokio::time::timeout(
            Duration::from_secs(6),
            client.write(GroupId(ev.group), &cmd),
        )
        .await;
        match answer {
            Ok(Ok(out)) => match out.response {
                Response::Event(reply) => match reply.outcome {
                    Outcome::Held(h) => w.rec.ok(
                        "zombie",
                        op,
                        Reply::Held {
                            hold: format!("h{}-{}", ev.group, h.seq),
                            seats: h.seats,
                            epoch: reply.epoch.0,
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
            Ok(Err(e)) => w.rec.info("zombie", op, e.code()),
            Err(_) => w.rec.info("zombie", op, "timeout"),
        }
    }
}

/// Ask every node who leads what, every 200 ms; record each new
/// `(term, leader)` of a group.
pub async fn observer(w: Arc<World>) {
    while w.pause(200).await {
        let asks = w.grpc.iter().map(|(id, addr)| {
            let client = w.client.clone();
            async move {
                let r =
                    tokio::time::timeout(Duration::from_millis(500), client.status_at(addr)).await;
                (*id, r.ok().and_then(Result::ok))
            }
        });
        for (id, status) in futures::future::join_all(asks).await {
            let Some(status) = status else { continue };
            for g in status.groups.iter().filter(|g| g.role == "leader") {
                let mut leaders = w.leaders.lock().expect("leaders lock poisoned");
                let newer = leaders.get(&g.group_id).is_none_or(|(term, leader)| {
                    g.term > *term || (g.term == *term && *leader != id)
                });
                if newer {
                    leaders.insert(g.group_id, (g.term, id));
                    drop(leaders);
                    w.rec.push(Entry::Leader {
                        t: 0,
                        group: g.group_id,
                        leader: id,
                        term: g.term,
                    });
                }
                w.voters
                    .lock()
                    .expect("voters lock poisoned")
                    .insert(g.group_id, g.voters.clone());
            }
        }
    }
}

/// Create generation `gen`: two hot events of `hot_seats` seats and a cold
/// one of 40, homed round-robin over the regions, through any edge that
/// answers (a repeated create with the same spec is answered 201 again).
pub async fn create_generation(
    w: &World,
    gen: u32,
    hot_seats: usize,
) -> anyhow::Result<Vec<EventInfo>> {
    let token = w.token("chaos-operator", true);
    let edges: Vec<String> = w.edges.values().cloned().collect();
    let kinds = [
        ("hot-a", true, hot_seats),
        ("hot-b", true, hot_seats),
        ("cold", false, 40),
    ];
    let mut out = Vec::new();
    for (k, (kind, hot, seats)) in kinds.into_iter().enumerate() {
        let event_id = format!("chaos-g{gen}-{kind}");
        let home = REGIONS[(gen as usize + k) % REGIONS.len()];
        let prefix = if hot { 'H' } else { 'C' };
        let seat_ids: Vec<String> = (1..=seats).map(|s| format!("{prefix}{s}")).collect();
        let body = json!({
            "event_id": event_id,
            "name": format!("chaos drill generation {gen} {kind}"),
            "home_region": home,
            "seats": seat_ids,
            "hold_ttl_secs": super::runner::HOLD_TTL_SECS,
            "max_seats_per_hold": 4,
        });
        let mut group = None;
        'tries: for attempt in 0..20 {
            for e in edges.iter().cycle().skip(attempt).take(edges.len()) {
                let url = format!("{e}/v1/events");
                match send(w, Method::POST, &url, Some(&token), None, Some(&body), 1).await {
                    Answer::Http(a) if a.status.as_u16() == 201 => {
                        group = a.body["group_id"].as_u64();
                        break 'tries;
                    }
                    Answer::Http(a) => anyhow::bail!("create {event_id}: {} {}", a.status, a.body),
                    Answer::Unknown(_) => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let group = group.with_context(|| format!("create {event_id}: no edge answered 201"))?;
        out.push(EventInfo {
            event_id,
            group,
            seats: seat_ids,
            hot,
            home_region: home.to_string(),
            generation: gen,
            retired: false,
        });
    }
    Ok(out)
}

/// Every `every_ms`, a new generation of events; the previous ones retire.
pub async fn generations(w: Arc<World>, hot_seats: usize, every_ms: u64) {
    let mut gen = 1;
    while w.pause(every_ms).await {
        match create_generation(&w, gen, hot_seats).await {
            Ok(fresh) => {
                let mut events = w.events.lock().expect("events lock poisoned");
                for e in events.iter_mut() {
                    e.retired = true;
                }
                events.extend(fresh);
                gen += 1;
            }
            Err(e) => tracing::warn!("generation {gen} not created (tried again later): {e:#}"),
        }
    }
}
