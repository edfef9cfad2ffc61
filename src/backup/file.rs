//! A backup on disk: `manifest.json` and one records file per group.
//!
//! ```text
//!  DIR/manifest.json                       written last (a backup without one is unfinished)
//!  DIR/groups/00000000000000000000.records the directory (group 0)
//!  DIR/groups/<group id, 20 digits>.records  each event group
//!  records file: "SFBACK1\n" then, per record: key length u32 LE | key | value length u32 LE | value
//! ```
//!
//! Keys and values are the group's stored records (values in the
//! versioned data format), so a backup is read back by the same code that
//! reads a data dir. The manifest names each file's SHA-256, record count
//! and size; `verify` checks all three and that every record decodes.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The first bytes of a records file.
pub const MAGIC: &[u8; 8] = b"SFBACK1\n";
/// What `manifest.json`'s `format` says.
pub const MANIFEST_FORMAT: &str = "seatfence-backup";
/// The manifest's layout version.
pub const MANIFEST_VERSION: u32 = 1;
/// No key or value in a records file is larger (a larger length is damage).
const MAX_FIELD: usize = 64 << 20;

/// `manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`MANIFEST_FORMAT`].
    pub format: String,
    /// [`MANIFEST_VERSION`].
    pub version: u32,
    /// This backup's id (a restore is named by it).
    pub backup_id: String,
    /// The backed-up cluster's id (the directory's `cluster_id`).
    pub cluster_id: String,
    /// The release that took it.
    pub release: String,
    /// The newest data format of any record in it: a cluster restoring
    /// it must read that format.
    pub data_format: u8,
    /// When the backup began and ended (ms since the Unix epoch).
    pub started_ms: u64,
    pub finished_ms: u64,
    /// Every group, the directory first.
    pub groups: Vec<GroupEntry>,
    /// Records and bytes in all files.
    pub records: u64,
    pub bytes: u64,
}

/// One group's file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupEntry {
    pub group_id: u64,
    /// `directory` or `event`.
    pub kind: String,
    /// The event it holds (event groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// The file, relative to the backup's directory.
    pub file: String,
    /// The committed log index and term the group was read at.
    pub applied_index: u64,
    pub term: u64,
    pub records: u64,
    pub bytes: u64,
    pub sha256: String,
}

/// The file name of group `g`'s records.
pub fn group_file(g: u64) -> String {
    format!("groups/{g:020}.records")
}

/// Writes one records file, hashing and counting as it goes.
pub struct RecordsWriter {
    out: BufWriter<File>,
    hash: Sha256,
    pub records: u64,
    pub bytes: u64,
    /// The newest data format among the values written.
    pub data_format: u8,
}

impl RecordsWriter {
    /// Create `path` (it must not exist).
    pub fn create(path: &Path) -> anyhow::Result<RecordsWriter> {
        let f = File::options()
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("create {}", path.display()))?;
        let mut w = RecordsWriter {
            out: BufWriter::with_capacity(1 << 20, f),
            hash: Sha256::new(),
            records: 0,
            bytes: 0,
            data_format: 0,
        };
        w.put(MAGIC)?;
        Ok(w)
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.hash.update(b);
        self.bytes += b.len() as u64;
        self.out.write_all(b)
    }

    /// Append one record.
    pub fn record(&mut self, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
        self.put(&(key.len() as u32).to_le_bytes())?;
        self.put(key)?;
        self.put(&(value.len() as u32).to_le_bytes())?;
        self.put(value)?;
        self.records += 1;
        if let Some(v) = value.first() {
            // Plain key→value values are not enveloped; they name no format.
            if seatfence_core::format::check(*v).is_ok() {
                self.data_format = self.data_format.max(*v);
            }
        }
        Ok(())
    }

    /// Flush and fsync; the file's SHA-256 (hex).
    pub fn finish(mut self) -> anyhow::Result<(String, u64, u64, u8)> {
        self.out.flush()?;
        self.out.get_ref().sync_all()?;
        let hex = hex(&self.hash.finalize());
        Ok((hex, self.records, self.bytes, self.data_format))
    }
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Reads one records file, hashing as it goes.
pub struct RecordsReader {
    input: BufReader<File>,
    hash: Sha256,
    path: PathBuf,
    pub bytes: u64,
}

impl RecordsReader {
    /// Open `path` and check its magic.
    pub fn open(path: &Path) -> anyhow::Result<RecordsReader> {
        let f = File::open(path).with_context(|| format!("open {}", path.display()))?;
        let mut r = RecordsReader {
            input: BufReader::with_capacity(1 << 20, f),
            hash: Sha256::new(),
            path: path.to_path_buf(),
            bytes: 0,
        };
        let mut magic = [0u8; 8];
        r.take(&mut magic)
            .and_then(|()| {
                (&magic == MAGIC)
                    .then_some(())
                    .ok_or_else(|| anyhow::anyhow!("bad magic"))
            })
            .with_context(|| {
                format!("{} is not a seatfence backup records file", path.display())
            })?;
        Ok(r)
    }

    fn take(&mut self, buf: &mut [u8]) -> anyhow::Result<()> {
        self.input.read_exact(buf)?;
        self.hash.update(&*buf);
        self.bytes += buf.len() as u64;
        Ok(())
    }

    fn field(&mut self) -> anyhow::Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.take(&mut len)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FIELD {
            bail!("{}: a field of {len} bytes (damaged)", self.path.display());
        }
        let mut v = vec![0u8; len];
        self.take(&mut v)?;
        Ok(v)
    }

    /// The next record; `None` at the end of the file.
    pub fn next_record(&mut self) -> anyhow::Result<Option<(Vec<u8>, Vec<u8>)>> {
        if self.input.fill_buf()?.is_empty() {
            return Ok(None);
        }
        let key = self
            .field()
            .with_context(|| format!("{}: truncated", self.path.display()))?;
        let value = self
            .field()
            .with_context(|| format!("{}: truncated", self.path.display()))?;
        Ok(Some((key, value)))
    }

    /// The SHA-256 (hex) of everything read.
    pub fn sha256(self) -> String {
        hex(&self.hash.finalize())
    }

    /// Check what was read against the manifest's entry `g` (once the
    /// file has been read to its end).
    pub fn check(self, g: &GroupEntry, records: u64) -> anyhow::Result<()> {
        let path = self.path.clone();
        let bytes = self.bytes;
        let sha = self.sha256();
        if sha != g.sha256 {
            bail!(
                "{}: SHA-256 {sha}, the manifest says {} (damaged)",
                path.display(),
                g.sha256
            );
        }
        if (records, bytes) != (g.records, g.bytes) {
            bail!(
                "{}: {records} records in {bytes} bytes, the manifest says {} in {}",
                path.display(),
                g.records,
                g.bytes
            );
        }
        Ok(())
    }
}

use std::io::BufRead;

/// Read `DIR/manifest.json`.
pub fn read_manifest(dir: &Path) -> anyhow::Result<Manifest> {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "read {} (a backup without a manifest is unfinished)",
            path.display()
        )
    })?;
    let m: Manifest =
        serde_json::from_str(&text).with_context(|| format!("{} is damaged", path.display()))?;
    if m.format != MANIFEST_FORMAT {
        bail!("{} is not a seatfence backup manifest", path.display());
    }
    if m.version > MANIFEST_VERSION {
        bail!(
            "{}: backup layout v{} is newer than this binary reads (v{MANIFEST_VERSION})",
            path.display(),
            m.version
        );
    }
    // A file is named by its group, under `groups/`: never a path of the
    // manifest's choosing (`/etc/...`, `../x`).
    for g in &m.groups {
        if g.file != group_file(g.group_id) {
            bail!(
                "{}: group {} names file {:?}, not {:?} (a manifest names only its own files)",
                path.display(),
                g.group_id,
                g.file,
                group_file(g.group_id)
            );
        }
    }
    Ok(m)
}

/// Write `DIR/manifest.json` atomically (a temporary file, fsync, rename).
pub fn write_manifest(dir: &Path, m: &Manifest) -> anyhow::Result<()> {
    let tmp = dir.join("manifest.json.tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(serde_json::to_string_pretty(m)?.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join("manifest.json"))?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(file: &str) -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT.into(),
            version: MANIFEST_VERSION,
            backup_id: "b".into(),
            cluster_id: "c".into(),
            release: "r".into(),
            data_format: 1,
            started_ms: 0,
            finished_ms: 0,
            groups: vec![GroupEntry {
                group_id: 3,
                kind: "event".into(),
                event_id: None,
                file: file.into(),
                applied_index: 0,
                term: 0,
                records: 0,
                bytes: 0,
                sha256: String::new(),
            }],
            records: 0,
            bytes: 0,
        }
    }

    #[test]
    fn a_manifest_names_only_its_own_files() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["../x", "/etc/passwd", "groups/../../x", &group_file(4)] {
            write_manifest(dir.path(), &manifest(bad)).unwrap();
            let e = format!("{:#}", read_manifest(dir.path()).unwrap_err());
            assert!(e.contains("names file"), "{bad}: {e}");
        }
        write_manifest(dir.path(), &manifest(&group_file(3))).unwrap();
        assert!(read_manifest(dir.path()).is_ok());
    }
}
