//! `seatfence chaos soak`: the drill's cluster, checkers and report under a
//! steady sale for hours instead of minutes — a leader kill every few
//! minutes instead of a fault every few seconds, an ownership move every few
//! minutes and one with every kill — while a sampler records every node's
//! resident memory, open file descriptors, disk bytes, log size and live
//! tokio tasks every `--sample-every` into `samples.jsonl`. The growth
//! checker (`check::growth`) then fails the run if any of them keeps
//! growing.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::nemesis::Nemesis;
use super::{DrillArgs, NetChoice, World};
use crate::check::growth::Sample;
use crate::run::SoakInfo;

#[derive(Args, Clone, Debug)]
pub struct SoakArgs {
    /// Seed of the kills' times and the clients' choices (random when
    /// absent; printed and recorded).
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long the load runs (`1h`, `20m`; set-up and settling come on
    /// top).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
    pub duration: Duration,
    /// Run directory (created; must be empty or absent).
    #[arg(long)]
    pub out: PathBuf,
    /// How to cut links (as `chaos drill --net`; a soak only kills).
    #[arg(long, value_enum, default_value_t = NetChoice::Auto)]
    pub net: NetChoice,
    /// Concurrent buyers.
    #[arg(long, default_value_t = 10)]
    pub clients: usize,
    /// Time between leader kills (the hottest group's leader and a
    /// directory voter, SIGKILLed, restarted 5 s later); at least 10 s.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3m")]
    pub kill_every: Duration,
    /// Time between ownership moves (one more starts with every kill).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2m")]
    pub move_every: Duration,
    /// Time between resource samples of every node; at least 1 s.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub sample_every: Duration,
    /// Seats of each of the two hot events of a generation.
    #[arg(long, default_value_t = 40)]
    pub hot_seats: usize,
    /// Seconds between generations of events (sold seats are gone for
    /// good, so a sale needs new events now and then).
    #[arg(long, default_value_t = 300)]
    pub generation_secs: u64,
    /// Keep the nodes' data directories (logs are always kept).
    #[arg(long)]
    pub keep_data: bool,
}

/// The shortest time between kills (a kill lasts 5 s).
const MIN_KILL_EVERY_MS: u64 = 10_000;

impl SoakArgs {
    /// The drill this soak runs, and what it records besides.
    pub fn into_drill(self) -> (DrillArgs, SoakInfo) {
        let info = SoakInfo {
            kill_every_ms: (self.kill_every.as_millis() as u64).max(MIN_KILL_EVERY_MS),
            move_every_ms: self.move_every.as_millis() as u64,
            sample_every_ms: (self.sample_every.as_millis() as u64).max(1_000),
        };
        let args = DrillArgs {
            seed: self.seed,
            duration: self.duration.as_secs(),
            out: self.out,
            net: self.net,
            nodes_per_region: 3,
            clients: self.clients,
            hot_seats: self.hot_seats,
            sleeping_events: 200,
            move_every_ms: info.move_every_ms,
            generation_secs: self.generation_secs,
            faults: Vec::new(),
            plant_bug: None,
            keep_data: self.keep_data,
            geo: Default::default(),
        };
        (args, info)
    }
}

/// Create `out/samples.jsonl` (before the load starts: a soak that cannot
/// record its samples fails at once, not after its hour).
pub(super) fn create_samples(out: &Path) -> anyhow::Result<std::fs::File> {
    let path = out.join("samples.jsonl");
    std::fs::File::create(&path).with_context(|| format!("create {}", path.display()))
}

/// Sample every node each `every` until the drill stops, appending to
/// `file`. A sample that cannot be written is reported, and the soak goes
/// on (the growth checker judges what was recorded).
pub(super) async fn sample(
    w: Arc<World>,
    nemesis: Arc<Nemesis>,
    out: PathBuf,
    mut file: std::fs::File,
    every: Duration,
) {
    let cluster_dir = out.join("cluster");
    let token = w.token("chaos-sampler", true);
    let mut failed = 0u64;
    loop {
        let t_ms = w.rec.now() / 1_000;
        let groups = placed_and_led(&w, &token).await;
        for (node, pid, data_dir) in nemesis.processes() {
            let scraped = match w.edges.get(&node) {
                Some(edge) => scrape(&w, edge).await,
                None => Scraped::default(),
            };
            let (placed, led) = match groups.get(&node) {
                Some((p, l)) => (Some(*p), Some(*l)),
                None => (None, None),
            };
            let log = cluster_dir.join(format!("n{node}/node.log"));
            // Directory walks and /proc reads off the runtime's workers.
            let s = tokio::task::spawn_blocking(move || Sample {
                t_ms,
                node,
                pid,
                rss_bytes: pid.and_then(rss_bytes),
                fds: pid.and_then(open_fds),
                data_bytes: dir_bytes(&data_dir, Some("mail")),
                mail_bytes: dir_bytes(&data_dir.join("mail"), None),
                log_bytes: std::fs::metadata(log).map(|m| m.len()).ok(),
                tasks: scraped.tasks,
                heap_bytes: scraped.heap,
                // Placed replicas not unloaded (a process that does not
                // answer loads nothing).
                groups_loaded: placed
                    .zip(scraped.dormant)
                    .map(|(p, d)| p.saturating_sub(d)),
                groups_led: led.filter(|_| scraped.dormant.is_some()),
            })
            .await;
            let written = match s {
                Ok(s) => serde_json::to_string(&s)
                    .map_err(anyhow::Error::from)
                    .and_then(|line| Ok(writeln!(file, "{line}")?)),
                Err(e) => Err(anyhow::anyhow!("sampling node {node}: {e}")),
            };
            if let Err(e) = written {
                failed += 1;
                if failed <= 3 {
                    eprintln!("chaos soak: a sample was not recorded: {e:#}");
                }
            }
        }
        let _ = file.flush();
        if !w.pause(every.as_millis() as u64).await {
            return;
        }
    }
}

/// `VmRSS` of process `pid`, in bytes.
fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Open file descriptors of process `pid`.
fn open_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Bytes of the regular files under `dir`, leaving out its top-level
/// entry `skip` (0 when `dir` does not exist).
fn dir_bytes(dir: &Path, skip: Option<&str>) -> Option<u64> {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    let mut top = true;
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            if top && skip.is_some_and(|s| e.file_name() == s) {
                continue;
            }
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
        top = false;
    }
    Some(total)
}

/// What one node's `/metrics` said.
#[derive(Default)]
struct Scraped {
    tasks: Option<u64>,
    heap: Option<u64>,
    dormant: Option<u64>,
}

/// `seatfence_tokio_alive_tasks`, `seatfence_heap_bytes` (when the binary
/// counts it: not 0) and `seatfence_groups_dormant` from the node's
/// `/metrics`.
async fn scrape(w: &World, edge: &str) -> Scraped {
    let Ok(a) = w.http.get(&format!("{edge}/metrics"), None).await else {
        return Scraped::default();
    };
    let text = a.body.as_str().unwrap_or_default();
    let gauge = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    };
    Scraped {
        tasks: gauge("seatfence_tokio_alive_tasks"),
        heap: gauge("seatfence_heap_bytes").filter(|b| *b > 0),
        dormant: gauge("seatfence_groups_dormant"),
    }
}

/// Per node, the replicas placed on it and the groups it leads, from the
/// first edge whose `GET /v1/admin/cluster` answers (empty when none
/// does): what a node's memory should follow.
async fn placed_and_led(w: &World, token: &str) -> BTreeMap<u64, (u64, u64)> {
    for edge in w.edges.values() {
        let url = format!("{edge}/v1/admin/cluster");
        let Ok(a) = w.http.get(&url, Some(token)).await else {
            continue;
        };
        let Some(nodes) = a.body["nodes"].as_array().filter(|_| a.status.is_success()) else {
            continue;
        };
        return nodes
            .iter()
            .filter_map(|n| {
                let led = n["leader_of"].as_array().map_or(0, |l| l.len() as u64);
                Some((n["node_id"].as_u64()?, (n["replicas"].as_u64()?, led)))
            })
            .collect();
    }
    BTreeMap::new()
}
