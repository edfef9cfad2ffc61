//! The timeline's leader rows: one per Raft group that the observer saw
//! led or that an event of the run has, named by its event
//! (`event-id (group N)`; group 0 is `directory (group 0)`), with a tick
//! at each new `(term, leader)`. The directory and the hot and cold
//! events' groups come first; the sleeping events' groups (hundreds of
//! rows) after them, which `report.html` shows in a `<details>` that
//! starts closed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::timeline::{fit, Canvas, Flag, Size, CHAR_W, LABEL_CHARS, LEADER, LEFT};
use super::{esc, plural};
use crate::history::{Entry, History};
use crate::run::{EventInfo, RunInfo};

/// Height of a group's row.
const ROW_H: f64 = 14.0;
/// Every other row's background, to follow a row from its name.
const STRIPE: &str = "#f4f4f4";

/// The blocks of rows, in their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Block {
    /// The directory, the hot and cold events' groups, and groups of no
    /// event of the run: shown open.
    Main,
    /// The sleeping events' groups: collapsed in the report.
    Sleeping,
}

impl Block {
    const ALL: [Block; 2] = [Block::Main, Block::Sleeping];

    /// What the block is called; `known`: whether the run's events are.
    fn heading(self, known: bool) -> &'static str {
        match self {
            Block::Main if known => "The directory and the hot and cold events",
            Block::Main => "Raft groups",
            Block::Sleeping => "Sleeping events",
        }
    }
}

/// A new `(term, leader)` of a group, seen at `t`.
#[derive(Debug, Clone, Copy)]
struct Tick {
    t: u64,
    term: u64,
    leader: u64,
}

/// A group's row.
struct Row {
    /// What the row is labelled: `event-id (group N)` cut to fit.
    label: String,
    /// The label in full.
    name: String,
    /// The label's tooltip: the group, its events, its leaders.
    about: String,
    /// Where it goes: its block, then the run's order of events (groups
    /// of no event after them), then the group's number.
    key: (Block, u8, u64),
    ticks: Vec<Tick>,
}

impl Row {
    /// Its leader changes: each distinct `(term, leader)` after the first,
    /// as the report's head counts them.
    fn changes(&self) -> usize {
        let distinct: BTreeSet<(u64, u64)> =
            self.ticks.iter().map(|k| (k.term, k.leader)).collect();
        distinct.len().saturating_sub(1)
    }
}

/// The rows as `report.html` shows them: each block in a `<details>`
/// (the sleeping events' closed) saying how many groups and leader
/// changes it holds, with its own SVG on the overview's time scale.
pub(super) fn html(run: &RunInfo, history: &History, end_us: u64, flags: &[Flag<'_>]) -> String {
    let all = group_rows(run, history);
    let mut out = String::new();
    for block in Block::ALL {
        let shown: Vec<&Row> = all.iter().filter(|r| r.key.0 == block).collect();
        if shown.is_empty() {
            continue;
        }
        let mut c = Canvas::new(end_us);
        draw_rows(&mut c, &shown, flags);
        let _ = writeln!(
            out,
            "<details{}><summary><b>{}</b>: {}</summary>\n{}\n</details>",
            if block == Block::Main { " open" } else { "" },
            esc(block.heading(!run.events.is_empty())),
            tally(&shown),
            c.finish(Size::Fluid)
        );
    }
    out
}

/// The rows drawn on `c` below what is there (`timeline.svg`), each
/// block under a heading.
pub(super) fn draw_all(c: &mut Canvas, run: &RunInfo, history: &History, flags: &[Flag<'_>]) {
    let all = group_rows(run, history);
    for block in Block::ALL {
        let shown: Vec<&Row> = all.iter().filter(|r| r.key.0 == block).collect();
        if shown.is_empty() {
            continue;
        }
        c.y += 10.0;
        let y = c.y + 10.0;
        let _ = write!(
            c.svg,
            r##"<text x="4" y="{y:.0}" font-size="12" font-weight="bold">{}: {}</text>"##,
            esc(block.heading(!run.events.is_empty())),
            tally(&shown)
        );
        c.y += 16.0;
        draw_rows(c, &shown, flags);
    }
}

/// `7 groups, 35 leader changes`: a block's groups and their leader
/// changes.
fn tally(rows: &[&Row]) -> String {
    let changes: usize = rows.iter().map(|r| r.changes()).sum();
    format!(
        "{}, {}",
        plural(rows.len(), "group"),
        plural(changes, "leader change")
    )
}

/// `rows` from `c.y`: the time axis, then a row per group (every other
/// one shaded) with its leader ticks, and a dashed line down them at each
/// flagged op.
fn draw_rows(c: &mut Canvas, rows: &[&Row], flags: &[Flag<'_>]) {
    c.time_axis();
    let top = c.y;
    for (i, r) in rows.iter().enumerate() {
        let y = top + i as f64 * ROW_H;
        if i % 2 == 1 {
            let _ = write!(
                c.svg,
                r##"<rect x="0" y="{:.0}" width="100%" height="{ROW_H}" fill="{STRIPE}"/>"##,
                y - 1.0
            );
        }
        c.row_label(&r.label, &r.about, y);
        draw_ticks(c, r, y);
    }
    let bottom = top + rows.len() as f64 * ROW_H;
    c.y = bottom + 6.0;
    c.marks(flags, top, bottom, false);
}

/// A row's ticks, each named by its node where the name does not run
/// into the previous one's; `no leader seen` where there are none.
fn draw_ticks(c: &mut Canvas, r: &Row, y: f64) {
    if r.ticks.is_empty() {
        let _ = write!(
            c.svg,
            r##"<text x="{:.0}" y="{:.0}" font-size="9" fill="#999">no leader seen</text>"##,
            LEFT + 4.0,
            y + 10.0
        );
        return;
    }
    let mut label_end = f64::MIN;
    for k in &r.ticks {
        let x = c.x(k.t);
        let _ = write!(
            c.svg,
            r##"<g><rect x="{x:.1}" y="{y:.0}" width="2" height="12" fill="{LEADER}"/>"##
        );
        let node = format!("n{}", k.leader);
        if x + 3.0 > label_end {
            label_end = x + 3.0 + node.len() as f64 * CHAR_W;
            let _ = write!(
                c.svg,
                r##"<text x="{:.1}" y="{:.0}" font-size="9">{node}</text>"##,
                x + 3.0,
                y + 10.0
            );
        }
        let _ = write!(
            c.svg,
            "<title>{}: node {} leads in term {} at {:.2}s</title></g>",
            esc(&r.name),
            k.leader,
            k.term,
            k.t as f64 / 1e6
        );
    }
}

/// Each group's new `(term, leader)`s in the history's order.
fn leader_ticks(history: &History) -> BTreeMap<u64, Vec<Tick>> {
    let mut ticks: BTreeMap<u64, Vec<Tick>> = BTreeMap::new();
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
        let row = ticks.entry(*group).or_default();
        if row
            .last()
            .is_some_and(|k| (k.term, k.leader) == (*term, *leader))
        {
            continue;
        }
        row.push(Tick {
            t: *t,
            term: *term,
            leader: *leader,
        });
    }
    ticks
}

/// A row per group that the observer saw led or that an event of `run`
/// has, in order: the directory, the hot and cold events' (in the run's
/// order), groups of no event, then the sleeping events' (by group).
fn group_rows(run: &RunInfo, history: &History) -> Vec<Row> {
    let mut ticks = leader_ticks(history);
    let mut events: BTreeMap<u64, Vec<(usize, &EventInfo)>> = BTreeMap::new();
    for (i, e) in run.events.iter().enumerate() {
        events.entry(e.group).or_default().push((i, e));
    }
    let groups: BTreeSet<u64> = ticks.keys().chain(events.keys()).copied().collect();
    let known = !run.events.is_empty();
    let mut rows: Vec<Row> = groups
        .into_iter()
        .map(|g| {
            let of_group = events.get(&g).map(Vec::as_slice).unwrap_or_default();
            row(g, of_group, known, ticks.remove(&g).unwrap_or_default())
        })
        .collect();
    rows.sort_by_key(|r| r.key);
    rows
}

/// The row of `group`, whose events are `events` (each with its index in
/// the run's); `known`: whether the run's events are known at all.
fn row(group: u64, events: &[(usize, &EventInfo)], known: bool, ticks: Vec<Tick>) -> Row {
    let suffix = format!(" (group {group})");
    let (label, name, what, key) = match events {
        [] if group == 0 => {
            let name = "directory (group 0)".to_string();
            let what = "the directory (every node, group and event's owner)".to_string();
            (name.clone(), name, what, (Block::Main, 0, 0))
        }
        [] => {
            let (name, what) = if known {
                (
                    format!("group {group} (not a drill event)"),
                    "no event of this run".to_string(),
                )
            } else {
                (format!("group {group}"), "events unknown here".to_string())
            };
            (fit(&name, LABEL_CHARS), name, what, (Block::Main, 2, group))
        }
        [(first, _), ..] => {
            let ids: Vec<&str> = events.iter().map(|(_, e)| e.event_id.as_str()).collect();
            let ids = ids.join(", ");
            let cut = fit(&ids, LABEL_CHARS.saturating_sub(suffix.len()));
            let what: Vec<String> = events.iter().map(|(_, e)| describe(e)).collect();
            let key = if events.iter().all(|(_, e)| e.sleeper) {
                (Block::Sleeping, 0, group)
            } else {
                (Block::Main, 1, *first as u64)
            };
            (
                format!("{cut}{suffix}"),
                format!("{ids}{suffix}"),
                what.join("; "),
                key,
            )
        }
    };
    Row {
        about: format!(
            "group {group}: {what}; {} seen",
            plural(ticks.len(), "new leader")
        ),
        label,
        name,
        key,
        ticks,
    }
}

/// What the run says of event `e`: `chaos-g1-hot-a: hot event of
/// generation 1 (retired), 40 seats, home us-east`.
fn describe(e: &EventInfo) -> String {
    let kind = if e.sleeper {
        "sleeping event".to_string()
    } else {
        format!(
            "{} event of generation {}",
            if e.hot { "hot" } else { "cold" },
            e.generation
        )
    };
    format!(
        "{}: {kind}{}, {} seats, home {}",
        e.event_id,
        if e.retired { " (retired)" } else { "" },
        e.seats.len(),
        e.home_region
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, group: u64, hot: bool, sleeper: bool) -> EventInfo {
        EventInfo {
            event_id: id.into(),
            group,
            hot,
            sleeper,
            ..EventInfo::default()
        }
    }

    fn leader(t: u64, group: u64, leader: u64, term: u64) -> Entry {
        Entry::Leader {
            t,
            group,
            leader,
            term,
        }
    }

    #[test]
    fn rows_are_named_by_their_events_and_sleepers_come_last() {
        let run = RunInfo {
            events: vec![
                event("chaos-g0-hot-a", 1, true, false),
                event("chaos-sleeper-0", 2, false, true),
                event("chaos-g0-cold", 3, false, false),
            ],
            ..RunInfo::default()
        };
        let history = History {
            entries: vec![
                leader(1, 2, 1, 1),
                leader(2, 0, 1, 1),
                leader(3, 1, 2, 1),
                leader(4, 1, 2, 1),
                leader(5, 1, 3, 2),
                leader(6, 9, 1, 1),
            ],
        };
        let rows = group_rows(&run, &history);
        let names: Vec<(&str, Block)> = rows.iter().map(|r| (r.label.as_str(), r.key.0)).collect();
        assert_eq!(
            names,
            vec![
                ("directory (group 0)", Block::Main),
                ("chaos-g0-hot-a (group 1)", Block::Main),
                ("chaos-g0-cold (group 3)", Block::Main),
                ("group 9 (not a drill event)", Block::Main),
                ("chaos-sleeper-0 (group 2)", Block::Sleeping),
            ]
        );
        // The same (term, leader) seen again is no new tick.
        assert_eq!(rows[1].ticks.len(), 2);
        assert_eq!(rows[1].changes(), 1);
        // An event whose leader was never seen has its row all the same.
        assert!(rows[2].ticks.is_empty());
        assert!(rows[1].about.contains("hot event of generation 0"));
        let main: Vec<&Row> = rows.iter().filter(|r| r.key.0 == Block::Main).collect();
        assert_eq!(tally(&main), "4 groups, 1 leader change");
    }

    #[test]
    fn long_event_ids_are_cut_but_keep_their_group() {
        let long = "x".repeat(60);
        let run = RunInfo {
            events: vec![event(&long, 7, true, false)],
            ..RunInfo::default()
        };
        let rows = group_rows(&run, &History::default());
        assert!(rows[0].label.ends_with("… (group 7)"), "{}", rows[0].label);
        assert!(rows[0].label.chars().count() <= LABEL_CHARS);
        assert!(rows[0].name.starts_with(&long));
    }
}
