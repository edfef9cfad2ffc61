//! The report's timeline: one SVG, top to bottom a legend, a lane of
//! faults and one of moves (each bar labelled), a lane of leader changes
//! per group, ops and latency per half second (each with its y scale),
//! and the time axis they share; a dashed red line marks every op a
//! checker found violating. The drill writes it into `report.html` and on
//! its own as `timeline.svg`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::esc;
use super::series::{buckets, fmt_value, nice_ceiling, percentile_ms, Counts, BUCKET_US};
use crate::check::{Verdict, Violation};
use crate::history::{Call, Entry, History, Op, Outcome};

/// Width of the SVG, in pixels.
const WIDTH: f64 = 1100.0;
/// Lanes start right of their labels and scales...
const LEFT: f64 = 150.0;
/// ...and end here, leaving room for the last time label.
const RIGHT: f64 = WIDTH - 40.0;
/// Width of one character at font-size 9, for fitting labels.
const CHAR_W: f64 = 6.0;
/// Height of the ops chart and of the latency chart, in pixels.
const CHART_HEIGHT: f64 = 80.0;
/// Violating ops marked on the timeline; the checkers table lists them all.
const VIOLATIONS_MARKED: usize = 100;

const FAULT: &str = "#d9534f";
const MOVE_DONE: &str = "#5cb85c";
const MOVE_REFUSED: &str = "#8e44ad";
const UNKNOWN: &str = "#f0ad4e";
const LEADER: &str = "#337ab7";
const OK: &str = "#5cb85c";
const REFUSED: &str = "#9fc5e8";
const FAILED: &str = "#999";
const P50: &str = "#337ab7";
const P99: &str = "#d9534f";
const VIOLATION: &str = "#c9302c";

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

/// The timeline as a standalone SVG document with a `viewBox`, so it
/// scales down to fit its container instead of being clipped, on a white
/// background.
pub(super) fn render(
    history: &History,
    ops: &[Op],
    verdicts: &[Verdict],
    faults: &Injected,
    heals: &BTreeMap<u32, u64>,
) -> String {
    let end_us = history
        .entries
        .iter()
        .map(Entry::t)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut timeline = Timeline {
        svg: String::new(),
        y: 6.0,
        end_us,
    };
    timeline.legend();
    if verdicts.iter().any(|v| !v.violations.is_empty()) {
        // A row for the violation marks' labels.
        timeline.label("flagged", timeline.y - 2.0);
        timeline.y += 12.0;
    }
    let lanes_top = timeline.y;
    timeline.fault_lane(faults, heals);
    timeline.move_lane(ops);
    timeline.leader_lanes(history);
    let (counts, latencies) = buckets(ops, end_us);
    timeline.ops_chart(&counts);
    timeline.latency_chart(latencies);
    let lanes_bottom = timeline.y;
    timeline.time_axis();
    timeline.violations(ops, verdicts, lanes_top, lanes_bottom);
    let height = timeline.y + 6.0;
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif"><rect width="100%" height="100%" fill="#fff"/>{}</svg>"##,
        timeline.svg
    )
}

/// The SVG drawn so far and where the next lane starts.
struct Timeline {
    svg: String,
    /// Top of the next lane.
    y: f64,
    /// The right edge: the history's last timestamp (at least 1 µs).
    end_us: u64,
}

/// Labelled bars staggered over a few rows: each bar goes in the first row
/// whose last bar or label ends before it starts; a bar that fits no row
/// goes in the emptiest one and keeps its label only in its tooltip.
struct Rows {
    ends: Vec<f64>,
}

impl Rows {
    fn new(n: usize) -> Rows {
        Rows {
            ends: vec![f64::MIN; n],
        }
    }

    /// The row for a bar from `x0` to `x1` whose label is `label_w` wide,
    /// and where its label starts (at the bar, or further left near the
    /// right edge so it stays inside), if it is drawn.
    fn place(&mut self, x0: f64, x1: f64, label_w: f64) -> (usize, Option<f64>) {
        let lx = (x0 + 2.0).min(WIDTH - 2.0 - label_w).max(LEFT);
        let end = x1.max(lx + label_w + 4.0);
        if let Some(row) = self.ends.iter().position(|e| *e < x0.min(lx)) {
            self.ends[row] = end;
            return (row, Some(lx));
        }
        let row = (0..self.ends.len())
            .min_by(|a, b| self.ends[*a].total_cmp(&self.ends[*b]))
            .unwrap_or(0);
        self.ends[row] = self.ends[row].max(x1);
        (row, None)
    }
}

impl Timeline {
    /// The x coordinate of time `t` (µs).
    fn x(&self, t: u64) -> f64 {
        LEFT + (t as f64 / self.end_us as f64) * (RIGHT - LEFT)
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

    /// What every colour and mark means, in two rows: the lanes, then the
    /// charts.
    fn legend(&mut self) {
        let rows: [&[(&str, &str, &str)]; 2] = [
            &[
                ("bar", FAULT, "fault (injected → healed)"),
                ("bar", MOVE_DONE, "move done"),
                ("bar", MOVE_REFUSED, "move refused or failed"),
                ("bar", UNKNOWN, "move unknown"),
                ("tick", LEADER, "new leader (node)"),
                ("dash", VIOLATION, "op a checker flagged"),
            ],
            &[
                ("bar", OK, "ops ok"),
                ("bar", REFUSED, "refused by design"),
                ("bar", FAILED, "failed"),
                ("bar", UNKNOWN, "unknown"),
                ("line", P50, "latency p50"),
                ("line", P99, "latency p99"),
            ],
        ];
        for items in rows {
            let y = self.y;
            let mut x = LEFT;
            for (mark, color, text) in items {
                let _ = match *mark {
                    "bar" => write!(
                        self.svg,
                        r##"<rect x="{x:.0}" y="{y:.0}" width="14" height="9" fill="{color}"/>"##
                    ),
                    "tick" => write!(
                        self.svg,
                        r##"<rect x="{:.0}" y="{y:.0}" width="2" height="10" fill="{color}"/>"##,
                        x + 6.0
                    ),
                    "dash" => write!(
                        self.svg,
                        r##"<line x1="{0:.0}" x2="{0:.0}" y1="{y:.0}" y2="{1:.0}" stroke="{color}" stroke-dasharray="2,2" stroke-width="1.5"/>"##,
                        x + 7.0,
                        y + 10.0
                    ),
                    _ => write!(
                        self.svg,
                        r##"<line x1="{x:.0}" x2="{:.0}" y1="{1:.0}" y2="{1:.0}" stroke="{color}" stroke-width="1.5"/>"##,
                        x + 14.0,
                        y + 5.0
                    ),
                };
                let _ = write!(
                    self.svg,
                    r##"<text x="{:.0}" y="{:.0}" font-size="10">{}</text>"##,
                    x + 18.0,
                    y + 9.0,
                    esc(text)
                );
                x += 18.0 + text.len() as f64 * 5.6 + 16.0;
            }
            self.y += 15.0;
        }
        self.y += 6.0;
    }

    /// A bar from `x0` to `x1` with its top at `y`, `label` drawn from the
    /// x given with it, `title` on hover.
    fn bar(
        &mut self,
        y: f64,
        x0: f64,
        x1: f64,
        color: &str,
        label: Option<(f64, &str)>,
        title: &str,
    ) {
        let _ = write!(
            self.svg,
            r##"<g><rect x="{x0:.1}" y="{y:.0}" width="{:.1}" height="10" fill="{color}" opacity="0.75"/>"##,
            (x1 - x0).max(1.5)
        );
        if let Some((lx, label)) = label {
            let _ = write!(
                self.svg,
                r##"<text x="{lx:.1}" y="{:.0}" font-size="9" fill="#222">{}</text>"##,
                y + 8.0,
                esc(label)
            );
        }
        let _ = write!(self.svg, "<title>{}</title></g>", esc(title));
    }

    /// Faults: bars from each injection to its heal (or to the end),
    /// labelled with the fault's kind.
    fn fault_lane(&mut self, faults: &Injected, heals: &BTreeMap<u32, u64>) {
        const ROWS: usize = 4;
        let y = self.y;
        self.label("faults", y);
        let mut rows = Rows::new(ROWS);
        for (id, (t, kind, detail)) in faults {
            let t1 = heals.get(id).copied().unwrap_or(self.end_us);
            let (x0, x1) = (self.x(*t), self.x(t1));
            let (row, lx) = rows.place(x0, x1, kind.len() as f64 * CHAR_W);
            let title = format!(
                "fault {id}: {kind} {detail} ({:.1}s–{:.1}s)",
                *t as f64 / 1e6,
                t1 as f64 / 1e6
            );
            let label = lx.map(|lx| (lx, kind.as_str()));
            self.bar(y + row as f64 * 12.0, x0, x1, FAULT, label, &title);
        }
        self.y += ROWS as f64 * 12.0 + 6.0;
    }

    /// Moves: bars from each move's request to its answer (or to the end),
    /// coloured by outcome and labelled `event → region`.
    fn move_lane(&mut self, ops: &[Op]) {
        const ROWS: usize = 3;
        let y = self.y;
        self.label("moves", y);
        let mut rows = Rows::new(ROWS);
        for o in ops {
            let Call::Move { event, to } = &o.call else {
                continue;
            };
            let t1 = o.completed.unwrap_or(self.end_us);
            let color = match o.outcome {
                Outcome::Ok(_) => MOVE_DONE,
                Outcome::Fail { .. } => MOVE_REFUSED,
                Outcome::Unknown(_) => UNKNOWN,
            };
            let (x0, x1) = (self.x(o.invoked), self.x(t1));
            let text = format!("{event} → {to}");
            let (row, lx) = rows.place(x0, x1, text.chars().count() as f64 * CHAR_W);
            let label = lx.map(|lx| (lx, text.as_str()));
            self.bar(y + row as f64 * 12.0, x0, x1, color, label, &o.label());
        }
        self.y += ROWS as f64 * 12.0 + 6.0;
    }

    /// Leader changes: a lane per Raft group the observer saw, a tick at
    /// each new `(term, leader)`, named by node where there is room.
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
            match *g {
                0 => self.label("directory (group 0)", *gy),
                g => self.label(&format!("Raft group {g}"), *gy),
            }
        }
        let mut last: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        let mut label_end: BTreeMap<u64, f64> = BTreeMap::new();
        for e in &history.entries {
            let Entry::Leader {
                t,
                group,
                leader,
                term,
            } = e
            else {
                continue;
            };
            if last.get(group) == Some(&(*term, *leader)) {
                continue;
            }
            last.insert(*group, (*term, *leader));
            let (gy, x) = (group_y[group], self.x(*t));
            let _ = write!(
                self.svg,
                r##"<g><rect x="{x:.1}" y="{gy:.0}" width="2" height="12" fill="{LEADER}"/>"##
            );
            let name = format!("n{leader}");
            let end = label_end.entry(*group).or_insert(f64::MIN);
            if x + 3.0 > *end {
                *end = x + 3.0 + name.len() as f64 * CHAR_W;
                let _ = write!(
                    self.svg,
                    r##"<text x="{:.1}" y="{:.0}" font-size="9">{name}</text>"##,
                    x + 3.0,
                    gy + 10.0
                );
            }
            let _ = write!(
                self.svg,
                "<title>group {group}: node {leader} leads in term {term} at {:.2}s</title></g>",
                *t as f64 / 1e6
            );
        }
        self.y += groups.len() as f64 * 14.0 + 8.0;
    }

    /// A chart's y scale: grid lines and values at 0, half and `max`, to
    /// the left of the chart whose top is `y`.
    fn y_scale(&mut self, y: f64, max: f64, unit: &str) {
        for frac in [0.0, 0.5, 1.0] {
            let yy = y + CHART_HEIGHT - frac * CHART_HEIGHT;
            let _ = write!(
                self.svg,
                r##"<line x1="{LEFT}" x2="{RIGHT}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd" stroke-width="0.5"/><text x="{:.0}" y="{:.1}" font-size="9" text-anchor="end">{}{unit}</text>"##,
                LEFT - 4.0,
                yy + 3.0,
                fmt_value(max * frac)
            );
        }
    }

    /// Ops per bucket, stacked ok / refused / failed / unknown, on a scale
    /// rounded up from the busiest bucket.
    fn ops_chart(&mut self, counts: &[Counts]) {
        let y = self.y;
        let h = CHART_HEIGHT;
        let busiest = counts.iter().map(Counts::total).max().unwrap_or(1);
        let max = nice_ceiling(busiest as f64);
        self.label("ops per 0.5 s", y);
        self.y_scale(y, max, "");
        let bw = ((RIGHT - LEFT) / counts.len() as f64).max(1.0);
        for (i, c) in counts.iter().enumerate() {
            let bx = self.x(i as u64 * BUCKET_US);
            let mut base = y + h;
            let title = format!(
                "{:.1}s: {} ok, {} refused, {} failed, {} unknown",
                i as f64 * 0.5,
                c.ok,
                c.refused,
                c.failed,
                c.unknown
            );
            let _ = write!(self.svg, "<g>");
            for (v, color) in [
                (c.ok, OK),
                (c.refused, REFUSED),
                (c.failed, FAILED),
                (c.unknown, UNKNOWN),
            ] {
                let hh = f64::from(v) / max * h;
                if hh > 0.0 {
                    let _ = write!(
                        self.svg,
                        r##"<rect x="{bx:.1}" y="{:.1}" width="{bw:.1}" height="{hh:.1}" fill="{color}"/>"##,
                        base - hh
                    );
                }
                base -= hh;
            }
            let _ = write!(self.svg, "<title>{title}</title></g>");
        }
        self.y += h + 12.0;
    }

    /// Latency per bucket: a p50 and a p99 line, on a scale rounded up
    /// from the largest p99 (at least 1 ms).
    fn latency_chart(&mut self, mut latencies: Vec<Vec<u64>>) {
        let y = self.y;
        let h = CHART_HEIGHT;
        self.label("latency", y);
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        for (i, v) in latencies.iter_mut().enumerate() {
            if let (Some(a), Some(b)) = (percentile_ms(v, 0.5), percentile_ms(v, 0.99)) {
                p50.push((i, a));
                p99.push((i, b));
            }
        }
        let max = nice_ceiling(p99.iter().map(|(_, v)| *v).fold(1.0, f64::max));
        self.y_scale(y, max, " ms");
        for (series, color) in [(&p50, P50), (&p99, P99)] {
            let pts: Vec<String> = series
                .iter()
                .map(|(i, v)| {
                    format!(
                        "{:.1},{:.1}",
                        self.x(*i as u64 * BUCKET_US),
                        y + h - v / max * h
                    )
                })
                .collect();
            let _ = write!(
                self.svg,
                r##"<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{}"/>"##,
                pts.join(" ")
            );
        }
        self.y += h + 8.0;
    }

    /// The time axis: a tick and a label every round number of seconds,
    /// about ten of them, and the end of the run.
    fn time_axis(&mut self) {
        let y = self.y;
        let _ = write!(
            self.svg,
            r##"<line x1="{LEFT}" x2="{RIGHT}" y1="{y:.0}" y2="{y:.0}" stroke="#666" stroke-width="0.8"/>"##
        );
        let secs = self.end_us as f64 / 1e6;
        let step = nice_ceiling(secs / 10.0).max(1.0) as u64;
        let mut s = 0;
        while (s as f64) <= secs {
            let x = self.x(s * 1_000_000);
            let _ = write!(
                self.svg,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{y:.0}" y2="{:.0}" stroke="#666" stroke-width="0.8"/><text x="{x:.1}" y="{:.0}" font-size="9" text-anchor="middle">{s}s</text>"##,
                y + 4.0,
                y + 14.0
            );
            s += step;
        }
        self.y += 18.0;
    }

    /// A dashed red line down every lane at each op a checker flagged
    /// (the first `VIOLATIONS_MARKED`), the checker and the op on hover.
    fn violations(&mut self, ops: &[Op], verdicts: &[Verdict], top: f64, bottom: f64) {
        let by_op: BTreeMap<u64, &Op> = ops.iter().map(|o| (o.op, o)).collect();
        let mut flagged: Vec<(&Op, &str, &Violation)> = verdicts
            .iter()
            .flat_map(|v| {
                v.violations.iter().flat_map(move |viol| {
                    viol.ops
                        .iter()
                        .map(move |op| (op, v.checker.as_str(), viol))
                })
            })
            .filter_map(|(op, checker, viol)| Some((*by_op.get(op)?, checker, viol)))
            .take(VIOLATIONS_MARKED)
            .collect();
        flagged.sort_by_key(|(o, _, _)| o.invoked);
        // A mark is named (`✗ checker`) where the name does not run into
        // the previous one's; the others are lines only.
        let mut label_end = f64::MIN;
        for (o, checker, viol) in flagged {
            let x = self.x(o.invoked);
            let _ = write!(
                self.svg,
                r##"<g><line x1="{x:.1}" x2="{x:.1}" y1="{top:.0}" y2="{bottom:.0}" stroke="{VIOLATION}" stroke-dasharray="3,2" stroke-width="1.5"/>"##
            );
            if x - 3.0 > label_end {
                let text = format!("✗ {checker}");
                label_end = x - 3.0 + text.chars().count() as f64 * CHAR_W + 4.0;
                let _ = write!(
                    self.svg,
                    r##"<text x="{:.1}" y="{:.0}" font-size="9" fill="{VIOLATION}">{}</text>"##,
                    x - 3.0,
                    top - 3.0,
                    esc(&text)
                );
            }
            let _ = write!(
                self.svg,
                "<title>{}: {}&#10;{}</title></g>",
                esc(checker),
                esc(&viol.message),
                esc(&o.label())
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_never_overlap_in_a_row() {
        let mut rows = Rows::new(2);
        // Two bars far apart share the first row, labels and all.
        assert_eq!(rows.place(200.0, 210.0, 50.0), (0, Some(202.0)));
        assert_eq!(rows.place(300.0, 310.0, 50.0), (0, Some(302.0)));
        // One that starts under the last label goes to the next row...
        assert_eq!(rows.place(320.0, 330.0, 50.0), (1, Some(322.0)));
        // ...and one with no free row keeps its label to its tooltip.
        assert_eq!(rows.place(325.0, 335.0, 50.0).1, None);
        // A label that would run off the right edge ends inside it.
        let mut rows = Rows::new(1);
        assert_eq!(
            rows.place(WIDTH - 20.0, WIDTH - 10.0, 100.0).1,
            Some(WIDTH - 102.0)
        );
    }
}
