//! The operator's calls (a client made with an operator's token): events,
//! moves, the waiting room, refunds, the cluster and the audit trail.
//! These go to the preferred region's edge, which routes them.

use reqwest::Method;
use serde_json::{json, Value};

use crate::{Answer, Call, Client, ClientError};

impl Client {
    /// `POST /v1/events` with `body` (DESIGN §7's create body): 201. Not
    /// keyed by the API: an attempt whose answer was lost makes a retry
    /// answer 409 `event_exists`, which says it was created.
    pub async fn create_event(&self, body: Value) -> Result<Answer, ClientError> {
        self.run(Call::new(Method::POST, "/v1/events".into()).body(body))
            .await
    }

    /// `POST /v1/admin/events/{id}/move` to `to_region`: 202 with the move.
    pub async fn move_event(&self, event_id: &str, to_region: &str) -> Result<Answer, ClientError> {
        let path = format!("/v1/admin/events/{event_id}/move");
        let call = Call::new(Method::POST, path)
            .body(json!({"to_region": to_region}))
            .keyed(None);
        self.run(call).await
    }

    /// `GET /v1/admin/moves/{id}`.
    pub async fn get_move(&self, move_id: &str) -> Result<Answer, ClientError> {
        self.run(Call::new(Method::GET, format!("/v1/admin/moves/{move_id}")))
            .await
    }

    /// `POST /v1/admin/events/{id}/waiting-room`: create or change the room
    /// (`ticket_ttl_secs` `None`: the default; `enabled` false turns it off).
    pub async fn set_waiting_room(
        &self,
        event_id: &str,
        admit_per_sec: u32,
        ticket_ttl_secs: Option<u64>,
        enabled: bool,
    ) -> Result<Answer, ClientError> {
        let mut body = json!({"admit_per_sec": admit_per_sec, "enabled": enabled});
        if let Some(t) = ticket_ttl_secs {
            body["ticket_ttl_secs"] = json!(t);
        }
        let path = format!("/v1/admin/events/{event_id}/waiting-room");
        self.run(Call::new(Method::POST, path).event(event_id).body(body))
            .await
    }

    /// `POST /v1/admin/bookings/{id}/refund` under `key` (the same key
    /// for the same refund, across processes: at most one refund).
    pub async fn refund(
        &self,
        booking_id: &str,
        reason: &str,
        release_seats: bool,
        key: &str,
    ) -> Result<Answer, ClientError> {
        let path = format!("/v1/admin/bookings/{booking_id}/refund");
        let call = Call::new(Method::POST, path)
            .of_id(booking_id)
            .body(json!({"reason": reason, "release_seats": release_seats}))
            .keyed(Some(key));
        self.run(call).await
    }

    /// `POST /v1/admin/groups/{id}/transfer-leader` to node `to` (a
    /// caught-up voter): answers once it leads.
    pub async fn transfer_leader(&self, group: u64, to: u64) -> Result<Answer, ClientError> {
        let path = format!("/v1/admin/groups/{group}/transfer-leader");
        self.run(Call::new(Method::POST, path).body(json!({ "to": to })))
            .await
    }

    /// `GET /v1/admin/cluster`.
    pub async fn cluster(&self) -> Result<Answer, ClientError> {
        self.run(Call::new(Method::GET, "/v1/admin/cluster".into()))
            .await
    }

    /// `GET /v1/admin/audit?limit=N`, newest first.
    pub async fn audit(&self, limit: u32) -> Result<Answer, ClientError> {
        let path = format!("/v1/admin/audit?limit={limit}");
        self.run(Call::new(Method::GET, path)).await
    }
}
