//! `resources_bounded` (soaks only): nothing a node holds may keep growing.
//! From `samples.jsonl` (every node every few seconds: resident memory,
//! open file descriptors, live tokio tasks, data and log bytes), a
//! least-squares line over the second half of the run; a slope above the
//! metric's limit fails the run. The first half is warm-up (caches fill,
//! groups wake, the sale reaches its steady mix).
//!
//! A process's own figures (memory, descriptors, tasks) restart with the
//! process: for those the fit takes, per node, the longest process life
//! within the second half, leaving out its first three minutes, and only
//! if what is left spans ten minutes. Disk and log bytes outlive a
//! restart and are fitted over the whole second half.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Verdict, Violation};

pub const NAME: &str = "resources_bounded";

/// One node at one moment; `None` where it could not be read (the process
/// down, the edge not answering).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Milliseconds since the run started (the history's clock).
    pub t_ms: u64,
    pub node: u64,
    pub pid: Option<u32>,
    pub rss_bytes: Option<u64>,
    pub fds: Option<u64>,
    /// The node's data directory without its mail directory.
    pub data_bytes: Option<u64>,
    /// Confirmation emails: one file per confirmed booking, growing by
    /// design; plotted, not judged.
    pub mail_bytes: Option<u64>,
    pub log_bytes: Option<u64>,
    pub tasks: Option<u64>,
    /// Bytes the node's allocations hold (`seatfence_heap_bytes`): the
    /// program's own share of `rss_bytes`. Absent in runs recorded before.
    #[serde(default)]
    pub heap_bytes: Option<u64>,
    /// Replicas placed on the node and in its memory (not dormant), and
    /// groups it leads: what its memory should follow. Plotted, not
    /// judged; absent in runs recorded before.
    #[serde(default)]
    pub groups_loaded: Option<u64>,
    #[serde(default)]
    pub groups_led: Option<u64>,
}

/// A judged metric and its limit.
pub struct Metric {
    pub name: &'static str,
    pub unit: &'static str,
    /// Restarts with the process (fitted per process life).
    pub per_process: bool,
    /// Largest slope allowed over the second half, in `unit` per hour.
    pub limit_per_hour: f64,
    pub get: fn(&Sample) -> Option<u64>,
}

const MIB: f64 = 1024.0 * 1024.0;

/// The metrics judged, with their limits. The limits are set well above
/// what a steady sale on a healthy build showed (docs/CHAOS.md, "Soak") and
/// well below what a leak of one entry or task per request, group or
/// connection produces over an hour.
pub const METRICS: [Metric; 6] = [
    Metric {
        name: "rss",
        unit: "MiB",
        per_process: true,
        limit_per_hour: 64.0,
        get: |s| s.rss_bytes.map(|b| (b as f64 / MIB) as u64),
    },
    Metric {
        name: "heap",
        unit: "MiB",
        per_process: true,
        limit_per_hour: 64.0,
        get: |s| s.heap_bytes.map(|b| (b as f64 / MIB) as u64),
    },
    Metric {
        name: "open_fds",
        unit: "fds",
        per_process: true,
        limit_per_hour: 60.0,
        get: |s| s.fds,
    },
    Metric {
        name: "tokio_tasks",
        unit: "tasks",
        per_process: true,
        limit_per_hour: 300.0,
        get: |s| s.tasks,
    },
    Metric {
        name: "data",
        unit: "MiB",
        per_process: false,
        limit_per_hour: 512.0,
        get: |s| s.data_bytes.map(|b| (b as f64 / MIB) as u64),
    },
    Metric {
        name: "log",
        unit: "MiB",
        per_process: false,
        limit_per_hour: 256.0,
        get: |s| s.log_bytes.map(|b| (b as f64 / MIB) as u64),
    },
];

/// A process life's first three minutes are warm-up: a restarted node
/// wakes a few hundred groups, opens their connections and spawns their
/// tasks over its first minutes (the one-hour soak's node 1 after its
/// eighth restart).
const LIFE_WARMUP_MS: u64 = 180_000;
/// Fewer points than this, or a shorter span, is not judged.
const MIN_POINTS: usize = 6;
const MIN_SPAN_MS: u64 = 120_000;
/// A process life judged must span this long past its warm-up: a slope
/// over a few minutes, scaled to an hour, is noise (a node killed every
/// few minutes is reported as not judged for its own figures; its disk
/// and logs still are).
const MIN_LIFE_SPAN_MS: u64 = 600_000;

/// One fitted line: a node's metric over its window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    pub metric: &'static str,
    pub node: u64,
    pub from_ms: u64,
    pub to_ms: u64,
    pub points: usize,
    pub per_hour: f64,
    pub limit_per_hour: f64,
}

pub fn read(path: &Path) -> anyhow::Result<Vec<Sample>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

/// Least-squares slope of `points` (ms, value), per hour.
fn slope_per_hour(points: &[(u64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0 as f64).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in points {
        let dx = *x as f64 - mx;
        sxy += dx * (y - my);
        sxx += dx * dx;
    }
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx * 3_600_000.0
    }
}

/// The window a node's metric is judged over (second half; for a
/// per-process metric the longest life in it, past its first minute).
fn window(m: &Metric, samples: &[&Sample], half_ms: u64) -> Vec<(u64, f64)> {
    let mut lives: BTreeMap<u32, (u64, Vec<(u64, f64)>)> = BTreeMap::new();
    let mut all = Vec::new();
    for s in samples {
        let Some(v) = (m.get)(s) else { continue };
        if let Some(pid) = s.pid {
            let life = lives.entry(pid).or_insert((s.t_ms, Vec::new()));
            if s.t_ms >= half_ms && s.t_ms >= life.0 + LIFE_WARMUP_MS {
                life.1.push((s.t_ms, v as f64));
            }
        }
        if s.t_ms >= half_ms {
            all.push((s.t_ms, v as f64));
        }
    }
    let mut pts = if m.per_process {
        lives
            .into_values()
            .map(|(_, pts)| pts)
            .max_by_key(|pts| pts.len())
            .unwrap_or_default()
    } else {
        all
    };
    pts.sort_by_key(|p| p.0);
    pts
}

/// Every node's fit of every judged metric, and what could not be judged.
pub fn fits(samples: &[Sample]) -> (Vec<Fit>, Vec<String>) {
    let end = samples.iter().map(|s| s.t_ms).max().unwrap_or(0);
    let start = samples.iter().map(|s| s.t_ms).min().unwrap_or(0);
    let half_ms = start + (end - start) / 2;
    let mut by_node: BTreeMap<u64, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_node.entry(s.node).or_default().push(s);
    }
    let (mut out, mut unjudged) = (Vec::new(), Vec::new());
    for m in &METRICS {
        for (node, ss) in &by_node {
            let pts = window(m, ss, half_ms);
            let span = match (pts.first(), pts.last()) {
                (Some(a), Some(b)) => b.0.saturating_sub(a.0),
                _ => 0,
            };
            let min_span = if m.per_process {
                MIN_LIFE_SPAN_MS
            } else {
                MIN_SPAN_MS
            };
            if pts.len() < MIN_POINTS || span < min_span {
                unjudged.push(format!("{} of node {node}", m.name));
                continue;
            }
            out.push(Fit {
                metric: m.name,
                node: *node,
                from_ms: pts[0].0,
                to_ms: pts[pts.len() - 1].0,
                points: pts.len(),
                per_hour: slope_per_hour(&pts),
                limit_per_hour: m.limit_per_hour,
            });
        }
    }
    (out, unjudged)
}

pub fn check(samples: &[Sample]) -> Verdict {
    let (fits, unjudged) = fits(samples);
    let mut violations: Vec<Violation> = fits
        .iter()
        .filter(|f| f.per_hour > f.limit_per_hour)
        .map(|f| {
            let unit = METRICS
                .iter()
                .find(|m| m.name == f.metric)
                .map_or("", |m| m.unit);
            Violation {
                message: format!(
                    "node {}: {} grew {:.1} {unit}/h over {:.0}–{:.0} s (limit {} {unit}/h)",
                    f.node,
                    f.metric,
                    f.per_hour,
                    f.from_ms as f64 / 1000.0,
                    f.to_ms as f64 / 1000.0,
                    f.limit_per_hour
                ),
                ops: vec![],
            }
        })
        .collect();
    for m in &METRICS {
        if !fits.iter().any(|f| f.metric == m.name) {
            violations.push(Violation {
                message: format!("{}: no node could be judged (too few samples)", m.name),
                ops: vec![],
            });
        }
    }
    let worst = METRICS
        .iter()
        .filter_map(|m| {
            fits.iter()
                .filter(|f| f.metric == m.name)
                .max_by(|a, b| a.per_hour.total_cmp(&b.per_hour))
                .map(|f| format!("{} {:+.1} {}/h", m.name, f.per_hour, m.unit))
        })
        .collect::<Vec<_>>()
        .join(", ");
    Verdict::new(
        NAME,
        format!(
            "{} fits from {} samples; steepest second-half slope: {worst}; {} not judged",
            fits.len(),
            samples.len(),
            unjudged.len()
        ),
        violations,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    /// Node 1 steady, node 2 leaking `leak` MiB/h of memory; `restart`:
    /// node 1 restarted a quarter of the way in (its memory starts low).
    fn run(leak: f64, restart: bool) -> Vec<Sample> {
        let mut out = Vec::new();
        for i in 0..=360u64 {
            let t_ms = i * 10_000;
            for node in [1u64, 2] {
                let leaking = node == 2;
                let pid = if node == 1 && restart && t_ms >= 900_000 {
                    11
                } else {
                    node as u32
                };
                let base = if leaking {
                    200.0 + leak * t_ms as f64 / 3_600_000.0
                } else {
                    200.0
                };
                // Jitter, so the fit has noise to see through.
                let rss = base + ((i * 7 + node) % 5) as f64;
                out.push(Sample {
                    t_ms,
                    node,
                    pid: Some(pid),
                    rss_bytes: Some((rss * MIB) as u64),
                    fds: Some(40 + (i % 3)),
                    data_bytes: Some(1 << 20),
                    mail_bytes: Some(i * 1000),
                    log_bytes: Some(1 << 20),
                    tasks: Some(300 + (i % 4)),
                    // The program's own memory steady: the leak shows
                    // in RSS alone (an allocator keeping freed memory).
                    heap_bytes: Some(((40 + (i % 3)) as f64 * MIB) as u64),
                    groups_loaded: Some(60),
                    groups_led: Some(20),
                });
            }
        }
        out
    }

    #[test]
    fn steady_nodes_pass() {
        let v = check(&run(0.0, true));
        assert_eq!(v.status, Status::Pass, "{v:?}");
    }

    #[test]
    fn a_leak_is_caught_and_named() {
        let v = check(&run(200.0, false));
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(
            v.violations[0].message.starts_with("node 2: rss grew"),
            "{v:?}"
        );
    }

    #[test]
    fn a_node_restarted_every_few_minutes_is_not_judged_on_its_wake_ups() {
        // Node 1 restarts every 400 s; each life ramps its tasks and memory
        // up for three minutes (groups waking), then holds steady.
        let samples: Vec<Sample> = run(0.0, false)
            .into_iter()
            .map(|mut s| {
                if s.node == 1 {
                    let life = s.t_ms / 400_000;
                    let age = (s.t_ms % 400_000).min(170_000) as f64 / 1_000.0;
                    s.pid = Some(100 + life as u32);
                    s.tasks = Some((age * 2.0) as u64);
                    s.rss_bytes = Some(((60.0 + age) * MIB) as u64);
                    s.heap_bytes = Some(((20.0 + age) * MIB) as u64);
                }
                s
            })
            .collect();
        let v = check(&samples);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(v.summary.contains("4 not judged"), "{}", v.summary);
        // Node 1 is judged on its disk and logs only.
        let (fits, _) = fits(&samples);
        let node1: Vec<&str> = fits
            .iter()
            .filter(|f| f.node == 1)
            .map(|f| f.metric)
            .collect();
        assert_eq!(node1, ["data", "log"]);
    }

    #[test]
    fn too_short_a_run_is_not_a_pass() {
        let short: Vec<Sample> = run(0.0, false)
            .into_iter()
            .filter(|s| s.t_ms < 60_000)
            .collect();
        assert_eq!(check(&short).status, Status::Fail);
    }
}
