//! The log's flusher task: rounds of writes and syncs, segments zeroed
//! ahead, dead segments deleted.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Weak};

use tokio::sync::mpsc;

use super::record::{self, Kind};
use super::record::{create_segment, sync_dir};
use super::{Chunk, Shared, State, Waiter, KEEP_SEGMENTS, RELOCATE_MAX};
use crate::storage::io_err;

/// One round per batch of waiters: write and sync what is pending, answer
/// them all, then look for segments to delete.
pub(super) async fn run_flusher(shared: Weak<Shared>, mut rx: mpsc::UnboundedReceiver<Waiter>) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 4096).await > 0 {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let result = round(&shared).await;
        for cb in batch.drain(..) {
            cb(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            });
        }
        if result.is_ok() {
            if let Err(e) = collect_garbage(&shared).await {
                tracing::warn!(error = %e, "log: deleting dead segments failed");
            }
            // Its own task: zeroing up to 64 MiB must not hold up rounds.
            let s = shared.clone();
            tokio::spawn(async move { prepare_spare(&s).await });
        }
    }
}

/// Write and sync every pending record: per segment in order, one write
/// and one `fdatasync` (a segment is synced before the next one is
/// written, so records in a later segment prove the earlier one whole).
async fn round(shared: &Shared) -> io::Result<()> {
    // After a failed flush nothing is acknowledged, not even an append
    // whose records a failed round took (its callback may come a round
    // later, with nothing left to write).
    if let Some(why) = shared.health.failed() {
        return Err(io::Error::other(format!(
            "storage failed earlier ({why}): nothing is flushed after a failed flush"
        )));
    }
    let (chunks, files, new_segment) = {
        let mut st = shared.state.lock().expect("wal lock poisoned");
        let chunks: Vec<Arc<Chunk>> = st.pending.drain(..).map(Arc::new).collect();
        st.writing.extend(chunks.iter().cloned());
        let files: Vec<Arc<File>> = chunks
            .iter()
            .map(|c| st.segments[&c.seg].file.clone())
            .collect();
        let mut new_segment = false;
        for seg in st.segments.values_mut() {
            new_segment |= std::mem::take(&mut seg.created);
        }
        (chunks, files, new_segment)
    };
    // Looked at after the records are taken: a mark set before a group's
    // first entry was pushed is flushed before that entry is written.
    if shared.sled_first.swap(false, SeqCst) {
        if let Err(e) = shared.health.flush(&shared.sled).await {
            shared
                .state
                .lock()
                .expect("wal lock poisoned")
                .writing
                .clear();
            return Err(e);
        }
    }
    if chunks.is_empty() && !new_segment {
        return Ok(());
    }
    let dir = shared.dir.clone();
    let to_write = chunks.clone();
    let r = shared
        .health
        .guarded(move || {
            for (c, f) in to_write.iter().zip(&files) {
                f.write_all_at(&c.buf, c.at)?;
                f.sync_data()?;
            }
            if new_segment {
                sync_dir(&dir)?;
            }
            Ok(())
        })
        .await;
    let mut st = shared.state.lock().expect("wal lock poisoned");
    st.writing.clear();
    if r.is_ok() {
        if let Some(c) = chunks.last() {
            st.synced = (c.seg, c.at + c.buf.len() as u64);
        }
    }
    r
}

/// Once the active segment is half full, write the next one with zeros
/// and sync it (see `State::spare`), off the append path.
async fn prepare_spare(shared: &Shared) {
    let (id, size) = {
        let mut st = shared.state.lock().expect("wal lock poisoned");
        if st.spare.is_some() || st.preparing.is_some() || st.end < st.active_bytes / 2 {
            return;
        }
        st.preparing = Some(st.active + 1);
        (st.active + 1, (st.active_bytes * 2).min(st.segment_bytes))
    };
    let dir = shared.dir.clone();
    let made = tokio::task::spawn_blocking(move || -> io::Result<File> {
        let f = create_segment(&dir, id)?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < size {
            let n = (size - at).min(zeros.len() as u64);
            f.write_all_at(&zeros[..n as usize], at)?;
            at += n;
        }
        f.sync_all()?;
        sync_dir(&dir)?;
        Ok(f)
    })
    .await
    .map_err(io_err)
    .and_then(|r| r);
    let mut st = shared.state.lock().expect("wal lock poisoned");
    st.preparing = None;
    match made {
        Ok(f) if st.active < id => st.spare = Some((id, f, size)),
        Ok(_) => {
            // The log rolled past it meanwhile.
            let _ = std::fs::remove_file(shared.dir.join(record::file_name(id)));
        }
        Err(e) => {
            tracing::warn!(error = %e, segment = id, "log: preparing the next segment failed")
        }
    }
}

/// Delete the oldest segments that are dead and whose death is synced
/// (after a sled flush: its purge points stand for their records). When
/// there are many segments and the oldest has few live entries, rewrite
/// the groups that keep it alive, so it dies by the next round.
async fn collect_garbage(shared: &Shared) -> io::Result<()> {
    let dead: Vec<u64> = {
        let mut st = shared.state.lock().expect("wal lock poisoned");
        if !std::mem::take(&mut st.garbage) {
            return Ok(());
        }
        let synced = st.synced;
        let dead: Vec<u64> = st
            .segments
            .iter()
            .take_while(|(&id, s)| {
                // Wholly synced (no record of it still pending), and what
                // emptied it (rewritten copies included) synced too.
                // (A segment that never held an entry has no `died_at`.)
                id < synced.0 && s.live == 0 && s.died_at.is_none_or(|d| d <= synced)
            })
            .map(|(&id, _)| id)
            .collect();
        let mut again = false;
        if st.segments.len() - dead.len() > KEEP_SEGMENTS {
            let (&oldest, seg) = st.segments.iter().nth(dead.len()).expect("counted");
            if oldest < st.active && seg.live > 0 && seg.live <= RELOCATE_MAX {
                relocate(&mut st, oldest)?;
                again = true;
            }
        }
        // A dead segment that must wait (its death not yet synced, or an
        // older one still alive): look again after the next round.
        again |= st
            .segments
            .iter()
            .any(|(id, s)| *id < st.active && s.live == 0 && !dead.contains(id));
        st.garbage |= again;
        dead
    };
    if dead.is_empty() {
        return Ok(());
    }
    shared.health.flush(&shared.sled).await?;
    {
        let mut st = shared.state.lock().expect("wal lock poisoned");
        for id in &dead {
            st.segments.remove(id);
        }
    }
    for id in &dead {
        match std::fs::remove_file(shared.dir.join(record::file_name(*id))) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    // A deleted segment back after a power loss would replay stale records.
    sync_dir(&shared.dir)?;
    tracing::debug!(segments = dead.len(), "log: deleted dead segments");
    Ok(())
}

/// Append again, whole, the log of every group with an entry in segment
/// `seg`: replay sees the copy replace the old one (an entry at or below
/// a group's last replaces from there on).
fn relocate(st: &mut State, seg: u64) -> io::Result<()> {
    let groups: Vec<u64> = st
        .groups
        .iter()
        .filter(|(_, g)| g.locs.iter().any(|l| l.seg == seg))
        .map(|(&id, _)| id)
        .collect();
    for group in &groups {
        let g = &st.groups[group];
        let (first, n, last, purged) = (g.first, g.locs.len() as u64, g.last, g.purged);
        let bytes: Vec<Arc<[u8]>> = (first..first + n)
            .map(|i| st.source(g, i).bytes())
            .collect::<io::Result<_>>()?;
        // Remove the group, then append it anew from its first entry.
        st.drop_mem(*group);
        for (k, b) in bytes.into_iter().enumerate() {
            let index = first + k as u64;
            let loc = st.push(Kind::Entry, *group, index, &b)?;
            st.add_loc(*group, index, loc, Some(b), None)?;
        }
        let g = st.groups.get_mut(group).expect("appended");
        g.last = last;
        g.purged = purged;
        st.trim_cache(*group);
    }
    tracing::debug!(
        segment = seg,
        groups = groups.len(),
        "log: rewrote the live entries of an old segment"
    );
    Ok(())
}
