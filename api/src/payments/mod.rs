//! Payments (DESIGN.md §8): three paths confirm, one path releases.
//!
//! ```text
//!  POST /v1/bookings ─▶ gateway create (stable key) ─▶ commit Attach ─▶ 201 pending + approve_url
//!  callback (browser) ─┐
//!  webhook (gateway)  ─┼▶ ExecuteIntent committed ─▶ execute(X-Fencing-Token) ─▶ Confirm HELD → PAID
//!  reconciler (leader)─┘      (webhook and reconciler first ask the gateway)
//!      every Confirm: the gateway's answer names the booking's amount and currency
//!      (`amount::check`), else amount_mismatch + ALERT, nothing committed
//!  reconciler only, past the deadline: VoidIntent committed ─▶ void(X-Fencing-Token)
//!      voided / failed / cancelled ─▶ Release (guarded by payment id) ─▶ watched until settled
//!      already_captured ─▶ Confirm;   no answer ─▶ Extend (≤ 3), then alert and keep
//!  reconciler, after a release: completed ─▶ Confirm → refund_pending;  terminal ─▶ Settle
//!  outbox (leader): confirmation email, refunds ─▶ OutboxDone
//! ```
//!
//! Every external signal is a hint until the gateway confirms it; a
//! release never happens while the payment could still be captured, and a
//! capture that lands after a release always becomes a refund.

pub mod amount;
pub mod bookings;
pub mod callback;
pub mod outbox;
pub mod reconciler;
pub mod refresher;
pub mod refunds;
pub mod webhook;

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::PaymentsConfig;
use seatfence_core::inventory::{
    Booking, ConfirmPath, EventAction, EventReply, Hold, Outcome, PaymentAction,
};
use seatfence_core::{BookingId, EventId, Fence, Query, QueryResult};
use seatfence_raft::Read;

use crate::error::ApiError;
use crate::gateway::{Gateway, GatewayError, PaymentState, PaymentStatus};
use crate::Edge;

/// The payment side of an edge.
pub struct Payments {
    pub config: PaymentsConfig,
    pub gateway: Arc<dyn Gateway>,
    /// The fleet's token as this node reads it (shared with `gateway`).
    pub tokens: Arc<crate::gateway::token::DirectoryToken>,
    /// Base URL of this edge for the gateway and browsers.
    pub public_url: String,
    pub mail_dir: PathBuf,
}

/// A hold and its booking (if any), read at the group's leader.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub id: BookingId,
    pub event_id: EventId,
    pub hold: Hold,
    pub booking: Option<Booking>,
    /// The event's seat price and currency (`None` when not read).
    pub price: Option<(u64, String)>,
    /// The event's epoch and owner region when read (for the
    /// `X-Seatfence-Epoch` / `-Owner-Region` headers of answers).
    pub fence: Option<(seatfence_core::Epoch, seatfence_core::RegionId)>,
}

impl Loaded {
    /// `reply` with the event's fence headers, when known.
    pub fn fenced(&self, reply: crate::http::Reply) -> crate::http::Reply {
        match &self.fence {
            Some((epoch, owner)) => reply
                .header("x-seatfence-epoch", epoch.0)
                .header("x-seatfence-owner-region", &owner.0),
            None => reply,
        }
    }
}

impl Edge {
    /// The event groups this node leads now (the workers act for these).
    pub(crate) fn led_event_groups(
        &self,
    ) -> Vec<(
        seatfence_core::GroupId,
        Arc<seatfence_raft::registry::GroupHandle>,
    )> {
        self.registry
            .all()
            .into_iter()
            .filter(|(gid, g)| !gid.is_directory() && g.leads())
            .collect()
    }

    pub fn payments(&self) -> Result<&Payments, ApiError> {
        self.payments.as_deref().ok_or_else(|| {
            ApiError::unavailable(
                "payments_disabled",
                "this node has no payment gateway configured",
            )
        })
    }

    /// Read hold `id.seq` and its booking at its group's leader; `None`
    /// when the group or hold does not exist. A lease read (linearizable
    /// while clock rates drift within the lease's margin; GET answers
    /// show it as is): whatever a caller decides from it is checked again
    /// by the command it commits (`Attach`, `ExecuteIntent`, `Confirm`
    /// each verify the state they expect in apply).
    pub async fn load_booking(&self, id: BookingId) -> Result<Option<Loaded>, ApiError> {
        if id.group.is_directory() || !self.group_exists(id.group).await? {
            return Ok(None);
        }
        self.load_booking_of_known_group(id).await
    }

    /// [`load_booking`](Self::load_booking) for an anonymous caller (the
    /// payment callback, before its signature can be checked): a group this
    /// node's directory replica does not know is `None` at once, without
    /// the directory read at its leader a lagging replica would need, so a
    /// stranger's made-up booking id costs no leader any work. A replica
    /// behind on the group's creation answers 404 to a genuine callback
    /// then; the webhook and the reconciler still confirm the payment.
    pub async fn load_booking_for_stranger(
        &self,
        id: BookingId,
    ) -> Result<Option<Loaded>, ApiError> {
        let known = self.registry_directory(|d| d.groups.contains_key(&id.group)) == Some(true);
        if id.group.is_directory() || !known {
            return Ok(None);
        }
        self.load_booking_of_known_group(id).await
    }

    async fn load_booking_of_known_group(&self, id: BookingId) -> Result<Option<Loaded>, ApiError> {
        let (answer, _) = self
            .client
            .query_with(id.group, &Query::Booking(id.seq), Read::Lease)
            .await
            .map_err(|e| self.client_error(e))?;
        Ok(match answer {
            QueryResult::Booking {
                event_id: Some(event_id),
                hold: Some(hold),
                booking,
                price,
                fence,
            } => Some(Loaded {
                id,
                event_id,
                hold,
                booking,
                price,
                fence,
            }),
            _ => None,
        })
    }

    /// Run a payment action on `event`'s group (no idempotency key: every
    /// payment action is conditional on the state it expects or keyed by
    /// its requester, so a re-sent one applies once).
    pub async fn payment_command(
        &self,
        event: &EventId,
        action: PaymentAction,
    ) -> Result<(EventReply, Fence), ApiError> {
        self.keyed_payment_command(event, None, action).await
    }

    /// A payment action under a buyer's Idempotency-Key (`Attach`: a
    /// replay answers the first outcome, another request under the key
    /// `IdempotencyKeyReused`).
    pub async fn keyed_payment_command(
        &self,
        event: &EventId,
        key: Option<(seatfence_core::UserId, String)>,
        action: PaymentAction,
    ) -> Result<(EventReply, Fence), ApiError> {
        let route = self.route(event).await?;
        let cmd = Edge::command(&route, key, EventAction::Payment(action));
        self.execute(&route, cmd).await
    }

    /// The conditional confirm (HELD → PAID, or refund_pending after a
    /// release) on the gateway's answer `state` that the payment completed,
    /// counted by the path that made it. Every confirm path comes through
    /// here, so none confirms on an answer that does not name the
    /// booking's own amount and currency ([`amount::check`]): that answer
    /// raises the alert and is refused with 409 `amount_mismatch`.
    pub async fn confirm(
        &self,
        l: &Loaded,
        state: &PaymentState,
        via: ConfirmPath,
        inbox: Option<String>,
    ) -> Result<Booking, ApiError> {
        let booking = l.booking.as_ref().ok_or(ApiError::NotFound {
            code: "booking_not_found",
            what: "booking".into(),
        })?;
        if let Err(m) = amount::check(booking, state) {
            self.amount_alert(l, via, &m);
            return Err(m.error(l));
        }
        let payment_id = booking.payment.payment_id.as_str();
        let action = PaymentAction::Confirm {
            hold: l.id.seq,
            payment_id: payment_id.to_string(),
            txn_id: state.txn_id.clone().unwrap_or_default(),
            via,
            inbox,
        };
        let (reply, _) = self.payment_command(&l.event_id, action).await?;
        match reply.outcome {
            Outcome::Confirmed { changed, booking } => {
                if changed {
                    use seatfence_core::inventory::BookingStatus;
                    if booking.status == BookingStatus::RefundPending {
                        self.metrics.inc(|m| &m.late_success);
                        tracing::warn!(booking = %l.id, payment_id, "payment completed after its hold was released: refund queued");
                    } else {
                        self.metrics.inc(|m| match via {
                            ConfirmPath::Callback => &m.confirmed_callback,
                            ConfirmPath::Webhook => &m.confirmed_webhook,
                            ConfirmPath::Reconciler => &m.confirmed_reconciler,
                        });
                        tracing::info!(booking = %l.id, payment_id, via = via.as_str(), "booking confirmed");
                    }
                }
                Ok(*booking)
            }
            other => Err(ApiError::from_outcome(other, &l.event_id)),
        }
    }

    /// Commit an execute intent, then capture once with the intent's
    /// fence; on a timeout ask the gateway once; confirm if completed.
    /// Returns the booking as it stands (pending when undecided).
    pub async fn execute_and_confirm(
        &self,
        l: &Loaded,
        takeover: bool,
        via: ConfirmPath,
    ) -> Result<Booking, ApiError> {
        let payments = self.payments()?;
        let booking = l.booking.as_ref().ok_or(ApiError::NotFound {
            code: "booking_not_found",
            what: "booking".into(),
        })?;
        let payment_id = booking.payment.payment_id.clone();
        let intent = PaymentAction::ExecuteIntent {
            hold: l.id.seq,
            payment_id: payment_id.clone(),
            takeover,
            // This call's own id: a re-sent intent gets the same grant.
            requester: format!("{}-{:016x}", via.as_str(), rand::random::<u64>()),
        };
        let (reply, fence) = self.payment_command(&l.event_id, intent).await?;
        match reply.outcome {
            Outcome::ExecuteIntent {
                granted: true,
                booking: _,
            } => {}
            // Another path holds the intent (or the booking is decided).
            Outcome::ExecuteIntent { booking, .. } => return Ok(*booking),
            other => return Err(ApiError::from_outcome(other, &l.event_id)),
        }
        let state = match payments.gateway.execute(&payment_id, fence).await {
            Ok(s) => Some(s),
            Err(e @ (GatewayError::Timeout | GatewayError::Unavailable(_))) => {
                self.metrics.inc(|m| &m.gateway_errors);
                tracing::warn!(booking = %l.id, payment_id, fence = %fence, "execute: {e}; asking once");
                payments.gateway.query(&payment_id).await.ok()
            }
            Err(e) => {
                tracing::warn!(booking = %l.id, payment_id, fence = %fence, "execute refused: {e}");
                None
            }
        };
        match state {
            Some(s) if s.status == PaymentStatus::Completed => self.confirm(l, &s, via, None).await,
            _ => Ok(booking.clone()),
        }
    }
}
