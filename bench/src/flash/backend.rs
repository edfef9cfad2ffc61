//! The systems a flash sale runs against, behind one `hold` call: seatfence
//! over its HTTP edges (the buyers' API) or straight to the group leader
//! over gRPC, PostgreSQL (conditional `UPDATE` in one transaction) and etcd
//! (one transaction comparing every seat key's absence). Every hold is all
//! or none for its 1–4 seats.

use std::sync::Arc;

use anyhow::Context;
use seatfence_core::inventory::{EventAction, EventCommand, Outcome, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, Response, UserId};
use seatfence_raft::client::ClusterClient;
use serde_json::json;

use seatfence_testkit::http_client::HttpClient;

/// The answer to one hold request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldAnswer {
    /// Granted; the hold's id.
    Granted(String),
    /// Refused because a seat is taken (nothing changed).
    Conflict,
    /// Anything else, by a stable code; the outcome may be unknown.
    Error(String),
}

/// Seats by state at the end of a run, from the system's own records.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Counts {
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

pub fn seat_name(seat: u32) -> String {
    format!("S{}", seat + 1)
}

/// Seatfence through the regional HTTP API, one bearer token per buyer:
/// raw HTTP/1.1 to the buyer's edge, or through `seatfence-client`.
#[derive(Clone)]
pub struct HttpBackend {
    pub http: HttpClient,
    pub edges: Arc<Vec<String>>,
    pub secret: String,
    pub operator: String,
    pub event: String,
    /// Holds through the library (given every edge, following leader
    /// hints), copied per buyer; `None`: raw HTTP.
    pub client: Option<seatfence_client::Client>,
}

/// Seatfence straight to the group's leader with the cluster client.
pub struct GrpcBackend {
    pub client: ClusterClient,
    pub group: GroupId,
    pub event: String,
}

pub enum Backend {
    Http(Box<HttpBackend>),
    Grpc(Box<GrpcBackend>),
    Postgres(Box<super::pg::PgBackend>),
    #[cfg(feature = "etcd")]
    Etcd(Box<super::etcd::EtcdBackend>),
}

impl HttpBackend {
    pub fn edge(&self, buyer: u64) -> &str {
        &self.edges[(buyer % self.edges.len() as u64) as usize]
    }

    pub fn token(&self, buyer: u64) -> String {
        seatfence_api::auth::mint(&self.secret, &format!("buyer{buyer}"), false, 3600)
    }

    /// The same backend holding through `seatfence-client`.
    pub fn through_library(&self) -> HttpBackend {
        let list = self.edges.iter().map(|u| (String::new(), u.clone()));
        let edges = seatfence_client::edges::Edges::new("", list);
        HttpBackend {
            client: Some(seatfence_client::Client::with_edges(edges, "")),
            ..self.clone()
        }
    }

    async fn hold(&self, buyer: u64, attempt: u32, seats: &[u32]) -> HoldAnswer {
        let names: Vec<String> = seats.iter().map(|&s| seat_name(s)).collect();
        let key = format!("fs{buyer}-{attempt}");
        if let Some(c) = &self.client {
            use seatfence_client::{ClientError, HoldRequest};
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let req = HoldRequest::seats(&self.event, &names).with_key(&key);
            return match c.as_user(&self.token(buyer)).hold(&req).await {
                Ok(a) => match a.body["hold_id"].as_str() {
                    Some(id) => HoldAnswer::Granted(id.to_string()),
                    None => HoldAnswer::Error("no_hold_id".into()),
                },
                Err(ClientError::Api { code, .. }) => match code.as_str() {
                    "seats_unavailable" => HoldAnswer::Conflict,
                    other => HoldAnswer::Error(other.to_string()),
                },
                Err(ClientError::Deadline { .. }) => HoldAnswer::Error("deadline".into()),
                Err(_) => HoldAnswer::Error("transport".into()),
            };
        }
        let answer = self
            .http
            .post(
                &format!("{}/v1/holds", self.edge(buyer)),
                Some(&self.token(buyer)),
                Some(&key),
                &json!({"event_id": self.event, "seats": names}),
            )
            .await;
        match answer {
            Ok(a) if a.status.as_u16() == 201 => match a.body["hold_id"].as_str() {
                Some(id) => HoldAnswer::Granted(id.to_string()),
                None => HoldAnswer::Error("no_hold_id".into()),
            },
            Ok(a) if a.code() == Some("seats_unavailable") => HoldAnswer::Conflict,
            Ok(a) => HoldAnswer::Error(a.code().unwrap_or("http_error").to_string()),
            Err(_) => HoldAnswer::Error("transport".into()),
        }
    }
}

impl GrpcBackend {
    async fn hold(&self, buyer: u64, attempt: u32, seats: &[u32]) -> HoldAnswer {
        let owner = UserId(format!("buyer{buyer}"));
        let cmd = Command::event(EventCommand {
            event_id: EventId(self.event.clone()),
            epoch: Epoch(1),
            now_ms: 0,
            idempotency: Some((owner.clone(), format!("fs{buyer}-{attempt}"))),
            action: EventAction::Hold {
                owner,
                pick: SeatPick::Seats(seats.iter().map(|&s| seat_name(s)).collect()),
            },
        });
        match self.client.write(self.group, &cmd).await {
            Ok(o) => match o.response {
                Response::Event(r) => match r.outcome {
                    Outcome::Held(h) => HoldAnswer::Granted(h.seq.to_string()),
                    Outcome::SeatsUnavailable { .. } => HoldAnswer::Conflict,
                    other => HoldAnswer::Error(other.error_code().unwrap_or("internal").into()),
                },
                _ => HoldAnswer::Error("unexpected_response".into()),
            },
            Err(_) => HoldAnswer::Error("transport".into()),
        }
    }
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Http(b) if b.client.is_some() => "seatfence-client",
            Backend::Http(_) => "seatfence-http",
            Backend::Grpc(_) => "seatfence-grpc",
            Backend::Postgres(_) => "postgresql",
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => "etcd",
        }
    }

    /// Hold `seats` for `buyer`, all or none. `attempt` names the request:
    /// the same (buyer, attempt) is the same request (idempotency key).
    pub async fn hold(&self, buyer: u64, attempt: u32, seats: &[u32]) -> HoldAnswer {
        match self {
            Backend::Http(b) => b.hold(buyer, attempt, seats).await,
            Backend::Grpc(b) => b.hold(buyer, attempt, seats).await,
            Backend::Postgres(b) => b.hold(buyer, attempt, seats).await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(b) => b.hold(buyer, attempt, seats).await,
        }
    }

    /// Seats by state from the system's records.
    pub async fn counts(&self) -> anyhow::Result<Counts> {
        match self {
            Backend::Http(b) => http_counts(b).await,
            Backend::Grpc(_) => anyhow::bail!("counts are read through an edge"),
            Backend::Postgres(b) => b.counts().await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(b) => b.counts().await,
        }
    }
}

pub async fn http_counts(b: &HttpBackend) -> anyhow::Result<Counts> {
    let (available, held, sold) =
        crate::holds::seat_counts(&b.http, &b.edges[0], &b.operator, &b.event)
            .await
            .context("read the event's counters")?;
    Ok(Counts {
        available,
        held,
        sold,
    })
}
