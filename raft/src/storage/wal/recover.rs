//! Opening the log: every segment replayed in order into memory, a torn
//! end cut off; and the one-time import of the layout before it.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::record::{self, Kind};
use super::record::{create_segment, sync_dir};
use super::{Loc, Segment, State, FIRST_SEGMENT_BYTES};
use crate::storage::decode;
use crate::types::LogId;

/// Write `entries` (group, index, encoded entry) as the only segment of a
/// new log in `dir`: the move from the layout that kept entries in sled.
/// Written whole in `dir`.tmp, synced, then renamed, so a crash leaves
/// either no log (the move runs again) or the whole one (the caller only
/// clears sled's copy). Returns how many were written.
pub(crate) fn import(
    dir: &Path,
    entries: impl Iterator<Item = io::Result<(u64, u64, Vec<u8>)>>,
) -> io::Result<usize> {
    let tmp = dir.with_extension("tmp");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp)?;
    let mut buf = Vec::new();
    let mut n = 0;
    for e in entries {
        let (group, index, bytes) = e?;
        record::put(&mut buf, Kind::Entry, group, index, &bytes);
        n += 1;
    }
    let f = create_segment(&tmp, 0)?;
    f.write_all_at(&buf, 0)?;
    f.sync_all()?;
    sync_dir(&tmp)?;
    std::fs::rename(&tmp, dir)?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(n)
}

/// Replay every segment in `dir` into a fresh state.
pub(super) fn recover(dir: &Path, segment_bytes: u64) -> io::Result<State> {
    let mut ids: Vec<u64> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().to_str().and_then(record::parse_name))
        .collect();
    ids.sort_unstable();
    let mut st = State::empty(dir, segment_bytes);
    for (n, &id) in ids.iter().enumerate() {
        let path = dir.join(record::file_name(id));
        let bytes = std::fs::read(&path)?;
        let (records, good) = record::scan(&bytes);
        // Zeros after the last record: the unused part of a zeroed segment.
        let torn = bytes[good..].iter().any(|&b| b != 0);
        if torn {
            let later_has_records = ids[n + 1..].iter().any(|&later| {
                std::fs::read(dir.join(record::file_name(later)))
                    .is_ok_and(|b| !record::scan(&b).0.is_empty())
            });
            if later_has_records {
                return Err(record::corrupt(format!(
                    "{}: a damaged record at byte {good} of {}, and later segments hold records: the log is corrupt (not a torn write); refusing to start rather than forget acknowledged entries",
                    path.display(),
                    bytes.len()
                )));
            }
        }
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        st.segments.insert(id, Segment::new(file));
        st.active = id;
        st.end = good as u64;
        st.active_bytes = (bytes.len() as u64)
            .max(FIRST_SEGMENT_BYTES)
            .min(segment_bytes);
        for r in &records {
            let loc = Loc {
                seg: id,
                at: r.payload_at as u64,
                len: r.payload.len() as u32,
            };
            match r.kind {
                Kind::Entry => st.add_loc(r.group, r.index, loc, None, None)?,
                Kind::Truncate => st.truncate_mem_quiet(r.group, r.index),
                Kind::Purge => {
                    let id: LogId = decode(r.payload)?;
                    st.purge_mem(r.group, id);
                }
                Kind::Drop => st.drop_mem(r.group),
            }
        }
        if torn {
            tracing::warn!(
                segment = %path.display(),
                kept = good,
                cut = bytes.len() - good,
                "log: a torn write at the end (never acknowledged): cut off"
            );
            let f = &st.segments[&id].file;
            f.set_len(good as u64)?;
            f.sync_all()?;
            // Later segments are empty (checked above): remove them.
            for &later in &ids[n + 1..] {
                std::fs::remove_file(dir.join(record::file_name(later)))?;
            }
            break;
        }
    }
    // What a killed process wrote may still be only in the page cache:
    // synced now, before anything replayed from it is taken as durable.
    for seg in st.segments.values() {
        seg.file.sync_all()?;
    }
    sync_dir(dir)?;
    st.synced = (st.active, st.end);
    // A segment nothing lives in (all purged, or a zeroed spare left by a
    // crash) goes at the first look.
    for seg in st.segments.values_mut() {
        if seg.live == 0 {
            seg.died_at = Some((0, 0));
        }
    }
    // Each group's last log id, from its last entry.
    let groups: Vec<u64> = st.groups.keys().copied().collect();
    for group in groups {
        st.reread_last(group)?;
    }
    st.garbage = true;
    Ok(st)
}

impl State {
    /// `truncate_mem` during replay: the new last log id is computed once
    /// at the end, so nothing is read here.
    pub(super) fn truncate_mem_quiet(&mut self, group: u64, from: u64) {
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        let keep = from.saturating_sub(g.first).min(g.locs.len() as u64) as usize;
        let gone: Vec<Loc> = g.locs.drain(keep..).collect();
        g.cache.clear();
        g.cache_bytes = 0;
        for loc in gone {
            self.release(loc);
        }
    }
}
