use super::*;
use crate::types::Entry;
use openraft::entry::RaftEntry;
use std::fs::OpenOptions;

fn id(term: u64, index: u64) -> LogId {
    LogId::new_term_index(term, index)
}

fn encoded(term: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<(LogId, Vec<u8>)> {
    indexes
        .map(|i| {
            let e = Entry::new_blank(id(term, i));
            (e.log_id(), crate::codec::encode_compressed(&e).unwrap())
        })
        .collect()
}

fn open(dir: &Path, segment_bytes: u64) -> Wal {
    let sled = sled::Config::new().temporary(true).open().unwrap();
    Wal::open_sized(&dir.join("wal"), Health::new(dir), sled, segment_bytes).unwrap()
}

fn indexes(wal: &Wal, group: u64) -> Vec<(u64, u64)> {
    wal.read(group, 0, u64::MAX)
        .unwrap()
        .iter()
        .map(|e| (e.log_id().leader_id.term, e.index()))
        .collect()
}

/// Append, truncate, purge and drop, then reopen: the replayed log is the
/// one memory had.
#[tokio::test]
async fn a_reopened_log_is_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path(), SEGMENT_BYTES);
    wal.append(1, encoded(1, 1..=10)).unwrap();
    wal.append(2, encoded(1, 1..=3)).unwrap();
    wal.append(3, encoded(1, 1..=2)).unwrap();
    wal.truncate(1, 8).unwrap(); // 1..=7 left
    wal.append(1, encoded(2, 8..=9)).unwrap(); // term 2 from 8
    wal.purge(1, id(1, 3)).unwrap(); // 4..=9 left
    wal.drop_group(3).unwrap();
    wal.flush().await.unwrap();
    let before = (indexes(&wal, 1), indexes(&wal, 2), wal.log_state(1));
    assert_eq!(before.0.first(), Some(&(1, 4)));
    assert_eq!(before.0.last(), Some(&(2, 9)));
    assert_eq!(wal.log_state(1), (Some(id(1, 3)), Some(id(2, 9))));
    drop(wal);

    let wal = open(dir.path(), SEGMENT_BYTES);
    assert_eq!(
        (indexes(&wal, 1), indexes(&wal, 2), wal.log_state(1)),
        before
    );
    assert_eq!(indexes(&wal, 3), vec![]);
    let mut groups = wal.groups();
    groups.sort();
    assert_eq!(groups, vec![1, 2]);
    // A range read.
    let some: Vec<u64> = wal
        .read(1, 5, 7)
        .unwrap()
        .iter()
        .map(|e| e.index())
        .collect();
    assert_eq!(some, vec![5, 6]);
    // Purged beyond the end: nothing left, the purge point is the last id.
    wal.purge(2, id(1, 5)).unwrap();
    assert_eq!(wal.log_state(2), (Some(id(1, 5)), Some(id(1, 5))));
    wal.append(2, encoded(1, 6..=6)).unwrap();
    assert_eq!(indexes(&wal, 2), vec![(1, 6)]);
}

/// The last record cut anywhere (a crash mid-write): reopening keeps every
/// record before it, cuts the rest off, and the log goes on from there.
#[tokio::test]
async fn a_torn_last_segment_is_cut_at_its_last_whole_record() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path(), SEGMENT_BYTES);
    wal.append(1, encoded(1, 1..=5)).unwrap();
    wal.flush().await.unwrap();
    let seg = dir.path().join("wal").join(record::file_name(0));
    let whole = std::fs::metadata(&seg).unwrap().len();
    wal.append(1, encoded(1, 6..=6)).unwrap();
    wal.flush().await.unwrap();
    drop(wal);
    let full = std::fs::metadata(&seg).unwrap().len();
    for cut in [whole + 1, whole + 7, whole + 20, full - 1] {
        let f = OpenOptions::new().write(true).open(&seg).unwrap();
        f.set_len(cut).unwrap();
        drop(f);
        let wal = open(dir.path(), SEGMENT_BYTES);
        assert_eq!(wal.log_state(1).1, Some(id(1, 5)), "cut at {cut}");
        assert_eq!(std::fs::metadata(&seg).unwrap().len(), whole);
        wal.append(1, encoded(1, 6..=6)).unwrap();
        wal.flush().await.unwrap();
        drop(wal);
        let wal = open(dir.path(), SEGMENT_BYTES);
        assert_eq!(indexes(&wal, 1).len(), 6);
        drop(wal);
    }
}

/// Damage in a segment that later segments follow is not a torn write:
/// the log refuses to open instead of dropping acknowledged entries.
#[tokio::test]
async fn damage_before_later_records_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path(), 256);
    for i in 1..=20 {
        wal.append(1, encoded(1, i..=i)).unwrap();
    }
    wal.flush().await.unwrap();
    assert!(wal.segment_ids().len() > 2);
    drop(wal);
    let seg = dir.path().join("wal").join(record::file_name(0));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[30] ^= 0xff;
    std::fs::write(&seg, bytes).unwrap();
    let sled = sled::Config::new().temporary(true).open().unwrap();
    let e = Wal::open_sized(&dir.path().join("wal"), Health::new(dir.path()), sled, 256)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("corrupt"), "{e}");
}

/// Purged segments are deleted; a group that wrote once long ago does not
/// keep its old segment alive (its entries are rewritten), and survives a
/// reopen.
#[tokio::test]
async fn dead_segments_are_deleted_and_a_quiet_group_is_carried_forward() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path(), 4096);
    wal.append(9, encoded(1, 1..=2)).unwrap(); // the quiet group
    for i in 1..=2_000 {
        wal.append(1, encoded(1, i..=i)).unwrap();
        if i % 50 == 0 {
            wal.purge(1, id(1, i - 10)).unwrap();
            wal.flush().await.unwrap();
        }
    }
    wal.flush().await.unwrap();
    wal.flush().await.unwrap();
    let ids = wal.segment_ids();
    assert!(
        ids.len() <= KEEP_SEGMENTS + 2,
        "{} segments left: {ids:?}",
        ids.len()
    );
    assert!(!ids.contains(&0), "the quiet group's first segment is gone");
    // On disk: the segments, and perhaps the zeroed spare after them.
    let on_disk: Vec<u64> = std::fs::read_dir(dir.path().join("wal"))
        .unwrap()
        .filter_map(|e| record::parse_name(e.unwrap().file_name().to_str()?))
        .collect();
    // (A spare being zeroed, or one the log rolled past and deletes when
    // zeroed, may be there too: they are never among the old ones.)
    assert!(
        on_disk.iter().all(|id| ids.contains(id) || id > &ids[0]),
        "{on_disk:?} against {ids:?}"
    );
    assert!(
        on_disk.len() <= ids.len() + 2,
        "{on_disk:?} against {ids:?}"
    );
    assert_eq!(indexes(&wal, 9), vec![(1, 1), (1, 2)]);
    let busy = indexes(&wal, 1);
    drop(wal);
    let wal = open(dir.path(), 4096);
    assert_eq!(indexes(&wal, 9), vec![(1, 1), (1, 2)]);
    assert_eq!(indexes(&wal, 1), busy);
    assert_eq!(wal.log_state(1).0, Some(id(1, 1_990)));
}

/// An append's round answers only after the bytes are synced: a failed
/// sync fails the round and every later one (see `health`).
#[tokio::test]
async fn a_failed_sync_fails_the_round_and_every_later_one() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path(), SEGMENT_BYTES);
    wal.append(1, encoded(1, 1..=1)).unwrap();
    wal.flush().await.unwrap();
    std::fs::write(dir.path().join(super::super::health::FAULT_FSYNC_FILE), b"").unwrap();
    wal.append(1, encoded(1, 2..=2)).unwrap();
    assert!(wal.flush().await.is_err());
    // A round with nothing left to write still refuses: an append whose
    // records the failed round took may be waiting on this one.
    let e = wal.flush().await.unwrap_err();
    assert!(e.to_string().contains("failed earlier"), "{e}");
    std::fs::remove_file(dir.path().join(super::super::health::FAULT_FSYNC_FILE)).unwrap();
    wal.append(1, encoded(1, 3..=3)).unwrap();
    let e = wal.flush().await.unwrap_err();
    assert!(e.to_string().contains("failed earlier"), "{e}");
}

/// A data dir of the layout before the node-wide log (entries in sled's
/// `log` tree) is moved into the log at open: every entry readable, the
/// old tree emptied.
#[tokio::test]
async fn entries_kept_in_sled_by_the_old_layout_are_moved_into_the_log() {
    use crate::storage::{FlushMode, LogStore, NodeDb};
    use openraft::storage::{RaftLogReader, RaftLogStorage};
    use seatfence_core::GroupId;
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::Config::new()
            .path(dir.path().join("sled"))
            .segment_size(4 * 1024 * 1024)
            .open()
            .unwrap();
        let (log, meta) = (db.open_tree("log").unwrap(), db.open_tree("meta").unwrap());
        let prefix = 5u64.to_be_bytes();
        for i in 1..=3u64 {
            let key = [&prefix[..], &i.to_be_bytes()].concat();
            let e = Entry::new_blank(id(1, i));
            log.insert(key, crate::codec::encode_compressed(&e).unwrap())
                .unwrap();
        }
        meta.insert([&prefix[..], b"created"].concat(), &[][..])
            .unwrap();
        db.flush().unwrap();
    }
    let db = NodeDb::open(dir.path(), FlushMode::Shared).unwrap();
    let mut log = LogStore::open(&db, GroupId(5)).unwrap();
    assert_eq!(
        log.get_log_state().await.unwrap().last_log_id,
        Some(id(1, 3))
    );
    let got: Vec<u64> = log
        .try_get_log_entries(1..=3)
        .await
        .unwrap()
        .iter()
        .map(|e| e.index())
        .collect();
    assert_eq!(got, vec![1, 2, 3]);
    assert!(dir.path().join("wal").join(record::file_name(0)).exists());
    assert_eq!(
        db.stored_groups().into_iter().collect::<Vec<_>>(),
        vec![GroupId(5)]
    );
}
