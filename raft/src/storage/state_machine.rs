//! [`StateMachineStore`]: a group's applied state, in memory for reads and
//! snapshots; durable as the last snapshot file plus, in `g{gid}/sm`, one
//! delta per apply (the records it changed) written atomically with the
//! applied log id.
//!
//! ```text
//!  g{gid}/sm:  !applied → log id     !membership → stored membership
//!              d/<index, big-endian> → [(record key, Some(value) | None)]
//!  snapshots/g{gid}.snap: the whole state at some applied index X
//!  open = snapshot state + every delta with index > X, in order
//! ```
//! One delta per apply instead of one sled insert per record: a batch of 64
//! writes costs two inserts, not 65 (sled inserts were the top cost in the
//! profile). Deltas at or below a snapshot are deleted after the snapshot
//! file is safely written.

use std::collections::BTreeSet;
use std::io::{self, Cursor};
use std::ops::Bound;
use std::sync::{Arc, RwLock};

use futures::{Stream, TryStreamExt};
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use seatfence_core::{GroupId, Response, State};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::db::{GroupTrees, NodeDb};
use super::{decode, decode_compressed, encode, encode_compressed, io_err};
use crate::joining::Joining;
use crate::types::{LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig};

const APPLIED: &[u8] = b"!applied";
const MEMBERSHIP: &[u8] = b"!membership";
const DELTA_PREFIX: &[u8] = b"d/";

fn delta_key(index: u64) -> Vec<u8> {
    [DELTA_PREFIX, &index.to_be_bytes()].concat()
}

/// The records one apply changed: `None` means removed.
type Delta = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// The applied state of a group, shared between the state machine (writer)
/// and readers (the node API, snapshot builds).
///
/// Guarded by a `std::sync::RwLock`: it is never held across an `.await`,
/// and the writer holds it only while applying one batch of entries in
/// memory.
#[derive(Debug, Clone)]
pub struct GroupState {
    /// The group's records, as of `last_applied`.
    pub state: State,
    /// The last entry applied (`None`: none yet).
    pub last_applied: Option<LogId>,
    /// The last membership applied, and the entry that carried it.
    pub membership: StoredMembership,
    /// Holds this replica applied, and hold requests it refused because
    /// the seats were taken, since it was opened (memory only: operators
    /// see rates, `GET /v1/admin/cluster`).
    pub holds_applied: u64,
    /// Hold requests this replica refused because the seats were taken, since it was opened.
    pub conflicts_applied: u64,
}

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

/// The openraft state machine of one group. Clones share state.
#[derive(Clone)]
pub struct StateMachineStore {
    group: GroupId,
    db: NodeDb,
    trees: GroupTrees,
    shared: Arc<RwLock<GroupState>>,
    /// Bumped to the applied index after every apply or install.
    tx_applied: Arc<watch::Sender<u64>>,
    /// Index of the snapshot file on disk. The async mutex orders file
    /// writes, so a slow build can never replace a newer installed snapshot.
    snapshot_file: Arc<tokio::sync::Mutex<Option<u64>>>,
    /// Told of an installed snapshot's membership (see `crate::joining`).
    joining: Option<Arc<Joining>>,
}

impl StateMachineStore {
    /// Open the group's state machine: the snapshot file, then every delta
    /// written after it.
    pub fn open(db: &NodeDb, group: GroupId) -> io::Result<StateMachineStore> {
        let trees = db.group_trees(group)?;
        let mut gs = GroupState {
            state: State::new(group),
            last_applied: None,
            membership: StoredMembership::default(),
            holds_applied: 0,
            conflicts_applied: 0,
        };
        let base = read_snapshot(&db.snapshot_path(group))?;
        if let Some(snap) = &base {
            gs.state = decode(&snap.data)?;
            if !gs.state.is_for(group) {
                return Err(io_err(
                    "the snapshot file holds the other kind of group's state",
                ));
            }
            gs.last_applied = snap.meta.last_log_id;
            gs.membership = snap.meta.last_membership.clone();
        }
        let base_index = gs.last_applied.map(|l| l.index());
        // An apply writes its delta, then the membership, then the applied
        // id, as separate sled writes (see `apply`); sled recovers writes in
        // order, so after a crash a delta or membership newer than the
        // applied id may be on disk without it. Those are ignored: openraft
        // applies those entries again from the log.
        let applied: Option<LogId> = match trees.sm.get(APPLIED).map_err(io_err)? {
            Some(v) => decode(&v)?,
            None => None,
        };
        if applied.map(|l| l.index()) > base_index {
            gs.last_applied = applied;
        }
        let applied_index = gs.last_applied.map(|l| l.index());
        for kv in trees.sm.scan_prefix(DELTA_PREFIX) {
            let (k, v) = kv.map_err(io_err)?;
            let index = k[DELTA_PREFIX.len()..]
                .try_into()
                .map(u64::from_be_bytes)
                .map_err(|_| io_err("delta key is not 8 bytes"))?;
            if base_index.is_some_and(|b| index <= b) {
                continue; // already in the snapshot; deletion was interrupted
            }
            if Some(index) > applied_index {
                continue; // its applied id never reached the disk
            }
            for (rk, rv) in decode_compressed::<Delta>(&v)? {
                match rv {
                    Some(rv) => gs.state.load_record(&rk, &rv),
                    None => gs.state.remove_record(&rk),
                }
                .map_err(io_err)?;
            }
        }
        gs.state.rebuild_indexes();
        if let Some(v) = trees.sm.get(MEMBERSHIP).map_err(io_err)? {
            let m: StoredMembership = decode(&v)?;
            let at = m.log_id().map(|l| l.index());
            if at > gs.membership.log_id().map(|l| l.index()) && at <= applied_index {
                gs.membership = m;
            }
        }
        let applied = gs.last_applied.map(|l| l.index()).unwrap_or(0);
        Ok(StateMachineStore {
            group,
            db: db.clone(),
            trees,
            shared: Arc::new(RwLock::new(gs)),
            tx_applied: Arc::new(watch::channel(applied).0),
            snapshot_file: Arc::new(tokio::sync::Mutex::new(base_index)),
            joining: None,
        })
    }

    /// Tell `joining` of every snapshot installed from now on.
    pub(crate) fn with_joining(mut self, joining: Arc<Joining>) -> StateMachineStore {
        self.joining = Some(joining);
        self
    }

    /// Read the applied state. `f` runs under the read lock: keep it short.
    pub fn read<T>(&self, f: impl FnOnce(&GroupState) -> T) -> T {
        f(&self.shared.read().expect("state lock poisoned"))
    }

    /// Watch the applied index.
    pub fn subscribe_applied(&self) -> watch::Receiver<u64> {
        self.tx_applied.subscribe()
    }

    fn stored_snapshot(&self) -> io::Result<Option<StoredSnapshot>> {
        read_snapshot(&self.db.snapshot_path(self.group))
    }

    /// Write the snapshot file crash-safely (temp file, fsync, rename, fsync
    /// the directory: a crash leaves the old file or the new one), unless
    /// the file on disk is already as new. Returns whether it wrote.
    async fn save_snapshot(&self, stored: &StoredSnapshot) -> io::Result<bool> {
        let index = stored.meta.last_log_id.map(|l| l.index());
        let mut current = self.snapshot_file.lock().await;
        if current.is_some() && *current >= index {
            return Ok(false);
        }
        let bytes = encode(stored)?;
        let path = self.db.snapshot_path(self.group);
        tokio::task::spawn_blocking(move || write_atomically(&path, &bytes))
            .await
            .map_err(io_err)??;
        *current = index;
        Ok(true)
    }

    /// Delete the deltas a snapshot at `upto` already contains.
    fn drop_deltas_upto(&self, upto: u64) -> io::Result<()> {
        let mut batch = self.trees.sm.batch();
        let (from, to) = (delta_key(0), delta_key(upto));
        for kv in self
            .trees
            .sm
            .range(Bound::Included(&from), Bound::Included(&to))
        {
            batch.remove(&kv.map_err(io_err)?.0);
        }
        self.trees.sm.apply_batch(batch).map_err(io_err)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok(self.read(|g| (g.last_applied, g.membership.clone())))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        // Collect what the stream has ready, apply it in memory under one
        // lock, then write the changed records (one delta) and the applied
        // id in one atomic batch before answering anyone.
        let mut pending = Vec::new();
        while let Some(item) = entries.try_next().await? {
            pending.push(item);
        }
        if pending.is_empty() {
            return Ok(());
        }
        let mut changed = BTreeSet::new();
        let mut replies = Vec::with_capacity(pending.len());
        let mut membership = None;
        let (applied_index, delta, applied);
        {
            let mut g = self.shared.write().expect("state lock poisoned");
            for (entry, responder) in pending {
                let log_id = entry.log_id();
                let response = match &entry.payload {
                    EntryPayload::Blank => Response::None,
                    EntryPayload::Normal(cmd) => {
                        let a = g.state.apply(self.group, cmd);
                        count_stale(&a.response);
                        let (holds, conflicts) = count_holds(&a.response);
                        g.holds_applied += holds;
                        g.conflicts_applied += conflicts;
                        changed.extend(a.changed);
                        a.response
                    }
                    EntryPayload::Membership(m) => {
                        g.membership = StoredMembership::new(Some(log_id), m.clone());
                        membership = Some(encode(&g.membership)?);
                        Response::None
                    }
                };
                g.last_applied = Some(log_id);
                if let Some(r) = responder {
                    replies.push((r, response));
                }
            }
            applied_index = g.last_applied.map(|l| l.index()).unwrap_or(0);
            delta = if changed.is_empty() {
                None
            } else {
                let d: Delta = changed
                    .iter()
                    .map(|key| (key.encode(), g.state.encode_record(key)))
                    .collect();
                Some(encode_compressed(&d)?)
            };
            applied = encode(&g.last_applied)?;
        }
        // Not flushed here: the log is durable. Three plain writes, not a
        // sled batch (each batch syncs sled's IO buffer twice): the delta,
        // the membership, the applied id last. sled recovers writes in
        // order, and `open` ignores a delta or membership newer than the
        // applied id, so a crash loses at most a suffix that is re-applied.
        if let Some(d) = delta {
            self.trees
                .sm
                .insert(&delta_key(applied_index), d)
                .map_err(io_err)?;
        }
        if let Some(m) = membership {
            self.trees.sm.insert(MEMBERSHIP, m).map_err(io_err)?;
        }
        self.trees.sm.insert(APPLIED, applied).map_err(io_err)?;
        for (r, response) in replies {
            r.send(response);
        }
        self.tx_applied.send_replace(applied_index);
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let data = snapshot.into_inner();
        let mut state: State = decode(&data)?;
        if !state.is_for(self.group) {
            return Err(io_err("a snapshot of the other kind of group's state"));
        }
        state.rebuild_indexes();
        // The snapshot file is the new base: written atomically first. Then
        // one atomic batch drops every delta (all older than the snapshot)
        // and records the applied id, and a flush makes it durable. A crash
        // between the two leaves the new file and old deltas, which `open`
        // skips because they are at or below the snapshot's index.
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        self.save_snapshot(&stored).await?;
        let mut batch = self.trees.sm.batch();
        for kv in self.trees.sm.scan_prefix(DELTA_PREFIX) {
            batch.remove(&kv.map_err(io_err)?.0);
        }
        batch.insert(APPLIED, encode(&meta.last_log_id)?);
        batch.insert(MEMBERSHIP, encode(&meta.last_membership)?);
        self.trees.sm.apply_batch(batch).map_err(io_err)?;
        self.db.flush().await?;
        {
            let mut g = self.shared.write().expect("state lock poisoned");
            g.state = state;
            g.last_applied = meta.last_log_id;
            g.membership = meta.last_membership.clone();
        }
        self.tx_applied
            .send_replace(meta.last_log_id.map(|l| l.index()).unwrap_or(0));
        tracing::info!(group = self.group.0, last = ?meta.last_log_id, "installed snapshot");
        if let Some(j) = &self.joining {
            j.note_membership(meta.last_membership.membership());
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        Ok(self.stored_snapshot()?.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Cursor::new(s.data),
        }))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        // Copy under the read lock (applies wait only for the copy), encode
        // and store outside it.
        let copy = self.read(|g| g.clone());
        let stored = tokio::task::spawn_blocking(move || -> io::Result<StoredSnapshot> {
            let meta = SnapshotMeta {
                last_log_id: copy.last_applied,
                last_membership: copy.membership,
            };
            let data = encode(&copy.state)?;
            Ok(StoredSnapshot { meta, data })
        })
        .await
        .map_err(io_err)??;
        if self.save_snapshot(&stored).await? {
            if let Some(l) = stored.meta.last_log_id {
                self.drop_deltas_upto(l.index())?;
            }
        }
        tracing::debug!(group = self.group.0, last = ?stored.meta.last_log_id, "built snapshot");
        Ok(Snapshot {
            meta: stored.meta,
            snapshot: Cursor::new(stored.data),
        })
    }
}

/// Count stale-epoch rejections made by `apply` (for `/metrics`).
fn count_stale(r: &Response) {
    use crate::metrics::{RaftMetrics, METRICS};
    use seatfence_core::inventory::Outcome;
    match r {
        Response::Event(e) if matches!(e.outcome, Outcome::StaleEpoch { .. }) => {
            RaftMetrics::inc(&METRICS.stale_epoch_apply)
        }
        Response::Batch(rs) => rs.iter().for_each(count_stale),
        _ => {}
    }
}

/// Holds made and hold requests refused for taken seats in `r`.
fn count_holds(r: &Response) -> (u64, u64) {
    use seatfence_core::inventory::Outcome;
    match r {
        Response::Event(e) => match e.outcome {
            Outcome::Held(_) => (1, 0),
            Outcome::SeatsUnavailable { .. } => (0, 1),
            _ => (0, 0),
        },
        Response::Batch(rs) => rs
            .iter()
            .map(count_holds)
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)),
        _ => (0, 0),
    }
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("snap.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn read_snapshot(path: &std::path::Path) -> io::Result<Option<StoredSnapshot>> {
    match std::fs::read(path) {
        Ok(bytes) => decode(&bytes).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::db::FlushMode;

    /// An apply writes its delta before its applied id. A crash between
    /// the two leaves a delta newer than the applied id: reopening ignores
    /// it (openraft applies those entries again), and reads it once the
    /// applied id covers it.
    #[tokio::test]
    async fn a_delta_newer_than_the_applied_id_is_ignored_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let db = NodeDb::open(dir.path(), FlushMode::Shared).unwrap();
        let group = GroupId(7);
        let sm = StateMachineStore::open(&db, group).unwrap();
        // Not a decodable delta: opening fails if it is read at all.
        sm.trees.sm.insert(&delta_key(5), &b"torn"[..]).unwrap();
        let reopened = StateMachineStore::open(&db, group).expect("delta past applied is skipped");
        assert_eq!(reopened.read(|g| g.last_applied), None);

        let at_4 = Some(LogId::new_term_index(1, 4));
        sm.trees.sm.insert(APPLIED, encode(&at_4).unwrap()).unwrap();
        let reopened = StateMachineStore::open(&db, group).expect("still past applied");
        assert_eq!(reopened.read(|g| g.last_applied), at_4);

        let at_5 = Some(LogId::new_term_index(1, 5));
        sm.trees.sm.insert(APPLIED, encode(&at_5).unwrap()).unwrap();
        assert!(
            StateMachineStore::open(&db, group).is_err(),
            "a delta the applied id covers is read"
        );
    }
}
