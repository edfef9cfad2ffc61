//! seatfence-payments: the payment side (DESIGN.md §8): three paths
//! confirm, one path releases.
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
//!
//! - [`Payments`]: the service every path goes through (load a booking,
//!   run a payment action, the one confirm, execute-and-confirm).
//! - [`gateway`]: the provider's trait, its HTTP client, webhook
//!   signatures and the fleet's shared token; [`refresher`]: the one
//!   token refresher (on the directory's leader).
//! - [`amount`]: the one amount check of every confirm.
//! - [`reconciler`], [`outbox`]: the leader's payment work, as passes over
//!   one group this node leads (`reconciler::sweep`, `outbox::refunds`,
//!   `outbox::emails`), scheduled per group by `seatfence-duties`.
//! - [`config`]: the `[payments]` section; [`metrics`]; [`error`].
//!
//! The HTTP handlers of bookings, callbacks, webhooks and refunds are the
//! edge's (`seatfence-api`); this crate never serves HTTP.

#![warn(missing_docs)]
// The layout of the workers' futures nests deeper than the default 128.
#![recursion_limit = "256"]

pub mod amount;
pub mod config;
pub mod error;
pub mod gateway;
pub mod metrics;
pub mod outbox;
pub mod reconciler;
pub mod refresher;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use seatfence_core::inventory::{
    Booking, ConfirmPath, EventAction, EventReply, Hold, Outcome, PaymentAction,
};
use seatfence_core::{BookingId, EventId, Fence, Query, QueryResult, UserId};
use seatfence_raft::clock::Clock;
use seatfence_raft::registry::Registry;
use seatfence_raft::Read;
use seatfence_regions::Commands;

/// Whether an event has nothing for the payment duties: no hold waiting
/// on a payment, no released booking unsettled at the gateway, no refund
/// or email in its outbox. A sweep or a lane pass of such an event does
/// nothing and reports zeros, so while its state cannot change (a sleeping
/// group) the passes are skipped.
pub fn nothing_pending(inv: &seatfence_core::inventory::Inventory) -> bool {
    let ix = inv.index();
    ix.pay_deadlines.is_empty()
        && ix.unsettled.is_empty()
        && ix.outbox_pending.is_empty()
        && ix.outbox_refunds.is_empty()
        && ix.outbox_emails.is_empty()
}

pub use config::PaymentsConfig;
pub use error::PaymentError;
pub use metrics::PaymentMetrics;

use gateway::{Gateway, GatewayError, PaymentState, PaymentStatus};

/// The payment side of a node: its gateway, the fleet's token, and the
/// fenced command path it confirms and releases through.
pub struct Payments {
    /// The node's `[payments]` settings.
    pub config: PaymentsConfig,
    /// The payment provider, reached over HTTP with the fleet's token.
    pub gateway: Arc<dyn Gateway>,
    /// The fleet's token as this node reads it (shared with `gateway`).
    pub tokens: Arc<gateway::token::DirectoryToken>,
    /// Base URL of this node's edge for the gateway and browsers.
    pub public_url: String,
    /// Directory the outbox writes confirmation emails to, as `.eml` files.
    pub mail_dir: PathBuf,
    /// The fenced command path every confirm, release and outbox step commits through.
    pub commands: Arc<Commands>,
    /// This node's replicas (the refresher asks it whether this node leads the directory).
    pub registry: Arc<Registry>,
    /// The node's clock, in ms since the Unix epoch (deadlines, token expiry).
    pub clock: Arc<dyn Clock>,
    /// The payment side's counters.
    pub metrics: PaymentMetrics,
    /// The mail sink's health (the outbox's emails lane backs off on it).
    sink: std::sync::Mutex<outbox::Sink>,
}

/// A hold and its booking (if any), read at the group's leader.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The booking's id: its group and its hold's sequence number.
    pub id: BookingId,
    /// The event the group sells.
    pub event_id: EventId,
    /// The hold, as read.
    pub hold: Hold,
    /// The hold's booking (`None` until a payment is attached to the hold).
    pub booking: Option<Booking>,
    /// The event's seat price and currency (`None` when not read).
    pub price: Option<(u64, String)>,
    /// The event's epoch and owner region when read (for the
    /// `X-Seatfence-Epoch` / `-Owner-Region` headers of answers).
    pub fence: Option<(seatfence_core::Epoch, seatfence_core::RegionId)>,
}

impl Payments {
    /// The provider key of a new booking for `l` ([`gateway::booking_key`]):
    /// a restored event's keys name this cluster. `None`: the event is
    /// restored and this node's directory replica has no cluster id yet.
    pub fn booking_key(&self, l: &Loaded) -> Option<String> {
        let restored = l
            .fence
            .as_ref()
            .is_none_or(|(epoch, _)| epoch.0 >= seatfence_core::restore::EPOCH_JUMP);
        let cluster = self
            .tokens
            .kv(seatfence_core::directory::CLUSTER_ID_KEY)
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        gateway::booking_key(
            cluster.as_deref(),
            restored,
            &l.event_id.0,
            &l.id.to_string(),
        )
    }

    /// Payments through the HTTP gateway of `config`, with the fleet's
    /// shared token; `public_url` is where buyers and the gateway reach
    /// this node's edge (the config's, if it names one); confirmation
    /// emails go to `mail_dir` unless the config names one.
    pub fn new(
        config: PaymentsConfig,
        public_url: String,
        mail_dir: PathBuf,
        commands: Arc<Commands>,
        registry: Arc<Registry>,
        clock: Arc<dyn Clock>,
    ) -> Payments {
        let tokens = Arc::new(gateway::token::DirectoryToken::new(
            registry.clone(),
            clock.clone(),
        ));
        let gateway = Arc::new(gateway::client::HttpGateway::new(
            &config.gateway_url,
            Duration::from_millis(config.call_timeout_ms),
            tokens.clone(),
        ));
        let public_url = config.public_url.clone().unwrap_or(public_url);
        Payments {
            mail_dir: config.mail_dir.clone().unwrap_or(mail_dir),
            config,
            gateway,
            tokens,
            public_url: public_url.trim_end_matches('/').to_string(),
            commands,
            registry,
            clock,
            metrics: PaymentMetrics::default(),
            sink: Default::default(),
        }
    }

    /// [`load_booking`] through this node's commands.
    pub async fn load_booking(&self, id: BookingId) -> Result<Option<Loaded>, PaymentError> {
        load_booking(&self.commands, id).await
    }

    /// Run a payment action on `event`'s group (no idempotency key: every
    /// payment action is conditional on the state it expects or keyed by
    /// its requester, so a re-sent one applies once).
    pub async fn command(
        &self,
        event: &EventId,
        action: PaymentAction,
    ) -> Result<(EventReply, Fence), PaymentError> {
        self.keyed_command(event, None, action).await
    }

    /// A payment action under a buyer's Idempotency-Key (`Attach`: a
    /// replay answers the first outcome, another request under the key
    /// `IdempotencyKeyReused`).
    pub async fn keyed_command(
        &self,
        event: &EventId,
        key: Option<(UserId, String)>,
        action: PaymentAction,
    ) -> Result<(EventReply, Fence), PaymentError> {
        Ok(self
            .commands
            .run(event, key, EventAction::Payment(action))
            .await?)
    }

    /// The conditional confirm (HELD → PAID, or refund_pending after a
    /// release) on the gateway's answer `state` that the payment completed,
    /// counted by the path that made it. Every confirm path comes through
    /// here, so none confirms on an answer that does not name the
    /// booking's own amount and currency ([`amount::check`]): that answer
    /// raises the alert and is refused (`amount_mismatch`).
    pub async fn confirm(
        &self,
        l: &Loaded,
        state: &PaymentState,
        via: ConfirmPath,
        inbox: Option<String>,
    ) -> Result<Booking, PaymentError> {
        let booking = l.booking.as_ref().ok_or(PaymentError::BookingNotFound)?;
        if let Err(m) = amount::check(booking, state) {
            self.amount_alert(l, via, &m);
            return Err(PaymentError::AmountMismatch { booking: l.id });
        }
        let payment_id = booking.payment.payment_id.as_str();
        let action = PaymentAction::Confirm {
            hold: l.id.seq,
            payment_id: payment_id.to_string(),
            txn_id: state.txn_id.clone().unwrap_or_default(),
            via,
            inbox,
        };
        let (reply, _) = self.command(&l.event_id, action).await?;
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
            outcome => Err(PaymentError::Refused {
                outcome,
                event_id: l.event_id.clone(),
            }),
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
    ) -> Result<Booking, PaymentError> {
        let booking = l.booking.as_ref().ok_or(PaymentError::BookingNotFound)?;
        let payment_id = booking.payment.payment_id.clone();
        let intent = PaymentAction::ExecuteIntent {
            hold: l.id.seq,
            payment_id: payment_id.clone(),
            takeover,
            // This call's own id: a re-sent intent gets the same grant.
            requester: format!("{}-{:016x}", via.as_str(), rand::random::<u64>()),
        };
        let (reply, fence) = self.command(&l.event_id, intent).await?;
        match reply.outcome {
            Outcome::ExecuteIntent {
                granted: true,
                booking: _,
            } => {}
            // Another path holds the intent (or the booking is decided).
            Outcome::ExecuteIntent { booking, .. } => return Ok(*booking),
            outcome => {
                return Err(PaymentError::Refused {
                    outcome,
                    event_id: l.event_id.clone(),
                })
            }
        }
        let state = match self.gateway.execute(&payment_id, fence).await {
            Ok(s) => Some(s),
            Err(e @ (GatewayError::Timeout | GatewayError::Unavailable(_))) => {
                self.metrics.inc(|m| &m.gateway_errors);
                tracing::warn!(booking = %l.id, payment_id, fence = %fence, "execute: {e}; asking once");
                self.gateway.query(&payment_id).await.ok()
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

/// Read hold `id.seq` and its booking at its group's leader; `None`
/// when the group or hold does not exist. A lease read (linearizable
/// while clock rates drift within the lease's margin; GET answers
/// show it as is): whatever a caller decides from it is checked again
/// by the command it commits (`Attach`, `ExecuteIntent`, `Confirm`
/// each verify the state they expect in apply).
pub async fn load_booking(
    commands: &Commands,
    id: BookingId,
) -> Result<Option<Loaded>, PaymentError> {
    if id.group.is_directory() || !commands.group_exists(id.group).await? {
        return Ok(None);
    }
    load_booking_of_known_group(commands, id).await
}

/// [`load_booking`] for an anonymous caller (the
/// payment callback, before its signature can be checked): a group this
/// node's directory replica does not know is `None` at once, without
/// the directory read at its leader a lagging replica would need, so a
/// stranger's made-up booking id costs no leader any work. A replica
/// behind on the group's creation answers 404 to a genuine callback
/// then; the webhook and the reconciler still confirm the payment.
pub async fn load_booking_for_stranger(
    commands: &Commands,
    id: BookingId,
) -> Result<Option<Loaded>, PaymentError> {
    let known = commands.directory(|d| d.groups.contains_key(&id.group)) == Some(true);
    if id.group.is_directory() || !known {
        return Ok(None);
    }
    load_booking_of_known_group(commands, id).await
}

async fn load_booking_of_known_group(
    commands: &Commands,
    id: BookingId,
) -> Result<Option<Loaded>, PaymentError> {
    let (answer, _) = commands
        .client
        .query_with(id.group, &Query::Booking(id.seq), Read::Lease)
        .await
        .map_err(|e| commands.client_error(e))?;
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
