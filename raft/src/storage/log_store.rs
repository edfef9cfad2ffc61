//! [`LogStore`]: a group's Raft log and vote in sled.
//!
//! The group's space in `log`: big-endian index → bincode entry; in
//! `meta`: `vote`, `committed`, `purged` (and `created`, see `db`).

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use seatfence_core::GroupId;

use super::db::{FlushMode, GroupTrees, NodeDb};
use super::{decode, decode_compressed, encode, encode_compressed, io_err};
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
        Ok(LogStore {
            group,
            db: db.clone(),
            trees: db.group_trees(group)?,
            joining: None,
        })
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

fn index_key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn key_index(k: &[u8]) -> io::Result<u64> {
    k.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "log key is not 8 bytes"))
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
            Bound::Included(i) => Bound::Included(index_key(*i)),
            Bound::Excluded(i) => Bound::Excluded(index_key(*i)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut out = Vec::new();
        let end = end.as_ref().map(|k| &k[..]);
        for kv in self
            .trees
            .log
            .range(Bound::Included(&index_key(start)), end)
        {
            let (k, v) = kv.map_err(io_err)?;
            let entry: Entry = decode_compressed(&v)?;
            debug_assert_eq!(key_index(&k)?, entry.index());
            out.push(entry);
        }
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.get_meta(VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let purged: Option<LogId> = self.get_meta(PURGED)?;
        let last = match self.trees.log.last().map_err(io_err)? {
            Some((_, v)) => Some(decode_compressed::<Entry>(&v)?.log_id()),
            None => purged,
        };
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
        Ok(self.get_meta::<Option<LogId>>(COMMITTED)?.flatten())
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
        let t0 = std::time::Instant::now();
        // One insert per entry, not a sled batch: every sled batch writes
        // and syncs the current IO buffer twice (it rolls the buffer to
        // make the batch atomic), which cost two synced writes per append
        // per group, ~2,000 a second per node with 100 busy groups. Atomic
        // is not needed: sled recovers its writes in order, so a crash keeps
        // a prefix of these entries, and none was acknowledged before the
        // flush below. Readable as soon as this returns.
        let mut n = 0;
        for entry in entries {
            n += 1;
            self.trees
                .log
                .insert(&index_key(entry.index()), encode_compressed(&entry)?)
                .map_err(io_err)?;
            // After the insert: sled recovers writes in order, so a crash
            // that kept the end of the joining kept this entry too.
            if let Some(j) = self.joining.as_ref().filter(|j| j.is_on()) {
                if let Some(m) = entry.get_membership() {
                    j.note_membership(&m);
                }
            }
        }
        match self.db.flush_mode() {
            FlushMode::Inline => {
                let r = self.db.flush().await;
                tracing::debug!(
                    group = self.group.0,
                    n,
                    us = t0.elapsed().as_micros() as u64,
                    "append flushed"
                );
                callback.io_completed(r)
            }
            FlushMode::Shared => self
                .db
                .flush_then(Box::new(move |r| callback.io_completed(r))),
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = index_key(last_log_id.map(|l| l.index() + 1).unwrap_or(0));
        let mut batch = self.trees.log.batch();
        for kv in self
            .trees
            .log
            .range(Bound::Included(&from), Bound::Unbounded)
        {
            batch.remove(&kv.map_err(io_err)?.0);
        }
        self.trees.log.apply_batch(batch).map_err(io_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        // Record the purge point first: entries at or below it are ignored
        // from then on, so the removal below need not be atomic with it.
        self.put_meta(PURGED, &log_id)?;
        let mut batch = self.trees.log.batch();
        let upto = index_key(log_id.index());
        for kv in self
            .trees
            .log
            .range(Bound::Unbounded, Bound::Included(&upto))
        {
            batch.remove(&kv.map_err(io_err)?.0);
        }
        self.trees.log.apply_batch(batch).map_err(io_err)
    }
}
