//! [`Wal`]: the node-wide log. Every group's Raft entries go to one
//! sequence of append-only segment files (`wal/*.seg`, format in
//! [`record`]); one flush round writes every group's new records with one
//! write per segment and one `fdatasync`, then answers every append
//! queued before it. Memory keeps, per group, where each entry lies and
//! the last few entries themselves (appended entries are read again at
//! once: applied, sent to followers).
//!
//! What it replaces: a sled B-tree insert per entry (and a remove per
//! entry at purge), the top storage cost with many busy groups
//! (docs/PERFORMANCE.md, "Many events at once").
//!
//! Rules kept:
//! - an append's callback fires only after the round that wrote its
//!   records synced them; rounds run one at a time, in order;
//! - records are replayed at open in file order, so a crash keeps a prefix
//!   of what was written: a truncate or purge is never lost while an entry
//!   written after it survives;
//! - a record that is incomplete or fails its checksum ends the last
//!   segment (a torn write, never acknowledged): cut off at open. One in an
//!   earlier segment that is followed by records is damage, and the node
//!   refuses to start rather than forget acknowledged entries;
//! - a segment is deleted only when no entry lives in it, every segment
//!   before it is gone, what made it dead is synced, and sled is flushed
//!   (the purge points in sled's `meta` then stand for its purge records);
//! - sled writes that entries must not outlive (a group's `created` mark,
//!   a joining mark) are flushed before the next round writes (`sled_first`).

mod flusher;
mod record;
mod recover;

pub(crate) use recover::import;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::entry::RaftEntry;
use tokio::sync::mpsc;

use super::health::Health;
use super::{decode_compressed, encode, io_err};
use crate::types::{Entry, LogId};
use record::{create_segment, sync_dir, Kind};

/// A new segment is started once the current one holds this much. The
/// first segment of a log is [`FIRST_SEGMENT_BYTES`], each next one twice
/// the last, up to this: a node that writes little keeps little on disk.
pub(crate) const SEGMENT_BYTES: u64 = 64 << 20;
const FIRST_SEGMENT_BYTES: u64 = 1 << 20;
/// Per group, encoded entries kept in memory up to this many bytes (the
/// newest ones; older ones are read from their segment).
const CACHE_BYTES: usize = 128 << 10;
/// The oldest segment is rewritten (its few live entries appended again)
/// when more than this many segments exist and it has at most
/// [`RELOCATE_MAX`] live entries: groups that write rarely must not keep
/// old segments alive forever.
const KEEP_SEGMENTS: usize = 4;
const RELOCATE_MAX: u64 = 4096;

type Waiter = Box<dyn FnOnce(io::Result<()>) + Send>;

/// The node-wide log. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Wal {
    shared: Arc<Shared>,
}

struct Shared {
    dir: PathBuf,
    state: Mutex<State>,
    health: Arc<Health>,
    sled: sled::Db,
    tx: mpsc::UnboundedSender<Waiter>,
    /// sled holds a write that the next records must not outlive: the next
    /// round flushes sled before it writes.
    sled_first: AtomicBool,
}

/// Where an entry's encoded bytes lie.
#[derive(Clone, Copy, Debug)]
struct Loc {
    seg: u64,
    at: u64,
    len: u32,
}

impl Loc {
    fn pos(&self) -> (u64, u64) {
        (self.seg, self.at)
    }
}

#[derive(Default)]
struct GroupLog {
    /// Index of `locs[0]`.
    first: u64,
    locs: VecDeque<Loc>,
    /// The encoded entries of the last `cache.len()` locs.
    cache: VecDeque<Arc<[u8]>>,
    cache_bytes: usize,
    last: Option<LogId>,
    purged: Option<LogId>,
}

impl GroupLog {
    fn next_index(&self) -> u64 {
        self.first + self.locs.len() as u64
    }
}

struct Segment {
    file: Arc<File>,
    /// Entries that live in it.
    live: u64,
    /// Where the log ended when `live` last fell to 0: the segment may go
    /// once that is synced.
    died_at: Option<(u64, u64)>,
    /// Created since the last round: the directory needs a sync.
    created: bool,
}

/// Records not yet on disk, for one segment from offset `at`.
struct Chunk {
    seg: u64,
    at: u64,
    buf: Vec<u8>,
}

struct State {
    dir: PathBuf,
    groups: HashMap<u64, GroupLog>,
    segments: BTreeMap<u64, Segment>,
    /// The segment appends go to, and its length counting unwritten bytes.
    active: u64,
    end: u64,
    segment_bytes: u64,
    /// The size at which the active segment is left for the next one.
    active_bytes: u64,
    /// Records not yet handed to a round, in order.
    pending: Vec<Chunk>,
    /// Records a round is writing (readable from here until synced).
    writing: Vec<Arc<Chunk>>,
    /// Everything before this position is synced.
    synced: (u64, u64),
    /// An entry was removed since the last look for dead segments.
    garbage: bool,
    /// The next segment, written with zeros and synced ahead of time: an
    /// fdatasync after overwriting zeros syncs only the data, while one
    /// after a write that grows the file also commits the file system's
    /// journal (on ext4, 151 µs against 223–270 µs per 4 KiB write here).
    spare: Option<(u64, File, u64)>,
    /// The id of the spare being zeroed, if one is.
    preparing: Option<u64>,
}

/// Where to get an entry's bytes.
enum Source {
    Mem(Arc<[u8]>),
    File(Arc<File>, Loc),
}

impl Source {
    fn bytes(self) -> io::Result<Arc<[u8]>> {
        match self {
            Source::Mem(b) => Ok(b),
            Source::File(f, loc) => {
                let mut buf = vec![0; loc.len as usize];
                f.read_exact_at(&mut buf, loc.at)?;
                Ok(buf.into())
            }
        }
    }
}

impl Wal {
    /// Open (or create) the log in `dir`, replaying every segment. Starts
    /// the flusher task: call from inside a tokio runtime.
    pub fn open(dir: &Path, health: Arc<Health>, sled: sled::Db) -> io::Result<Wal> {
        Self::open_sized(dir, health, sled, SEGMENT_BYTES)
    }

    pub(crate) fn open_sized(
        dir: &Path,
        health: Arc<Health>,
        sled: sled::Db,
        segment_bytes: u64,
    ) -> io::Result<Wal> {
        std::fs::create_dir_all(dir)?;
        let mut state = recover::recover(dir, segment_bytes)?;
        if state.segments.is_empty() {
            let file = create_segment(dir, 0)?;
            sync_dir(dir)?;
            state.segments.insert(0, Segment::new(file));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            state: Mutex::new(state),
            health,
            sled,
            tx,
            sled_first: AtomicBool::new(false),
        });
        tokio::spawn(flusher::run_flusher(Arc::downgrade(&shared), rx));
        Ok(Wal { shared })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().expect("wal lock poisoned")
    }

    /// Whether no group has anything in the log.
    pub fn is_empty(&self) -> bool {
        self.lock().groups.is_empty()
    }

    /// Groups with a log here.
    pub fn groups(&self) -> Vec<u64> {
        self.lock().groups.keys().copied().collect()
    }

    /// The group's last purged log id and last log id (the purged one when
    /// nothing is left).
    pub fn log_state(&self, group: u64) -> (Option<LogId>, Option<LogId>) {
        let st = self.lock();
        match st.groups.get(&group) {
            Some(g) => (g.purged, g.last.or(g.purged)),
            None => (None, None),
        }
    }

    /// The next round writes only after a sled flush (see the module doc).
    pub fn sled_first(&self) {
        self.shared.sled_first.store(true, SeqCst);
    }

    /// Append encoded entries of `group` (readable on return, durable once
    /// a round that starts after this call has synced). An index at or
    /// below the group's last replaces it and everything after it.
    pub fn append(&self, group: u64, entries: Vec<(LogId, Vec<u8>)>) -> io::Result<()> {
        let mut st = self.lock();
        for (id, bytes) in entries {
            st.append_one(group, id, bytes.into())?;
        }
        st.trim_cache(group);
        Ok(())
    }

    /// The group's entries with index in `[start, end)`.
    pub fn read(&self, group: u64, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        let sources = {
            let st = self.lock();
            let Some(g) = st.groups.get(&group) else {
                return Ok(Vec::new());
            };
            let lo = start.max(g.first);
            let hi = end.min(g.next_index());
            (lo..hi).map(|i| st.source(g, i)).collect::<Vec<_>>()
        };
        sources
            .into_iter()
            .map(|s| decode_compressed(&s.bytes()?))
            .collect()
    }

    /// Remove the group's entries at `from` and above.
    pub fn truncate(&self, group: u64, from: u64) -> io::Result<()> {
        let mut st = self.lock();
        st.push(Kind::Truncate, group, from, &[])?;
        st.truncate_mem(group, from)
    }

    /// Remove the group's entries up to and including `id`.
    pub fn purge(&self, group: u64, id: LogId) -> io::Result<()> {
        let mut st = self.lock();
        let payload = encode(&id)?;
        st.push(Kind::Purge, group, id.index(), &payload)?;
        st.purge_mem(group, id);
        Ok(())
    }

    /// Forget the group's log (a retired replica).
    pub fn drop_group(&self, group: u64) -> io::Result<()> {
        let mut st = self.lock();
        if !st.groups.contains_key(&group) {
            return Ok(());
        }
        st.push(Kind::Drop, group, 0, &[])?;
        st.drop_mem(group);
        Ok(())
    }

    /// Queue `callback` for the next round that starts after this call.
    pub fn flush_then(&self, callback: Waiter) {
        if let Err(mpsc::error::SendError(cb)) = self.shared.tx.send(callback) {
            cb(Err(io::Error::other("log flusher stopped")));
        }
    }

    /// Wait for the next round that starts after this call.
    pub async fn flush(&self) -> io::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.flush_then(Box::new(move |r| {
            let _ = tx.send(r);
        }));
        rx.await
            .unwrap_or_else(|_| Err(io::Error::other("log flusher stopped")))
    }

    /// Segment files on disk (tests: garbage collection).
    #[cfg(test)]
    fn segment_ids(&self) -> Vec<u64> {
        self.lock().segments.keys().copied().collect()
    }
}

impl Segment {
    fn new(file: File) -> Segment {
        Segment {
            file: Arc::new(file),
            live: 0,
            died_at: None,
            created: false,
        }
    }
}

impl State {
    fn empty(dir: &Path, segment_bytes: u64) -> State {
        State {
            dir: dir.to_path_buf(),
            groups: HashMap::new(),
            segments: BTreeMap::new(),
            active: 0,
            end: 0,
            segment_bytes,
            active_bytes: FIRST_SEGMENT_BYTES.min(segment_bytes),
            pending: Vec::new(),
            writing: Vec::new(),
            synced: (0, 0),
            garbage: false,
            spare: None,
            preparing: None,
        }
    }

    /// Write a record into the pending bytes; the location of its payload.
    fn push(&mut self, kind: Kind, group: u64, index: u64, payload: &[u8]) -> io::Result<Loc> {
        if self.end >= self.active_bytes {
            self.roll()?;
        }
        let (active, end) = (self.active, self.end);
        if self.pending.last().is_none_or(|c| c.seg != active) {
            self.pending.push(Chunk {
                seg: active,
                at: end,
                buf: Vec::new(),
            });
        }
        let chunk = self.pending.last_mut().expect("a chunk was just ensured");
        let before = chunk.buf.len();
        let at = record::put(&mut chunk.buf, kind, group, index, payload);
        self.end += (chunk.buf.len() - before) as u64;
        Ok(Loc {
            seg: active,
            at: chunk.at + at as u64,
            len: payload.len() as u32,
        })
    }

    /// Start the next segment (its directory entry synced by the next round).
    fn roll(&mut self) -> io::Result<()> {
        let next_bytes = (self.active_bytes * 2).min(self.segment_bytes);
        let (id, file, bytes) = match self.spare.take() {
            Some((id, file, bytes)) if id == self.active + 1 => (id, file, bytes),
            stale => {
                if let Some((id, _, _)) = stale {
                    let _ = std::fs::remove_file(self.dir.join(record::file_name(id)));
                }
                // Not the one being zeroed (it is deleted when done).
                let id = self.active.max(self.preparing.unwrap_or(0)) + 1;
                (id, create_segment(&self.dir, id)?, next_bytes)
            }
        };
        self.active_bytes = bytes;
        let mut seg = Segment::new(file);
        seg.created = true;
        self.segments.insert(id, seg);
        self.active = id;
        self.end = 0;
        Ok(())
    }

    fn append_one(&mut self, group: u64, id: LogId, bytes: Arc<[u8]>) -> io::Result<()> {
        let index = id.index();
        // Checked before the record is written: a gap written would stop
        // the log from opening.
        if let Some(g) = self.groups.get(&group).filter(|g| !g.locs.is_empty()) {
            if index > g.next_index() {
                return Err(io_err(format!(
                    "log of group {group}: entry {index} appended after {}",
                    g.next_index() - 1
                )));
            }
        }
        let loc = self.push(Kind::Entry, group, index, &bytes)?;
        self.add_loc(group, index, loc, Some(bytes), Some(id))
    }

    /// Record an entry at `loc` (its bytes cached when given).
    fn add_loc(
        &mut self,
        group: u64,
        index: u64,
        loc: Loc,
        bytes: Option<Arc<[u8]>>,
        id: Option<LogId>,
    ) -> io::Result<()> {
        let next = self
            .groups
            .get(&group)
            .map(|g| (g.next_index(), g.locs.is_empty()));
        match next {
            // Replay or a rewrite: the caller sets `last`.
            Some((next, false)) if index < next => self.truncate_mem_quiet(group, index),
            Some((next, false)) if index > next => {
                return Err(io_err(format!(
                    "log of group {group}: entry {index} appended after {}",
                    next - 1
                )))
            }
            _ => {}
        }
        let g = self.groups.entry(group).or_default();
        if g.locs.is_empty() {
            g.first = index;
            g.cache.clear();
            g.cache_bytes = 0;
        }
        g.locs.push_back(loc);
        match bytes {
            Some(b) => {
                g.cache_bytes += b.len();
                g.cache.push_back(b);
            }
            None => {
                g.cache.clear();
                g.cache_bytes = 0;
            }
        }
        if id.is_some() {
            g.last = id;
        }
        let seg = self
            .segments
            .get_mut(&loc.seg)
            .expect("entry in a known segment");
        seg.live += 1;
        seg.died_at = None;
        Ok(())
    }

    /// Drop cached bytes of synced entries beyond the group's budget.
    fn trim_cache(&mut self, group: u64) {
        let synced = self.synced;
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        while g.cache_bytes > CACHE_BYTES && g.cache.len() > 1 {
            let loc = g.locs[g.locs.len() - g.cache.len()];
            if loc.pos() >= synced {
                break;
            }
            let b = g.cache.pop_front().expect("non-empty");
            g.cache_bytes -= b.len();
        }
    }

    /// Where entry `index` of `g` (present) can be read.
    fn source(&self, g: &GroupLog, index: u64) -> Source {
        let k = (index - g.first) as usize;
        let uncached = g.locs.len() - g.cache.len();
        if k >= uncached {
            return Source::Mem(g.cache[k - uncached].clone());
        }
        let loc = g.locs[k];
        if loc.pos() >= self.synced {
            if let Some(b) = self.unsynced_bytes(loc) {
                return Source::Mem(b);
            }
        }
        Source::File(self.segments[&loc.seg].file.clone(), loc)
    }

    /// The bytes at `loc` if they are still in memory (pending or being
    /// written).
    fn unsynced_bytes(&self, loc: Loc) -> Option<Arc<[u8]>> {
        let within = |c: &Chunk| {
            (c.seg == loc.seg
                && c.at <= loc.at
                && loc.at + loc.len as u64 <= c.at + c.buf.len() as u64)
                .then(|| {
                    let from = (loc.at - c.at) as usize;
                    Arc::from(&c.buf[from..from + loc.len as usize])
                })
        };
        self.pending
            .iter()
            .find_map(within)
            .or_else(|| self.writing.iter().find_map(|c| within(c)))
    }

    fn release(&mut self, loc: Loc) {
        let position = (self.active, self.end);
        if let Some(seg) = self.segments.get_mut(&loc.seg) {
            seg.live -= 1;
            if seg.live == 0 {
                seg.died_at = Some(position);
            }
        }
        self.garbage = true;
    }

    fn truncate_mem(&mut self, group: u64, from: u64) -> io::Result<()> {
        let Some(g) = self.groups.get_mut(&group) else {
            return Ok(());
        };
        let keep = from.saturating_sub(g.first).min(g.locs.len() as u64) as usize;
        let gone: Vec<Loc> = g.locs.drain(keep..).collect();
        let uncached = g.locs.len() + gone.len() - g.cache.len();
        let cache_keep = keep.saturating_sub(uncached);
        for b in g.cache.drain(cache_keep..) {
            g.cache_bytes -= b.len();
        }
        for loc in gone {
            self.release(loc);
        }
        self.reread_last(group)
    }

    /// Set the group's last log id from its last entry (read back).
    fn reread_last(&mut self, group: u64) -> io::Result<()> {
        let Some(g) = self.groups.get(&group) else {
            return Ok(());
        };
        let last = match g.locs.is_empty() {
            true => None,
            false => {
                let entry: Entry = decode_compressed(&self.source(g, g.next_index() - 1).bytes()?)?;
                Some(entry.log_id())
            }
        };
        self.groups.get_mut(&group).expect("present").last = last;
        Ok(())
    }

    fn purge_mem(&mut self, group: u64, id: LogId) {
        let g = self.groups.entry(group).or_default();
        let upto = id.index();
        let n = upto
            .saturating_add(1)
            .saturating_sub(g.first)
            .min(g.locs.len() as u64) as usize;
        let gone: Vec<Loc> = g.locs.drain(..n).collect();
        while g.cache.len() > g.locs.len() {
            let b = g.cache.pop_front().expect("non-empty");
            g.cache_bytes -= b.len();
        }
        g.first = g.first.max(upto.saturating_add(1));
        if g.purged < Some(id) {
            g.purged = Some(id);
        }
        if g.locs.is_empty() {
            g.last = None;
        }
        for loc in gone {
            self.release(loc);
        }
    }

    fn drop_mem(&mut self, group: u64) {
        if let Some(g) = self.groups.remove(&group) {
            for loc in g.locs {
                self.release(loc);
            }
        }
    }
}

#[cfg(test)]
mod tests;
