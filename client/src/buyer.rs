//! The buyer's calls: events and availability, holds, bookings and the
//! payment's return, and the waiting room.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::{Answer, Call, Client, ClientError};

/// A hold to ask for: seats by id, or a quantity (in a section).
#[derive(Debug, Clone)]
pub struct HoldRequest {
    pub event_id: String,
    pub seats: Option<Vec<String>>,
    pub section: Option<String>,
    pub quantity: Option<u32>,
    /// The call's Idempotency-Key; one is made when `None`. Give your own
    /// to make a retry across processes (after a crash) the same call.
    pub key: Option<String>,
    /// The waiting room's `Admission-Ticket`, for an event that has one.
    pub ticket: Option<String>,
}

impl HoldRequest {
    /// These seats, all or none.
    pub fn seats(event_id: &str, seats: &[&str]) -> HoldRequest {
        HoldRequest {
            event_id: event_id.to_string(),
            seats: Some(seats.iter().map(|s| s.to_string()).collect()),
            section: None,
            quantity: None,
            key: None,
            ticket: None,
        }
    }

    /// Any `quantity` free seats (of `section`, when given).
    pub fn quantity(event_id: &str, section: Option<&str>, quantity: u32) -> HoldRequest {
        HoldRequest {
            event_id: event_id.to_string(),
            seats: None,
            section: section.map(str::to_string),
            quantity: Some(quantity),
            key: None,
            ticket: None,
        }
    }

    /// Under this Idempotency-Key.
    pub fn with_key(mut self, key: &str) -> HoldRequest {
        self.key = Some(key.to_string());
        self
    }

    /// With the waiting room's admission ticket.
    pub fn with_ticket(mut self, ticket: &str) -> HoldRequest {
        self.ticket = Some(ticket.to_string());
        self
    }

    fn body(&self) -> Value {
        let mut body = json!({"event_id": self.event_id});
        if let Some(seats) = &self.seats {
            body["seats"] = json!(seats);
        }
        if let Some(section) = &self.section {
            body["section"] = json!(section);
        }
        if let Some(q) = self.quantity {
            body["quantity"] = json!(q);
        }
        body
    }
}

/// A buyer's place in an event's waiting room (`GET …/queue/me`).
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    /// `waiting`, `admitted` or `lapsed`.
    pub state: String,
    /// 1-based; `None` before the opening draw.
    pub position: Option<u64>,
    /// The server's estimate of the wait.
    pub estimated_wait_secs: u64,
    /// The admission ticket (`admitted` only): send it with the hold.
    pub ticket: Option<String>,
}

impl Standing {
    fn parse(body: &Value) -> Standing {
        Standing {
            state: body["state"].as_str().unwrap_or_default().to_string(),
            position: body["position"].as_u64(),
            estimated_wait_secs: body["estimated_wait_secs"].as_u64().unwrap_or(0),
            ticket: body["ticket"].as_str().map(str::to_string),
        }
    }
}

/// The shortest and longest pause between two polls of the waiting room
/// (the server's estimate in between).
const POLL_MIN: Duration = Duration::from_millis(500);
const POLL_MAX: Duration = Duration::from_secs(5);

impl Client {
    /// `GET /v1/events/{id}`.
    pub async fn event(&self, event_id: &str) -> Result<Answer, ClientError> {
        let call = Call::new(Method::GET, format!("/v1/events/{event_id}")).event(event_id);
        self.run(call).await
    }

    /// `GET /v1/events/{id}/availability?limit=N`.
    pub async fn availability(&self, event_id: &str, limit: u32) -> Result<Answer, ClientError> {
        let path = format!("/v1/events/{event_id}/availability?limit={limit}");
        self.run(Call::new(Method::GET, path).event(event_id)).await
    }

    /// `POST /v1/holds`: 201 with the hold.
    pub async fn hold(&self, req: &HoldRequest) -> Result<Answer, ClientError> {
        let mut call = Call::new(Method::POST, "/v1/holds".into())
            .event(&req.event_id)
            .body(req.body())
            .keyed(req.key.as_deref());
        if let Some(t) = &req.ticket {
            call.headers.push(("admission-ticket", t.clone()));
        }
        self.run(call).await
    }

    /// `GET /v1/holds/{id}` (the caller's own).
    pub async fn get_hold(&self, hold_id: &str) -> Result<Answer, ClientError> {
        let call = Call::new(Method::GET, format!("/v1/holds/{hold_id}")).of_id(hold_id);
        self.run(call).await
    }

    /// `DELETE /v1/holds/{id}`: the hold `released` (or `expired`).
    pub async fn cancel_hold(&self, hold_id: &str) -> Result<Answer, ClientError> {
        self.cancel_hold_keyed(hold_id, None).await
    }

    /// [`Client::cancel_hold`] under `key` (one is made when `None`).
    pub async fn cancel_hold_keyed(
        &self,
        hold_id: &str,
        key: Option<&str>,
    ) -> Result<Answer, ClientError> {
        let call = Call::new(Method::DELETE, format!("/v1/holds/{hold_id}"))
            .of_id(hold_id)
            .keyed(key);
        self.run(call).await
    }

    /// `POST /v1/bookings`: 201 with the booking (`pending`, `approve_url`).
    pub async fn book(&self, hold_id: &str) -> Result<Answer, ClientError> {
        self.book_keyed(hold_id, None).await
    }

    /// [`Client::book`] under `key` (one is made when `None`; a hold has
    /// one booking whatever the key, so a repeat answers it).
    pub async fn book_keyed(
        &self,
        hold_id: &str,
        key: Option<&str>,
    ) -> Result<Answer, ClientError> {
        let call = Call::new(Method::POST, "/v1/bookings".into())
            .of_id(hold_id)
            .body(json!({"hold_id": hold_id}))
            .keyed(key);
        self.run(call).await
    }

    /// `GET /v1/bookings/{id}` (the caller's own).
    pub async fn booking(&self, booking_id: &str) -> Result<Answer, ClientError> {
        let call = Call::new(Method::GET, format!("/v1/bookings/{booking_id}")).of_id(booking_id);
        self.run(call).await
    }

    /// The buyer's browser back from the gateway: `url` is where the
    /// gateway redirected it (the edge's payment callback, signed by the
    /// gateway). Answers `{booking_id, status}`. For a backend that takes
    /// the redirect itself; a browser may just follow it.
    pub async fn payment_callback(&self, url: &str) -> Result<Answer, ClientError> {
        let edge = self
            .edges()
            .all()
            .iter()
            .find(|e| url.starts_with(&format!("{}/", e.url)))
            .ok_or_else(|| {
                ClientError::Transport(format!("{url} is not on an edge this client knows"))
            })?;
        let path = url[edge.url.len()..].to_string();
        let mut call = Call::new(Method::GET, path);
        call.pin = Some(edge.clone());
        self.run(call).await
    }

    /// Poll `GET /v1/bookings/{id}` until it is no longer `pending` (or
    /// `deadline` passes: the last answer).
    pub async fn await_booking(
        &self,
        booking_id: &str,
        deadline: Duration,
    ) -> Result<Answer, ClientError> {
        let start = Instant::now();
        loop {
            let b = self.booking(booking_id).await?;
            if b.body["status"] != "pending" || start.elapsed() >= deadline {
                return Ok(b);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `POST /v1/events/{id}/queue`: join the waiting room (again: the
    /// same place).
    pub async fn join_queue(&self, event_id: &str) -> Result<Standing, ClientError> {
        let call = Call::new(Method::POST, format!("/v1/events/{event_id}/queue")).event(event_id);
        Ok(Standing::parse(&self.run(call).await?.body))
    }

    /// `GET /v1/events/{id}/queue/me`: the buyer's place.
    pub async fn standing(&self, event_id: &str) -> Result<Standing, ClientError> {
        let path = format!("/v1/events/{event_id}/queue/me");
        let call = Call::new(Method::GET, path).event(event_id);
        Ok(Standing::parse(&self.run(call).await?.body))
    }

    /// Join `event_id`'s waiting room and poll, pausing as long as the
    /// server's `estimated_wait_secs` says (within 0.5–5 s), until
    /// admitted: the standing with its ticket. A lapsed place joins again
    /// (at the back). `None` when `max_wait` passes first.
    pub async fn wait_for_admission(
        &self,
        event_id: &str,
        max_wait: Duration,
    ) -> Result<Option<Standing>, ClientError> {
        let start = Instant::now();
        let mut s = self.join_queue(event_id).await?;
        loop {
            match s.state.as_str() {
                "admitted" if s.ticket.is_some() => return Ok(Some(s)),
                "lapsed" => {
                    s = self.join_queue(event_id).await?;
                    continue;
                }
                _ => {}
            }
            let left = max_wait.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            let pause = Duration::from_secs(s.estimated_wait_secs)
                .clamp(POLL_MIN, POLL_MAX)
                .min(left);
            tokio::time::sleep(pause).await;
            s = self.standing(event_id).await?;
        }
    }
}
