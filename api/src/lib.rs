//! seatfence-api: the regional HTTP edge (DESIGN.md §7). Every node runs
//! one for its region.
//!
//! ```text
//!  HTTP ─▶ http.rs: body limit, route (routes.rs), auth (JWT HS256), admission (429)
//!        ─▶ events.rs / holds.rs: validate (400/404/413), build an EventCommand
//!        ─▶ Edge::execute: epoch from the RouteCache ─▶ ClusterClient
//!              ─▶ this node leads? its Proposer in-process : the leader over gRPC
//!              ◀─ reply (epoch, term): below the highest fence seen? discard, retry
//!              ◀─ StaleEpoch{current}: adopt the epoch, retry
//!        ─▶ one mapping from ApiError / Outcome to status + stable code
//! ```
//!
//! - [`auth`]: bearer tokens. [`admission`]: in-flight bound and per-user rate.
//! - [`error`]: `ApiError` and its HTTP mapping. [`metrics`]: `/metrics`.
//! - [`routes`]: the one route table (dispatch, admission, audit, metric
//!   labels, the OpenAPI test). [`http`]: the hyper server and dispatch.
//! - [`events`], [`holds`]: handlers. [`config`]: `[edge]`, `[payments]`.
//! - [`payments`]: bookings, callback, webhook, reconciler, outbox;
//!   [`gateway`]: the payment provider's client (the mock provider is in
//!   `seatfence-testkit`).
//! - [`admin`]: operator endpoints (cluster view, leader transfer, drain).
//!
//! The edge never decides an outcome itself: seats change only through a
//! committed command of the owning group. A request that cannot be admitted
//! is refused (429), never queued out of sight; a queue position is never
//! shown as a reservation.

pub mod admin;
pub mod admission;
pub mod auth;
pub mod changes;
pub mod config;
mod conn;
pub mod console;
pub mod error;
pub mod events;
pub mod gateway;
pub mod holds;
pub mod http;
pub mod keyed;
pub mod lifecycle;
pub mod metrics;
pub mod moves;
pub mod payments;
pub mod room;
pub mod routes;
pub mod secret;
mod whole;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seatfence_core::inventory::{EventCommand, EventReply, Outcome};
use seatfence_core::{Command, EventId, EventRoute, Fence, Response};
use seatfence_raft::registry::Registry;
use seatfence_raft::{ClientError, ClusterClient, Committed, ProposeError};

use crate::config::EdgeConfig;
use seatfence_regions::{FenceCheck, RouteCache, RouteError};

use crate::admission::Admission;
use crate::error::ApiError;
use crate::metrics::EdgeMetrics;

pub use http::serve;

/// Attempts of one command before giving up with 503.
const MAX_ATTEMPTS: usize = 8;

/// Shared state of one edge.
pub struct Edge {
    pub region: String,
    pub config: EdgeConfig,
    pub client: ClusterClient,
    pub routes: Arc<RouteCache>,
    pub admission: Admission,
    pub metrics: EdgeMetrics,
    pub(crate) registry: Arc<Registry>,
    pub clock: Arc<dyn seatfence_raft::clock::Clock>,
    /// The payment gateway and workers (`None`: bookings answer 503).
    pub payments: Option<Arc<payments::Payments>>,
    /// A voter within this many entries of the leader's log may take its
    /// leadership (operator transfers, drain): the node's `[moves]
    /// catch_up_slack`, as the move coordinator uses.
    pub catch_up_slack: u64,
    /// Availability answers, reused for a short while to absorb refresh
    /// storms. Held only for a lookup or insert, never across `.await`.
    availability: Mutex<HashMap<EventId, (Instant, serde_json::Value)>>,
    /// Bearer tokens this edge verified (bounded; see [`auth::TokenCache`]).
    pub tokens: auth::TokenCache,
    /// Waiting-room joins on their way to the join worker (`room.rs`).
    pub joins: room::Joins,
}

/// How long an availability answer is reused.
pub const AVAILABILITY_CACHE: Duration = Duration::from_millis(250);

/// The fewest free seats an availability answer asks the leader for: any
/// smaller `limit` is served from the same cached answer, so varying
/// `limit` does not reach the leader more often.
pub const AVAILABILITY_FETCH: u32 = 1000;

/// A cached availability answer cut to `limit` free seats.
fn availability_cut(body: &serde_json::Value, limit: u32) -> serde_json::Value {
    let mut body = body.clone();
    if let Some(seats) = body["available_seats"].as_array_mut() {
        seats.truncate(limit as usize);
    }
    let listed = body["available_seats"].as_array().map_or(0, |a| a.len()) as u64;
    body["available_seats_truncated"] = (listed < body["available"].as_u64().unwrap_or(0)).into();
    body["limit"] = limit.into();
    body
}

impl Edge {
    /// An edge of `region` that reaches groups through `client` (built by
    /// the node with `ClusterClient::with_local`, so the groups this node
    /// leads are proposed in-process).
    pub fn new(
        region: String,
        config: EdgeConfig,
        client: ClusterClient,
        registry: Arc<Registry>,
        clock: Arc<dyn seatfence_raft::clock::Clock>,
    ) -> Edge {
        let tokens = auth::TokenCache::new(config.jwt_secret.clone(), auth::TOKEN_CACHE);
        Edge {
            region,
            admission: Admission::new(
                config.max_inflight_mutations,
                config.max_inflight_other,
                config.user_rate_per_sec,
                config.user_burst,
            )
            .with_anonymous_rate(config.anonymous_rate_per_ip),
            config,
            routes: Arc::new(RouteCache::new(client.clone())),
            client,
            metrics: EdgeMetrics::default(),
            registry,
            clock,
            payments: None,
            catch_up_slack: seatfence_regions::transfer::CATCH_UP_SLACK,
            availability: Mutex::new(HashMap::new()),
            tokens,
            joins: room::Joins::default(),
        }
    }

    /// Take payments through the gateway of `config`, with the fleet's
    /// shared token; confirmation emails go to `mail_dir` unless the
    /// config names one.
    pub fn with_payments(
        mut self,
        config: config::PaymentsConfig,
        mail_dir: std::path::PathBuf,
    ) -> Edge {
        let tokens = Arc::new(gateway::token::DirectoryToken::new(
            self.registry.clone(),
            self.clock.clone(),
        ));
        let gateway = Arc::new(gateway::client::HttpGateway::new(
            &config.gateway_url,
            Duration::from_millis(config.call_timeout_ms),
            tokens.clone(),
        ));
        let public_url = config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.config.http_addr));
        self.payments = Some(Arc::new(payments::Payments {
            mail_dir: config.mail_dir.clone().unwrap_or(mail_dir),
            config,
            gateway,
            tokens,
            public_url: public_url.trim_end_matches('/').to_string(),
        }));
        self
    }

    /// Start the edge's background work: following the directory for its
    /// route cache, and the payment workers (reconciler, outbox, token
    /// refresher), each acting only for what this node leads. All stop
    /// with `rx_stop`.
    pub fn spawn_workers(self: &Arc<Edge>, rx_stop: tokio::sync::watch::Receiver<bool>) {
        tokio::spawn(seatfence_regions::routes::follow_directory(
            self.routes.clone(),
            self.registry.clone(),
            rx_stop.clone(),
        ));
        if let Some(rx) = self.joins.take_receiver() {
            tokio::spawn(room::run_joins(self.clone(), rx, rx_stop.clone()));
        }
        if self.payments.is_none() {
            return;
        }
        tokio::spawn(payments::reconciler::run(self.clone(), rx_stop.clone()));
        tokio::spawn(payments::outbox::run(self.clone(), rx_stop.clone()));
        tokio::spawn(payments::refresher::run(self.clone(), rx_stop));
    }

    /// The route of `event`, or 404 / 503.
    pub async fn route(&self, event: &EventId) -> Result<EventRoute, ApiError> {
        self.routes
            .resolve(event)
            .await
            .map_err(|e| self.route_error(e))
    }

    fn route_error(&self, e: RouteError) -> ApiError {
        match e {
            RouteError::NotFound(id) => ApiError::NotFound {
                code: "event_not_found",
                what: format!("event {id}"),
            },
            RouteError::Directory(e) => self.client_error(e),
            RouteError::BadAnswer => ApiError::Internal("directory answered oddly".into()),
        }
    }

    /// The answer for a failed cluster call: 503 `no_leader` when no leader
    /// answered in time (counted), 503 `storage_full` when the leader's disk
    /// is below its reserve, 503 `group_unavailable` otherwise.
    pub(crate) fn client_error(&self, e: ClientError) -> ApiError {
        match e {
            ClientError::NoLeader { .. } => {
                self.metrics.inc(|m| &m.no_leader);
                ApiError::unavailable("no_leader", format!("{e}"))
            }
            ClientError::Rejected(ProposeError::StorageFull(m)) => {
                ApiError::unavailable("storage_full", m)
            }
            other => ApiError::unavailable("group_unavailable", other.to_string()),
        }
    }

    /// Run an event command at the leader of the event's group: stamp the
    /// cached epoch, check the reply's fence, adopt a newer epoch on
    /// `StaleEpoch`, retry (same idempotency key) when the outcome is unknown.
    pub async fn execute(
        &self,
        route: &EventRoute,
        mut cmd: EventCommand,
    ) -> Result<(EventReply, Fence), ApiError> {
        let mut route = route.clone();
        let mut last = String::new();
        for attempt in 0..MAX_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(20 << attempt.min(4))).await;
            }
            cmd.epoch = route.epoch;
            let out = match self.write(route.group, Command::event(cmd.clone())).await {
                Ok(out) => out,
                Err(ClientError::Rejected(e @ ProposeError::OutcomeUnknown(_))) => {
                    // Entry discarded by a leader change: the same key makes
                    // a retry safe. (A group not open yet is retried by the
                    // client itself until its deadline.)
                    last = format!("{}: {e}", e.code());
                    continue;
                }
                Err(e) => return Err(self.client_error(e)),
            };
            let Response::Event(reply) = out.response else {
                return Err(ApiError::Internal(format!(
                    "group {} answered {:?}",
                    route.group, out.response
                )));
            };
            if let Outcome::StaleEpoch { current, owner } = &reply.outcome {
                if *current > cmd.epoch {
                    self.routes
                        .adopt_epoch(&cmd.event_id, *current, owner.clone());
                    route.epoch = *current;
                    route.owner_region = owner.clone();
                    last = format!("epoch {} is stale, now {current}", cmd.epoch);
                    continue;
                }
            }
            let fence = Fence {
                epoch: reply.epoch,
                term: out.term,
            };
            match self.routes.check_fence(&cmd.event_id, fence) {
                FenceCheck::Fresh => return Ok((reply, fence)),
                FenceCheck::Stale { seen } => {
                    self.metrics.inc(|m| &m.stale_epoch_edge);
                    self.client.forget_leader(route.group);
                    last = format!("reply fence {fence} below {seen}");
                }
            }
        }
        Err(ApiError::unavailable(
            "no_leader",
            format!("gave up after {MAX_ATTEMPTS} attempts: {last}"),
        ))
    }

    /// Read this node's replica of the directory (`None` if not hosted).
    pub fn registry_directory<T>(
        &self,
        f: impl FnOnce(&seatfence_core::Directory) -> T,
    ) -> Option<T> {
        self.registry
            .get(seatfence_core::GroupId::DIRECTORY)
            .map(|d| d.sm.read(|s| f(&s.state.directory)))
    }

    /// Whether the directory knows `group`: this node's replica first, the
    /// directory's leader when the replica has not seen it (it may lag).
    pub async fn group_exists(&self, group: seatfence_core::GroupId) -> Result<bool, ApiError> {
        if self.registry_directory(|d| d.groups.contains_key(&group)) == Some(true) {
            return Ok(true);
        }
        Ok(self
            .directory_at_leader()
            .await?
            .groups
            .contains_key(&group))
    }

    /// Whether any registered node is in `region`: this node's directory
    /// replica first, the directory's leader when the replica has not seen
    /// one (it may lag behind registrations).
    pub async fn region_exists(&self, region: &seatfence_core::RegionId) -> Result<bool, ApiError> {
        let has = |d: &seatfence_core::Directory| d.nodes.values().any(|n| &n.region == region);
        if self.registry_directory(has) == Some(true) {
            return Ok(true);
        }
        Ok(has(&self.directory_at_leader().await?))
    }

    /// The directory as its leader has it (a linearizable read).
    pub async fn directory_at_leader(&self) -> Result<seatfence_core::Directory, ApiError> {
        let (answer, _) = self
            .client
            .query(
                seatfence_core::GroupId::DIRECTORY,
                &seatfence_core::Query::Directory,
                true,
            )
            .await
            .map_err(|e| self.client_error(e))?;
        match answer {
            seatfence_core::QueryResult::Directory(d) => Ok(d),
            _ => Err(ApiError::Internal("directory answered oddly".into())),
        }
    }

    fn cached_availability(
        &self,
        event: &EventId,
        limit: u32,
    ) -> Option<(serde_json::Value, Instant)> {
        let cache = self
            .availability
            .lock()
            .expect("availability lock poisoned");
        let (at, body) = cache.get(event).filter(|(at, body)| {
            at.elapsed() < AVAILABILITY_CACHE && body["limit"].as_u64() >= Some(u64::from(limit))
        })?;
        Some((availability_cut(body, limit), *at))
    }

    fn store_availability(&self, event: &EventId, at: Instant, body: serde_json::Value) {
        let mut cache = self
            .availability
            .lock()
            .expect("availability lock poisoned");
        if cache.len() > 10_000 {
            cache.retain(|_, (t, _)| t.elapsed() < AVAILABILITY_CACHE);
        }
        cache.insert(event.clone(), (at, body));
    }

    /// A command for `route`'s event at the cached epoch (`execute`
    /// re-stamps it on retries; the leader stamps `now_ms`).
    pub fn command(
        route: &EventRoute,
        idempotency: Option<(seatfence_core::UserId, String)>,
        action: seatfence_core::inventory::EventAction,
    ) -> EventCommand {
        EventCommand {
            event_id: route.event_id.clone(),
            epoch: route.epoch,
            now_ms: 0,
            idempotency,
            action,
        }
    }

    /// Admission for one mutation by `user`: their rate, then a slot among
    /// the edge's mutations in flight (held until the permit drops).
    /// A slot for a request that is not a buyer's mutation.
    /// A request to a route anyone may call without a token, from `peer`:
    /// its address's rate (429 `rate_limited`).
    pub(crate) fn admit_anonymous(&self, peer: crate::conn::Peer) -> Result<(), ApiError> {
        self.admission
            .check_anonymous(peer)
            .inspect_err(|_| self.metrics.inc(|m| &m.rejected_anonymous))
    }

    pub fn admit_other(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        self.admission
            .enter_other()
            .inspect_err(|_| self.metrics.inc(|m| &m.rejected_inflight))
    }

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

    /// Propose `cmd` to `group`: in-process when this node leads the group,
    /// else through the cluster client to the leader.
    pub(crate) async fn write(
        &self,
        group: seatfence_core::GroupId,
        cmd: Command,
    ) -> Result<Committed, ClientError> {
        self.client.write(group, &cmd).await
    }

    /// Whether this node can serve: the directory has a leader it knows.
    pub fn ready(&self) -> bool {
        self.registry
            .leader_of(seatfence_core::GroupId::DIRECTORY)
            .is_some()
    }
}
