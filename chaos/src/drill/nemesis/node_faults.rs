//! Faults that change how one node behaves rather than what reaches it:
//! its leader clock skewed, its timers run fast or slow, its disk full
//! (all through the node's skew file, `drill::skew`).

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
}
