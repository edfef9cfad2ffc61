//! How `seatfence ctl` shows things: tables sized to their content, the
//! cluster, moves and durations, and a move followed step by step.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

use super::edge::{Edge, Req};

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Align {
    Left,
    Right,
}

/// A table: a header and rows of cells, each column as wide as its widest
/// cell, two spaces between columns.
pub(super) struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these columns (header and alignment).
    pub(super) fn new(columns: &[(&'static str, Align)]) -> Table {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Add a row (missing cells are empty, extra ones dropped).
    pub(super) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether it has no row.
    pub(super) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Print it: the header, then the rows.
    pub(super) fn print(&self) {
        print!("{}", self.render());
    }

    /// The header and the rows, one line each, without trailing spaces.
    fn render(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|(h, _)| width(h)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        let header: Vec<String> = self.columns.iter().map(|(h, _)| h.to_string()).collect();
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut cells = Vec::with_capacity(widths.len());
            for (i, (&(_, align), &w)) in self.columns.iter().zip(&widths).enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                cells.push(match align {
                    Align::Left => format!("{cell:<w$}"),
                    Align::Right => format!("{cell:>w$}"),
                });
            }
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

/// How wide `s` shows, in characters.
fn width(s: &str) -> usize {
    s.chars().count()
}

/// A JSON value as a cell: a string as is, `-` for null, else JSON.
fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A duration in milliseconds as ctl shows every one (steps, summaries,
/// tables): `272 ms` under 10 s, else `12.3 s`; `-` when unknown.
pub(super) fn duration(ms: &Value) -> String {
    match ms.as_u64() {
        None => "-".into(),
        Some(ms) if ms < 10_000 => format!("{ms} ms"),
        Some(ms) => format!("{:.1} s", ms as f64 / 1000.0),
    }
}

/// A JSON array of ids as `1,2,3`.
fn ids(x: &Value) -> String {
    let arr = x.as_array().map(Vec::as_slice).unwrap_or_default();
    arr.iter().map(cell).collect::<Vec<_>>().join(",")
}

/// The items of a JSON array (none when it is not one).
fn items(x: &Value) -> &[Value] {
    x.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// The cluster view as readable tables.
pub(super) fn print_cluster(v: &Value) {
    let mut regions = Table::new(&[("REGION", Align::Left), ("NODES", Align::Left)]);
    for r in items(&v["regions"]) {
        regions.row(vec![cell(&r["region"]), ids(&r["nodes"])]);
    }
    regions.print();
    println!();
    print_nodes(v);
    println!();
    print_groups(v);
    let moves = items(&v["moves"]);
    if !moves.is_empty() {
        println!("\nRUNNING MOVES");
        moves_table(moves).print();
    }
    let repairs = items(&v["repairs"]);
    if !repairs.is_empty() {
        println!("\nRUNNING REPAIRS");
        let mut t = Table::new(&[
            ("GROUP", Align::Right),
            ("REMOVE", Align::Right),
            ("ADD", Align::Right),
            ("REASON", Align::Left),
            ("STEP", Align::Left),
        ]);
        for r in repairs {
            let row = ["group_id", "remove", "add", "reason", "step"].map(|k| cell(&r[k]));
            t.row(Vec::from(row));
        }
        t.print();
    }
    if !items(&v["under_replicated"]).is_empty() {
        println!(
            "\nUNDER-REPLICATED (a voter on a dead or retiring node, no spare node in its region): {}",
            ids(&v["under_replicated"])
        );
    }
}

/// The cluster's nodes: region, address, state, replicas, reachable,
/// drained, the groups each leads.
fn print_nodes(v: &Value) {
    let yes_no = |b: &Value, no: &str| String::from(if *b == json!(true) { "yes" } else { no });
    let mut t = Table::new(&[
        ("NODE", Align::Right),
        ("REGION", Align::Left),
        ("GRPC", Align::Left),
        ("STATE", Align::Left),
        ("REPLICAS", Align::Right),
        ("UP", Align::Left),
        ("DRAINED", Align::Left),
        ("LEADS", Align::Left),
    ]);
    for n in items(&v["nodes"]) {
        t.row(vec![
            cell(&n["node_id"]),
            cell(&n["region"]),
            cell(&n["grpc_addr"]),
            cell(&n["state"]),
            cell(&n["replicas"]),
            yes_no(&n["reachable"], "NO"),
            yes_no(&n["drained"], "no"),
            ids(&n["leader_of"]),
        ]);
    }
    t.print();
}

/// The cluster's groups: event, owner, epoch, leader, term, members and
/// each replica's lag.
fn print_groups(v: &Value) {
    let mut t = Table::new(&[
        ("GROUP", Align::Right),
        ("EVENT", Align::Left),
        ("OWNER", Align::Left),
        ("EPOCH", Align::Right),
        ("LEADER", Align::Right),
        ("TERM", Align::Right),
        ("MEMBERS", Align::Left),
        ("LAG (node:entries)", Align::Left),
    ]);
    for g in items(&v["groups"]) {
        let lag = items(&g["replicas"])
            .iter()
            .map(|r| format!("{}:{}", r["node_id"], r["lag"]))
            .collect::<Vec<_>>()
            .join(" ");
        let event = match g["event_id"].as_str() {
            Some(e) => e.to_string(),
            None if g["group_id"] == 0 => "(directory)".into(),
            None => "-".into(),
        };
        t.row(vec![
            cell(&g["group_id"]),
            event,
            cell(&g["owner_region"]),
            cell(&g["epoch"]),
            cell(&g["leader"]),
            cell(&g["term"]),
            ids(&g["members"]),
            lag,
        ]);
    }
    t.print();
}

/// Moves as a table, one row each: id, event, regions, step, state,
/// duration, write pause.
pub(super) fn moves_table(moves: &[Value]) -> Table {
    let mut t = Table::new(&[
        ("MOVE", Align::Right),
        ("EVENT", Align::Left),
        ("FROM", Align::Left),
        ("", Align::Left),
        ("TO", Align::Left),
        ("STEP", Align::Left),
        ("STATE", Align::Left),
        ("TOOK", Align::Right),
        ("PAUSE", Align::Right),
    ]);
    for m in moves {
        t.row(vec![
            cell(&m["move_id"]),
            cell(&m["event_id"]),
            cell(&m["from_region"]),
            "->".into(),
            cell(&m["to_region"]),
            cell(&m["step"]),
            cell(&m["state"]),
            duration(&m["duration_ms"]),
            duration(&m["pause_ms"]),
        ]);
    }
    t
}

/// A step's line: `[########----] 3/6 transfer_leader    180 ms  running`,
/// step `n` of `total` reached `ms` after the move started.
fn step_line(n: u64, total: u64, step: &str, ms: &Value, state: &str) -> String {
    let (n, total) = (n as usize, total as usize);
    let done = if step == "done" {
        total
    } else {
        n.saturating_sub(1).min(total)
    };
    // The longest step name is 17 characters: pad so later columns line up.
    format!(
        "[{}{}] {n}/{total} {step:<18} {:>8}  {state}",
        "#".repeat(done * 4),
        "-".repeat((total - done) * 4),
        duration(ms)
    )
}

/// The lines for what `m` shows, each with a key (a line is printed once):
/// one per step it reached (its history), timed from the move's start by
/// the directory's clock, the clock of its `duration_ms`, so the last
/// line's time is the summary's; and for a move that ended aborted or
/// failed, a line with its step and state at its `duration_ms`.
fn step_lines(m: &Value) -> Vec<(String, String)> {
    let total = m["steps"].as_u64().unwrap_or(6);
    let state = m["state"].as_str().unwrap_or("?");
    let started = m["started_ms"].as_u64().unwrap_or(0);
    let mut lines: Vec<(String, String)> = items(&m["history"])
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let step = h["step"].as_str().unwrap_or("?");
            let at = h["at_ms"]
                .as_u64()
                .map(|at| json!(at.saturating_sub(started)));
            let step_state = if step == "done" { "done" } else { "running" };
            let line = step_line(
                i as u64 + 1,
                total,
                step,
                &at.unwrap_or(Value::Null),
                step_state,
            );
            (step.to_string(), line)
        })
        .collect();
    // Without a history (an older edge): its current step; ended other
    // than done: its last step and how it ended.
    if lines.is_empty() || !matches!(state, "running" | "done") {
        let step = m["step"].as_str().unwrap_or("?");
        let n = m["step_number"].as_u64().unwrap_or(0);
        let key = match state {
            "running" | "done" => step.to_string(),
            ended => format!("end {ended}"),
        };
        lines.push((key, step_line(n, total, step, &m["duration_ms"], state)));
    }
    lines
}

/// The live bar under the step lines, on a terminal only.
fn live_bar(live: bool, total: u64) -> ProgressBar {
    if !live {
        return ProgressBar::hidden();
    }
    let style =
        ProgressStyle::with_template("{bar:24} {pos}/{len} {msg}").expect("a valid template");
    ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stdout()).with_style(style)
}

/// Follow move `first` until it ends: one line per step it reached, timed
/// from its start by the directory (the lines scripts read), and on a
/// terminal a live bar under them; `quiet`: neither. Returns the final
/// move.
pub(super) async fn follow_move(edge: &Edge, first: Value, quiet: bool) -> anyhow::Result<Value> {
    let id = first["move_id"].clone();
    let total = first["steps"].as_u64().unwrap_or(6);
    let live = !quiet && std::io::stdout().is_terminal();
    let bar = live_bar(live, total);
    let mut shown: Vec<String> = Vec::new();
    let mut m = first;
    loop {
        for (key, line) in step_lines(&m) {
            if quiet || shown.contains(&key) {
                continue;
            }
            if live {
                bar.println(line);
            } else {
                println!("{line}");
            }
            shown.push(key);
        }
        bar.set_position(m["step_number"].as_u64().unwrap_or(0).saturating_sub(1));
        bar.set_message(format!(
            "{}  {}",
            m["step"].as_str().unwrap_or("?"),
            duration(&m["duration_ms"])
        ));
        if m["state"] != "running" {
            bar.finish_and_clear();
            return Ok(m);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let a = edge
            .send(&format!("/v1/admin/moves/{id}"), Req::Get)
            .await?;
        // The directory may be electing: keep watching.
        if a.status.is_success() {
            m = a.body;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Columns are as wide as their widest cell; numbers line up right;
    /// no line ends in spaces.
    #[test]
    fn tables_fit_their_content() {
        let mut t = Table::new(&[
            ("SEQ", Align::Right),
            ("ACTOR", Align::Left),
            ("RESULT", Align::Left),
        ]);
        t.row(vec![
            "7".into(),
            "a-rather-long-operator".into(),
            "ok".into(),
        ]);
        t.row(vec!["12".into(), "ops".into()]);
        assert_eq!(
            t.render(),
            "SEQ  ACTOR                   RESULT\n  7  a-rather-long-operator  ok\n 12  ops\n"
        );
    }

    /// Every step of a finished move gets its line, timed as the summary.
    #[test]
    fn a_done_move_has_a_line_per_step_and_the_summary_time_last() {
        let m = json!({"steps": 6, "state": "done", "step": "done", "step_number": 6,
            "started_ms": 1000, "duration_ms": 272,
            "history": [{"step": "add_learners", "at_ms": 1000}, {"step": "change_membership", "at_ms": 1098},
                        {"step": "transfer_leader", "at_ms": 1180}, {"step": "bump_epoch", "at_ms": 1195},
                        {"step": "update_directory", "at_ms": 1240}, {"step": "done", "at_ms": 1272}]});
        let lines = step_lines(&m);
        assert_eq!(lines.len(), 6);
        assert_eq!(
            lines[5].1,
            format!("[{}] 6/6 done                 272 ms  done", "#".repeat(24))
        );
        assert!(lines[1].1.starts_with("[####----"), "{}", lines[1].1);
        assert_eq!(duration(&json!(12_345)), "12.3 s");
        assert_eq!(duration(&Value::Null), "-");
    }
}
