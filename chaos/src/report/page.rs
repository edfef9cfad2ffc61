//! `report.html`: the head (verdict, run parameters, counts, how to
//! replay), the checkers with their violating ops in full, the timeline
//! (from `timeline`) and the fault schedule against what was injected.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::timeline::{self, Injected};
use super::{color, esc, Summary};
use crate::check::Verdict;
use crate::history::{History, Op};
use crate::run::RunInfo;

/// Violations shown in full per checker; the rest are counted.
const VIOLATIONS_SHOWN: usize = 50;

/// The timeline alone, as a standalone SVG document (`timeline.svg`).
pub fn timeline_svg(history: &History, ops: &[Op], verdicts: &[Verdict]) -> String {
    let (injected, heals) = timeline::injected_faults(history);
    timeline::render(history, ops, verdicts, &injected, &heals)
}

/// The HTML report.
pub fn html(
    run: &RunInfo,
    history: &History,
    ops: &[Op],
    verdicts: &[Verdict],
    summary: &Summary,
) -> String {
    let (injected, heals) = timeline::injected_faults(history);
    let svg = timeline::render(history, ops, verdicts, &injected, &heals);
    format!(
        r##"{head}
<h2>Checkers</h2><table>{checks}</table>
<h2>Timeline</h2>
<p style="font-size:12px">Hover a bar, tick or mark for its details (a fault's target, a move's answer, an op in full).</p>
{svg}
<h2>Fault schedule</h2><table><tr><th>id</th><th>fault</th><th>planned</th><th>injected</th></tr>{schedule}</table>
</body></html>"##,
        head = head(run, summary),
        checks = checker_rows(ops, verdicts),
        schedule = schedule_rows(run, &injected),
    )
}

/// From the doctype to the paragraph under the verdict: the seed, the
/// duration, the partition mechanism, a planted bug, the counts, whether
/// the cluster settled, and the commands that replay and re-check the run.
fn head(run: &RunInfo, summary: &Summary) -> String {
    let verdict_color = color(summary.verdict);
    format!(
        r##"<!doctype html><html><head><meta charset="utf-8"><title>seatfence chaos drill {seed}: {verdict:?}</title>
<style>body{{font-family:sans-serif;margin:20px;max-width:1200px}}td{{padding:2px 8px;vertical-align:top}}
svg{{max-width:100%;height:auto}}.v{{font-size:12px}}code{{font-size:11px}}h1 span{{color:{verdict_color}}}</style></head><body>
<h1>Chaos drill: <span>{verdict:?}</span></h1>
<p>seed <b>{seed}</b>, {dur} s, partitions by <b>{mech}</b>{unavail}{bug}.
{ops} ops ({ok} ok, {refused} refused by design, {fail} failed, {info} unknown), {inj}/{sched} faults injected, {lc} leader changes, {md}/{ms} moves done; {settled}.
Replay: <code>seatfence chaos drill --seed {seed} --duration {dur} --out DIR</code>; re-check: <code>seatfence chaos check DIR</code>.</p>"##,
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
        ops = summary.ops.total(),
        refused = summary.ops.refused,
        ok = summary.ops.ok,
        fail = summary.ops.fail,
        info = summary.ops.info,
        inj = summary.faults_injected,
        sched = summary.faults_scheduled,
        lc = summary.leader_changes,
        md = summary.moves_done,
        ms = summary.moves_started,
        settled = settled_clause(summary),
    )
}

/// Whether the cluster settled after the heal, and if not what was pending.
fn settled_clause(summary: &Summary) -> String {
    if summary.settled {
        "the cluster settled after the heal".to_string()
    } else {
        format!(
            "<b>the cluster did not settle after the heal</b>: {}",
            esc(&summary.unsettled.join("; "))
        )
    }
}

/// The checkers table: a row per checker (name, verdict, summary), then a
/// row per violation (up to `VIOLATIONS_SHOWN`) with its ops in full.
fn checker_rows(ops: &[Op], verdicts: &[Verdict]) -> String {
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
        for viol in v.violations.iter().take(VIOLATIONS_SHOWN) {
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
        if v.violations.len() > VIOLATIONS_SHOWN {
            let _ = write!(
                checks,
                "<tr><td></td><td></td><td>… {} more</td></tr>",
                v.violations.len() - VIOLATIONS_SHOWN
            );
        }
    }
    checks
}

/// The fault schedule: a row per planned fault, with when it was injected
/// and on what (or that it never was).
fn schedule_rows(run: &RunInfo, injected: &Injected) -> String {
    let mut schedule = String::new();
    for f in &run.schedule {
        let happened = injected
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
    schedule
}
