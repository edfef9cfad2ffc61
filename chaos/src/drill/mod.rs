//! `seatfence chaos`: partition drills against a local cluster of real node
//! processes (`drill`), and re-checking a recorded drill (`check`). The
//! history, schedule, partition mechanisms, checkers and report live in the
//! `seatfence-chaos` crate; this module runs the processes, the nemesis
//! and the workload.
//!
//! ```text
//!  drill ─▶ LocalCluster (3 regions × 3 nodes, every node an edge) + mock gateway
//!        ─▶ Partitioner (link proxies, namespaces or iptables), skew files, signals
//!  tasks: buyers ×N (HTTP), operator (moves), zombie (gRPC, old epochs),
//!         observer (leaders), nemesis (schedule), progress
//!  end:   heal ─▶ stop clients ─▶ settle (replicas equal, payments resolved)
//!         ─▶ final.json ─▶ checkers ─▶ summary.json, report.html, timeline.svg; exit 0/1/2
//! ```

mod faults;
mod nemesis;
mod net_setup;
mod runner;
mod settle;
mod skew;
mod soak;
mod teardown;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::check::{check_all, growth, Input, Status};
use crate::history::{History, Recorder};
use crate::report;
use crate::run::{read_json, write_json, EventInfo, FinalState, RunInfo};
use clap::{Args, Subcommand, ValueEnum};
use seatfence_raft::ClusterClient;
use tokio::sync::watch;

use seatfence_testkit::http_client::HttpClient;

#[derive(Subcommand)]
pub enum ChaosCmd {
    /// Run a drill: start a cluster, inject the seed's faults while clients
    /// buy, check the history. Exit 0 PASS, 1 FAIL, 2 when the harness
    /// itself could not run.
    Drill(DrillArgs),
    /// Run a soak: the drill's cluster and checkers under a steady sale for
    /// hours (a leader kill and a move every few minutes), sampling every
    /// node's memory, descriptors, tasks, disk and log; fails like a drill,
    /// or when any of those keeps growing. Exit codes as `drill`.
    Soak(soak::SoakArgs),
    /// Check a recorded drill again (DIR from `drill --out`): rewrites its
    /// summary.json and report.html, exits like the drill.
    Check { dir: PathBuf },
}

#[derive(Args, Clone, Debug)]
pub struct DrillArgs {
    /// Seed of the fault schedule and the clients' choices (random when
    /// absent; printed and recorded).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Seconds of faults and load (plus set-up and settling).
    #[arg(long, default_value_t = 120)]
    pub duration: u64,
    /// Run directory (created; must be empty or absent).
    #[arg(long)]
    pub out: PathBuf,
    /// How to cut links: `auto` (the first that works here of `netns`,
    /// `iptables` and `proxy`), `netns` (each node in a network namespace
    /// of its own, iptables inside; root), `iptables` (per-node loopback
    /// addresses; root) or `proxy` (a TCP proxy per link; no privileges).
    #[arg(long, value_enum, default_value_t = NetChoice::Auto)]
    pub net: NetChoice,
    /// Nodes in each of the three regions (at least 3: an event's group
    /// has 3 voters in its region; the others serve as edges and move
    /// targets).
    #[arg(long, default_value_t = 3)]
    pub nodes_per_region: usize,
    /// Concurrent buyers.
    #[arg(long, default_value_t = 10)]
    pub clients: usize,
    /// Seats of each of the two hot events.
    #[arg(long, default_value_t = 4)]
    pub hot_seats: usize,
    /// Small events created at the start beside the hot and cold ones;
    /// their groups sleep until a buyer (2% of buyers' picks) wakes one.
    #[arg(long, default_value_t = 200)]
    pub sleeping_events: usize,
    /// Milliseconds between the operator's ownership moves.
    #[arg(long, default_value_t = 4_000)]
    pub move_every_ms: u64,
    /// Seconds between generations of events (two hot, one cold): the
    /// previous one is retired so seats never run out.
    #[arg(long, default_value_t = 40)]
    pub generation_secs: u64,
    /// Only these kinds of fault (comma-separated, as `schedule.json` and
    /// the report name them: `pause-leader,kill-minority,gateway-capture-held`);
    /// coverage then asks for these kinds only. Default: every kind this
    /// binary and partition mechanism can inject.
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<String>,
    /// Plant a bug the drill must catch (tests only): `accept-stale-epoch`.
    #[arg(long, hide = true)]
    pub plant_bug: Option<String>,
    /// Keep the nodes' data directories (logs are always kept).
    #[arg(long)]
    pub keep_data: bool,
    /// The regions far apart (`--global`, `--rtt`, `--jitter`): the link
    /// proxies carry each link's latency, so `--net` must be `proxy` or
    /// `auto` (which then takes the proxies).
    #[command(flatten)]
    pub geo: seatfence_testkit::GeoArgs,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetChoice {
    Auto,
    Proxy,
    Iptables,
    Netns,
}

/// Exit codes of `chaos drill` / `chaos check`.
pub const EXIT_PASS: i32 = 0;
pub const EXIT_FAIL: i32 = 1;
pub const EXIT_HARNESS: i32 = 2;

pub async fn run(bin: &Path, cmd: ChaosCmd) -> i32 {
    match cmd {
        ChaosCmd::Drill(args) => run_drill(bin, args, None).await,
        ChaosCmd::Soak(s) => {
            let (args, info) = s.into_drill();
            run_drill(bin, args, Some(info)).await
        }
        ChaosCmd::Check { dir } => match check_dir(&dir) {
            Ok(status) => exit_code(status),
            Err(e) => {
                eprintln!("chaos check could not run: {e:#}");
                EXIT_HARNESS
            }
        },
    }
}

/// A drill (with `soak`, a soak) until its verdict or an interrupt.
async fn run_drill(bin: &Path, args: DrillArgs, soak: Option<crate::run::SoakInfo>) -> i32 {
    let result = tokio::select! {
        r = runner::run(bin, args, soak) => Some(r),
        _ = interrupted() => None,
    };
    // Whatever happened, no node or gateway outlives the drill (the caller
    // exits without waiting for tasks to drop them).
    seatfence_testkit::cluster::reap_all();
    match result {
        Some(Ok(status)) => exit_code(status),
        Some(Err(e)) => {
            eprintln!("chaos drill could not run: {e:#}");
            EXIT_HARNESS
        }
        None => {
            crate::net::remove_after_interrupt();
            eprintln!("\nchaos drill: interrupted; nodes and gateway stopped, partitions removed");
            EXIT_HARNESS
        }
    }
}

/// SIGINT or SIGTERM.
async fn interrupted() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn exit_code(s: Status) -> i32 {
    match s {
        Status::Pass => EXIT_PASS,
        Status::Fail | Status::Unknown => EXIT_FAIL,
    }
}

/// Check the run in `dir`, write its summary and report, print the verdicts.
pub fn check_dir(dir: &Path) -> anyhow::Result<Status> {
    let run: RunInfo = read_json(&dir.join("run.json"))?;
    let history = History::read(&dir.join("history.jsonl"))?;
    let finals: FinalState = read_json(&dir.join("final.json"))?;
    let input = Input::new(&run, &history, &finals);
    let mut verdicts = check_all(&input);
    // A soak's samples: the growth checker, and charts in the report.
    let samples_path = dir.join("samples.jsonl");
    let samples = if samples_path.exists() {
        let samples = growth::read(&samples_path)?;
        verdicts.push(growth::check(&samples));
        Some(samples)
    } else {
        None
    };
    let summary = report::summarize(&run, &history, &input.ops, &verdicts, &finals);
    write_json(&dir.join("summary.json"), &summary)?;
    let mut page = report::html(&run, &history, &input.ops, &verdicts, &summary);
    if let Some(samples) = &samples {
        let (fits, _) = growth::fits(samples);
        let at = page.rfind("</body>").unwrap_or(page.len());
        page.insert_str(at, &report::resources::section(samples, &fits));
        std::fs::write(dir.join("resources.svg"), report::resources::svg(samples))?;
    }
    std::fs::write(dir.join("report.html"), page)?;
    std::fs::write(
        dir.join("timeline.svg"),
        report::timeline_svg_for(&run, &history, &input.ops, &verdicts),
    )?;
    for v in &verdicts {
        eprintln!("  {:<22} {:?}  {}", v.checker, v.status, v.summary);
        for viol in v.violations.iter().take(5) {
            eprintln!("      ✗ {}", viol.message);
        }
        if v.violations.len() > 5 {
            eprintln!("      … {} more in report.html", v.violations.len() - 5);
        }
    }
    if !summary.settled {
        eprintln!(
            "  the cluster did not settle after the heal: {:?}",
            summary.unsettled
        );
    }
    eprintln!(
        "{:?}: seed {}, {} ops, {}/{} faults, {} leader changes, {}/{} moves done; report: {}",
        summary.verdict,
        summary.seed,
        summary.ops.total(),
        summary.faults_injected,
        summary.faults_scheduled,
        summary.leader_changes,
        summary.moves_done,
        summary.moves_started,
        dir.join("report.html").display()
    );
    Ok(summary.verdict)
}

/// What every drill task shares. The std mutexes guard small maps, held
/// only to read or update them, never across an `.await`.
pub(crate) struct World {
    pub rec: Recorder,
    pub http: HttpClient,
    /// Node id → its edge URL.
    pub edges: BTreeMap<u64, String>,
    /// Node id → region.
    pub regions: BTreeMap<u64, String>,
    /// Node id → gRPC address (for the harness's own gRPC calls).
    pub grpc: BTreeMap<u64, String>,
    pub gateway: String,
    pub jwt_secret: String,
    /// Every event the drill created (a new generation every so often).
    pub events: Mutex<Vec<EventInfo>>,
    /// The highest epoch a finished move gave each event.
    pub epochs: Mutex<BTreeMap<String, u64>>,
    /// Per group: the `(term, leader)` last seen.
    pub leaders: Mutex<BTreeMap<u64, (u64, u64)>>,
    /// Per group: its voters as the leader last reported them.
    pub voters: Mutex<BTreeMap<u64, Vec<u64>>>,
    /// Groups whose leader replica reported itself asleep in the
    /// observer's last round, and the most seen in one round.
    pub asleep: std::sync::atomic::AtomicUsize,
    pub asleep_max: std::sync::atomic::AtomicUsize,
    pub client: ClusterClient,
    pub rx_stop: watch::Receiver<bool>,
}

impl World {
    pub fn stopped(&self) -> bool {
        *self.rx_stop.borrow()
    }

    pub fn token(&self, user: &str, operator: bool) -> String {
        seatfence_api::auth::mint(&self.jwt_secret, user, operator, 24 * 3600)
    }

    /// The live (not retired) events, hot or cold.
    pub fn live(&self, hot: bool) -> Vec<EventInfo> {
        self.events
            .lock()
            .expect("events lock poisoned")
            .iter()
            .filter(|e| e.hot == hot && !e.retired && !e.sleeper)
            .cloned()
            .collect()
    }

    /// The sleeping events.
    pub fn sleepers(&self) -> Vec<EventInfo> {
        self.events
            .lock()
            .expect("events lock poisoned")
            .iter()
            .filter(|e| e.sleeper)
            .cloned()
            .collect()
    }

    pub fn all_events(&self) -> Vec<EventInfo> {
        self.events.lock().expect("events lock poisoned").clone()
    }

    /// The current leader of `group`, as last observed.
    pub fn leader_of(&self, group: u64) -> Option<u64> {
        self.leaders
            .lock()
            .expect("leaders lock poisoned")
            .get(&group)
            .map(|(_, l)| *l)
    }

    pub fn voters_of(&self, group: u64) -> Vec<u64> {
        self.voters
            .lock()
            .expect("voters lock poisoned")
            .get(&group)
            .cloned()
            .unwrap_or_default()
    }

    pub fn nodes_in(&self, region: &str) -> Vec<u64> {
        self.regions
            .iter()
            .filter(|(_, r)| r.as_str() == region)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Sleep `ms`, returning early (false) when the drill stops.
    pub async fn pause(&self, ms: u64) -> bool {
        let mut rx = self.rx_stop.clone();
        tokio::select! {
            _ = rx.wait_for(|s| *s) => false,
            _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => !self.stopped(),
        }
    }
}
