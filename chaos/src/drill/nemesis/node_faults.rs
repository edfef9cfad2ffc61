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

// Wiped disks (`wipe-disk`).
impl Nemesis {
    /// Start a stopped node again on its data dir, with `--rejoin-empty`
    /// if `wipe-disk` deleted it.
    pub(super) fn start(
        &self,
        c: &mut seatfence_testkit::cluster::LocalCluster,
        id: u64,
    ) -> anyhow::Result<()> {
        if self
            .wiped
            .lock()
            .expect("nemesis lock poisoned")
            .contains_key(&id)
        {
            c.restart_with(id, &["--rejoin-empty"])
        } else {
            c.restart(id)
        }
    }

    /// A follower of a hot group (else any node that is not a directory
    /// voter, lost or the group's leader) SIGKILLed and its data dir
    /// deleted; started again at heal with `--rejoin-empty`, so the
    /// checkers judge a sale across a voter that forgot its log.
    pub(super) async fn wipe_disk(&self) -> anyhow::Result<(String, Undo)> {
        // Two voters of one group wiped before the first is back is a
        // majority's log lost: no leader, nothing to repair from, by
        // design. One rejoin at a time, as an operator replaces disks.
        let mut waited = 0;
        while let Some(n) = self.still_rejoining().await {
            anyhow::ensure!(
                waited < 120,
                "node {n} is still rejoining after its wiped disk (waited 60 s)"
            );
            waited += 1;
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let (ev, g, l, voters) = self.hot_group().await?;
        let lost = self.lost();
        let fits = |v: &u64| *v > 3 && *v != l && Some(*v) != lost;
        let followers: Vec<u64> = voters.iter().copied().filter(fits).collect();
        let others: Vec<u64> = self.all_nodes().into_iter().filter(fits).collect();
        let v = self
            .pick(&followers)
            .or_else(|| self.pick(&others))
            .ok_or_else(|| anyhow::anyhow!("no node but directory voters and the leader"))?;
        let data = self.data_dir(v)?;
        self.cluster
            .lock()
            .expect("cluster lock poisoned")
            .kill(v)?;
        std::fs::remove_dir_all(&data)?;
        self.wiped
            .lock()
            .expect("nemesis lock poisoned")
            .insert(v, wall_ms());
        let of = if voters.contains(&v) {
            format!("a voter of group {g}, {ev}")
        } else {
            "not a voter of the hot group".to_string()
        };
        Ok((
            format!(
                "node {v} ({}, {of}) SIGKILLed and its data dir deleted; back with --rejoin-empty at heal",
                self.region(v)
            ),
            Undo::Restart(vec![v]),
        ))
    }

    /// A node `wipe-disk` wiped that has not rejoined every group yet, as
    /// the first edge whose `GET /v1/admin/cluster` answers says: no rejoin
    /// recorded since its latest wipe, or one with groups still pending (a
    /// wiped node counts as rejoining while no edge answers).
    async fn still_rejoining(&self) -> Option<u64> {
        let wiped: Vec<(u64, u64)> = {
            let w = self.wiped.lock().expect("nemesis lock poisoned");
            w.iter().map(|(n, at)| (*n, *at)).collect()
        };
        if wiped.is_empty() {
            return None;
        }
        let token = self.w.token("nemesis", true);
        for edge in self.w.edges.values() {
            let url = format!("{edge}/v1/admin/cluster");
            let Ok(a) = self.w.http.get(&url, Some(&token)).await else {
                continue;
            };
            let Some(nodes) = a.body["nodes"].as_array().filter(|_| a.status.is_success()) else {
                continue;
            };
            // `rejoin` is null once no rejoin is recorded, or lists what
            // is still pending.
            let back = |id: u64, wiped_at: u64| {
                nodes.iter().any(|n| {
                    let r = &n["rejoin"];
                    n["node_id"] == id
                        && r["started_ms"].as_u64().is_some_and(|t| t >= wiped_at)
                        && r["pending"].as_array().is_some_and(|p| p.is_empty())
                })
            };
            return wiped
                .into_iter()
                .find(|(id, at)| !back(*id, *at))
                .map(|(id, _)| id);
        }
        wiped.first().map(|(id, _)| *id)
    }
}

/// Milliseconds since the Unix epoch, as the nodes stamp a rejoin.
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
