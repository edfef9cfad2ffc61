//! Dormant replicas and the registry's opening lock, in process: a
//! replica retired while unloaded stays gone, whoever wanted it back.

use std::sync::Arc;

use seatfence_core::GroupId;
use seatfence_raft::registry::Registry;
use seatfence_raft::sleep::dormant::Dormant;
use seatfence_raft::storage::{FlushMode, NodeDb};

const MOVED_AWAY: GroupId = GroupId(7);
const OTHER: GroupId = GroupId(8);

fn registry(dir: &tempfile::TempDir) -> Arc<Registry> {
    let db = NodeDb::open(dir.path(), FlushMode::Shared).expect("open sled");
    let config = Arc::new(openraft::Config::default().validate().expect("config"));
    Arc::new(Registry::new(1, db, Default::default(), config).with_sleep(true))
}

/// A record as the sleep controller would keep it (leader: node 2).
fn record() -> Dormant {
    Dormant {
        leader: 2,
        term: 0,
        last_log_index: 0,
        status: Default::default(),
    }
}

/// Open `id` (asleep: this node leads nothing) and unload it.
async fn dormant(registry: &Registry, id: GroupId) {
    let g = registry.open(id).await.expect("open");
    assert!(registry.unload(&g, record()).await, "{id} unloads");
    assert!(registry.is_dormant(id));
}

/// The interleaving a move away and a late Raft message produce: the
/// opening lock is busy (another replica unloading), placement's `retire`
/// waits for it, then a message for the dormant replica asks for it back
/// and waits behind `retire`. It must not reopen what `retire` dropped:
/// such a replica would be tracked by nobody, and found still running, with
/// its stale state, when the group is placed here again.
#[tokio::test]
async fn a_replica_retired_while_dormant_is_not_reopened_by_a_late_message() {
    let dir = tempfile::tempdir().expect("temp dir");
    let registry = registry(&dir);
    dormant(&registry, MOVED_AWAY).await;
    let other = registry.open(OTHER).await.expect("open other");

    // Polled in this order: the unload takes the lock and waits for the
    // replica's shutdown, `retire` queues, then `hosted` finds the record
    // and queues behind it.
    let (unloaded, (), back) = tokio::join!(
        registry.unload(&other, record()),
        registry.retire(MOVED_AWAY),
        registry.hosted(MOVED_AWAY),
    );
    assert!(unloaded);
    assert!(back.is_none(), "a retired replica came back");
    assert!(registry.get(MOVED_AWAY).is_none());
    assert!(!registry.is_hosted(MOVED_AWAY));
}

/// The ordinary case still works: a dormant replica asked for comes back
/// (once, however many ask at the same time) and is no longer dormant.
#[tokio::test]
async fn a_dormant_replica_reopens_once_when_asked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let registry = registry(&dir);
    dormant(&registry, MOVED_AWAY).await;
    let (a, b) = tokio::join!(registry.hosted(MOVED_AWAY), registry.hosted(MOVED_AWAY));
    let (a, b) = (a.expect("reopened"), b.expect("reopened"));
    assert!(Arc::ptr_eq(&a, &b), "opened twice");
    assert!(!registry.is_dormant(MOVED_AWAY));
    assert_eq!(a.leader_hint(), Some(2), "leader taken from the record");
}
