//! A soak's resource charts: one panel per sampled figure (memory, file
//! descriptors, tasks, data, mail, log), one line per node over the run,
//! and the growth checker's fits as a table.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::series::{fmt_value, nice_ceiling};
use crate::check::growth::{Fit, Sample};

const W: f64 = 900.0;
const PANEL_H: f64 = 130.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 110.0;
const COLORS: [&str; 9] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#17becf",
];

type Get = fn(&Sample) -> Option<f64>;

const PANELS: [(&str, &str, Get); 9] = [
    ("resident memory", "MiB", |s| {
        s.rss_bytes.map(|b| b as f64 / 1048576.0)
    }),
    ("heap in use (held by allocations)", "MiB", |s| {
        s.heap_bytes.map(|b| b as f64 / 1048576.0)
    }),
    ("open file descriptors", "", |s| s.fds.map(|v| v as f64)),
    ("live tokio tasks", "", |s| s.tasks.map(|v| v as f64)),
    ("replicas in memory (placed, not dormant)", "", |s| {
        s.groups_loaded.map(|v| v as f64)
    }),
    ("groups led", "", |s| s.groups_led.map(|v| v as f64)),
    ("data directory (without mail)", "MiB", |s| {
        s.data_bytes.map(|b| b as f64 / 1048576.0)
    }),
    (
        "mail directory (one file per confirmed booking)",
        "MiB",
        |s| s.mail_bytes.map(|b| b as f64 / 1048576.0),
    ),
    ("log", "MiB", |s| s.log_bytes.map(|b| b as f64 / 1048576.0)),
];

/// The resources section of `report.html`: the charts and the fits.
pub fn section(samples: &[Sample], fits: &[Fit]) -> String {
    let mut out = String::from("<h2>Resources (soak)</h2>\n");
    out.push_str(&svg(samples));
    out.push_str(
        "<table><tr><th>figure</th><th>node</th><th>window (s)</th><th>points</th><th>slope per hour</th><th>limit</th></tr>\n",
    );
    for f in fits {
        let _ = writeln!(
            out,
            "<tr{}><td>{}</td><td>{}</td><td>{:.0}–{:.0}</td><td>{}</td><td>{:+.1}</td><td>{}</td></tr>",
            if f.per_hour > f.limit_per_hour { " class=\"fail\"" } else { "" },
            f.metric,
            f.node,
            f.from_ms as f64 / 1000.0,
            f.to_ms as f64 / 1000.0,
            f.points,
            f.per_hour,
            f.limit_per_hour
        );
    }
    out.push_str("</table>\n");
    out
}

/// Every panel, stacked, as one SVG.
pub fn svg(samples: &[Sample]) -> String {
    let t_max = samples.iter().map(|s| s.t_ms).max().unwrap_or(1).max(1) as f64;
    let mut by_node: BTreeMap<u64, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_node.entry(s.node).or_default().push(s);
    }
    let height = PANEL_H * PANELS.len() as f64 + 30.0;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n"
    );
    for (i, (title, unit, get)) in PANELS.iter().enumerate() {
        let top = i as f64 * PANEL_H + 10.0;
        let plot_h = PANEL_H - 40.0;
        let y_max = nice_ceiling(samples.iter().filter_map(get).fold(0.0, f64::max));
        let _ = writeln!(
            out,
            "<text x=\"{LEFT}\" y=\"{}\" font-weight=\"bold\">{title}{}</text>",
            top + 10.0,
            if unit.is_empty() {
                String::new()
            } else {
                format!(" ({unit})")
            }
        );
        let (y0, y1) = (top + 18.0, top + 18.0 + plot_h);
        let _ = writeln!(
            out,
            "<rect x=\"{LEFT}\" y=\"{y0}\" width=\"{}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#ccc\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{y1}\" text-anchor=\"end\">0</text>",
            W - LEFT - RIGHT,
            LEFT - 4.0,
            y0 + 8.0,
            fmt_value(y_max),
            LEFT - 4.0,
        );
        for (k, (node, ss)) in by_node.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            let points: Vec<String> = ss
                .iter()
                .filter_map(|s| {
                    let v = get(s)?;
                    let x = LEFT + (W - LEFT - RIGHT) * s.t_ms as f64 / t_max;
                    let y = y1 - plot_h * v / y_max;
                    Some(format!("{x:.1},{y:.1}"))
                })
                .collect();
            let _ = writeln!(
                out,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.2\" points=\"{}\"/>",
                points.join(" ")
            );
            if i == 0 {
                let _ = writeln!(
                    out,
                    "<text x=\"{}\" y=\"{}\" fill=\"{color}\">node {node}</text>",
                    W - RIGHT + 8.0,
                    y0 + 10.0 + 12.0 * k as f64
                );
            }
        }
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0} min</text>",
            W - RIGHT,
            y1 + 12.0,
            t_max / 60_000.0
        );
    }
    out.push_str("</svg>\n");
    out
}
