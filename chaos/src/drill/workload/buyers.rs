//! The buyers: each holds seats on the hot and cold events, then cancels,
//! books and pays (approving or abandoning at the gateway, then the
//! browser's callback), and now and then reads a booking back.

use std::sync::Arc;

use crate::drill::World;
use crate::history::{Call, Reply};
use crate::run::EventInfo;
use hyper::Method;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::{code_of, send, strings, Answer};

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

/// An RFC 3339 time of an answer (`expires_at`) as Unix ms.
fn unix_ms(v: &Value) -> Option<u64> {
    let t = humantime::parse_rfc3339(v.as_str()?).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64)
}
