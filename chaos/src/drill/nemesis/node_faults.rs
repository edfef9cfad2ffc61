//! Faults that change how one node behaves rather than what reaches it:
//! its leader clock skewed, its timers run fast or slow, its disk full
//! (all through the node's skew file, `drill::skew`), its fsyncs failing
//! (the storage's fault hook file).

use seatfence_raft::storage::health::FAULT_FSYNC_FILE;

use super::{Nemesis, Undo};

impl Nemesis {
    /// The clocks of a hot group's voters skewed by `ms`.
    pub(super) async fn skew_clocks(&self, ms: i64) -> anyhow::Result<(String, Undo)> {
        let (ev, g, _, voters) = self.hot_group().await?;
        for v in &voters {
            self.skews.set_clock(*v, ms)?;
        }
        Ok((
            format!("clocks of group {g} ({ev}) voters {voters:?} skewed {ms:+} ms"),
            Undo::Skew(voters),
        ))
    }

    /// The timers of a hot group's leader run at `permille` / 1000 of the
    /// wall clock's speed (elections, heartbeats, its lease, hold expiry
    /// ticks, payment sweeps).
    pub(super) async fn skew_timers(&self, permille: u32) -> anyhow::Result<(String, Undo)> {
        let (ev, g, l, _) = self.hot_group().await?;
        self.skews.set_rate(l, permille)?;
        Ok((
            format!(
                "timers of node {l} (leader of group {g}, {ev}) at x{}",
                permille as f64 / 1000.0
            ),
            Undo::Timers(l),
        ))
    }

    /// A hot group's leader acts as if its disk were full (the chaos hook;
    /// `tests/t42_storage.rs` fills a real one).
    pub(super) async fn fill_disk(&self) -> anyhow::Result<(String, Undo)> {
        let (ev, g, l, _) = self.hot_group().await?;
        self.skews.set_full(l, true)?;
        Ok((
            format!("disk of node {l} (leader of group {g}, {ev}) full"),
            Undo::DiskFull(l),
        ))
    }

    /// A hot group's leader's flushes fail from now on: at its next one
    /// it acknowledges none of the writes that flush covered and exits
    /// (`seatfence_raft::storage::health`). Only builds with the
    /// `fault-injection` feature read the hook file (test builds; a
    /// release build carries on, and the heal finds it running).
    pub(super) async fn fail_fsync(&self) -> anyhow::Result<(String, Undo)> {
        let (ev, g, l, _) = self.hot_group().await?;
        std::fs::write(self.data_dir(l)?.join(FAULT_FSYNC_FILE), b"")?;
        Ok((
            format!("fsyncs of node {l} (leader of group {g}, {ev}) fail"),
            Undo::FsyncFail(l),
        ))
    }

    /// Flushes succeed again; the node, if its failed flush ended it, is
    /// started again on its data. `Some(why)` when it had kept running:
    /// the fault had no effect (a build whose storage ignores the hook, or
    /// a node that flushed nothing), and coverage must not count it.
    pub(super) fn heal_fsync(&self, node: u64) -> anyhow::Result<Option<String>> {
        match std::fs::remove_file(self.data_dir(node)?.join(FAULT_FSYNC_FILE)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        let mut c = self.cluster.lock().expect("cluster lock poisoned");
        match c.exited(node) {
            Ok(Some(_)) => self.start(&mut c, node).map(|()| None),
            Ok(None) => Ok(Some(format!(
                "node {node} was still running at the heal: no flush of its failed \
                 (a build without the storage fault hook, or no write reached it)"
            ))),
            // Stopped by another fault that restarts it itself.
            Err(_) => Ok(None),
        }
    }
}
