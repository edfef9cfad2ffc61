//! The buyers: each holds seats on the hot and cold events, then cancels,
//! books and pays (approving or abandoning at the gateway, then the
//! browser's callback), and now and then reads a booking back.

use std::sync::Arc;
use std::time::Duration;

use crate::drill::World;
use crate::history::{Call, Reply};
use crate::run::EventInfo;
use hyper::Method;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use seatfence_client::edges::Edges;
use seatfence_client::{Client, ClientError, HoldRequest, RetryPolicy};
use seatfence_testkit::http_client::HttpAnswer;
use serde_json::{json, Value};

use super::{code_of, send, strings, Answer};

/// One buyer: `c{i}`, user `buyer{i}`. Even buyers always go through the
/// same edge (so a cut edge keeps its clients) with the drill's own
/// retries; odd ones through `seatfence-client`, given every edge with
/// their node's first: its retries (one key per operation), failover and
/// leader hints are then under the drill's checkers like any buyer's.
pub async fn buyer(w: Arc<World>, i: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ (0x5EA7_F3BC_u64.wrapping_mul(i as u64 + 1)));
    let process = format!("c{i}");
    let token = w.token(&format!("buyer{i}"), false);
    let nodes: Vec<u64> = w.edges.keys().copied().collect();
    let node = nodes[i % nodes.len()];
    let edge = w.edges[&node].clone();
    let mut bookings: Vec<(String, String, String, Vec<String>)> = Vec::new();
    let client = (i % 2 == 1).then(|| library_client(&w, node, &token));
    let b = Buyer {
        w: &w,
        process: &process,
        token: &token,
        edge: &edge,
        node,
        client,
    };
    while !w.stopped() {
        if !bookings.is_empty() && rng.gen_bool(0.1) {
            let (ev, hold, booking, seats) = bookings.choose(&mut rng).expect("not empty").clone();
            b.read_booking(&ev, &hold, &booking, &seats).await;
            continue;
        }
        let (hot, cold, sleepers) = (w.live(true), w.live(false), w.sleepers());
        let ev = if !sleepers.is_empty() && rng.gen_bool(0.02) {
            // Wakes a sleeping group, during faults as much as between.
            sleepers.choose(&mut rng)
        } else if cold.is_empty() || rng.gen_bool(0.75) {
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

/// Who a buyer is (process, token) and which edge it uses: what each of
/// its operations needs.
struct Buyer<'a> {
    w: &'a World,
    process: &'a str,
    token: &'a str,
    edge: &'a str,
    node: u64,
    /// The library client, for the buyers that use it.
    client: Option<Client>,
}

/// A `seatfence-client` for a buyer at `node`: every edge, that node's
/// first, its region preferred; a call's retries within 10 s.
fn library_client(w: &World, node: u64, token: &str) -> Client {
    let mut list: Vec<(String, String)> = w
        .edges
        .iter()
        .map(|(n, url)| (w.regions.get(n).cloned().unwrap_or_default(), url.clone()))
        .collect();
    let own = w.edges.keys().position(|n| *n == node).unwrap_or(0);
    list.rotate_left(own);
    let home = w.regions.get(&node).cloned().unwrap_or_default();
    let policy = RetryPolicy {
        deadline: Duration::from_secs(10),
        attempt_timeout: Duration::from_secs(5),
        ..RetryPolicy::default()
    };
    Client::with_edges(Edges::new(&home, list), token).with_policy(policy)
}

/// The library's outcome as the drill's: an answer (a success or a
/// refusal that decided something), or unknown (no answer settled it).
fn settled(r: Result<seatfence_client::Answer, ClientError>) -> Answer {
    let answer = |status: u16, body: Value, epoch: Option<u64>| {
        Answer::Http(HttpAnswer {
            status: hyper::StatusCode::from_u16(status)
                .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR),
            body,
            retry_after: None,
            epoch,
            cache_control: None,
            headers: Default::default(),
        })
    };
    match r {
        Ok(a) => answer(a.status, a.body, a.epoch),
        Err(ClientError::Api { status, body, .. }) if status < 500 && status != 429 => {
            answer(status, body, None)
        }
        Err(e) => Answer::Unknown(e.to_string().chars().take(160).collect()),
    }
}

impl Buyer<'_> {
    /// A mutation of this buyer's: its token, Idempotency-Key `{process}-{op}`,
    /// up to three tries while the outcome is unknown.
    async fn mutate(&self, method: Method, path: &str, op: u64, body: Option<&Value>) -> Answer {
        let key = format!("{}-{op}", self.process);
        let url = format!("{}{path}", self.edge);
        send(self.w, method, &url, Some(self.token), Some(&key), body, 3).await
    }

    /// The key of operation `op`.
    fn key(&self, op: u64) -> String {
        format!("{}-{op}", self.process)
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
        let answer = match &self.client {
            Some(c) => {
                let seats: Vec<&str> = seats.iter().map(String::as_str).collect();
                let req = HoldRequest::seats(&ev.event_id, &seats).with_key(&self.key(op));
                settled(c.hold(&req).await)
            }
            None => {
                let body = json!({"event_id": ev.event_id, "seats": seats});
                self.mutate(Method::POST, "/v1/holds", op, Some(&body))
                    .await
            }
        };
        match answer {
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
                        expires_at_ms: unix_ms(&a.body["expires_at"]),
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
        let answer = match &self.client {
            Some(c) => settled(c.cancel_hold_keyed(hold, Some(&self.key(op))).await),
            None => {
                let path = format!("/v1/holds/{hold}");
                self.mutate(Method::DELETE, &path, op, None).await
            }
        };
        match answer {
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
        let answer = match &self.client {
            Some(c) => settled(c.book_keyed(hold, Some(&self.key(op))).await),
            None => {
                let body = json!({"hold_id": hold});
                self.mutate(Method::POST, "/v1/bookings", op, Some(&body))
                    .await
            }
        };
        match answer {
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
        let answer = match &self.client {
            Some(c) => settled(c.payment_callback(&redirect).await),
            None => send(w, Method::GET, &redirect, None, None, None, 3).await,
        };
        match answer {
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
        let answer = match &self.client {
            Some(c) => settled(c.booking(booking).await),
            None => {
                let url = format!("{}/v1/bookings/{booking}", self.edge);
                send(w, Method::GET, &url, Some(self.token), None, None, 2).await
            }
        };
        match answer {
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

/// An RFC 3339 time of an answer (`expires_at`) as Unix ms.
fn unix_ms(v: &Value) -> Option<u64> {
    let t = humantime::parse_rfc3339(v.as_str()?).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64)
}
