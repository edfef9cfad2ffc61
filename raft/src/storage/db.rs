//! [`NodeDb`]: the node's one sled database and its group-commit flusher.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use seatfence_core::GroupId;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::health::Health;
use super::ident::{self, IdentState, StoreIdent};
use super::io_err;
use super::space::{group_of, Space};
use super::wal::Wal;

/// How log appends reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushMode {
    /// `append()` awaits a flush before it returns and then fires the
    /// callback; openraft queues the next appends meanwhile and hands them
    /// over together. Flushes run one at a time node-wide (`health`), so
    /// with many busy groups their fsyncs queue behind each other.
    Inline,
    /// `append()` returns at once and hands its callback to one node-wide
    /// flusher task, which runs one flush for every callback queued across
    /// all groups and then fires them all. The default: as fast as `Inline`
    /// with one busy group, faster with 100 (docs/PERFORMANCE.md).
    #[default]
    Shared,
}

/// sled's page cache unless `[raft] cache_mb` says otherwise.
pub const DEFAULT_CACHE_MB: u64 = 256;

/// The node's sled database. Cheap to clone.
#[derive(Clone)]
pub struct NodeDb {
    inner: Arc<Inner>,
}

struct Inner {
    db: sled::Db,
    /// Every group's log entries (see `wal`).
    wal: Wal,
    /// The node-wide trees, every key prefixed with its group id.
    meta: sled::Tree,
    sm: sled::Tree,
    snapshot_dir: PathBuf,
    mode: FlushMode,
    health: Arc<Health>,
    tx_flush: mpsc::UnboundedSender<Box<dyn FnOnce(io::Result<()>) + Send>>,
}

/// One group's spaces in the node-wide trees.
#[derive(Clone)]
pub(crate) struct GroupTrees {
    pub meta: Space,
    pub sm: Space,
}

/// Marks a group as stored here from its first open (its meta space).
const CREATED: &[u8] = b"created";

/// Marks a replica that joined as a learner and has not yet stored the
/// entry that made it one (see `crate::joining`).
const JOINING: &[u8] = b"joining";

/// The value of a `joining` mark that also refuses votes: the replica of a
/// node rejoining on an empty data dir (see `crate::joining`).
const REJOIN: &[u8] = b"rejoin";

/// In sled's default tree: this node came back on an empty data dir
/// (`--rejoin-empty`) and not every group has taken it back yet; every
/// replica it opens on new storage meanwhile refuses votes.
const NODE_REJOINING: &[u8] = b"node_rejoining";

impl NodeDb {
    /// Open (or create) the node's storage in `dir`: sled in `dir/sled`,
    /// snapshot files in `dir/snapshots`. Must be called from inside a tokio
    /// runtime: it starts the flusher task.
    pub fn open(dir: &Path, mode: FlushMode) -> io::Result<NodeDb> {
        Self::open_with_cache(dir, mode, DEFAULT_CACHE_MB << 20)
    }

    /// [`open`](Self::open) with sled's page cache bounded at `cache_bytes`.
    pub fn open_with_cache(dir: &Path, mode: FlushMode, cache_bytes: u64) -> io::Result<NodeDb> {
        let snapshot_dir = dir.join("snapshots");
        std::fs::create_dir_all(&snapshot_dir)?;
        let db = sled::Config::new()
            .path(dir.join("sled"))
            .cache_capacity(cache_bytes)
            // sled writes any value above a quarter segment to its own blob
            // file (a create + write + unlink each). With 512 KiB segments a
            // busy batch's delta (~300 bytes per hold) crossed that 128 KiB
            // line and blob writes took ~10% of the CPU; 4 MiB segments
            // raise it to 1 MiB.
            .segment_size(4 * 1024 * 1024)
            // We flush explicitly where durability is promised.
            .flush_every_ms(None)
            .open()
            .map_err(io_err)?;
        // Data of the layout before node-wide trees (one sled tree per
        // group and kind) is not read by this version.
        if db.tree_names().iter().any(|n| n.starts_with(b"g")) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} holds data in the old layout (sled trees per group); this version keeps all groups in three trees: start from an empty data dir",
                    dir.display()
                ),
            ));
        }
        let tree = |name: &str| db.open_tree(name).map_err(io_err);
        let (meta, sm) = (tree("meta")?, tree("sm")?);
        let health = Health::new(dir);
        // Before the node-wide log, entries lived in sled's `log` tree:
        // moved into the log's first segment once.
        let wal_dir = dir.join("wal");
        let old_log = tree("log")?;
        // A log already there: an earlier move finished and was cut short
        // while clearing sled's copy (`Tree::clear` is not atomic).
        if !old_log.is_empty() && !wal_dir.exists() {
            let entries = old_log.iter().map(|kv| {
                let (k, v) = kv.map_err(io_err)?;
                let group = group_of(&k).ok_or_else(|| io_err("a log key without a group"))?;
                let index = k
                    .get(8..16)
                    .and_then(|i| i.try_into().ok())
                    .map(u64::from_be_bytes)
                    .ok_or_else(|| io_err("a log key without an index"))?;
                Ok((group.0, index, v.to_vec()))
            });
            let n = super::wal::import(&wal_dir, entries)?;
            tracing::info!(
                entries = n,
                "moved the log from sled into the node-wide log"
            );
        }
        if !old_log.is_empty() {
            old_log.clear().map_err(io_err)?;
            db.flush().map_err(io_err)?;
        }
        let wal = Wal::open(&wal_dir, health.clone(), db.clone())?;
        let (tx_flush, rx_flush) = mpsc::unbounded_channel();
        tokio::spawn(run_flusher(db.clone(), health.clone(), rx_flush));
        let node_db = NodeDb {
            inner: Arc::new(Inner {
                db,
                wal,
                meta,
                sm,
                snapshot_dir,
                mode,
                health,
                tx_flush,
            }),
        };
        // A drop interrupted after sled forgot the group but before the
        // log did: finish it.
        let stored = node_db.stored_groups();
        for g in node_db.inner.wal.groups() {
            if !stored.contains(&GroupId(g)) {
                tracing::info!(group = g, "finishing the drop of a retired replica's log");
                node_db.inner.wal.drop_group(g)?;
            }
        }
        Ok(node_db)
    }

    /// The node-wide log.
    pub(crate) fn wal(&self) -> &Wal {
        &self.inner.wal
    }

    /// The data dir's identity for node `node_id` (see [`super::ident`]):
    /// written and flushed now if absent. A data dir with data but no
    /// identity (written before identities existed) is adopted as known;
    /// one naming another node, or written in a format this binary does
    /// not read, is an error that says so. The process then writes the
    /// data dir's format (it is the cluster's, or older).
    pub async fn ident(&self, node_id: u64) -> io::Result<IdentState> {
        let db = &self.inner.db;
        if let Some(raw) = db.get(ident::KEY).map_err(io_err)? {
            let found: StoreIdent = seatfence_core::format::decode(&raw).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("this data dir's store identity cannot be read: {e}"),
                )
            })?;
            if found.node_id != node_id {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "this data dir belongs to node {}, not node {node_id}: give each node its own data dir",
                        found.node_id
                    ),
                ));
            }
            seatfence_core::format::activate(found.format).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("this data dir holds {e}"),
                )
            })?;
            return Ok(match found.admitted {
                true => IdentState::Known(found),
                false => IdentState::Fresh(found),
            });
        }
        let inner = &self.inner;
        let empty = inner.wal.is_empty() && inner.meta.is_empty() && inner.sm.is_empty();
        let made = StoreIdent {
            node_id,
            incarnation: ident::new_incarnation(),
            admitted: !empty,
            format: seatfence_core::format::active(),
        };
        self.write_ident(&made).await?;
        Ok(match made.admitted {
            true => {
                tracing::warn!(
                    node = node_id,
                    incarnation = made.incarnation,
                    "this data dir had no store identity (written by an older version): adopted it"
                );
                IdentState::Known(made)
            }
            false => IdentState::Fresh(made),
        })
    }

    /// Record that this data dir's node may vote (its id was new to the
    /// cluster, or the cluster was new), flushed.
    pub async fn admit(&self, ident: StoreIdent) -> io::Result<()> {
        self.write_ident(&StoreIdent {
            admitted: true,
            ..ident
        })
        .await
    }

    /// Write data format `v` from now on: the identity names it first
    /// (flushed), then the process writes it. Never lowers the format.
    pub async fn raise_format(
        &self,
        ident: StoreIdent,
        v: seatfence_core::format::Version,
    ) -> io::Result<StoreIdent> {
        let raised = StoreIdent {
            format: ident.format.max(v),
            ..ident
        };
        self.write_ident(&raised).await?;
        seatfence_core::format::activate(raised.format)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(raised)
    }

    /// The identity, in its own format, flushed.
    async fn write_ident(&self, ident: &StoreIdent) -> io::Result<()> {
        let bytes = seatfence_core::format::encode_at(ident.format, ident)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.inner.db.insert(ident::KEY, bytes).map_err(io_err)?;
        self.flush().await
    }

    /// How this database's log appends reach the disk.
    pub fn flush_mode(&self) -> FlushMode {
        self.inner.mode
    }

    fn spaces(&self, group: GroupId) -> GroupTrees {
        GroupTrees {
            meta: Space::new(self.inner.meta.clone(), group),
            sm: Space::new(self.inner.sm.clone(), group),
        }
    }

    /// The spaces of `group`, marked as stored here.
    pub(crate) fn group_trees(&self, group: GroupId) -> io::Result<GroupTrees> {
        let trees = self.spaces(group);
        if trees.meta.get(CREATED).map_err(io_err)?.is_none() {
            trees.meta.insert(CREATED, &[][..]).map_err(io_err)?;
            // On disk before any entry of the group (see `wal`).
            self.inner.wal.sled_first();
        }
        Ok(trees)
    }

    /// Whether `group` has storage on this node (its `created` mark).
    pub fn is_stored(&self, group: GroupId) -> io::Result<bool> {
        Ok(self
            .spaces(group)
            .meta
            .get(CREATED)
            .map_err(io_err)?
            .is_some())
    }

    /// Whether `group`'s replica here is still joining (see
    /// `crate::joining`).
    pub(crate) fn is_joining(&self, group: GroupId) -> io::Result<bool> {
        Ok(self
            .spaces(group)
            .meta
            .get(JOINING)
            .map_err(io_err)?
            .is_some())
    }

    /// Whether `group`'s joining mark is a rejoin's (it refuses votes).
    pub(crate) fn is_rejoin_mark(&self, group: GroupId) -> io::Result<bool> {
        let mark = self.spaces(group).meta.get(JOINING).map_err(io_err)?;
        Ok(mark.is_some_and(|m| m.as_ref() == REJOIN))
    }

    /// Mark `group`'s replica here as rejoining (a joining mark that also
    /// refuses votes). Flushed before the replica takes any message.
    pub(crate) fn set_rejoin_mark(&self, group: GroupId) -> io::Result<()> {
        self.spaces(group)
            .meta
            .insert(JOINING, REJOIN)
            .map_err(io_err)?;
        self.inner.wal.sled_first();
        Ok(())
    }

    /// Whether this node is rejoining on an empty data dir (see
    /// [`NODE_REJOINING`]).
    pub fn is_rejoining(&self) -> io::Result<bool> {
        Ok(self.inner.db.get(NODE_REJOINING).map_err(io_err)?.is_some())
    }

    /// Set or clear the node-wide rejoin mark, flushed.
    pub async fn set_rejoining(&self, on: bool) -> io::Result<()> {
        match on {
            true => self.inner.db.insert(NODE_REJOINING, &[][..]).map(drop),
            false => self.inner.db.remove(NODE_REJOINING).map(drop),
        }
        .map_err(io_err)?;
        self.flush().await
    }

    /// Mark or unmark `group`'s replica here as joining. Not flushed here:
    /// a mark is flushed before the next round of the log writes (so before
    /// the group's first entry), and removed only after the entry that ends
    /// it is durable (`LogStore::append`).
    pub(crate) fn set_joining(&self, group: GroupId, on: bool) -> io::Result<()> {
        let meta = self.spaces(group).meta;
        match on {
            true => meta.insert(JOINING, &[][..]),
            false => meta.remove(JOINING),
        }
        .map_err(io_err)?;
        if on {
            self.inner.wal.sled_first();
        }
        Ok(())
    }

    /// The snapshot file of `group`. Snapshots live in files, not in sled:
    /// a multi-megabyte sled value would ride along with the next log flush
    /// and stall every group's appends (seen as 400 ms p999 spikes).
    pub(crate) fn snapshot_path(&self, group: GroupId) -> PathBuf {
        self.inner.snapshot_dir.join(format!("g{}.snap", group.0))
    }

    /// Groups that have storage on this node (a `created` mark in the
    /// meta tree, written at first open).
    pub fn stored_groups(&self) -> BTreeSet<GroupId> {
        self.inner
            .meta
            .iter()
            .keys()
            .filter_map(|k| {
                let k = k.ok()?;
                (k.get(8..) == Some(CREATED))
                    .then(|| group_of(&k))
                    .flatten()
            })
            .collect()
    }

    /// Delete the log, every key and the snapshot of `group` (a retired
    /// replica). The replica must be shut down first. The `created` mark
    /// goes last, so an interrupted drop is found and finished at the next
    /// start.
    pub fn drop_group(&self, group: GroupId) -> io::Result<()> {
        self.inner.wal.drop_group(group.0)?;
        let trees = self.spaces(group);
        for space in [&trees.sm, &trees.meta] {
            space.clear().map_err(io_err)?;
        }
        match std::fs::remove_file(self.snapshot_path(group)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Flush everything written so far, awaited by the caller.
    pub async fn flush(&self) -> io::Result<()> {
        self.inner.health.flush(&self.inner.db).await
    }

    /// Resolves with the reason once a flush of this storage has failed
    /// (final: see `health`).
    pub fn watch_failed(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.inner.health.watch_failed()
    }

    /// Whether the data directory's free space is below the reserve: new
    /// data is refused until it is back (see `health`).
    pub fn is_full(&self) -> bool {
        self.inner.health.is_full()
    }

    /// Drills only: behave as if the disk were full until told otherwise.
    pub fn force_full(&self, on: bool) {
        self.inner.health.force_full(on)
    }

    /// Start watching free space against `reserve` bytes (0: never full).
    pub fn watch_space(&self, reserve: u64) {
        self.inner.health.watch_space(reserve)
    }

    /// Wait for the node-wide flusher's next flush that starts after this
    /// call (group commit: many groups' votes share one flush).
    pub async fn flush_shared(&self) -> io::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.flush_then(Box::new(move |r| {
            let _ = tx.send(r);
        }));
        rx.await
            .unwrap_or_else(|_| Err(io::Error::other("flusher stopped")))
    }

    /// Queue `callback` on the node-wide flusher: it runs after the next
    /// flush that starts after this call.
    pub(crate) fn flush_then(&self, callback: Box<dyn FnOnce(io::Result<()>) + Send>) {
        if let Err(mpsc::error::SendError(cb)) = self.inner.tx_flush.send(callback) {
            cb(Err(io::Error::other("flusher stopped")));
        }
    }
}

/// Group commit: take every queued callback, run one flush, answer them all.
async fn run_flusher(
    db: sled::Db,
    health: Arc<Health>,
    mut rx: mpsc::UnboundedReceiver<Box<dyn FnOnce(io::Result<()>) + Send>>,
) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 4096).await > 0 {
        let result = health.flush(&db).await;
        for cb in batch.drain(..) {
            cb(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            });
        }
    }
}
