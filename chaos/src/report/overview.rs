//! The top of the timeline, what an operator looks for first: the faults
//! and the moves as labelled bars, throughput (ops per second by how they
//! ended) and latency (p50, p99) with every fault shaded behind them, all
//! over one time axis; a dashed line down all of it at each op a checker
//! flagged.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::series::{buckets, fmt_value, nice_ceiling, percentile_ms, Counts, BUCKET_US};
use super::timeline::{
    Canvas, Flag, Injected, Rows, BAR_ROW, CHAR_W, LEADER, LEFT, RIGHT, VIOLATION,
};
use crate::history::{Call, Op, Outcome};

/// Height of the ops chart and of the latency chart.
const CHART_HEIGHT: f64 = 80.0;
/// Space under the ops chart...
const OPS_GAP: f64 = 12.0;
/// ...and under the latency chart.
const LATENCY_GAP: f64 = 8.0;
/// Rows of fault bars at most: labels that fit none are kept to their
/// tooltips.
const FAULT_ROWS: usize = 8;
/// Rows of move bars at most.
const MOVE_ROWS: usize = 6;

const FAULT: &str = "#d9534f";
const MOVE_DONE: &str = "#5cb85c";
const MOVE_REFUSED: &str = "#8e44ad";
const UNKNOWN: &str = "#f0ad4e";
const OK: &str = "#5cb85c";
const REFUSED: &str = "#9fc5e8";
const FAILED: &str = "#999";
const P50: &str = "#337ab7";
const P99: &str = "#d9534f";

/// Draw the overview on `c` from its `y`: a legend, a row for the flagged
/// ops' names, the fault and move lanes, the ops and latency charts with
/// the faults shaded behind them, and the time axis they all share.
pub(super) fn draw(
    c: &mut Canvas,
    ops: &[Op],
    flags: &[Flag<'_>],
    faults: &Injected,
    heals: &BTreeMap<u32, u64>,
) {
    legend(c);
    if !flags.is_empty() {
        // A row for the flagged ops' names.
        let y = c.y - 2.0;
        c.label("flagged", y);
        c.y += 12.0;
    }
    let top = c.y;
    fault_lane(c, faults, heals);
    move_lane(c, ops);
    fault_bands(c, faults, heals, 2.0 * CHART_HEIGHT + OPS_GAP);
    let (counts, latencies) = buckets(ops, c.end_us);
    ops_chart(c, &counts);
    latency_chart(c, latencies);
    let bottom = c.y;
    c.time_axis();
    c.marks(flags, top, bottom, true);
}

/// What every colour and mark means, in two rows: the lanes, then the
/// charts.
fn legend(c: &mut Canvas) {
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
        let y = c.y;
        let mut x = LEFT;
        for (mark, color, text) in items {
            let _ = match *mark {
                "bar" => write!(
                    c.svg,
                    r##"<rect x="{x:.0}" y="{y:.0}" width="14" height="9" fill="{color}"/>"##
                ),
                "tick" => write!(
                    c.svg,
                    r##"<rect x="{:.0}" y="{y:.0}" width="2" height="10" fill="{color}"/>"##,
                    x + 6.0
                ),
                "dash" => write!(
                    c.svg,
                    r##"<line x1="{0:.0}" x2="{0:.0}" y1="{y:.0}" y2="{1:.0}" stroke="{color}" stroke-dasharray="2,2" stroke-width="1.5"/>"##,
                    x + 7.0,
                    y + 10.0
                ),
                _ => write!(
                    c.svg,
                    r##"<line x1="{x:.0}" x2="{:.0}" y1="{1:.0}" y2="{1:.0}" stroke="{color}" stroke-width="1.5"/>"##,
                    x + 14.0,
                    y + 5.0
                ),
            };
            let _ = write!(
                c.svg,
                r##"<text x="{:.0}" y="{:.0}" font-size="10">{}</text>"##,
                x + 18.0,
                y + 9.0,
                super::esc(text)
            );
            x += 18.0 + text.len() as f64 * 5.6 + 16.0;
        }
        c.y += 15.0;
    }
    c.y += 6.0;
}

/// Faults: bars from each injection to its heal (or to the end),
/// labelled with the fault's kind, in as many rows as the labels need.
fn fault_lane(c: &mut Canvas, faults: &Injected, heals: &BTreeMap<u32, u64>) {
    let y = c.y;
    c.label("faults", y);
    let mut rows = Rows::new(FAULT_ROWS);
    for (id, (t, kind, detail)) in faults {
        let t1 = heals.get(id).copied().unwrap_or(c.end_us);
        let (x0, x1) = (c.x(*t), c.x(t1));
        let (row, lx) = rows.place(x0, x1, kind.chars().count() as f64 * CHAR_W);
        let title = format!(
            "fault {id}: {kind} {detail} ({:.1}s–{:.1}s)",
            *t as f64 / 1e6,
            t1 as f64 / 1e6
        );
        let label = lx.map(|lx| (lx, kind.as_str()));
        c.bar(y + row as f64 * BAR_ROW, x0, x1, FAULT, label, &title);
    }
    c.y += rows.used() as f64 * BAR_ROW + 6.0;
}

/// Moves: bars from each move's request to its answer (or to the end),
/// coloured by outcome and labelled `event → region`.
fn move_lane(c: &mut Canvas, ops: &[Op]) {
    let y = c.y;
    c.label("moves", y);
    let mut rows = Rows::new(MOVE_ROWS);
    for o in ops {
        let Call::Move { event, to } = &o.call else {
            continue;
        };
        let t1 = o.completed.unwrap_or(c.end_us);
        let color = match o.outcome {
            Outcome::Ok(_) => MOVE_DONE,
            Outcome::Fail { .. } => MOVE_REFUSED,
            Outcome::Unknown(_) => UNKNOWN,
        };
        let (x0, x1) = (c.x(o.invoked), c.x(t1));
        let text = format!("{event} → {to}");
        let (row, lx) = rows.place(x0, x1, text.chars().count() as f64 * CHAR_W);
        let label = lx.map(|lx| (lx, text.as_str()));
        c.bar(y + row as f64 * BAR_ROW, x0, x1, color, label, &o.label());
    }
    c.y += rows.used() as f64 * BAR_ROW + 6.0;
}

/// Each fault shaded from its injection to its heal (or to the end), over
/// a band `h` tall from `c.y`, behind the charts drawn next.
fn fault_bands(c: &mut Canvas, faults: &Injected, heals: &BTreeMap<u32, u64>, h: f64) {
    let y = c.y;
    for (id, (t, _, _)) in faults {
        let t1 = heals.get(id).copied().unwrap_or(c.end_us);
        let (x0, x1) = (c.x(*t), c.x(t1));
        let _ = write!(
            c.svg,
            r##"<rect x="{x0:.1}" y="{y:.0}" width="{:.1}" height="{h:.0}" fill="{FAULT}" opacity="0.08" pointer-events="none"/>"##,
            (x1 - x0).max(1.0)
        );
    }
}

/// Where bucket `i` starts, and how wide it is (cut at the right edge).
fn bucket_span(c: &Canvas, i: usize) -> (f64, f64) {
    let t0 = i as u64 * BUCKET_US;
    let x0 = c.x(t0);
    (x0, (c.x(t0 + BUCKET_US).min(RIGHT) - x0).max(1.0))
}

/// Bucket `i`'s time span, for tooltips: `12.5–13.0s`.
fn bucket_text(i: usize) -> String {
    let secs = BUCKET_US as f64 / 1e6;
    format!("{:.1}–{:.1}s", i as f64 * secs, (i + 1) as f64 * secs)
}

/// A chart's y scale: grid lines and values at 0, half and `max`, to the
/// left of the chart whose top is `y`.
fn y_scale(c: &mut Canvas, y: f64, max: f64, unit: &str) {
    for frac in [0.0, 0.5, 1.0] {
        let yy = y + CHART_HEIGHT - frac * CHART_HEIGHT;
        let _ = write!(
            c.svg,
            r##"<line x1="{LEFT}" x2="{RIGHT}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd" stroke-width="0.5"/><text x="{:.0}" y="{:.1}" font-size="9" text-anchor="end">{}{unit}</text>"##,
            LEFT - 4.0,
            yy + 3.0,
            fmt_value(max * frac)
        );
    }
}

/// Throughput: ops per second by invoke time, per bucket, stacked ok /
/// refused / failed / unknown, on a scale rounded up from the busiest
/// bucket.
fn ops_chart(c: &mut Canvas, counts: &[Counts]) {
    let y = c.y;
    let h = CHART_HEIGHT;
    let per_s = 1e6 / BUCKET_US as f64;
    let busiest = counts.iter().map(Counts::total).max().unwrap_or(1);
    let max = nice_ceiling(f64::from(busiest) * per_s);
    c.label("ops per second", y);
    y_scale(c, y, max, "");
    for (i, n) in counts.iter().enumerate() {
        let (bx, bw) = bucket_span(c, i);
        let title = format!(
            "{}: {} ops/s ({} ok, {} refused, {} failed, {} unknown)",
            bucket_text(i),
            fmt_value(f64::from(n.total()) * per_s),
            n.ok,
            n.refused,
            n.failed,
            n.unknown
        );
        let mut base = y + h;
        let _ = write!(c.svg, "<g>");
        for (v, color) in [
            (n.ok, OK),
            (n.refused, REFUSED),
            (n.failed, FAILED),
            (n.unknown, UNKNOWN),
        ] {
            let hh = f64::from(v) * per_s / max * h;
            if hh > 0.0 {
                let _ = write!(
                    c.svg,
                    r##"<rect x="{bx:.1}" y="{:.1}" width="{bw:.1}" height="{hh:.1}" fill="{color}"/>"##,
                    base - hh
                );
            }
            base -= hh;
        }
        let _ = write!(c.svg, "<title>{title}</title></g>");
    }
    c.y += h + OPS_GAP;
}

/// Latency per bucket: a p50 and a p99 line, on a scale rounded up from
/// the largest p99 (at least 1 ms); a bucket's figures on hover.
fn latency_chart(c: &mut Canvas, mut latencies: Vec<Vec<u64>>) {
    let y = c.y;
    let h = CHART_HEIGHT;
    c.label("latency", y);
    // (bucket, p50, p99, completed ops)
    let mut points: Vec<(usize, f64, f64, usize)> = Vec::new();
    for (i, v) in latencies.iter_mut().enumerate() {
        if let (Some(a), Some(b)) = (percentile_ms(v, 0.5), percentile_ms(v, 0.99)) {
            points.push((i, a, b, v.len()));
        }
    }
    let max = nice_ceiling(points.iter().map(|p| p.2).fold(1.0, f64::max));
    y_scale(c, y, max, " ms");
    for (p99, color) in [(false, P50), (true, P99)] {
        let pts: Vec<String> = points
            .iter()
            .map(|&(i, a, b, _)| {
                let v = if p99 { b } else { a };
                format!(
                    "{:.1},{:.1}",
                    c.x(i as u64 * BUCKET_US),
                    y + h - v / max * h
                )
            })
            .collect();
        let _ = write!(
            c.svg,
            r##"<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{}"/>"##,
            pts.join(" ")
        );
    }
    for &(i, a, b, n) in &points {
        let (bx, bw) = bucket_span(c, i);
        let _ = write!(
            c.svg,
            r##"<rect x="{bx:.1}" y="{y:.0}" width="{bw:.1}" height="{h:.0}" fill="#000" fill-opacity="0"><title>{}: latency p50 {a:.1} ms, p99 {b:.1} ms, of {n} completed ops</title></rect>"##,
            bucket_text(i)
        );
    }
    c.y += h + LATENCY_GAP;
}
