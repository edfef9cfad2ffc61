//! The bytes of the node-wide log: segment files of checksummed records.
//!
//! ```text
//!  wal/00000000000000000007.seg:  record record record …
//!  record: len u32 LE | crc32 u32 LE (of the body) | body (len bytes)
//!  body:   kind u8 | group u64 LE | index u64 LE | payload
//!    Entry    (1): index = the entry's, payload = the entry (format envelope + LZ4)
//!    Truncate (2): every entry of the group at index or above is gone
//!    Purge    (3): every entry at index or below is gone; payload = the
//!                  purged log id (format envelope)
//!    Drop     (4): the group's log is gone
//! ```
//! A scan stops at the first record that is incomplete or fails its
//! checksum: what follows was never acknowledged (a torn write) when it is
//! the end of the last segment.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// Bytes before a record's body: its length and checksum.
pub(super) const HEADER: usize = 8;
/// Bytes of a body before its payload: kind, group, index.
pub(super) const BODY_FIXED: usize = 17;
/// No record body is larger (an entry is far smaller; a larger length
/// read from disk is garbage).
pub(super) const MAX_BODY: usize = 256 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    Entry = 1,
    Truncate = 2,
    Purge = 3,
    Drop = 4,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Entry,
            2 => Kind::Truncate,
            3 => Kind::Purge,
            4 => Kind::Drop,
            _ => return None,
        })
    }
}

/// Append one record to `buf`; returns the offset of its payload in `buf`.
pub(super) fn put(buf: &mut Vec<u8>, kind: Kind, group: u64, index: u64, payload: &[u8]) -> usize {
    let start = buf.len();
    let body = BODY_FIXED + payload.len();
    buf.reserve(HEADER + body);
    buf.extend_from_slice(&(body as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.push(kind as u8);
    buf.extend_from_slice(&group.to_le_bytes());
    buf.extend_from_slice(&index.to_le_bytes());
    buf.extend_from_slice(payload);
    let crc = crc32fast::hash(&buf[start + HEADER..]);
    buf[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
    start + HEADER + BODY_FIXED
}

/// One record read back.
#[derive(Debug)]
pub(super) struct Record<'a> {
    pub kind: Kind,
    pub group: u64,
    pub index: u64,
    pub payload: &'a [u8],
    /// Offset of the payload in the segment.
    pub payload_at: usize,
}

/// The records of a segment's bytes, up to the first that is incomplete or
/// damaged, and the offset where the good ones end.
pub(super) fn scan(bytes: &[u8]) -> (Vec<Record<'_>>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((rec, next)) = read_one(bytes, at) {
        out.push(rec);
        at = next;
    }
    (out, at)
}

fn read_one(bytes: &[u8], at: usize) -> Option<(Record<'_>, usize)> {
    let header = bytes.get(at..at + HEADER)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
    if !(BODY_FIXED..=MAX_BODY).contains(&len) {
        return None;
    }
    let body = bytes.get(at + HEADER..at + HEADER + len)?;
    if crc32fast::hash(body) != crc {
        return None;
    }
    let kind = Kind::from_u8(body[0])?;
    let group = u64::from_le_bytes(body[1..9].try_into().ok()?);
    let index = u64::from_le_bytes(body[9..17].try_into().ok()?);
    let rec = Record {
        kind,
        group,
        index,
        payload: &body[BODY_FIXED..],
        payload_at: at + HEADER + BODY_FIXED,
    };
    Some((rec, at + HEADER + len))
}

/// The file name of segment `id`: zero-padded, so names sort as ids do.
pub(super) fn file_name(id: u64) -> String {
    format!("{id:020}.seg")
}

/// The id of a segment file name, if it is one.
pub(super) fn parse_name(name: &str) -> Option<u64> {
    let id = name.strip_suffix(".seg")?;
    (id.len() == 20).then(|| id.parse().ok()).flatten()
}

/// Create segment file `id` in `dir` (it must not exist).
pub(super) fn create_segment(dir: &Path, id: u64) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(dir.join(file_name(id)))
}

/// Make `dir`'s entries (files created, renamed, removed) durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

pub(super) fn corrupt(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_scan_stops_at_a_torn_or_damaged_one() {
        let mut buf = Vec::new();
        let p1 = put(&mut buf, Kind::Entry, 7, 1, b"first");
        let p2 = put(&mut buf, Kind::Purge, 7, 1, b"id");
        let whole = buf.len();
        put(&mut buf, Kind::Entry, 9, 2, b"third");
        let (recs, end) = scan(&buf);
        assert_eq!(recs.len(), 3);
        assert_eq!(end, buf.len());
        assert_eq!(
            (recs[0].kind, recs[0].group, recs[0].index),
            (Kind::Entry, 7, 1)
        );
        assert_eq!(&buf[p1..p1 + 5], b"first");
        assert_eq!(recs[1].payload_at, p2);
        assert_eq!(recs[2].payload, b"third");

        // Torn: the last record cut short anywhere.
        for cut in whole..buf.len() {
            let (recs, end) = scan(&buf[..cut]);
            assert_eq!((recs.len(), end), (2, whole), "cut at {cut}");
        }
        // Damaged: one flipped bit in the last record's payload.
        let mut bad = buf.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(scan(&bad).1, whole);
        // Zeros after the end (a file extended but never written).
        let mut zeros = buf[..whole].to_vec();
        zeros.extend([0u8; 64]);
        assert_eq!(scan(&zeros).1, whole);
    }

    #[test]
    fn segment_names_sort_as_ids() {
        assert_eq!(parse_name(&file_name(42)), Some(42));
        assert!(file_name(9) < file_name(10));
        assert_eq!(parse_name("42.seg"), None);
        assert_eq!(parse_name("snapshots"), None);
    }
}
