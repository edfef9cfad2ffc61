//! A self-contained SVG of runs over time: granted holds/s (and seats sold/s
//! when there were bookings) above, hold latency p50/p99 below, one colour
//! per system.

use std::fmt::Write;

use super::{Bucket, RunStats, BUCKET_MS};

const W: f64 = 900.0;
const PANEL: f64 = 220.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One series: its legend, colour, dashed or not, and (seconds, value).
struct Line {
    label: String,
    colour: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// One panel: axes, grid, and a polyline per (label, colour, points).
fn panel(out: &mut String, top: f64, title: &str, unit: &str, t_max: f64, lines: &[Line]) {
    let y_max = nice_max(
        lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(0.0, f64::max),
    );
    let x = |t: f64| LEFT + (W - LEFT - RIGHT) * t / t_max;
    let y = |v: f64| top + PANEL - PANEL * v / y_max;
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{}</text>"#,
        top - 8.0,
        escape(title)
    );
    for i in 0..=4 {
        let v = y_max * f64::from(i) / 4.0;
        let (x2, yv, label_x, label_y) = (W - RIGHT, y(v), LEFT - 4.0, y(v) + 4.0);
        let label = if y_max >= 10.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        };
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{x2}" y1="{yv}" y2="{yv}" stroke="#ddd"/><text x="{label_x}" y="{label_y}" font-size="11" text-anchor="end">{label} {unit}</text>"##
        );
    }
    let steps = 10;
    for i in 0..=steps {
        let t = t_max * f64::from(i) / f64::from(steps);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" font-size="11" text-anchor="middle">{t:.1} s</text>"#,
            x(t),
            top + PANEL + 14.0
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{top}" width="{}" height="{PANEL}" fill="none" stroke="#888"/>"##,
        W - LEFT - RIGHT
    );
    for (n, line) in lines.iter().enumerate() {
        let (label, colour) = (&line.label, line.colour);
        let path: Vec<String> = line
            .points
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v)))
            .collect();
        let dash = if line.dashed {
            r#" stroke-dasharray="5,3""#
        } else {
            ""
        };
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="{}"/>"#,
            path.join(" ")
        );
        let ly = top + 14.0 + 14.0 * n as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{0}" x2="{1}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/><text x="{2}" y="{3}" font-size="11">{4}</text>"#,
            W - RIGHT - 230.0,
            W - RIGHT - 205.0,
            W - RIGHT - 200.0,
            ly + 4.0,
            escape(label)
        );
    }
}

fn per_sec(b: &Bucket, v: u64) -> (f64, f64) {
    (b.at_secs, v as f64 * 1000.0 / BUCKET_MS as f64)
}

/// The SVG document for `runs` (one or more systems), titled `title`.
pub fn svg(title: &str, runs: &[&RunStats]) -> String {
    let t_max = runs
        .iter()
        .map(|r| r.duration_secs)
        .fold(1.0, f64::max)
        .ceil();
    let mut rate_lines = Vec::new();
    let mut lat_lines = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        rate_lines.push(Line {
            label: format!("{} holds/s", r.system),
            colour: c,
            dashed: false,
            points: r.timeline.iter().map(|b| per_sec(b, b.holds)).collect(),
        });
        if r.bookings_confirmed > 0 {
            rate_lines.push(Line {
                label: format!("{} seats sold/s", r.system),
                colour: c,
                dashed: true,
                points: r
                    .timeline
                    .iter()
                    .map(|b| per_sec(b, b.sold_seats))
                    .collect(),
            });
        }
        let answered = |b: &&Bucket| b.holds + b.conflicts > 0;
        lat_lines.push(Line {
            label: format!("{} p99", r.system),
            colour: c,
            dashed: false,
            points: r
                .timeline
                .iter()
                .filter(answered)
                .map(|b| (b.at_secs, b.p99_ms))
                .collect(),
        });
        lat_lines.push(Line {
            label: format!("{} p50", r.system),
            colour: c,
            dashed: true,
            points: r
                .timeline
                .iter()
                .filter(answered)
                .map(|b| (b.at_secs, b.p50_ms))
                .collect(),
        });
    }
    let h = 2.0 * PANEL + 120.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="18" font-size="15">{}</text>"#,
        escape(title)
    );
    panel(
        &mut out,
        48.0,
        "throughput (per 250 ms, as a rate)",
        "/s",
        t_max,
        &rate_lines,
    );
    panel(
        &mut out,
        48.0 + PANEL + 50.0,
        "hold latency",
        "ms",
        t_max,
        &lat_lines,
    );
    out.push_str("</svg>\n");
    out
}
