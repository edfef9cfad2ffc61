//! [`LogStore`]: a group's Raft log (in the node-wide log, `wal`) and its
//! vote (in sled).
//!
//! The group's space in sled's `meta`: `vote`, `committed`, `purged` (and
//! `created`, see `db`). The purge point is kept in both: the log's purge
//! record may go with a deleted segment, sled's copy is flushed first.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use seatfence_core::GroupId;

use super::db::{FlushMode, GroupTrees, NodeDb};
use super::{decode, encode, encode_compressed, io_err};
use crate::joining::Joining;
use crate::types::{Entry, LogId, TypeConfig, Vote};

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const PURGED: &[u8] = b"purged";

/// A group's log storage. Clones share the same trees (the reader is a clone).
#[derive(Clone)]
pub struct LogStore {
    group: GroupId,
    db: NodeDb,
    trees: GroupTrees,
    /// Told of every membership entry stored (see `crate::joining`).
    joining: Option<Arc<Joining>>,
}

impl LogStore {
    /// The log of `group` in `db` (its spaces marked as stored here).
    pub fn open(db: &NodeDb, group: GroupId) -> io::Result<LogStore> {
        let store = LogStore {
            group,
            db: db.clone(),
            trees: db.group_trees(group)?,
            joining: None,
        };
        // The two purge points agree from here on: sled's may be newer (a
        // purge record not yet synced at a crash, while sled's write was)
        // or older (the other way round; sled's copy must stand for the
        // log's record once its segment goes).
        let in_sled = store.get_meta::<LogId>(PURGED)?;
        let in_log = db.wal().log_state(group.0).0;
        match (in_sled, in_log) {
            (Some(s), l) if l.as_ref() < Some(&s) => db.wal().purge(group.0, s)?,
            (s, Some(l)) if s.as_ref() < Some(&l) => store.put_meta(PURGED, &l)?,
            _ => {}
        }
        Ok(store)
    }

    /// Tell `joining` of every membership entry appended from now on.
    pub(crate) fn with_joining(mut self, joining: Arc<Joining>) -> LogStore {
        self.joining = Some(joining);
        self
    }

    fn get_meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> io::Result<Option<T>> {
        match self.trees.meta.get(key).map_err(io_err)? {
            Some(v) => decode(&v).map(Some),
            None => Ok(None),
        }
    }

    fn put_meta<T: serde::Serialize>(&self, key: &[u8], v: &T) -> io::Result<()> {
        self.trees.meta.insert(key, encode(v)?).map_err(io_err)?;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => i.saturating_add(1),
            Bound::Excluded(i) => *i,
            Bound::Unbounded => u64::MAX,
        };
        self.db.wal().read(self.group.0, start, end)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.get_meta(VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let (purged, last) = self.db.wal().log_state(self.group.0);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.put_meta(VOTE, vote)?;
        // A vote must be on disk before it is acted on. Through the shared
        // flusher: when a node dies, its groups' survivors all vote at
        // once, and 1,000 separate flushes queued behind each other.
        self.db.flush_shared().await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        // Not flushed: losing it only means re-learning the commit index.
        self.put_meta(COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        let committed = self.get_meta::<Option<LogId>>(COMMITTED)?.flatten();
        // sled may have kept a commit index whose entries the log had not
        // synced at a crash (they are in the cluster: re-learnt).
        let (_, last) = self.db.wal().log_state(self.group.0);
        Ok(committed.filter(|c| Some(c) <= last.as_ref()))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Encoded here, outside the log's lock; readable on return.
        let joining = self.joining.clone().filter(|j| j.is_on());
        let mut memberships = Vec::new();
        let mut encoded = Vec::new();
        for entry in entries {
            if joining.is_some() {
                if let Some(m) = entry.get_membership() {
                    memberships.push(m);
                }
            }
            encoded.push((entry.log_id(), encode_compressed(&entry)?));
        }
        self.db.wal().append(self.group.0, encoded)?;
        // A membership that ends the joining counts once it is durable:
        // the mark must not go while the entry could still be lost.
        let done = move |r: io::Result<()>| {
            if let (Ok(()), Some(j)) = (&r, joining) {
                memberships.iter().for_each(|m| j.note_membership(m));
            }
            callback.io_completed(r)
        };
        match self.db.flush_mode() {
            FlushMode::Inline => done(self.db.wal().flush().await),
            FlushMode::Shared => self.db.wal().flush_then(Box::new(done)),
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.map(|l| l.index() + 1).unwrap_or(0);
        self.db.wal().truncate(self.group.0, from)?;
        // Synced before anything else happens: a truncate lost at a crash
        // while what followed it in sled survived (an applied id, or a
        // snapshot's) would bring back a conflicting tail at or past the
        // applied index, which openraft refuses to start on. Rare: only a
        // follower with an uncommitted tail from a deposed leader.
        self.db.wal().flush().await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        // sled's copy first (see the module doc).
        self.put_meta(PURGED, &log_id)?;
        self.db.wal().purge(self.group.0, log_id)
    }
}
