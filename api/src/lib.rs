//! seatfence-api: the regional HTTP edge (DESIGN.md §7). Every node runs
//! one for its region.
//!
//! ```text
//!  HTTP ─▶ http.rs: body limit, route (routes.rs), auth (JWT HS256), admission (429)
//!        ─▶ events.rs / holds.rs: validate (400/404/413), build an EventCommand
//!        ─▶ Commands::execute (seatfence-regions): epoch from the RouteCache ─▶ ClusterClient
//!              ─▶ this node leads? its Proposer in-process : the leader over gRPC
//!              ◀─ reply (epoch, term): below the highest fence seen? discard, retry
//!              ◀─ StaleEpoch{current}: adopt the epoch, retry
//!        ─▶ one mapping from ApiError / Outcome to status + stable code
//! ```
//!
//! Every module:
//! - [`http`]: the hyper server's dispatch; `conn`: the connections'
//!   bounds (per-address limit, slow-client timeouts); [`message`]: the
//!   `Req` a handler reads and the `Reply` it returns (handlers depend on
//!   it, not on the server, which depends on them).
//! - [`routes`]: the one route table (dispatch, admission, audit, metric
//!   labels, the OpenAPI test).
//! - [`auth`]: bearer tokens. [`admission`]: in-flight bound and per-user rate.
//! - [`error`]: `ApiError` and its HTTP mapping (from `CommandError`,
//!   `PaymentError` and refused outcomes). [`metrics`]: `/metrics`.
//! - Handlers, one file per resource: [`events`] (create, read,
//!   availability, open/close), [`holds`], [`room`] (the waiting room and
//!   its join worker), [`payments`] (bookings, callback, webhook, refunds;
//!   the work itself is `seatfence-payments`'), [`changes`] (the
//!   changefeed), [`moves`] and [`lifecycle`] (operator moves and node
//!   states), [`admin`] (cluster view, leader transfer, drain; the
//!   `Operators` service).
//! - `Edge` is the context every handler gets (config, commands, admission,
//!   metrics, clock, tokens) and the services it reaches: `payments`
//!   (`seatfence-payments`), `operators` ([`admin::Operators`]),
//!   `availability` ([`availability`]: the availability cache), `joins`
//!   (the waiting room's join worker).
//! - [`keyed`]: `Idempotency-Key` on operator requests; `whole`: whole
//!   numbers in request bodies; [`config`]: `[edge]`.
//!
//! The edge never decides an outcome itself: seats change only through a
//! committed command of the owning group. A request that cannot be admitted
//! is refused (429), never queued out of sight; a queue position is never
//! shown as a reservation.

#![warn(missing_docs)]
pub mod admin;
pub mod admission;
pub mod auth;
pub mod availability;
pub mod changes;
pub mod config;
mod conn;
pub mod error;
pub mod events;
pub mod fleet;
pub mod holds;
pub mod http;
pub mod keyed;
pub mod lifecycle;
pub mod message;
pub mod metrics;
pub mod moves;
pub mod payments;
pub mod reads;
pub mod room;
pub mod routes;
pub mod tls;
pub mod version;
mod whole;

use std::sync::Arc;

use seatfence_payments::Payments;
use seatfence_regions::Commands;

use crate::admission::Admission;
use crate::config::EdgeConfig;
use crate::error::ApiError;
use crate::metrics::EdgeMetrics;

pub use availability::{AVAILABILITY_CACHE, AVAILABILITY_FETCH};
pub use http::serve;

/// Shared state of one edge.
pub struct Edge {
    /// The node's `[edge]` config section.
    pub config: EdgeConfig,
    /// The fenced command path (route cache, cluster client).
    pub commands: Arc<Commands>,
    /// In-flight bounds and rate limits, built from `config`.
    pub admission: Admission,
    /// The edge's own counters and latency histograms for `/metrics`.
    pub metrics: EdgeMetrics,
    /// The node's clock: the `now_ms` of commands, deadlines and audit records.
    pub clock: Arc<dyn seatfence_raft::clock::Clock>,
    /// The node's payment side (`None`: bookings answer 503).
    pub payments: Option<Arc<Payments>>,
    /// The operators' services (cluster view, leader transfer, audit).
    pub operators: admin::Operators,
    /// Availability answers, reused for a short while to absorb refresh
    /// storms.
    pub availability: availability::AvailabilityCache,
    /// Bearer tokens this edge verified (bounded; see [`auth::TokenCache`]).
    pub tokens: auth::TokenCache,
    /// Waiting-room joins on their way to the join worker (`room.rs`).
    pub joins: room::Joins,
    /// More series for `/metrics`, added by the node (the waiting rooms'
    /// gauges of the events it leads, which are its duties' to report).
    pub scrape: Vec<MetricsSource>,
}

/// A source of Prometheus text the edge appends to its `/metrics` answer.
pub type MetricsSource = Arc<dyn Fn() -> String + Send + Sync>;

impl Edge {
    /// This node's whole Prometheus exposition: what `GET /metrics`
    /// answers, and what the node gives the fleet view.
    pub fn metrics_text(&self) -> String {
        self.metrics
            .body_bytes
            .set(self.admission.body_bytes_held() as f64);
        self.metrics.render(self.commands.client.redirects())
            + &moves::progress_metrics(self)
            + &metrics::runtime_metrics(self.commands.client.write_queues())
            + &self.scrape.iter().map(|s| s()).collect::<String>()
    }

    /// An edge that runs commands through `commands` (built by
    /// the node on a `ClusterClient::with_local`, so the groups this node
    /// leads are proposed in-process).
    pub fn new(
        config: EdgeConfig,
        commands: Arc<Commands>,
        clock: Arc<dyn seatfence_raft::clock::Clock>,
    ) -> Edge {
        let tokens = auth::TokenCache::new(config.jwt_secret.clone(), auth::TOKEN_CACHE);
        let operators = admin::Operators::new(
            commands.clone(),
            clock.clone(),
            seatfence_regions::transfer::CATCH_UP_SLACK,
        );
        Edge {
            admission: Admission::new(
                config.max_inflight_mutations,
                config.max_inflight_other,
                config.user_rate_per_sec,
                config.user_burst,
            )
            .with_anonymous_rate(config.anonymous_rate_per_ip)
            .with_body_budget(config.max_body_buffer_mb.saturating_mul(1 << 20)),
            config,
            commands,
            metrics: EdgeMetrics::default(),
            clock,
            payments: None,
            operators,
            availability: Default::default(),
            tokens,
            joins: room::Joins::default(),
            scrape: Vec::new(),
        }
    }

    /// Take bookings, callbacks and webhooks through `payments` (the
    /// node's payment side, whose duties the node runs).
    pub fn with_payments(mut self, payments: Arc<Payments>) -> Edge {
        self.payments = Some(payments);
        self
    }

    /// Operator transfers and drains go only to voters within
    /// `catch_up_slack` entries of the leader (the node's `[moves]`).
    pub fn with_catch_up_slack(mut self, catch_up_slack: u64) -> Edge {
        self.operators =
            admin::Operators::new(self.commands.clone(), self.clock.clone(), catch_up_slack);
        self
    }

    /// Append `source`'s series to every `/metrics` answer.
    pub fn with_metrics(mut self, source: MetricsSource) -> Edge {
        self.scrape.push(source);
        self
    }

    /// Start the edge's own background work into `tasks`, stopped with `rx_stop`: the
    /// waiting room's join worker. (The route cache follows the directory
    /// through the task the node starts for its `Commands`.)
    pub fn spawn_workers(
        self: &Arc<Edge>,
        tasks: &mut tokio::task::JoinSet<()>,
        rx_stop: tokio::sync::watch::Receiver<bool>,
    ) {
        if let Some(rx) = self.joins.take_receiver() {
            tasks.spawn(room::run_joins(self.clone(), rx, rx_stop));
        }
    }

    /// The payment side, or 503 `payments_disabled`.
    pub fn payments(&self) -> Result<&Payments, ApiError> {
        self.payments.as_deref().ok_or_else(|| {
            ApiError::unavailable(
                "payments_disabled",
                "this node has no payment gateway configured",
            )
        })
    }

    /// A request to a route anyone may call without a token, from `peer`:
    /// its address's rate (429 `rate_limited`).
    pub(crate) fn admit_anonymous(&self, peer: crate::conn::Peer) -> Result<(), ApiError> {
        self.admission
            .check_anonymous(peer)
            .inspect_err(|_| self.metrics.inc(|m| &m.rejected_anonymous))
    }

    /// Room in the edge's body budget for `bytes` of one request's body
    /// (503 `edge_overloaded`), held until the permit drops.
    pub(crate) fn admit_body(
        &self,
        bytes: usize,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        self.admission
            .enter_body(bytes)
            .inspect_err(|_| self.metrics.inc(|m| &m.rejected_body_budget))
    }

    /// A slot for a request that is not a buyer's mutation.
    pub fn admit_other(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        self.admission
            .enter_other()
            .inspect_err(|_| self.metrics.inc(|m| &m.rejected_inflight))
    }

    /// Admission for one mutation by `user`: their rate, then a slot among
    /// the edge's mutations in flight (held until the permit drops).
    pub fn admit(
        &self,
        user: &seatfence_core::UserId,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        self.admission
            .check_rate(user)
            .inspect_err(|_| self.metrics.inc(|m| &m.rejected_rate))?;
        self.admission
            .enter()
            .inspect_err(|_| self.metrics.inc(|m| &m.rejected_inflight))
    }
}
