//! The report's timeline: one SVG, top to bottom a lane of faults, a lane
//! of moves, a lane of leader changes per group, ops and latency per half
//! second, and the time axis they share.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::esc;
use crate::history::{Call, Entry, History, Op, Outcome};

/// Width of the SVG, in pixels.
pub(super) const WIDTH: f64 = 1100.0;
/// Ops and latency are counted per bucket of this many µs (by invoke time).
const BUCKET_US: u64 = 500_000;
/// Height of the ops chart and of the latency chart, in pixels.
const CHART_HEIGHT: f64 = 80.0;

/// Injected faults by id: `(injected at, kind, detail)`.
pub(super) type Injected = BTreeMap<u32, (u64, String, String)>;

/// The faults the history says were injected, and when each was healed
/// (by fault id).
pub(super) fn injected_faults(history: &History) -> (Injected, BTreeMap<u32, u64>) {
    let mut fault_at: Injected = BTreeMap::new();
    let mut heals: BTreeMap<u32, u64> = BTreeMap::new();
    for e in &history.entries {
        match e {
            Entry::Fault {
                t,
                id,
                kind,
                detail,
            } => {
                fault_at.insert(*id, (*t, kind.clone(), detail.clone()));
            }
            Entry::Heal { t, id } => {
                heals.insert(*id, *t);
            }
            _ => {}
        }
    }
    (fault_at, heals)
}

/// The timeline's SVG markup (what goes inside `<svg>`) and its height.
pub(super) fn render(
    history: &History,
    ops: &[Op],
    faults: &Injected,
    heals: &BTreeMap<u32, u64>,
) -> (String, f64) {
    let end_us = history
        .entries
        .iter()
        .map(Entry::t)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut timeline = Timeline {
        svg: String::new(),
        y: 10.0,
        end_us,
    };
    timeline.fault_lane(faults, heals);
    timeline.move_lane(ops);
    timeline.leader_lanes(history);
    let (counts, latencies) = buckets(ops, end_us);
    timeline.ops_chart(&counts);
    timeline.latency_chart(latencies);
    timeline.time_axis();
    (timeline.svg, timeline.y + 10.0)
}

/// The SVG drawn so far and where the next lane starts.
struct Timeline {
    svg: String,
    /// Top of the next lane.
    y: f64,
    /// The right edge: the history's last timestamp (at least 1 µs).
    end_us: u64,
}

impl Timeline {
    /// The x coordinate of time `t` (µs); lanes start right of their labels.
    fn x(&self, t: u64) -> f64 {
        150.0 + (t as f64 / self.end_us as f64) * (WIDTH - 160.0)
    }

    /// A lane's label, at the left, for a lane whose top is `y`.
    fn label(&mut self, label: &str, y: f64) {
        let _ = write!(
            self.svg,
            r##"<text x="4" y="{:.0}" font-size="11">{}</text>"##,
            y + 10.0,
            esc(label)
        );
    }

    /// Faults: one lane, a bar from each injection to its heal (or to the
    /// end), staggered over three rows.
    fn fault_lane(&mut self, faults: &Injected, heals: &BTreeMap<u32, u64>) {
        let y = self.y;
        self.label("faults", y);
        for (i, (id, (t, kind, detail))) in faults.iter().enumerate() {
            let t1 = heals.get(id).copied().unwrap_or(self.end_us);
            let yy = y + (i % 3) as f64 * 9.0;
            let (x0, x1) = (self.x(*t), self.x(t1));
            let _ = write!(
                self.svg,
                r##"<rect x="{x0:.1}" y="{yy:.0}" width="{:.1}" height="8" fill="#d9534f" opacity="0.8"><title>{} {} ({:.1}s–{:.1}s)</title></rect>"##,
                (x1 - x0).max(1.0),
                esc(kind),
                esc(detail),
                *t as f64 / 1e6,
                t1 as f64 / 1e6
            );
        }
        self.y += 34.0;
    }

    /// Moves: one lane, a bar from each move's request to its answer (or
    /// to the end), coloured by outcome.
    fn move_lane(&mut self, ops: &[Op]) {
        let y = self.y;
        self.label("moves", y);
        for o in ops.iter().filter(|o| matches!(o.call, Call::Move { .. })) {
            let t1 = o.completed.unwrap_or(self.end_us);
            let color = match o.outcome {
                Outcome::Ok(_) => "#5cb85c",
                Outcome::Fail { .. } => "#d9534f",
                Outcome::Unknown(_) => "#f0ad4e",
            };
            let (x0, x1) = (self.x(o.invoked), self.x(t1));
            let _ = write!(
                self.svg,
                r##"<rect x="{x0:.1}" y="{y:.0}" width="{:.1}" height="12" fill="{color}"><title>{}</title></rect>"##,
                (x1 - x0).max(1.0),
                esc(&o.label())
            );
        }
        self.y += 22.0;
    }

    /// Leader changes: a lane per group the observer saw, a tick at each
    /// new `(term, leader)`.
    fn leader_lanes(&mut self, history: &History) {
        let y = self.y;
        let groups: BTreeSet<u64> = history
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::Leader { group, .. } => Some(*group),
                _ => None,
            })
            .collect();
        let group_y: BTreeMap<u64, f64> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| (*g, y + i as f64 * 14.0))
            .collect();
        for (g, gy) in &group_y {
            self.label(&format!("leader g{g}"), *gy);
        }
        let mut last: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for e in &history.entries {
            if let Entry::Leader {
                t,
                group,
                leader,
                term,
            } = e
            {
                let changed = last.get(group) != Some(&(*term, *leader));
                if changed {
                    let gy = group_y[group];
                    let x = self.x(*t);
                    let _ = write!(
                        self.svg,
                        r##"<g><rect x="{x:.1}" y="{gy:.0}" width="2" height="12" fill="#337ab7"/><text x="{:.1}" y="{:.0}" font-size="9">n{leader}</text><title>group {group}: node {leader} leads in term {term} at {:.2}s</title></g>"##,
                        x + 3.0,
                        gy + 10.0,
                        *t as f64 / 1e6
                    );
                    last.insert(*group, (*term, *leader));
                }
            }
        }
        self.y += groups.len() as f64 * 14.0 + 8.0;
    }

    /// Ops per bucket, stacked ok / failed / unknown, scaled to the
    /// busiest bucket.
    fn ops_chart(&mut self, counts: &[(u32, u32, u32)]) {
        let y = self.y;
        let h = CHART_HEIGHT;
        let n = counts.len();
        let max = counts
            .iter()
            .map(|c| c.0 + c.1 + c.2)
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        self.label("ops / 0.5 s", y);
        let bw = ((WIDTH - 160.0) / n as f64).max(1.0);
        for (i, (ok, fail, info)) in counts.iter().enumerate() {
            let bx = self.x(i as u64 * BUCKET_US);
            let mut base = y + h;
            for (v, color) in [(*ok, "#5cb85c"), (*fail, "#999"), (*info, "#f0ad4e")] {
                let hh = v as f64 / max * h;
                if hh > 0.0 {
                    let _ = write!(
                        self.svg,
                        r##"<rect x="{bx:.1}" y="{:.1}" width="{bw:.1}" height="{hh:.1}" fill="{color}"><title>{:.1}s: {ok} ok, {fail} fail, {info} unknown</title></rect>"##,
                        base - hh,
                        i as f64 * 0.5
                    );
                }
                base -= hh;
            }
        }
        self.y += h + 10.0;
    }

    /// Latency per bucket: a p50 and a p99 line, scaled to the largest p99
    /// (at least 1 ms).
    fn latency_chart(&mut self, mut latencies: Vec<Vec<u64>>) {
        let y = self.y;
        let h = CHART_HEIGHT;
        self.label("p50 / p99 ms", y);
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        for (i, v) in latencies.iter_mut().enumerate() {
            if let (Some(a), Some(b)) = (percentile_ms(v, 0.5), percentile_ms(v, 0.99)) {
                p50.push((i, a));
                p99.push((i, b));
            }
        }
        let lmax = p99.iter().map(|(_, v)| *v).fold(1.0, f64::max);
        for (series, color) in [(&p50, "#337ab7"), (&p99, "#d9534f")] {
            let pts: Vec<String> = series
                .iter()
                .map(|(i, v)| {
                    format!(
                        "{:.1},{:.1}",
                        self.x(*i as u64 * BUCKET_US),
                        y + h - v / lmax * h
                    )
                })
                .collect();
            let _ = write!(
                self.svg,
                r##"<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{}"/>"##,
                pts.join(" ")
            );
        }
        let _ = write!(
            self.svg,
            r##"<text x="150" y="{:.0}" font-size="9">max {lmax:.0} ms</text>"##,
            y + 8.0
        );
        self.y += h + 20.0;
    }

    /// The time axis: a label in whole seconds about every tenth of the run.
    fn time_axis(&mut self) {
        let y = self.y;
        let secs = self.end_us / 1_000_000;
        let step = (secs / 10).max(1);
        for s in (0..=secs).step_by(step as usize) {
            let x = self.x(s * 1_000_000);
            let _ = write!(
                self.svg,
                r##"<text x="{x:.1}" y="{y:.0}" font-size="9">{s}s</text>"##
            );
        }
        self.y += 10.0;
    }
}

/// Ops of one bucket: `(ok, failed, unknown)`.
type Counts = (u32, u32, u32);

/// Per bucket of `BUCKET_US`, by invoke time up to `end_us`: the ops'
/// [`Counts`], and the latencies (µs) of those that completed.
fn buckets(ops: &[Op], end_us: u64) -> (Vec<Counts>, Vec<Vec<u64>>) {
    let n = (end_us / BUCKET_US + 1) as usize;
    let mut counts = vec![(0u32, 0u32, 0u32); n];
    let mut latencies: Vec<Vec<u64>> = vec![Vec::new(); n];
    for o in ops {
        let b = (o.invoked / BUCKET_US) as usize;
        if b >= n {
            continue;
        }
        match o.outcome {
            Outcome::Ok(_) => counts[b].0 += 1,
            Outcome::Fail { .. } => counts[b].1 += 1,
            Outcome::Unknown(_) => counts[b].2 += 1,
        }
        if let Some(c) = o.completed {
            latencies[b].push(c - o.invoked);
        }
    }
    (counts, latencies)
}

/// The `p` quantile of the latencies `v` (µs, sorted in place), in ms;
/// `None` when there are none.
fn percentile_ms(v: &mut [u64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[((v.len() - 1) as f64 * p) as usize] as f64 / 1e3)
}
