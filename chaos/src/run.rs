//! What a drill leaves for the checkers besides its history: `run.json`
//! (seed, parameters, events, the fault schedule) and `final.json` (every
//! replica's records of every event, and the gateway's payments), all
//! plain JSON so `seatfence chaos check DIR` can re-check a run later.

use std::path::Path;

use anyhow::Context;
use seatfence_core::ReplicaDump;
use serde::{Deserialize, Serialize};

use crate::schedule::ScheduledFault;

/// `run.json`: how the drill was set up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    pub seed: u64,
    pub duration_s: u64,
    /// Hold TTL of every drill event.
    pub hold_ttl_ms: u64,
    /// How far the leader clocks may be skewed (the checkers' tolerance
    /// for when a hold may expire).
    pub max_skew_ms: u64,
    pub events: Vec<EventInfo>,
    pub schedule: Vec<ScheduledFault>,
    /// The kinds of fault the run set out to cover (`Fault::kind`): every
    /// kind the binary and the partition mechanism could inject, or those
    /// `--faults` chose. Coverage fails when one was never injected. Empty
    /// in runs recorded before it was kept (coverage then checks the
    /// schedule alone).
    #[serde(default)]
    pub fault_kinds: Vec<String>,
    /// The kinds this binary or partition mechanism could not inject, and
    /// why (left out of `fault_kinds` and of the schedule).
    #[serde(default)]
    pub cannot_inject: Vec<(String, String)>,
    /// The partition mechanism used, and those that were not available.
    pub partition_mechanism: String,
    #[serde(default)]
    pub unavailable_mechanisms: Vec<(String, String)>,
    #[serde(default)]
    pub planted_bug: Option<String>,
    pub nodes: Vec<NodeInfo>,
    /// A soak's settings (`chaos soak`); none for a drill.
    #[serde(default)]
    pub soak: Option<SoakInfo>,
    /// Wall-clock time (Unix ms) at the history's time 0, so the checkers
    /// can place each hold's own `expires_at`; 0 in runs recorded before
    /// it was kept (the checkers then fall back to the TTL and the slack).
    #[serde(default)]
    pub started_unix_ms: u64,
    /// How long the run's events keep finished records (their
    /// `retention_secs`, in ms); 0 in runs recorded before events had one.
    #[serde(default)]
    pub retention_ms: u64,
    /// The regions' latency matrix of a `--global` drill (`Geo::to_json`);
    /// none when the regions shared one loopback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo: Option<serde_json::Value>,
}

/// What a soak recorded besides a drill's: how often it killed, moved and
/// sampled (the samples are in `samples.jsonl`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoakInfo {
    pub kill_every_ms: u64,
    pub move_every_ms: u64,
    pub sample_every_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventInfo {
    pub event_id: String,
    pub group: u64,
    pub seats: Vec<String>,
    pub hot: bool,
    pub home_region: String,
    /// Events come in generations (two hot, one cold); when a new one is
    /// created the previous one is retired: no new holds, reads only.
    #[serde(default)]
    pub generation: u32,
    #[serde(default)]
    pub retired: bool,
    /// One of the drill's sleeping events: created at the start, touched
    /// by a buyer now and then, so its group sleeps most of the run and
    /// is woken by buyers during faults.
    #[serde(default)]
    pub sleeper: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: u64,
    pub region: String,
    pub grpc_addr: String,
    pub edge: String,
}

impl RunInfo {
    /// Slack the checkers allow around hold expiry: the largest skew plus
    /// a second for scheduling and replication.
    pub fn expiry_slack_us(&self) -> u64 {
        (self.max_skew_ms + 1_000) * 1_000
    }

    /// Whether a finished booking may have left the state by the end of the
    /// run (its event's retention is shorter than the run): then a
    /// refunded booking missing from a replica is pruned, not lost.
    pub fn prunes(&self) -> bool {
        self.retention_ms > 0 && self.retention_ms < self.duration_s.saturating_mul(1000)
    }
}

/// `final.json`: the end state, read after every fault was healed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalState {
    pub events: Vec<EventFinal>,
    /// Every payment the gateway knows, with its captures.
    pub gateway: Vec<GatewayPayment>,
    /// Whether every replica had applied its group's last entry when read.
    pub converged: bool,
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventFinal {
    pub event_id: String,
    pub group: u64,
    /// The directory's epoch and owner region for the event.
    pub epoch: u64,
    pub owner: String,
    /// The group's voters at the end.
    pub members: Vec<u64>,
    pub replicas: Vec<ReplicaFinal>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaFinal {
    pub node: u64,
    pub applied_index: u64,
    pub dump: Option<ReplicaDump>,
    /// Why the replica could not be read.
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayPayment {
    pub payment_id: String,
    /// The booking id the payment was created for.
    pub invoice: String,
    pub status: String,
    pub captures: u32,
    #[serde(default)]
    pub refunds: u32,
}

pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))
}

pub fn write_json<T: Serialize>(path: &Path, v: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

/// `h12-3` / `b12-3` → `(12, 3)`.
pub fn group_seq(id: &str) -> Option<(u64, u64)> {
    let rest = id.get(1..)?;
    let (g, s) = rest.split_once('-')?;
    Some((g.parse().ok()?, s.parse().ok()?))
}
