//! [`Commands`]: the one way an in-node caller (the HTTP edge, the payment
//! workers, the duties) runs an event command at the owning group's leader,
//! fenced: stamp the cached epoch, check the reply's fence against the
//! highest seen, adopt a newer epoch on `StaleEpoch`, retry (same
//! idempotency key) when the outcome is unknown. And the directory reads
//! those callers need (this node's replica first, the leader's when it
//! lags).
//!
//! ```text
//!  execute(route, cmd) ─▶ cmd.epoch = route.epoch ─▶ ClusterClient::write (in-process when led here)
//!     OutcomeUnknown ─▶ retry (same key)        StaleEpoch{current > ours} ─▶ adopt, retry
//!     reply fence below the highest seen ─▶ forget the leader, retry
//!     EventNotFound, yet the directory routes the event ─▶ re-route, retry (never a false 404)
//!     otherwise ─▶ (reply, fence)
//! ```

use std::sync::Arc;
use std::time::Duration;

use metrics::Counter;
use seatfence_core::inventory::{EventAction, EventCommand, EventReply, Outcome};
use seatfence_core::{
    Command, Directory, EventId, EventRoute, Fence, GroupId, Query, QueryResult, RegionId,
    Response, UserId,
};
use seatfence_raft::registry::Registry;
use seatfence_raft::{ClientError, ClusterClient, Committed, ProposeError};

use crate::{FenceCheck, RouteCache, RouteError};

/// Attempts of one command before giving up.
const MAX_ATTEMPTS: usize = 8;

/// Why a command or a directory read failed (the group's own refusals are
/// outcomes of a reply, not errors). Each kind has a stable code.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommandError {
    /// The directory has no such event.
    #[error("event {0} not found")]
    EventNotFound(EventId),
    /// No leader answered in time (`no_leader`).
    #[error("{0}")]
    NoLeader(String),
    /// The leader's disk is below its reserve (`storage_full`).
    #[error("{0}")]
    StorageFull(String),
    /// The group's leader or its node has as many writes pending as it
    /// takes (`overloaded`): nothing was proposed; retry shortly.
    #[error("{0}")]
    Overloaded(String),
    /// The group could not take the command (`group_unavailable`).
    #[error("{0}")]
    Unavailable(String),
    /// An answer that makes no sense (a bug).
    #[error("{0}")]
    Internal(String),
}

impl CommandError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            CommandError::EventNotFound(_) => "event_not_found",
            CommandError::NoLeader(_) => "no_leader",
            CommandError::StorageFull(_) => "storage_full",
            CommandError::Overloaded(_) => "overloaded",
            CommandError::Unavailable(_) => "group_unavailable",
            CommandError::Internal(_) => "internal",
        }
    }
}

/// The fenced command path of one node (shared: `Arc<Commands>`).
pub struct Commands {
    /// The cluster client commands go through (in-process for groups this node leads).
    pub client: ClusterClient,
    /// Events' routes, cached from the directory.
    pub routes: Arc<RouteCache>,
    /// Reads answered by a replica in this node's region.
    pub local_reads: Arc<crate::local_reads::LocalReads>,
    registry: Arc<Registry>,
    /// `seatfence_stale_epoch_rejections_total{layer="edge"}`.
    stale_epoch: Counter,
    /// `seatfence_no_leader_total`.
    no_leader: Counter,
    /// `seatfence_commands_total{hop="local"}`: commands run on a group
    /// this node leads (proposed in-process).
    hops_local: Counter,
    /// `seatfence_commands_total{hop="forwarded"}`: commands sent on to
    /// another node's leader (one more gRPC hop).
    hops_forwarded: Counter,
}

impl Commands {
    /// Commands through `client` (built by the node with
    /// `ClusterClient::with_local`, so the groups this node leads are
    /// proposed in-process), routed by a cache of this node's directory.
    pub fn new(client: ClusterClient, registry: Arc<Registry>) -> Commands {
        Commands {
            routes: Arc::new(RouteCache::new(client.clone())),
            local_reads: Arc::new(crate::local_reads::LocalReads::new(
                client.clone(),
                registry.clone(),
            )),
            client,
            registry,
            stale_epoch: metrics::counter!("seatfence_stale_epoch_rejections_total", "layer" => "edge"),
            no_leader: metrics::counter!("seatfence_no_leader_total"),
            hops_local: metrics::counter!("seatfence_commands_total", "hop" => "local"),
            hops_forwarded: metrics::counter!("seatfence_commands_total", "hop" => "forwarded"),
        }
    }

    /// The route of `event`.
    pub async fn route(&self, event: &EventId) -> Result<EventRoute, CommandError> {
        let route = self.routes.resolve(event).await.map_err(|e| match e {
            RouteError::NotFound(id) => CommandError::EventNotFound(id),
            RouteError::Directory(e) => self.client_error(e),
            RouteError::BadAnswer => CommandError::Internal("directory answered oddly".into()),
        })?;
        crate::hint::touch(route.group);
        Ok(route)
    }

    /// A failed cluster call as an error (a missing leader is counted).
    pub fn client_error(&self, e: ClientError) -> CommandError {
        match e {
            ClientError::NoLeader { .. } => {
                self.no_leader.increment(1);
                CommandError::NoLeader(format!("{e}"))
            }
            ClientError::Rejected(ProposeError::StorageFull(m)) => CommandError::StorageFull(m),
            ClientError::Rejected(ProposeError::Overloaded(m)) => CommandError::Overloaded(m),
            other => CommandError::Unavailable(other.to_string()),
        }
    }

    /// A command for `route`'s event at the cached epoch (`execute`
    /// re-stamps it on retries; the leader stamps `now_ms`).
    pub fn command(
        route: &EventRoute,
        idempotency: Option<(UserId, String)>,
        action: EventAction,
    ) -> EventCommand {
        EventCommand {
            event_id: route.event_id.clone(),
            epoch: route.epoch,
            now_ms: 0,
            idempotency,
            action,
        }
    }

    /// Route `action` to `event`'s group and run it there (under `key`, if
    /// any: a replay answers the first outcome).
    pub async fn run(
        &self,
        event: &EventId,
        key: Option<(UserId, String)>,
        action: EventAction,
    ) -> Result<(EventReply, Fence), CommandError> {
        let route = self.route(event).await?;
        self.execute(&route, Commands::command(&route, key, action))
            .await
    }

    /// Run an event command at the leader of the event's group (see the
    /// module's diagram). A group that answers `EventNotFound` for an event
    /// the directory routes (to it or elsewhere) is asked again: an
    /// existing event is never "not found" (503 `no_leader` once the
    /// attempts are spent).
    pub async fn execute(
        &self,
        route: &EventRoute,
        mut cmd: EventCommand,
    ) -> Result<(EventReply, Fence), CommandError> {
        let mut route = route.clone();
        crate::hint::touch(route.group);
        if self.client.leads(route.group) {
            self.hops_local.increment(1);
        } else {
            self.hops_forwarded.increment(1);
        }
        let mut last = String::new();
        // An earlier attempt may have committed (its outcome unknown, or
        // its reply discarded as stale): a later refusal is then no "no".
        let mut unknown = false;
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
                    unknown = true;
                    continue;
                }
                Err(ClientError::Rejected(ProposeError::Overloaded(m))) if unknown => {
                    return Err(CommandError::NoLeader(format!(
                        "{m}, after an attempt whose outcome is unknown ({last})"
                    )))
                }
                Err(e) => return Err(self.client_error(e)),
            };
            let Response::Event(reply) = out.response else {
                return Err(CommandError::Internal(format!(
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
            if matches!(reply.outcome, Outcome::EventNotFound)
                && !matches!(cmd.action, EventAction::Create(_))
            {
                // The group says it has no such event, yet it was routed
                // here: ask the directory before a buyer hears "it does
                // not exist". Routed elsewhere now: go there; routed here
                // still (a replica that does not hold the event yet, a
                // create not committed yet): "not now" (503), never 404.
                match self.routes.refresh(&cmd.event_id).await {
                    Ok(now) => {
                        last = format!(
                            "group {} answered event_not_found while the directory routes the event to group {}",
                            route.group, now.group
                        );
                        if now.epoch > route.epoch || now.group != route.group {
                            route = now;
                        }
                        continue;
                    }
                    Err(RouteError::NotFound(_)) => {}
                    Err(RouteError::Directory(e)) => return Err(self.client_error(e)),
                    Err(RouteError::BadAnswer) => {
                        return Err(CommandError::Internal("directory answered oddly".into()))
                    }
                }
            }
            let fence = Fence {
                epoch: reply.epoch,
                term: out.term,
            };
            match self.routes.check_fence(&cmd.event_id, fence) {
                FenceCheck::Fresh => {
                    // After an attempt whose outcome is unknown, a replayed
                    // answer may be that attempt's own: never say this
                    // request did nothing new (`Idempotent-Replayed`, the
                    // audit's replay) when it may have done it.
                    let mut reply = reply;
                    reply.replayed &= !unknown;
                    return Ok((reply, fence));
                }
                FenceCheck::Stale { seen } => {
                    self.stale_epoch.increment(1);
                    self.client.forget_leader(route.group);
                    last = format!("reply fence {fence} below {seen}");
                    unknown = true;
                }
            }
        }
        Err(CommandError::NoLeader(format!(
            "gave up after {MAX_ATTEMPTS} attempts: {last}"
        )))
    }

    /// Propose `cmd` to `group`: in-process when this node leads the group,
    /// else through the cluster client to the leader.
    pub async fn write(&self, group: GroupId, cmd: Command) -> Result<Committed, ClientError> {
        self.client.write(group, &cmd).await
    }

    /// Read this node's replica of the directory (`None` if not hosted).
    pub fn directory<T>(&self, f: impl FnOnce(&Directory) -> T) -> Option<T> {
        self.registry.read_directory(f)
    }

    /// Whether the directory knows `group`: this node's replica first, the
    /// directory's leader when the replica has not seen it (it may lag).
    pub async fn group_exists(&self, group: GroupId) -> Result<bool, CommandError> {
        crate::hint::touch(group);
        if self.directory(|d| d.groups.contains_key(&group)) == Some(true) {
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
    pub async fn region_exists(&self, region: &RegionId) -> Result<bool, CommandError> {
        let has = |d: &Directory| d.nodes.values().any(|n| &n.region == region);
        if self.directory(has) == Some(true) {
            return Ok(true);
        }
        Ok(has(&self.directory_at_leader().await?))
    }

    /// The directory as its leader has it (a linearizable read).
    pub async fn directory_at_leader(&self) -> Result<Directory, CommandError> {
        let (answer, _) = self
            .client
            .query(GroupId::DIRECTORY, &Query::Directory, true)
            .await
            .map_err(|e| self.client_error(e))?;
        match answer {
            QueryResult::Directory(d) => Ok(d),
            _ => Err(CommandError::Internal("directory answered oddly".into())),
        }
    }

    /// Whether this node can serve: the directory has a leader it knows.
    pub fn ready(&self) -> bool {
        self.registry.leader_of(GroupId::DIRECTORY).is_some()
    }
}
