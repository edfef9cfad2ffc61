//! The drill's clock and timer skews: each node follows a skew file in its
//! directory (`MS RATE`: the leader clock's skew in ms, and the rate of its
//! timer clock, `seatfence_raft::timer`). A clock skew and a timer skew may
//! overlap on one node, so both are kept here and written together.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

pub struct Skews {
    files: BTreeMap<u64, PathBuf>,
    /// Per node: clock skew (ms) and timer rate (per mille).
    now: Mutex<BTreeMap<u64, (i64, u32)>>,
}

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
        self.update(node, |s| s.0 = ms)
    }

    /// Run `node`'s timers at `permille` / 1000 of the wall clock's speed.
    pub fn set_rate(&self, node: u64, permille: u32) -> anyhow::Result<()> {
        self.update(node, |s| s.1 = permille)
    }

    /// No skew and normal timers on every node.
    pub fn reset_all(&self) -> anyhow::Result<()> {
        for id in self.files.keys() {
            self.update(*id, |s| *s = (0, NORMAL_RATE))?;
        }
        Ok(())
    }

    fn update(&self, node: u64, f: impl FnOnce(&mut (i64, u32))) -> anyhow::Result<()> {
        let path = self
            .files
            .get(&node)
            .ok_or_else(|| anyhow::anyhow!("no skew file for node {node}"))?;
        let mut now = self.now.lock().expect("skews lock poisoned");
        let s = now.entry(node).or_insert((0, NORMAL_RATE));
        f(s);
        let (ms, permille) = *s;
        std::fs::write(path, format!("{ms} {}\n", permille as f64 / 1000.0))?;
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
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "-700 1.25\n");
        s.set_clock(3, 0).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0 1.25\n");
        s.reset_all().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0 1\n");
        assert!(s.set_rate(4, 800).is_err());
    }
}
