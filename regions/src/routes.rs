//! [`RouteCache`]: event → route, from the directory, plus the highest
//! fence seen per event.
//!
//! No negative caching: an unknown event is asked of the directory every
//! time, so an event is served by every edge as soon as its create returns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use seatfence_core::{Epoch, EventId, EventRoute, Fence, GroupId, Query, QueryResult, RegionId};
use seatfence_raft::registry::Registry;
use seatfence_raft::{ClientError, ClusterClient};

/// Why an event's route could not be found.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The directory has no route for the event (no such event).
    #[error("event {0} not found")]
    NotFound(EventId),
    /// The directory's leader could not be asked, or refused the query.
    #[error("directory unreachable: {0}")]
    Directory(#[from] ClientError),
    /// The directory answered the route query with something other than a route.
    #[error("directory answered an unexpected result")]
    BadAnswer,
}

/// Whether a reply may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceCheck {
    /// At or above every fence seen for the event: use it.
    Fresh,
    /// Below a fence already seen: discard and re-route.
    Stale {
        /// The highest fence seen for the event.
        seen: Fence,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    route: EventRoute,
    highest: Fence,
}

impl Entry {
    /// No reply below `epoch` is fresh any more.
    fn raise_to_epoch(&mut self, epoch: Epoch) {
        if epoch > self.highest.epoch {
            self.highest = Fence { epoch, term: 0 };
        }
    }
}

/// Shared by every request of one edge.
///
/// Its `std::sync::Mutex` is only held for map lookups and inserts, never
/// across an `.await`.
pub struct RouteCache {
    client: ClusterClient,
    entries: Mutex<HashMap<EventId, Entry>>,
}

impl RouteCache {
    /// An empty cache that asks the directory through `client`.
    pub fn new(client: ClusterClient) -> RouteCache {
        RouteCache {
            client,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<EventId, Entry>> {
        self.entries.lock().expect("route cache lock poisoned")
    }

    /// The route of `event`: cached, or read from the directory's leader.
    pub async fn resolve(&self, event: &EventId) -> Result<EventRoute, RouteError> {
        if let Some(e) = self.lock().get(event) {
            return Ok(e.route.clone());
        }
        self.refresh(event).await
    }

    /// Read `event`'s route from the directory (linearizable) and cache it.
    pub async fn refresh(&self, event: &EventId) -> Result<EventRoute, RouteError> {
        let (answer, _) = self
            .client
            .query(GroupId::DIRECTORY, &Query::Route(event.clone()), true)
            .await?;
        match answer {
            QueryResult::Route(Some(route)) => {
                self.learn(route.clone());
                Ok(route)
            }
            QueryResult::Route(None) => {
                self.lock().remove(event);
                Err(RouteError::NotFound(event.clone()))
            }
            _ => Err(RouteError::BadAnswer),
        }
    }

    /// The events with a cached route.
    pub fn cached_events(&self) -> Vec<EventId> {
        self.lock().keys().cloned().collect()
    }

    /// Cache `route` unless a newer epoch is already known; a newer epoch
    /// also raises the highest fence seen, so a late reply of the old
    /// epoch is stale from now on even if no reply of the new one came yet.
    pub fn learn(&self, route: EventRoute) {
        let mut entries = self.lock();
        match entries.get_mut(&route.event_id) {
            Some(e) if e.route.epoch > route.epoch => {}
            Some(e) => {
                e.raise_to_epoch(route.epoch);
                e.route = route;
            }
            None => {
                entries.insert(
                    route.event_id.clone(),
                    Entry {
                        highest: Fence {
                            epoch: route.epoch,
                            term: 0,
                        },
                        route,
                    },
                );
            }
        }
    }

    /// An event group answered with a newer epoch and owner than cached
    /// (a `StaleEpoch` rejection): adopt them.
    pub fn adopt_epoch(&self, event: &EventId, epoch: Epoch, owner: RegionId) {
        if let Some(e) = self.lock().get_mut(event) {
            if epoch > e.route.epoch {
                e.route.epoch = epoch;
                e.route.owner_region = owner;
            }
            e.raise_to_epoch(epoch);
        }
    }

    /// Check a reply's fence against the highest seen for `event`, and
    /// raise the highest if the reply is newer.
    pub fn check_fence(&self, event: &EventId, fence: Fence) -> FenceCheck {
        let mut entries = self.lock();
        let Some(e) = entries.get_mut(event) else {
            return FenceCheck::Fresh;
        };
        if fence < e.highest {
            return FenceCheck::Stale { seen: e.highest };
        }
        e.highest = fence;
        if fence.epoch > e.route.epoch {
            e.route.epoch = fence.epoch;
        }
        FenceCheck::Fresh
    }
}

/// Keep every cached route at the directory's newest epoch and owner: on
/// each apply of this node's directory replica, cached events whose route
/// changed (a finished move) are learned again. So after a move reads
/// `done`, every edge reports the new owner within one directory
/// replication round.
pub async fn follow_directory(
    routes: Arc<RouteCache>,
    registry: Arc<Registry>,
    mut rx_stop: tokio::sync::watch::Receiver<bool>,
) {
    let Some(dir) = registry.get(GroupId::DIRECTORY) else {
        return;
    };
    let mut rx = dir.subscribe_applied();
    loop {
        let cached = routes.cached_events();
        let fresh: Vec<seatfence_core::EventRoute> = dir.read(|s| {
            cached
                .iter()
                .filter_map(|e| s.state.directory().events.get(e).cloned())
                .collect()
        });
        for route in fresh {
            routes.learn(route);
        }
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seatfence_core::inventory::Survival;

    fn cache_with(epoch: u64) -> (RouteCache, EventId) {
        let c = RouteCache::new(ClusterClient::new(
            vec!["127.0.0.1:1".into()],
            Default::default(),
        ));
        let id = EventId("e".into());
        c.learn(EventRoute {
            event_id: id.clone(),
            group: GroupId(1),
            home_region: RegionId("a".into()),
            owner_region: RegionId("a".into()),
            epoch: Epoch(epoch),
            survival: Survival::Zone,
            state: Default::default(),
        });
        (c, id)
    }

    fn fence(epoch: u64, term: u64) -> Fence {
        Fence {
            epoch: Epoch(epoch),
            term,
        }
    }

    #[test]
    fn a_reply_below_the_highest_fence_is_stale() {
        let (c, id) = cache_with(1);
        assert_eq!(c.check_fence(&id, fence(1, 5)), FenceCheck::Fresh);
        assert_eq!(
            c.check_fence(&id, fence(1, 4)),
            FenceCheck::Stale { seen: fence(1, 5) }
        );
        assert_eq!(c.check_fence(&id, fence(2, 1)), FenceCheck::Fresh);
        assert_eq!(
            c.check_fence(&id, fence(1, 9)),
            FenceCheck::Stale { seen: fence(2, 1) }
        );
    }

    #[test]
    fn a_newer_route_makes_the_old_epochs_replies_stale() {
        let (c, id) = cache_with(1);
        assert_eq!(c.check_fence(&id, fence(1, 5)), FenceCheck::Fresh);
        let mut moved = route_of(&id);
        moved.epoch = Epoch(2);
        c.learn(moved);
        assert_eq!(
            c.check_fence(&id, fence(1, 9)),
            FenceCheck::Stale { seen: fence(2, 0) }
        );
        c.adopt_epoch(&id, Epoch(3), RegionId("c".into()));
        assert_eq!(
            c.check_fence(&id, fence(2, 7)),
            FenceCheck::Stale { seen: fence(3, 0) }
        );
        assert_eq!(c.check_fence(&id, fence(3, 1)), FenceCheck::Fresh);
    }

    #[test]
    fn an_older_route_never_replaces_a_newer_one() {
        let (c, id) = cache_with(3);
        let mut old = route_of(&id);
        old.epoch = Epoch(2);
        c.learn(old);
        assert_eq!(c.lock()[&id].route.epoch, Epoch(3));
    }

    fn route_of(id: &EventId) -> EventRoute {
        EventRoute {
            event_id: id.clone(),
            group: GroupId(1),
            home_region: RegionId("a".into()),
            owner_region: RegionId("b".into()),
            epoch: Epoch(1),
            survival: Survival::Zone,
            state: Default::default(),
        }
    }
}
