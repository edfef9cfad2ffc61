//! A replica opened as a move's or repair's target does not campaign on a
//! membership it replays from the group's past (see `seatfence_raft::joining`).
//!
//! The replica here is node 1; a "leader" (node 2, which exists only as the
//! vote on the append requests this test sends) replicates a log whose
//! first membership makes node 1 the group's only voter, as the group was
//! before it moved away. A replica that took that membership at its word
//! would elect itself at once, alone: a second leader of the group.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::entry::RaftEntry;
use openraft::raft::AppendEntriesRequest;
use openraft::{BasicNode, Membership};
use seatfence_core::GroupId;
use seatfence_raft::registry::{GroupHandle, Registry};
use seatfence_raft::storage::{FlushMode, NodeDb};
use seatfence_raft::types::{Entry, LogId, TypeConfig, Vote};

const GROUP: GroupId = GroupId(9);
/// Nothing listens here: node 1 never reaches anyone.
const NOWHERE: &str = "127.0.0.1:1";
/// Many election timeouts (150–300 ms): a replica free to campaign as the
/// only voter of its membership has done so well within it.
const QUIET: Duration = Duration::from_millis(1_500);

fn registry(dir: &tempfile::TempDir) -> Arc<Registry> {
    let db = NodeDb::open(dir.path(), FlushMode::Shared).expect("open sled");
    let config = Arc::new(
        openraft::Config {
            heartbeat_interval: 50,
            election_timeout_min: 150,
            election_timeout_max: 300,
            ..Default::default()
        }
        .validate()
        .expect("raft config"),
    );
    Arc::new(Registry::new(1, db, Default::default(), config))
}

/// A membership entry at `index` (term 1) with these voters and learners.
fn membership(index: u64, voters: &[u64], learners: &[u64]) -> Entry {
    let nodes: BTreeMap<u64, BasicNode> = voters
        .iter()
        .chain(learners)
        .map(|id| (*id, BasicNode::new(NOWHERE)))
        .collect();
    let config = vec![voters.iter().copied().collect::<BTreeSet<u64>>()];
    let m = Membership::new(config, nodes).expect("membership");
    Entry::new_membership(LogId::new_term_index(1, index), m)
}

/// Node 2, leading term 1, appends `entries` after `prev` and commits them.
async fn append(g: &GroupHandle, prev: Option<u64>, entries: Vec<Entry>) {
    let last = entries.last().map(|e| e.log_id());
    let req = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(1, 2),
        prev_log_id: prev.map(|i| LogId::new_term_index(1, i)),
        entries,
        leader_commit: last,
    };
    let resp = g.raw_raft().append_entries(req).await.expect("append");
    assert!(resp.is_success(), "append refused: {resp:?}");
}

fn term(g: &GroupHandle) -> u64 {
    g.term()
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not within 30 s: {what}"));
}

#[tokio::test]
async fn a_target_ignores_its_old_membership_until_it_stores_the_one_making_it_a_learner() {
    let dir = tempfile::tempdir().expect("temp dir");
    let registry = registry(&dir);
    let g = registry.open_target(GROUP).await.expect("open");
    assert!(g.joining.is_on(), "a target's new replica joins");

    // The group's past: node 1 was its only voter.
    append(&g, None, vec![membership(0, &[1], &[])]).await;
    tokio::time::sleep(QUIET).await;
    assert!(
        !g.raw_raft().is_leader(),
        "a joining replica elected itself"
    );
    assert_eq!(term(&g), 1, "a joining replica campaigned");

    // The present: the group's voter is node 2, node 1 its learner.
    append(&g, Some(0), vec![membership(1, &[2], &[1])]).await;
    eventually("the learner entry ends the joining", || !g.joining.is_on()).await;

    // The move back makes node 1 the only voter again: now it campaigns.
    append(&g, Some(1), vec![membership(2, &[1], &[])]).await;
    eventually("node 1 leads", || g.raw_raft().is_leader()).await;
    assert!(term(&g) > 1);
}

#[tokio::test]
async fn the_joining_mark_outlives_the_replica() {
    let dir = tempfile::tempdir().expect("temp dir");
    let registry = registry(&dir);
    let g = registry.open_target(GROUP).await.expect("open");
    append(&g, None, vec![membership(0, &[1], &[])]).await;
    registry.retire(GROUP).await;
    drop(g);

    // Reopened from its storage (as after a restart), by any path.
    let g = registry.open(GROUP).await.expect("reopen");
    assert!(g.joining.is_on(), "the mark was stored");
    tokio::time::sleep(QUIET).await;
    assert!(
        !g.raw_raft().is_leader(),
        "a reopened joining replica elected itself"
    );
    assert_eq!(term(&g), 1);
}

#[tokio::test]
async fn a_replica_opened_as_a_voter_is_not_joining() {
    let dir = tempfile::tempdir().expect("temp dir");
    let registry = registry(&dir);
    let g = registry.open(GROUP).await.expect("open");
    assert!(!g.joining.is_on());
    append(&g, None, vec![membership(0, &[1], &[])]).await;
    eventually("the only voter leads", || g.raw_raft().is_leader()).await;
}
