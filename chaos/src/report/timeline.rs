//! The timeline's canvas, shared by every timeline SVG so that they line
//! up on one time scale: the width and margins, time → x, lane and row
//! labels, labelled bars (and the rows their labels are laid out in, so
//! that no two overlap), the time axis, the dashed marks of flagged ops
//! and the `<svg>` element around it all. What is drawn on it: the
//! overview (throughput, latency, faults, moves; `overview`) and the
//! leader rows (`leaders`). The drill writes the timeline into
//! `report.html` and on its own as `timeline.svg`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::esc;
use super::series::nice_ceiling;
use crate::check::{Verdict, Violation};
use crate::history::{Entry, History, Op};

/// Width of every timeline SVG, in its own units; `report.html` scales
/// each to the page's width, so all keep one time scale.
pub(super) const WIDTH: f64 = 1280.0;
/// Lanes start right of their labels and scales...
pub(super) const LEFT: f64 = 190.0;
/// ...and end here, leaving room for the last time label.
pub(super) const RIGHT: f64 = WIDTH - 40.0;
/// Width of one character at font-size 9, for fitting labels.
pub(super) const CHAR_W: f64 = 6.0;
/// Characters of a row label (font-size 10, about 5.8 wide each) that
/// fit left of the lanes.
pub(super) const LABEL_CHARS: usize = 31;
/// Height of a row of labelled bars.
pub(super) const BAR_ROW: f64 = 12.0;
/// Violating ops marked on the timeline; the report lists them all.
const VIOLATIONS_MARKED: usize = 100;

pub(super) const LEADER: &str = "#337ab7";
pub(super) const VIOLATION: &str = "#c9302c";

/// Injected faults by id: `(injected at, kind, detail)`.
pub(super) type Injected = BTreeMap<u32, (u64, String, String)>;

/// An op a checker flagged: the op, the checker, what it found.
pub(super) type Flag<'a> = (&'a Op, &'a str, &'a Violation);

/// How a timeline SVG sizes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Size {
    /// In `report.html`: as wide as the page, scaled from `WIDTH` (text
    /// and all, so labels laid out apart stay apart), its height
    /// following.
    Fluid,
    /// A file of its own: `WIDTH` by its height, in pixels.
    Fixed,
}

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
            // Injected, but nothing came of it: say so wherever the fault
            // is shown (coverage counts it as not injected).
            Entry::NoEffect { id, reason, .. } => {
                if let Some((_, _, detail)) = fault_at.get_mut(id) {
                    detail.push_str(&format!(" (NO EFFECT: {reason})"));
                }
            }
            _ => {}
        }
    }
    (fault_at, heals)
}

/// The timeline's right edge: the history's last timestamp (at least
/// 1 µs).
pub(super) fn end_us(history: &History) -> u64 {
    history
        .entries
        .iter()
        .map(Entry::t)
        .max()
        .unwrap_or(1)
        .max(1)
}

/// The ops the checkers flagged (the first `VIOLATIONS_MARKED` of them),
/// by invoke time.
pub(super) fn flagged<'a>(ops: &'a [Op], verdicts: &'a [Verdict]) -> Vec<Flag<'a>> {
    let by_op: BTreeMap<u64, &'a Op> = ops.iter().map(|o| (o.op, o)).collect();
    let mut flagged: Vec<Flag<'a>> = verdicts
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
    flagged
}

/// `text` cut to at most `max` characters, ending in `…` where cut.
pub(super) fn fit(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// An SVG being drawn top to bottom, on the time scale of one run.
pub(super) struct Canvas {
    pub svg: String,
    /// Top of the next lane.
    pub y: f64,
    /// The right edge: the run's last timestamp (µs, at least 1).
    pub end_us: u64,
}

impl Canvas {
    pub fn new(end_us: u64) -> Canvas {
        Canvas {
            svg: String::new(),
            y: 6.0,
            end_us: end_us.max(1),
        }
    }

    /// The x coordinate of time `t` (µs).
    pub fn x(&self, t: u64) -> f64 {
        LEFT + (t as f64 / self.end_us as f64) * (RIGHT - LEFT)
    }

    /// A lane's label, at the left, for a lane whose top is `y`.
    pub fn label(&mut self, label: &str, y: f64) {
        let _ = write!(
            self.svg,
            r##"<text x="4" y="{:.0}" font-size="11">{}</text>"##,
            y + 10.0,
            esc(label)
        );
    }

    /// A group row's label (at most `LABEL_CHARS` long) for a row whose
    /// top is `y`, `about` on hover.
    pub fn row_label(&mut self, label: &str, about: &str, y: f64) {
        let _ = write!(
            self.svg,
            r##"<text x="4" y="{:.0}" font-size="10">{}<title>{}</title></text>"##,
            y + 10.0,
            esc(label),
            esc(about)
        );
    }

    /// A bar from `x0` to `x1` with its top at `y`, `label` drawn from the
    /// x given with it, `title` on hover.
    pub fn bar(
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

    /// The time axis at `y`: a line, and a tick and a label every round
    /// number of seconds (about ten of them) under it.
    pub fn time_axis(&mut self) {
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

    /// A dashed red line from `top` to `bottom` at each flagged op, the
    /// checker and the op on hover; `labelled`: each also named
    /// (`✗ checker`, just above `top`) where the name does not run into
    /// the previous one's.
    pub fn marks(&mut self, flags: &[Flag<'_>], top: f64, bottom: f64, labelled: bool) {
        let mut label_end = f64::MIN;
        for (o, checker, viol) in flags {
            let x = self.x(o.invoked);
            let _ = write!(
                self.svg,
                r##"<g><line x1="{x:.1}" x2="{x:.1}" y1="{top:.0}" y2="{bottom:.0}" stroke="{VIOLATION}" stroke-dasharray="3,2" stroke-width="1.5"/>"##
            );
            if labelled && x - 3.0 > label_end {
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

    /// The `<svg>` element: what was drawn, on white, sized by `size`,
    /// ending 6 below the last lane.
    pub fn finish(self, size: Size) -> String {
        let height = self.y + 6.0;
        let dims = match size {
            Size::Fluid => {
                r#"class="tl" width="100%" preserveAspectRatio="xMinYMin meet""#.to_string()
            }
            Size::Fixed => format!(r#"width="{WIDTH}" height="{height:.0}""#),
        };
        format!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" {dims} viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif"><rect width="100%" height="100%" fill="#fff"/>{}</svg>"##,
            self.svg
        )
    }
}

/// Labelled bars staggered over rows, as many as needed up to `max`: each
/// bar goes in the first row whose last bar and label end before the bar
/// and its label start, else in a new row; with all `max` rows taken, in
/// the one that ends first, its label kept to its tooltip. So no label
/// ever overlaps another.
pub(super) struct Rows {
    ends: Vec<f64>,
    max: usize,
}

impl Rows {
    pub fn new(max: usize) -> Rows {
        Rows {
            ends: Vec::new(),
            max: max.max(1),
        }
    }

    /// How many rows the bars so far take (at least one, for an empty
    /// lane).
    pub fn used(&self) -> usize {
        self.ends.len().max(1)
    }

    /// The row for a bar from `x0` to `x1` whose label is `label_w` wide,
    /// and where its label starts (at the bar, or further left near the
    /// right edge so it stays inside), if it is drawn.
    pub fn place(&mut self, x0: f64, x1: f64, label_w: f64) -> (usize, Option<f64>) {
        let lx = (x0 + 2.0).min(WIDTH - 2.0 - label_w).max(LEFT);
        let end = x1.max(lx + label_w + 4.0);
        if let Some(row) = self.ends.iter().position(|e| *e < x0.min(lx)) {
            self.ends[row] = end;
            return (row, Some(lx));
        }
        if self.ends.len() < self.max {
            self.ends.push(end);
            return (self.ends.len() - 1, Some(lx));
        }
        let row = (0..self.ends.len())
            .min_by(|a, b| self.ends[*a].total_cmp(&self.ends[*b]))
            .unwrap_or(0);
        self.ends[row] = self.ends[row].max(x1);
        (row, None)
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
        assert_eq!(rows.used(), 2);
        // A label that would run off the right edge ends inside it.
        let mut rows = Rows::new(1);
        assert_eq!(
            rows.place(WIDTH - 20.0, WIDTH - 10.0, 100.0).1,
            Some(WIDTH - 102.0)
        );
    }

    #[test]
    fn rows_are_added_only_as_labels_need_them() {
        let mut rows = Rows::new(8);
        assert_eq!(rows.used(), 1);
        // Five faults at once: a row each, every label drawn.
        for row in 0..5 {
            assert_eq!(rows.place(400.0, 600.0, 120.0), (row, Some(402.0)));
        }
        // A later one fits the first row again.
        assert_eq!(rows.place(700.0, 720.0, 120.0), (0, Some(702.0)));
        assert_eq!(rows.used(), 5);
    }

    #[test]
    fn long_labels_are_cut() {
        assert_eq!(fit("chaos-g1-hot-a", 31), "chaos-g1-hot-a");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abcdef", 4).chars().count(), 4);
    }
}
