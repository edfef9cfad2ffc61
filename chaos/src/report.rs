//! The drill's verdict: `summary.json` (verdict per checker, ops, faults)
//! and a self-contained `report.html` (timeline of ops, faults, leader
//! changes, moves and latency; PASS/FAIL; the violating ops in full).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::check::{Status, Verdict};
use crate::history::{Call, Entry, History, Op, Outcome};
use crate::run::RunInfo;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckerLine {
    pub checker: String,
    pub verdict: Status,
    pub summary: String,
    pub violations: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub verdict: Status,
    pub seed: u64,
    pub duration_s: u64,
    pub partition_mechanism: String,
    pub unavailable_mechanisms: Vec<(String, String)>,
    pub planted_bug: Option<String>,
    pub checkers: Vec<CheckerLine>,
    pub ops: Counts,
    pub ops_by_call: BTreeMap<String, Counts>,
    pub faults_scheduled: usize,
    pub faults_injected: usize,
    pub faults_by_kind: BTreeMap<String, u32>,
    pub leader_changes: u64,
    pub moves_done: u64,
    pub moves_started: u64,
    /// Whether the cluster settled after the heal (replicas equal, moves
    /// finished, payments resolved), and what was still pending if not.
    pub settled: bool,
    pub unsettled: Vec<String>,
}

pub fn overall(verdicts: &[Verdict]) -> Status {
    if verdicts.iter().any(|v| v.status == Status::Fail) {
        Status::Fail
    } else if verdicts.iter().any(|v| v.status == Status::Unknown) {
        Status::Unknown
    } else {
        Status::Pass
    }
}

/// Leader changes seen by the observer: each new `(term, leader)` per group
/// after the first.
fn leader_changes(history: &History) -> u64 {
    let mut seen: BTreeMap<u64, BTreeSet<(u64, u64)>> = BTreeMap::new();
    for e in &history.entries {
        if let Entry::Leader {
            group,
            leader,
            term,
            ..
        } = e
        {
            seen.entry(*group).or_default().insert((*term, *leader));
        }
    }
    seen.values()
        .map(|s| s.len().saturating_sub(1) as u64)
        .sum()
}

pub fn summarize(
    run: &RunInfo,
    history: &History,
    ops: &[Op],
    verdicts: &[Verdict],
    finals: &crate::run::FinalState,
) -> Summary {
    let mut total = Counts::default();
    let mut by_call: BTreeMap<String, Counts> = BTreeMap::new();
    let (mut moves_started, mut moves_done) = (0, 0);
    for o in ops {
        let c = by_call.entry(o.call.name().to_string()).or_default();
        for c in [&mut total, c] {
            match o.outcome {
                Outcome::Ok(_) => c.ok += 1,
                Outcome::Fail { .. } => c.fail += 1,
                Outcome::Unknown(_) => c.info += 1,
            }
        }
        if let Call::Move { .. } = o.call {
            moves_started += 1;
            if matches!(o.outcome, Outcome::Ok(_)) {
                moves_done += 1;
            }
        }
    }
    let mut by_kind = BTreeMap::new();
    let mut injected = 0;
    for e in &history.entries {
        if let Entry::Fault { kind, .. } = e {
            injected += 1;
            *by_kind.entry(kind.clone()).or_insert(0) += 1;
        }
    }
    Summary {
        verdict: overall(verdicts),
        seed: run.seed,
        duration_s: run.duration_s,
        partition_mechanism: run.partition_mechanism.clone(),
        unavailable_mechanisms: run.unavailable_mechanisms.clone(),
        planted_bug: run.planted_bug.clone(),
        checkers: verdicts
            .iter()
            .map(|v| CheckerLine {
                checker: v.checker.clone(),
                verdict: v.status,
                summary: v.summary.clone(),
                violations: v.violations.len(),
            })
            .collect(),
        ops: total,
        ops_by_call: by_call,
        faults_scheduled: run.schedule.len(),
        faults_injected: injected,
        faults_by_kind: by_kind,
        leader_changes: leader_changes(history),
        moves_done,
        moves_started,
        settled: finals.converged,
        unsettled: finals.notes.iter().take(20).cloned().collect(),
    }
}

fn color(s: Status) -> &'static str {
    match s {
        Status::Pass => "#5cb85c",
        Status::Fail => "#d9534f",
        Status::Unknown => "#f0ad4e",
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The HTML report.
pub fn html(
    run: &RunInfo,
    history: &History,
    ops: &[Op],
    verdicts: &[Verdict],
    summary: &Summary,
) -> String {
    let end_us = history
        .entries
        .iter()
        .map(Entry::t)
        .max()
        .unwrap_or(1)
        .max(1);
    let width = 1100.0;
    let x = |t: u64| 150.0 + (t as f64 / end_us as f64) * (width - 160.0);
    let mut svg = String::new();
    let mut y = 10.0;
    let lane = |svg: &mut String, label: &str, y: f64| {
        let _ = write!(
            svg,
            r##"<text x="4" y="{:.0}" font-size="11">{}</text>"##,
            y + 10.0,
            esc(label)
        );
    };

    // Faults: one lane, bars from injection to heal.
    let mut fault_at: BTreeMap<u32, (u64, String, String)> = BTreeMap::new();
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
    lane(&mut svg, "faults", y);
    for (i, (id, (t, kind, detail))) in fault_at.iter().enumerate() {
        let t1 = heals.get(id).copied().unwrap_or(end_us);
        let yy = y + (i % 3) as f64 * 9.0;
        let _ = write!(
            svg,
            r##"<rect x="{:.1}" y="{yy:.0}" width="{:.1}" height="8" fill="#d9534f" opacity="0.8"><title>{} {} ({:.1}s–{:.1}s)</title></rect>"##,
            x(*t),
            (x(t1) - x(*t)).max(1.0),
            esc(kind),
            esc(detail),
            *t as f64 / 1e6,
            t1 as f64 / 1e6
        );
    }
    y += 34.0;

    // Moves.
    lane(&mut svg, "moves", y);
    for o in ops.iter().filter(|o| matches!(o.call, Call::Move { .. })) {
        let t1 = o.completed.unwrap_or(end_us);
        let color = match o.outcome {
            Outcome::Ok(_) => "#5cb85c",
            Outcome::Fail { .. } => "#d9534f",
            Outcome::Unknown(_) => "#f0ad4e",
        };
        let _ = write!(
            svg,
            r##"<rect x="{:.1}" y="{y:.0}" width="{:.1}" height="12" fill="{color}"><title>{}</title></rect>"##,
            x(o.invoked),
            (x(t1) - x(o.invoked)).max(1.0),
            esc(&o.label())
        );
    }
    y += 22.0;

    // Leader changes per group.
    let mut last: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
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
        lane(&mut svg, &format!("leader g{g}"), *gy);
    }
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
                let _ = write!(
                    svg,
                    r##"<g><rect x="{:.1}" y="{gy:.0}" width="2" height="12" fill="#337ab7"/><text x="{:.1}" y="{:.0}" font-size="9">n{leader}</text><title>group {group}: node {leader} leads in term {term} at {:.2}s</title></g>"##,
                    x(*t),
                    x(*t) + 3.0,
                    gy + 10.0,
                    *t as f64 / 1e6
                );
                last.insert(*group, (*term, *leader));
            }
        }
    }
    y += groups.len() as f64 * 14.0 + 8.0;

    // Ops per 500 ms bucket, stacked ok / fail / info, and latency.
    let bucket = 500_000u64;
    let n = (end_us / bucket + 1) as usize;
    let mut counts = vec![(0u32, 0u32, 0u32); n];
    let mut lat: Vec<Vec<u64>> = vec![Vec::new(); n];
    for o in ops {
        let b = (o.invoked / bucket) as usize;
        if b >= n {
            continue;
        }
        match o.outcome {
            Outcome::Ok(_) => counts[b].0 += 1,
            Outcome::Fail { .. } => counts[b].1 += 1,
            Outcome::Unknown(_) => counts[b].2 += 1,
        }
        if let Some(c) = o.completed {
            lat[b].push(c - o.invoked);
        }
    }
    let max = counts
        .iter()
        .map(|c| c.0 + c.1 + c.2)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let h = 80.0;
    lane(&mut svg, "ops / 0.5 s", y);
    let bw = ((width - 160.0) / n as f64).max(1.0);
    for (i, (ok, fail, info)) in counts.iter().enumerate() {
        let bx = x(i as u64 * bucket);
        let mut base = y + h;
        for (v, color) in [(*ok, "#5cb85c"), (*fail, "#999"), (*info, "#f0ad4e")] {
            let hh = v as f64 / max * h;
            if hh > 0.0 {
                let _ = write!(
                    svg,
                    r##"<rect x="{bx:.1}" y="{:.1}" width="{bw:.1}" height="{hh:.1}" fill="{color}"><title>{:.1}s: {ok} ok, {fail} fail, {info} unknown</title></rect>"##,
                    base - hh,
                    i as f64 * 0.5
                );
            }
            base -= hh;
        }
    }
    y += h + 10.0;
    lane(&mut svg, "p50 / p99 ms", y);
    let pct = |v: &mut Vec<u64>, p: f64| -> Option<f64> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        Some(v[((v.len() - 1) as f64 * p) as usize] as f64 / 1e3)
    };
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    for (i, v) in lat.iter_mut().enumerate() {
        if let (Some(a), Some(b)) = (pct(v, 0.5), pct(v, 0.99)) {
            p50.push((i, a));
            p99.push((i, b));
        }
    }
    let lmax = p99.iter().map(|(_, v)| *v).fold(1.0, f64::max);
    for (series, color) in [(&p50, "#337ab7"), (&p99, "#d9534f")] {
        let pts: Vec<String> = series
            .iter()
            .map(|(i, v)| format!("{:.1},{:.1}", x(*i as u64 * bucket), y + h - v / lmax * h))
            .collect();
        let _ = write!(
            svg,
            r##"<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{}"/>"##,
            pts.join(" ")
        );
    }
    let _ = write!(
        svg,
        r##"<text x="150" y="{:.0}" font-size="9">max {lmax:.0} ms</text>"##,
        y + 8.0
    );
    y += h + 20.0;
    // Time axis.
    let secs = end_us / 1_000_000;
    let step = (secs / 10).max(1);
    for s in (0..=secs).step_by(step as usize) {
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{y:.0}" font-size="9">{s}s</text>"##,
            x(s * 1_000_000)
        );
    }
    y += 10.0;

    let by_op: BTreeMap<u64, &Op> = ops.iter().map(|o| (o.op, o)).collect();
    let mut checks = String::new();
    for v in verdicts {
        let color = color(v.status);
        let _ = write!(
            checks,
            r##"<tr><td>{}</td><td style="color:{color};font-weight:bold">{:?}</td><td>{}</td></tr>"##,
            esc(&v.checker),
            v.status,
            esc(&v.summary)
        );
        for viol in v.violations.iter().take(50) {
            let mut detail = esc(&viol.message);
            for op in &viol.ops {
                if let Some(o) = by_op.get(op) {
                    let _ = write!(detail, "<br><code>{}</code>", esc(&o.label()));
                }
            }
            let _ = write!(
                checks,
                r##"<tr><td></td><td></td><td class="v">{detail}</td></tr>"##
            );
        }
        if v.violations.len() > 50 {
            let _ = write!(
                checks,
                "<tr><td></td><td></td><td>… {} more</td></tr>",
                v.violations.len() - 50
            );
        }
    }
    let mut schedule = String::new();
    for f in &run.schedule {
        let happened = fault_at
            .get(&f.id)
            .map(|(t, _, d)| format!("at {:.1}s: {}", *t as f64 / 1e6, esc(d)))
            .unwrap_or_else(|| "<b>never injected</b>".into());
        let _ = write!(
            schedule,
            "<tr><td>{}</td><td>{}</td><td>{:.1}s for {:.1}s</td><td>{happened}</td></tr>",
            f.id,
            esc(f.fault.name()),
            f.at_ms as f64 / 1e3,
            f.duration_ms as f64 / 1e3
        );
    }
    let verdict_color = color(summary.verdict);
    format!(
        r##"<!doctype html><html><head><meta charset="utf-8"><title>seatfence chaos drill {seed}: {verdict:?}</title>
<style>body{{font-family:sans-serif;margin:20px;max-width:1200px}}td{{padding:2px 8px;vertical-align:top}}
.v{{font-size:12px}}code{{font-size:11px}}h1 span{{color:{verdict_color}}}</style></head><body>
<h1>Chaos drill: <span>{verdict:?}</span></h1>
<p>seed <b>{seed}</b>, {dur} s, partitions by <b>{mech}</b>{unavail}{bug}.
{ops} ops ({ok} ok, {fail} failed, {info} unknown), {inj}/{sched} faults injected, {lc} leader changes, {md}/{ms} moves done; {settled}.
Replay: <code>seatfence chaos drill --seed {seed} --duration {dur} --out DIR</code>; re-check: <code>seatfence chaos check DIR</code>.</p>
<h2>Checkers</h2><table>{checks}</table>
<h2>Timeline</h2>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0}">{svg}</svg>
<p style="font-size:12px">Faults red (hover for target), moves green/orange (done/unknown), leader ticks blue; ops green ok, grey failed, orange unknown; latency p50 blue, p99 red.</p>
<h2>Fault schedule</h2><table><tr><th>id</th><th>fault</th><th>planned</th><th>injected</th></tr>{schedule}</table>
</body></html>"##,
        seed = run.seed,
        verdict = summary.verdict,
        dur = run.duration_s,
        mech = esc(&run.partition_mechanism),
        unavail = run
            .unavailable_mechanisms
            .iter()
            .map(|(m, why)| format!(" ({} unavailable: {})", esc(m), esc(why)))
            .collect::<String>(),
        bug = run
            .planted_bug
            .as_ref()
            .map(|b| format!(", <b>planted bug: {}</b>", esc(b)))
            .unwrap_or_default(),
        ops = summary.ops.ok + summary.ops.fail + summary.ops.info,
        ok = summary.ops.ok,
        fail = summary.ops.fail,
        info = summary.ops.info,
        inj = summary.faults_injected,
        sched = summary.faults_scheduled,
        lc = summary.leader_changes,
        md = summary.moves_done,
        ms = summary.moves_started,
        height = y + 10.0,
        settled = if summary.settled {
            "the cluster settled after the heal".to_string()
        } else {
            format!(
                "<b>the cluster did not settle after the heal</b>: {}",
                esc(&summary.unsettled.join("; "))
            )
        },
    )
}
