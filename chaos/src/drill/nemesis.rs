//! The nemesis: injects the schedule's faults when they are due, with
//! targets chosen at that moment (the hottest group's leader, the
//! directory leader's region...), and heals each after its duration. Every
//! injection, heal and skipped fault is recorded in the history, with the
//! targets it hit.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::history::Entry;
use crate::net::{cut, Partitioner};
use crate::schedule::{Fault, ScheduledFault};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::json;

mod node_faults;

use super::skew::{Skews, NORMAL_RATE};
use super::World;
use seatfence_testkit::cluster::LocalCluster;

/// How a fault is undone.
enum Undo {
    Net,
    Resume(Vec<u64>),
    Restart(Vec<u64>),
    /// Clocks back to no skew.
    Skew(Vec<u64>),
    /// A node's timers back to the normal rate.
    Timers(u64),
    /// A node's disk no longer full.
    DiskFull(u64),
    /// A node's flushes succeed again; restarted if its failure ended it.
    FsyncFail(u64),
    /// The gateway switches the fault set.
    Gateway(serde_json::Value),
    /// Nothing: a lost node stays lost.
    Nothing,
}

pub struct Nemesis {
    w: Arc<World>,
    /// std mutexes: held for a signal or a spawn, never across an `.await`.
    cluster: Mutex<LocalCluster>,
    net: Arc<dyn Partitioner>,
    skews: Skews,
    rng: Mutex<StdRng>,
    /// Each active fault's kind and how it is undone.
    active: Mutex<BTreeMap<u32, (String, Undo)>>,
    /// The heal timers (aborted by `heal_all`, so none outlives the drill).
    timers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The node `lose-node` killed for good (never restarted, never a
    /// target again).
    lost: Mutex<Option<u64>>,
    /// Nodes whose data dir `wipe-disk` deleted: every start of theirs
    /// from then on is with `--rejoin-empty` (a no-op once the directory
    /// took them back; before that, what a crash mid-rejoin needs).
    /// The wall-clock ms of each node's latest wipe.
    wiped: Mutex<BTreeMap<u64, u64>>,
    /// Buyers, each bound to the edge of node `edges[i % n]`.
    clients: usize,
}

impl Nemesis {
    pub fn new(
        w: Arc<World>,
        cluster: LocalCluster,
        net: Arc<dyn Partitioner>,
        skew_files: BTreeMap<u64, PathBuf>,
        seed: u64,
        clients: usize,
    ) -> Arc<Nemesis> {
        Arc::new(Nemesis {
            w,
            cluster: Mutex::new(cluster),
            net,
            skews: Skews::new(skew_files),
            rng: Mutex::new(StdRng::seed_from_u64(seed ^ 0x0E3E_5155)),
            active: Mutex::new(BTreeMap::new()),
            timers: Mutex::new(Vec::new()),
            lost: Mutex::new(None),
            wiped: Mutex::new(Default::default()),
            clients,
        })
    }

    /// Every node: id, process id while running, data directory.
    pub fn processes(&self) -> Vec<(u64, Option<u32>, PathBuf)> {
        let cluster = self.cluster.lock().expect("cluster lock poisoned");
        cluster
            .nodes
            .iter()
            .map(|n| (n.id(), n.pid(), n.config.data_dir.clone()))
            .collect()
    }

    /// Node `id`'s data directory.
    fn data_dir(&self, id: u64) -> anyhow::Result<PathBuf> {
        self.processes()
            .into_iter()
            .find(|n| n.0 == id)
            .map(|n| n.2)
            .ok_or_else(|| anyhow::anyhow!("node {id} unknown"))
    }

    /// Run the schedule until it ends or the drill stops; each fault is
    /// healed by its own timer.
    pub async fn run(self: Arc<Self>, schedule: Vec<ScheduledFault>) {
        let start = self.w.rec.started();
        for f in schedule {
            let at = start + Duration::from_millis(f.at_ms);
            let mut rx = self.w.rx_stop.clone();
            tokio::select! {
                _ = rx.wait_for(|s| *s) => return,
                _ = tokio::time::sleep_until(at.into()) => {}
            }
            match self.inject(&f.fault).await {
                Ok((detail, undo)) => {
                    tracing::info!("--- fault {} {}: {detail}", f.id, f.fault.name());
                    self.w.rec.push(Entry::Fault {
                        t: 0,
                        id: f.id,
                        kind: f.fault.name().to_string(),
                        detail,
                    });
                    self.active
                        .lock()
                        .expect("nemesis lock poisoned")
                        .insert(f.id, (f.fault.name().to_string(), undo));
                    let me = self.clone();
                    let until = at + Duration::from_millis(f.duration_ms);
                    let timer = tokio::spawn(async move {
                        tokio::time::sleep_until(until.into()).await;
                        me.heal(f.id).await;
                    });
                    self.timers
                        .lock()
                        .expect("nemesis lock poisoned")
                        .push(timer);
                }
                Err(reason) => {
                    tracing::warn!("--- fault {} {} skipped: {reason:#}", f.id, f.fault.name());
                    self.w.rec.push(Entry::Skipped {
                        t: 0,
                        id: f.id,
                        kind: f.fault.name().to_string(),
                        reason: format!("{reason:#}"),
                    });
                }
            }
        }
    }

    /// Heal fault `id` (if still active) and record it.
    pub async fn heal(&self, id: u32) {
        let undo = self
            .active
            .lock()
            .expect("nemesis lock poisoned")
            .remove(&id);
        let Some((kind, undo)) = undo else { return };
        match self.undo(undo).await {
            Ok(None) => {}
            Ok(Some(reason)) => {
                tracing::warn!("--- fault {id} {kind} had no effect: {reason}");
                self.w.rec.push(Entry::NoEffect {
                    t: 0,
                    id,
                    kind,
                    reason,
                });
            }
            Err(e) => tracing::warn!("healing fault {id}: {e:#}"),
        }
        self.w.rec.push(Entry::Heal { t: 0, id });
    }

    /// Heal everything still active; then make sure every node runs,
    /// nothing is cut, no clock is skewed and the gateway behaves.
    pub async fn heal_all(&self) -> anyhow::Result<()> {
        let timers: Vec<_> = self
            .timers
            .lock()
            .expect("nemesis lock poisoned")
            .drain(..)
            .collect();
        for t in timers {
            t.abort();
            let _ = t.await;
        }
        let ids: Vec<u32> = self
            .active
            .lock()
            .expect("nemesis lock poisoned")
            .keys()
            .copied()
            .collect();
        for id in ids {
            self.heal(id).await;
        }
        self.net.heal()?;
        self.skews.reset_all()?;
        self.gateway_defaults().await?;
        let mut c = self.cluster.lock().expect("cluster lock poisoned");
        let lost = self.lost();
        let ids: Vec<u64> = c
            .nodes
            .iter()
            .map(|n| n.id())
            .filter(|n| Some(*n) != lost)
            .collect();
        for id in ids {
            let running = c.nodes.iter().any(|n| n.id() == id && n.is_running());
            if running {
                c.resume(id)?;
            } else {
                self.start(&mut c, id)?;
            }
        }
        Ok(())
    }

    /// Hand the cluster back (to stop it after the drill).
    pub fn into_cluster(self: Arc<Self>) -> Option<LocalCluster> {
        Arc::into_inner(self).map(|n| n.cluster.into_inner().expect("cluster lock poisoned"))
    }

    fn pick<T: Clone>(&self, v: &[T]) -> Option<T> {
        v.choose(&mut *self.rng.lock().expect("rng lock poisoned"))
            .cloned()
    }

    /// Every node but a lost one.
    fn all_nodes(&self) -> Vec<u64> {
        let lost = self.lost();
        self.w
            .regions
            .keys()
            .copied()
            .filter(|n| Some(*n) != lost)
            .collect()
    }

    fn lost(&self) -> Option<u64> {
        *self.lost.lock().expect("nemesis lock poisoned")
    }

    fn others(&self, side: &[u64]) -> Vec<u64> {
        self.all_nodes()
            .into_iter()
            .filter(|n| !side.contains(n))
            .collect()
    }

    /// A hot event's group, its leader and voters, waiting up to 5 s for
    /// the observer to know them (an election may be under way).
    async fn hot_group(&self) -> anyhow::Result<(String, u64, u64, Vec<u64>)> {
        let hot = self.w.live(true);
        let ev = self
            .pick(&hot)
            .ok_or_else(|| anyhow::anyhow!("no hot event"))?;
        for _ in 0..50 {
            if let Some(leader) = self.w.leader_of(ev.group) {
                let voters = self.w.voters_of(ev.group);
                if voters.contains(&leader) && voters.len() >= 3 {
                    return Ok((ev.event_id, ev.group, leader, voters));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!(
            "group {} of {} has no known leader with 3 voters",
            ev.group,
            ev.event_id
        )
    }

    async fn directory_leader(&self) -> anyhow::Result<u64> {
        for _ in 0..50 {
            if let Some(l) = self.w.leader_of(0) {
                return Ok(l);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("the directory has no known leader")
    }

    fn region(&self, node: u64) -> String {
        self.w.regions.get(&node).cloned().unwrap_or_default()
    }

    /// Inject `fault` on targets chosen now: what it hit, and how to undo
    /// it.
    async fn inject(&self, fault: &Fault) -> anyhow::Result<(String, Undo)> {
        match fault {
            Fault::IsolateNode => self.isolate_node(),
            Fault::IsolateLeader => self.isolate_leader().await,
            Fault::PartitionRegion { leader_inside } => self.partition_region(*leader_inside).await,
            Fault::Bridge => self.bridge().await,
            Fault::OneWayLoss => self.one_way_loss().await,
            Fault::CutEdge => self.cut_edge().await,
            Fault::SlowNetwork { ms } => self.slow_network(*ms),
            Fault::PauseLeader => self.pause_leader().await,
            Fault::KillMinority => self.kill_minority().await,
            Fault::LoseNode => self.lose_node(),
            Fault::WipeDisk => self.wipe_disk().await,
            Fault::ClockSkew { ms } => self.skew_clocks(*ms).await,
            Fault::TimerSkew { permille } => self.skew_timers(*permille).await,
            Fault::DiskFull => self.fill_disk().await,
            Fault::FsyncFail => self.fail_fsync().await,
            Fault::Gateway { mode } => self.gateway_fault(mode).await,
        }
    }

    // Partitions and lossy links (undone by healing the network).

    /// A random node cut off from every other.
    fn isolate_node(&self) -> anyhow::Result<(String, Undo)> {
        let n = self.pick(&self.all_nodes()).expect("nodes");
        cut(&*self.net, &[n], &self.others(&[n]))?;
        Ok((format!("node {n} ({}) cut off", self.region(n)), Undo::Net))
    }

    /// A hot group's leader cut off from every other node.
    async fn isolate_leader(&self) -> anyhow::Result<(String, Undo)> {
        let (ev, g, l, _) = self.hot_group().await?;
        cut(&*self.net, &[l], &self.others(&[l]))?;
        Ok((format!("leader {l} of group {g} ({ev}) cut off"), Undo::Net))
    }

    /// A region cut off from the others: the directory leader's own
    /// (`leader_inside`: the leader ends up in the minority) or another.
    async fn partition_region(&self, leader_inside: bool) -> anyhow::Result<(String, Undo)> {
        let d = self.directory_leader().await?;
        let home = self.region(d);
        let region = if leader_inside {
            home.clone()
        } else {
            let others: Vec<String> = seatfence_testkit::cluster::REGIONS
                .iter()
                .map(|r| r.to_string())
                .filter(|r| *r != home)
                .collect();
            self.pick(&others).expect("regions")
        };
        let side = self.w.nodes_in(&region);
        cut(&*self.net, &side, &self.others(&side))?;
        let leader_side = if leader_inside {
            "minority"
        } else {
            "majority"
        };
        Ok((
            format!("region {region} {side:?} cut off; directory leader {d} in the {leader_side}"),
            Undo::Net,
        ))
    }

    /// Two sides that cannot reach each other: a hot group's leader with
    /// the non-voters of one region, one of its followers with the other
    /// non-voters; its other follower, the bridge, reaches both.
    async fn bridge(&self) -> anyhow::Result<(String, Undo)> {
        let (ev, g, l, voters) = self.hot_group().await?;
        let followers: Vec<u64> = voters.iter().copied().filter(|v| *v != l).collect();
        let (bridge, far) = (followers[0], followers[1]);
        let rest = self.others(&voters);
        let (r1, r2): (Vec<u64>, Vec<u64>) = {
            let first = rest.first().map(|n| self.region(*n)).unwrap_or_default();
            rest.iter().partition(|n| self.region(**n) == first)
        };
        let a: Vec<u64> = std::iter::once(l).chain(r1).collect();
        let b: Vec<u64> = std::iter::once(far).chain(r2).collect();
        cut(&*self.net, &a, &b)?;
        Ok((
            format!("group {g} ({ev}): {a:?} | {b:?}, node {bridge} reaches both"),
            Undo::Net,
        ))
    }

    /// A hot group's leader can no longer send to its followers (they can
    /// still send to it).
    async fn one_way_loss(&self) -> anyhow::Result<(String, Undo)> {
        let (ev, g, l, voters) = self.hot_group().await?;
        for f in voters.iter().filter(|v| **v != l) {
            self.net.block(l, *f)?;
        }
        Ok((
            format!("leader {l} of group {g} ({ev}) cannot send to its followers"),
            Undo::Net,
        ))
    }

    /// A node that leads neither the directory nor the hot group (one of
    /// the group's followers if possible) cut off from the cluster, while
    /// the buyers on its edge keep using it.
    async fn cut_edge(&self) -> anyhow::Result<(String, Undo)> {
        let d = self.directory_leader().await?;
        let (ev, g, l, voters) = self.hot_group().await?;
        let mut candidates: Vec<u64> = voters
            .iter()
            .copied()
            .filter(|v| *v != l && *v != d)
            .collect();
        if candidates.is_empty() {
            candidates = self.others(&[l, d]);
        }
        let n = self.pick(&candidates).expect("a node");
        cut(&*self.net, &[n], &self.others(&[n]))?;
        Ok((
            format!("edge of node {n} (follower in group {g}, {ev}) cut off from the cluster; its clients keep using it"),
            Undo::Net,
        ))
    }

    /// Every link delayed by `ms`.
    fn slow_network(&self, ms: u64) -> anyhow::Result<(String, Undo)> {
        self.net.delay_all(ms)?;
        Ok((format!("every link delayed {ms} ms"), Undo::Net))
    }

    // Processes (undone by resuming or restarting them).

    /// A hot group's leader stopped (SIGSTOP) until the heal.
    async fn pause_leader(&self) -> anyhow::Result<(String, Undo)> {
        let (ev, g, l, _) = self.hot_group().await?;
        self.cluster
            .lock()
            .expect("cluster lock poisoned")
            .pause(l)?;
        Ok((
            format!("leader {l} of group {g} ({ev}) paused (SIGSTOP)"),
            Undo::Resume(vec![l]),
        ))
    }

    /// A hot group's leader killed (SIGKILL), with a directory voter of
    /// another region unless the leader is one; restarted at the heal.
    async fn kill_minority(&self) -> anyhow::Result<(String, Undo)> {
        let (ev, g, l, _) = self.hot_group().await?;
        let mut victims = vec![l];
        // Directory voters are nodes 1..=3, one per region. Kill one
        // more unless the leader is one of them (two of three would
        // be a majority of the directory).
        if l > 3 {
            let others: Vec<u64> = (1..=3)
                .filter(|v| self.region(*v) != self.region(l))
                .collect();
            victims.extend(self.pick(&others));
        }
        let mut c = self.cluster.lock().expect("cluster lock poisoned");
        for v in &victims {
            c.kill(*v)?;
        }
        Ok((
            format!("SIGKILL {victims:?} (leader {l} of group {g}, {ev})"),
            Undo::Restart(victims),
        ))
    }

    /// A node that no buyer uses (not a directory voter, in a region with a
    /// spare) SIGKILLed and its data deleted: the directory's leader
    /// declares it dead after `dead_after_ms` and repairs its groups onto
    /// the region's spare node. Never healed.
    fn lose_node(&self) -> anyhow::Result<(String, Undo)> {
        anyhow::ensure!(self.lost().is_none(), "a node is already lost");
        let nodes: Vec<u64> = self.w.edges.keys().copied().collect();
        let used: std::collections::BTreeSet<u64> =
            (0..self.clients).map(|i| nodes[i % nodes.len()]).collect();
        let per_region = |r: &String| self.w.regions.values().filter(|x| *x == r).count();
        let candidates: Vec<u64> = self
            .w
            .regions
            .iter()
            .filter(|(n, r)| **n > 3 && !used.contains(n) && per_region(r) >= 4)
            .map(|(n, _)| *n)
            .collect();
        let v = self
            .pick(&candidates)
            .ok_or_else(|| anyhow::anyhow!("no node without buyers in a region with a spare"))?;
        let data = self.data_dir(v)?;
        self.cluster
            .lock()
            .expect("cluster lock poisoned")
            .kill(v)?;
        std::fs::remove_dir_all(&data)?;
        *self.lost.lock().expect("nemesis lock poisoned") = Some(v);
        Ok((
            format!(
                "node {v} ({}) SIGKILLed, its data deleted: lost for good",
                self.region(v)
            ),
            Undo::Nothing,
        ))
    }

    // Clocks and the gateway.

    /// A gateway misbehaviour switched on (`mode`), off again at the heal.
    async fn gateway_fault(&self, mode: &str) -> anyhow::Result<(String, Undo)> {
        let patch = match mode {
            "execute-timeout" => json!({"execute": "timeout", "timeout_ms": 2500}),
            "webhook-drop" => json!({"webhook": "drop"}),
            "webhook-duplicate" => json!({"webhook": "duplicate"}),
            "query-error" => json!({"query": "error"}),
            // Captures held past the deadline with every webhook lost,
            // released at heal; the void wins, loses the race, or lies
            // (answers voided and leaves the payment capturable).
            "capture-held" => {
                let void = self.pick(&["ok", "lose", "ignore"]).expect("modes");
                json!({"execute": "hold", "webhook": "drop", "void": void})
            }
            other => anyhow::bail!("unknown gateway fault {other}"),
        };
        self.put_faults(&patch).await?;
        Ok((format!("gateway {mode} {patch}"), Undo::Gateway(patch)))
    }

    /// Undo a fault; `Some(why)` when the undo found the fault had no
    /// effect.
    async fn undo(&self, undo: Undo) -> anyhow::Result<Option<String>> {
        if let Undo::FsyncFail(id) = undo {
            return self.heal_fsync(id);
        }
        match undo {
            Undo::Net => self.net.heal(),
            Undo::Resume(ids) => {
                let mut c = self.cluster.lock().expect("cluster lock poisoned");
                ids.iter().try_for_each(|id| c.resume(*id))
            }
            Undo::Restart(ids) => {
                let mut c = self.cluster.lock().expect("cluster lock poisoned");
                ids.iter().try_for_each(|id| self.start(&mut c, *id))
            }
            Undo::Skew(ids) => ids.iter().try_for_each(|id| self.skews.set_clock(*id, 0)),
            Undo::Timers(id) => self.skews.set_rate(id, NORMAL_RATE),
            Undo::DiskFull(id) => self.skews.set_full(id, false),
            Undo::FsyncFail(_) => unreachable!("undone above"),
            Undo::Gateway(patch) => self.gateway_undo(&patch).await,
            Undo::Nothing => Ok(()),
        }
        .map(|()| None)
    }

    /// Reset the switches `patch` set, then re-apply those of the gateway
    /// faults still active (gateway faults overlap: healing one must not
    /// end another early).
    async fn gateway_undo(&self, patch: &serde_json::Value) -> anyhow::Result<()> {
        let defaults = json!({"execute": "ok", "query": "ok", "webhook": "deliver", "void": "ok"});
        let mut reset = serde_json::Map::new();
        for key in patch.as_object().into_iter().flat_map(|o| o.keys()) {
            if let Some(v) = defaults.get(key) {
                reset.insert(key.clone(), v.clone());
            }
        }
        let active: Vec<serde_json::Value> = self
            .active
            .lock()
            .expect("nemesis lock poisoned")
            .values()
            .filter_map(|(_, u)| match u {
                Undo::Gateway(p) => Some(p.clone()),
                _ => None,
            })
            .collect();
        for p in active {
            for (k, v) in p.as_object().into_iter().flatten() {
                reset.insert(k.clone(), v.clone());
            }
        }
        self.put_faults(&serde_json::Value::Object(reset)).await
    }

    async fn gateway_defaults(&self) -> anyhow::Result<()> {
        self.put_faults(
            &json!({"execute": "ok", "query": "ok", "webhook": "deliver", "void": "ok"}),
        )
        .await
    }

    async fn put_faults(&self, patch: &serde_json::Value) -> anyhow::Result<()> {
        let url = format!("{}/_faults", self.w.gateway);
        let a = self
            .w
            .http
            .send(hyper::Method::PUT, &url, None, None, Some(patch))
            .await?;
        anyhow::ensure!(
            a.status.is_success(),
            "gateway /_faults: {} {}",
            a.status,
            a.body
        );
        Ok(())
    }
}
