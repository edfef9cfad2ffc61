//! `report.html`, top to bottom: the head (verdict, run parameters,
//! counts, how to replay) and the checkers; what an operator looks for
//! first, the timeline's overview (throughput, latency, faults and moves
//! on one time axis; from `overview`); the checkers' violations with
//! their ops in full; the leaders per group, named by their events (from
//! `leaders`; the sleeping events' collapsed); and the fault schedule
//! against what was injected. `timeline.svg` is the overview and the
//! leader rows in one SVG.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::timeline::{self, Canvas, Injected, Size};
use super::{color, esc, leaders, overview, plural, Summary};
use crate::check::Verdict;
use crate::history::{History, Op};
use crate::run::RunInfo;

/// Violations shown in full per checker; the rest are counted.
const VIOLATIONS_SHOWN: usize = 50;

/// The timeline alone, as a standalone SVG document (`timeline.svg`), its
/// leader rows named by group number only: [`timeline_svg_for`] names
/// them by the run's events.
pub fn timeline_svg(history: &History, ops: &[Op], verdicts: &[Verdict]) -> String {
    timeline_svg_for(&RunInfo::default(), history, ops, verdicts)
}

/// The timeline alone, as a standalone SVG document (`timeline.svg`):
/// the overview on top, then the leader rows named by the events of
/// `run` (the directory and the hot and cold events', then the sleeping
/// events').
pub fn timeline_svg_for(
    run: &RunInfo,
    history: &History,
    ops: &[Op],
    verdicts: &[Verdict],
) -> String {
    let (injected, heals) = timeline::injected_faults(history);
    let flags = timeline::flagged(ops, verdicts);
    let mut c = Canvas::new(timeline::end_us(history));
    overview::draw(&mut c, ops, &flags, &injected, &heals);
    leaders::draw_all(&mut c, run, history, &flags);
    c.finish(Size::Fixed)
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
    let flags = timeline::flagged(ops, verdicts);
    let end_us = timeline::end_us(history);
    let mut top = Canvas::new(end_us);
    overview::draw(&mut top, ops, &flags, &injected, &heals);
    format!(
        r##"{head}
<h2>Checkers</h2><table>{checks}</table>
<h2>Timeline</h2>
<p class="hint">Throughput, latency, faults and moves on one time axis, each fault shaded behind the charts from its injection to its heal. Hover a bar, tick or mark for its details (a fault's target, a move's answer, an op in full).</p>
{overview}
{violations}<h2>Leaders per group</h2>
<p class="hint">A row per Raft group, named by its event, on the time scale above: a tick at each new leader, named by node where there is room (hover for the term), a dashed line at each flagged op. Click a heading to open or close its rows.</p>
{leaders}<h2>Fault schedule</h2><table><tr><th>id</th><th>fault</th><th>planned</th><th>injected</th></tr>{schedule}</table>
</body></html>"##,
        head = head(run, summary),
        checks = checker_rows(verdicts),
        overview = top.finish(Size::Fluid),
        violations = violation_rows(ops, verdicts),
        leaders = leaders::html(run, history, end_us, &flags),
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
<style>body{{font-family:sans-serif;margin:16px 20px}}p{{max-width:1200px}}td{{padding:2px 8px;vertical-align:top}}
svg{{max-width:100%;height:auto}}svg.tl{{display:block;width:100%}}.v{{font-size:12px}}.hint{{font-size:12px}}code{{font-size:11px}}
summary{{cursor:pointer;padding:4px 0}}h1 span{{color:{verdict_color}}}</style></head><body>
<h1>Chaos drill: <span>{verdict:?}</span></h1>
<p>seed <b>{seed}</b>, {dur} s, partitions by <b>{mech}</b>{unavail}{bug}.
{ops} ops ({ok} ok, {refused} refused by design, {fail} failed, {info} unknown), {inj}/{sched} faults injected, {lc} leader changes, {md}/{ms} moves done; {settled}.
Replay: <code>seatfence chaos drill --seed {seed} --duration {dur}{faults} --out DIR</code>; re-check: <code>seatfence chaos check DIR</code>.</p>"##,
        seed = run.seed,
        verdict = summary.verdict,
        dur = run.duration_s,
        faults = replay_faults(run),
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

/// The checkers table: a row per checker (name, verdict, summary, and
/// how many violations it found, linked to their list under the
/// timeline).
fn checker_rows(verdicts: &[Verdict]) -> String {
    let mut checks = String::new();
    for v in verdicts {
        let found = match v.violations.len() {
            0 => String::new(),
            n => format!(
                r##"<a href="#v-{}">{} ↓</a>"##,
                esc(&v.checker),
                plural(n, "violation")
            ),
        };
        let _ = write!(
            checks,
            r##"<tr><td>{}</td><td style="color:{};font-weight:bold">{:?}</td><td>{}</td><td>{found}</td></tr>"##,
            esc(&v.checker),
            color(v.status),
            v.status,
            esc(&v.summary)
        );
    }
    checks
}

/// The violations, under the timeline: per checker that found any, a
/// row naming it, then a row per violation (up to `VIOLATIONS_SHOWN`)
/// with its ops in full; nothing when no checker found any.
fn violation_rows(ops: &[Op], verdicts: &[Verdict]) -> String {
    if verdicts.iter().all(|v| v.violations.is_empty()) {
        return String::new();
    }
    let by_op: BTreeMap<u64, &Op> = ops.iter().map(|o| (o.op, o)).collect();
    let mut rows = String::new();
    for v in verdicts.iter().filter(|v| !v.violations.is_empty()) {
        let _ = write!(
            rows,
            r##"<tr id="v-{name}"><td>{name}</td><td style="color:{};font-weight:bold">{:?}</td><td>{}</td></tr>"##,
            color(v.status),
            v.status,
            plural(v.violations.len(), "violation"),
            name = esc(&v.checker)
        );
        for viol in v.violations.iter().take(VIOLATIONS_SHOWN) {
            let mut detail = esc(&viol.message);
            for op in &viol.ops {
                if let Some(o) = by_op.get(op) {
                    let _ = write!(detail, "<br><code>{}</code>", esc(&o.label()));
                }
            }
            let _ = write!(
                rows,
                r##"<tr><td></td><td></td><td class="v">{detail}</td></tr>"##
            );
        }
        if v.violations.len() > VIOLATIONS_SHOWN {
            let _ = write!(
                rows,
                "<tr><td></td><td></td><td>… {} more</td></tr>",
                v.violations.len() - VIOLATIONS_SHOWN
            );
        }
    }
    format!("<h2 id=\"violations\">Violations</h2><table>{rows}</table>\n")
}

/// The fault schedule: a row per planned fault, with when it was injected
/// and on what (or that it never was).
/// ` --faults a,b` when the run covered a chosen set of kinds (every kind
/// a binary can inject, less what this one could not, means none were
/// chosen).
fn replay_faults(run: &RunInfo) -> String {
    let every = crate::schedule::all_kinds(true, true).len()
        + usize::from(
            run.schedule
                .iter()
                .any(|f| f.fault == crate::schedule::Fault::LoseNode),
        );
    if run.soak.is_some()
        || run.fault_kinds.is_empty()
        || run.fault_kinds.len() + run.cannot_inject.len() >= every
    {
        return String::new();
    }
    format!(" --faults {}", esc(&run.fault_kinds.join(",")))
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Entry;
    use crate::run::{EventInfo, FinalState};

    fn leader(t: u64, group: u64) -> Entry {
        Entry::Leader {
            t,
            group,
            leader: 1,
            term: 1,
        }
    }

    #[test]
    fn the_overview_comes_first_and_sleeping_events_are_collapsed() {
        let run = RunInfo {
            events: vec![
                EventInfo {
                    event_id: "hot-one".into(),
                    group: 1,
                    hot: true,
                    ..EventInfo::default()
                },
                EventInfo {
                    event_id: "sleepy-one".into(),
                    group: 2,
                    sleeper: true,
                    ..EventInfo::default()
                },
            ],
            ..RunInfo::default()
        };
        let history = History {
            entries: vec![
                leader(100, 0),
                Entry::Fault {
                    t: 1_000_000,
                    id: 0,
                    kind: "kill-minority".into(),
                    detail: "n1".into(),
                },
                leader(1_500_000, 1),
                leader(1_600_000, 2),
                Entry::Heal {
                    t: 3_000_000,
                    id: 0,
                },
            ],
        };
        let ops = history.ops();
        let summary = crate::report::summarize(&run, &history, &ops, &[], &FinalState::default());
        let page = html(&run, &history, &ops, &[], &summary);
        let at = |s: &str| {
            page.find(s)
                .unwrap_or_else(|| panic!("{s} not in the page"))
        };
        // Faults, throughput and the leaders, in that order.
        assert!(at("kill-minority") < at("ops per second"));
        assert!(at("ops per second") < at("directory (group 0)"));
        assert!(at("<details open>") < at("hot-one (group 1)"));
        assert!(at("hot-one (group 1)") < at("<details><summary>"));
        assert!(at("<details><summary>") < at("sleepy-one (group 2)"));
        assert!(page.contains(r#"class="tl" width="100%""#));
        let svg = timeline_svg_for(&run, &history, &ops, &[]);
        let at = |s: &str| svg.find(s).unwrap_or_else(|| panic!("{s} not in the SVG"));
        assert!(at("ops per second") < at("directory (group 0)"));
        assert!(at("hot-one (group 1)") < at("sleepy-one (group 2)"));
    }
}
