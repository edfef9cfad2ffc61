//! The drill's clock and timer skews and forced full disks: each node
//! follows a skew file in its directory (`MS RATE FULL`: the leader clock's
//! skew in ms, the rate of its timer clock, `seatfence_raft::timer`, and 1
//! to act as if its disk were full). These faults may overlap on one node,
//! so all three are kept here and written together.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

pub struct Skews {
    files: BTreeMap<u64, PathBuf>,
    /// Per node: clock skew (ms), timer rate (per mille), disk full.
    now: Mutex<BTreeMap<u64, Skew>>,
}

#[derive(Clone, Copy)]
struct Skew {
    ms: i64,
    permille: u32,
    full: bool,
}

const NONE: Skew = Skew {
    ms: 0,
    permille: NORMAL_RATE,
    full: false,
};

/// The normal timer rate, per mille.
pub const NORMAL_RATE: u32 = 1_000;

impl Skews {
    pub fn new(files: BTreeMap<u64, PathBuf>) -> Skews {
        Skews {
            files,
            now: Mutex::new(BTreeMap::new()),
        }
    }

    /// Skew `node`'s leader clock by `ms` (0: none).
    pub fn set_clock(&self, node: u64, ms: i64) -> anyhow::Result<()> {
        self.update(node, |s| s.ms = ms)
    }

    /// Run `node`'s timers at `permille` / 1000 of the wall clock's speed.
    pub fn set_rate(&self, node: u64, permille: u32) -> anyhow::Result<()> {
        self.update(node, |s| s.permille = permille)
    }

    /// Make `node` act as if its disk were full (or not).
    pub fn set_full(&self, node: u64, full: bool) -> anyhow::Result<()> {
        self.update(node, |s| s.full = full)
    }

    /// No skew and normal timers on every node.
    pub fn reset_all(&self) -> anyhow::Result<()> {
        for id in self.files.keys() {
            self.update(*id, |s| *s = NONE)?;
        }
        Ok(())
    }

    fn update(&self, node: u64, f: impl FnOnce(&mut Skew)) -> anyhow::Result<()> {
        let path = self
            .files
            .get(&node)
            .ok_or_else(|| anyhow::anyhow!("no skew file for node {node}"))?;
        let mut now = self.now.lock().expect("skews lock poisoned");
        let s = now.entry(node).or_insert(NONE);
        f(s);
        let rate = s.permille as f64 / 1000.0;
        // Written aside and renamed: the node re-reads the file every
        // 100 ms and must never see it empty (no skew, not full).
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{} {rate} {}\n", s.ms, u8::from(s.full)))?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_and_timer_skews_share_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skew");
        let s = Skews::new([(3, path.clone())].into());
        s.set_clock(3, -700).unwrap();
        s.set_rate(3, 1_250).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "-700 1.25 0\n");
        s.set_clock(3, 0).unwrap();
        s.set_full(3, true).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0 1.25 1\n");
        s.reset_all().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0 1 0\n");
        assert!(s.set_rate(4, 800).is_err());
    }
}
