//! The drill's history: every client operation as an invoke and its
//! completion (`ok`, `fail`: definitely did not happen, `info`: may or may
//! not have happened), plus what the nemesis and the observer saw, one JSON
//! object per line in `history.jsonl`. Times are microseconds of the
//! harness's monotonic clock since the drill started.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// One line of `history.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    Invoke {
        t: u64,
        process: String,
        op: u64,
        call: Call,
    },
    Ok {
        t: u64,
        process: String,
        op: u64,
        reply: Reply,
    },
    /// The operation definitely did not take effect.
    Fail {
        t: u64,
        process: String,
        op: u64,
        code: String,
        /// For `seats_unavailable`: the seats the system said were taken.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unavailable: Vec<String>,
    },
    /// Unknown outcome: it may or may not have taken effect.
    Info {
        t: u64,
        process: String,
        op: u64,
        reason: String,
    },
    /// A fault the nemesis injected (`id` is its index in the schedule).
    Fault {
        t: u64,
        id: u32,
        kind: String,
        detail: String,
    },
    /// The fault `id` was healed.
    Heal { t: u64, id: u32 },
    /// A scheduled fault that could not be injected, and why.
    Skipped {
        t: u64,
        id: u32,
        kind: String,
        reason: String,
    },
    /// The fault `id` was injected but had no effect the nemesis could
    /// see (a failing fsync on a node that kept running: a build without
    /// the storage fault hook). Coverage counts it as not injected.
    NoEffect {
        t: u64,
        id: u32,
        kind: String,
        reason: String,
    },
    /// The observer saw `leader` lead `group` in `term`.
    Leader {
        t: u64,
        group: u64,
        leader: u64,
        term: u64,
    },
}

impl Entry {
    pub fn t(&self) -> u64 {
        match self {
            Entry::Invoke { t, .. }
            | Entry::Ok { t, .. }
            | Entry::Fail { t, .. }
            | Entry::Info { t, .. }
            | Entry::Fault { t, .. }
            | Entry::Heal { t, .. }
            | Entry::Skipped { t, .. }
            | Entry::NoEffect { t, .. }
            | Entry::Leader { t, .. } => *t,
        }
    }

    fn t_mut(&mut self) -> &mut u64 {
        match self {
            Entry::Invoke { t, .. }
            | Entry::Ok { t, .. }
            | Entry::Fail { t, .. }
            | Entry::Info { t, .. }
            | Entry::Fault { t, .. }
            | Entry::Heal { t, .. }
            | Entry::Skipped { t, .. }
            | Entry::NoEffect { t, .. }
            | Entry::Leader { t, .. } => t,
        }
    }
}

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "snake_case")]
pub enum Call {
    /// `POST /v1/holds` (retried with the same Idempotency-Key while the
    /// outcome is unknown).
    Hold {
        event: String,
        seats: Vec<String>,
        edge: String,
    },
    /// `DELETE /v1/holds/{hold}`.
    Cancel {
        event: String,
        hold: String,
        seats: Vec<String>,
    },
    /// `POST /v1/bookings`.
    Book {
        event: String,
        hold: String,
        seats: Vec<String>,
    },
    /// Approve at the gateway, then the browser callback; `abandon`:
    /// cancel at the gateway instead (the reconciler then releases the
    /// hold as soon as it sees the cancelled payment).
    Pay {
        event: String,
        hold: String,
        booking: String,
        seats: Vec<String>,
        #[serde(default)]
        abandon: bool,
    },
    /// `GET /v1/bookings/{booking}` (linearizable, owner only).
    ReadBooking {
        event: String,
        hold: String,
        booking: String,
        seats: Vec<String>,
    },
    /// The zombie client: a hold sent straight to the group over gRPC with
    /// an epoch that a finished move already replaced.
    StaleHold {
        event: String,
        seats: Vec<String>,
        epoch: u64,
    },
    /// The operator: move the event's ownership (start, then wait for done).
    Move { event: String, to: String },
}

impl Call {
    pub fn name(&self) -> &'static str {
        match self {
            Call::Hold { .. } => "hold",
            Call::Cancel { .. } => "cancel",
            Call::Book { .. } => "book",
            Call::Pay { .. } => "pay",
            Call::ReadBooking { .. } => "read_booking",
            Call::StaleHold { .. } => "stale_hold",
            Call::Move { .. } => "move",
        }
    }

    pub fn event(&self) -> &str {
        match self {
            Call::Hold { event, .. }
            | Call::Cancel { event, .. }
            | Call::Book { event, .. }
            | Call::Pay { event, .. }
            | Call::ReadBooking { event, .. }
            | Call::StaleHold { event, .. }
            | Call::Move { event, .. } => event,
        }
    }
}

/// What a successful call answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
pub enum Reply {
    Held {
        hold: String,
        seats: Vec<String>,
        epoch: u64,
        /// The hold's `expires_at` (Unix ms), as its leader stamped it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_at_ms: Option<u64>,
    },
    Cancelled {
        epoch: u64,
        /// The hold's status in the answer: `released` (this cancel, or an
        /// earlier one, freed it) or `expired` (it had already lapsed: a
        /// cancel is idempotent and answers 200 either way). Absent in
        /// histories recorded before it was kept: taken as `released`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
    },
    Booked {
        booking: String,
        payment_id: String,
        epoch: u64,
    },
    /// A booking's status (`pending`, `confirmed`, `expired`,
    /// `refund_pending`, `refunded`).
    Booking { status: String },
    /// The move finished: the event's new epoch.
    Moved { epoch: u64 },
}

/// An operation: an invoke paired with its completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub process: String,
    pub op: u64,
    pub call: Call,
    pub invoked: u64,
    /// `None` for an unknown outcome (`info`, or no completion at all).
    pub completed: Option<u64>,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok(Reply),
    Fail {
        code: String,
        unavailable: Vec<String>,
    },
    Unknown(String),
}

impl Op {
    /// The history line that names this op (for reports).
    pub fn label(&self) -> String {
        let what = match &self.outcome {
            Outcome::Ok(r) => format!("ok {}", serde_json::to_string(r).unwrap_or_default()),
            Outcome::Fail { code, .. } => format!("fail {code}"),
            Outcome::Unknown(r) => format!("info {r}"),
        };
        format!(
            "op {} ({}) {} {} at {:.3}s: {}",
            self.op,
            self.process,
            self.call.name(),
            serde_json::to_string(&self.call).unwrap_or_default(),
            self.invoked as f64 / 1e6,
            what
        )
    }
}

/// The whole history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    pub entries: Vec<Entry>,
}

impl History {
    pub fn read(path: &Path) -> anyhow::Result<History> {
        let file = std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
        let mut entries = Vec::new();
        for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.with_context(|| format!("read {}", path.display()))?;
            if line.trim().is_empty() {
                continue;
            }
            entries.push(
                serde_json::from_str(&line).with_context(|| {
                    format!("{}:{}: not a history entry", path.display(), n + 1)
                })?,
            );
        }
        Ok(History { entries })
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?,
        );
        for e in &self.entries {
            serde_json::to_writer(&mut out, e)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
        Ok(())
    }

    /// Pair invokes with completions, ordered by invoke time. An invoke
    /// without a completion counts as unknown.
    pub fn ops(&self) -> Vec<Op> {
        let mut open: BTreeMap<u64, Op> = BTreeMap::new();
        let mut done = Vec::new();
        for e in &self.entries {
            match e {
                Entry::Invoke {
                    t,
                    process,
                    op,
                    call,
                } => {
                    open.insert(
                        *op,
                        Op {
                            process: process.clone(),
                            op: *op,
                            call: call.clone(),
                            invoked: *t,
                            completed: None,
                            outcome: Outcome::Unknown("no completion recorded".into()),
                        },
                    );
                }
                Entry::Ok { t, op, reply, .. } => {
                    if let Some(mut o) = open.remove(op) {
                        o.completed = Some(*t);
                        o.outcome = Outcome::Ok(reply.clone());
                        done.push(o);
                    }
                }
                Entry::Fail {
                    t,
                    op,
                    code,
                    unavailable,
                    ..
                } => {
                    if let Some(mut o) = open.remove(op) {
                        o.completed = Some(*t);
                        o.outcome = Outcome::Fail {
                            code: code.clone(),
                            unavailable: unavailable.clone(),
                        };
                        done.push(o);
                    }
                }
                Entry::Info { op, reason, .. } => {
                    if let Some(mut o) = open.remove(op) {
                        o.outcome = Outcome::Unknown(reason.clone());
                        done.push(o);
                    }
                }
                _ => {}
            }
        }
        done.extend(open.into_values());
        done.sort_by_key(|o| (o.invoked, o.op));
        done
    }
}

/// Appends entries to `history.jsonl` as they happen (so a drill that dies
/// still leaves its history), stamping the harness's monotonic time.
pub struct Recorder {
    start: std::time::Instant,
    inner: std::sync::Mutex<RecorderInner>,
}

struct RecorderInner {
    out: std::io::BufWriter<std::fs::File>,
    next_op: u64,
    entries: Vec<Entry>,
    tally: Tally,
}

/// Running counts, for the progress line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub invoked: u64,
    pub ok: u64,
    /// Definite "no"s by design (see `report::is_refusal`).
    pub refused: u64,
    pub fail: u64,
    pub info: u64,
    pub faults: u64,
    pub leader_changes: u64,
}

impl Recorder {
    pub fn create(path: &Path) -> anyhow::Result<Recorder> {
        let file =
            std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
        Ok(Recorder {
            start: std::time::Instant::now(),
            inner: std::sync::Mutex::new(RecorderInner {
                out: std::io::BufWriter::new(file),
                next_op: 1,
                entries: Vec::new(),
                tally: Tally::default(),
            }),
        })
    }

    /// Microseconds since the drill started.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    pub fn started(&self) -> std::time::Instant {
        self.start
    }

    /// Record an invoke; returns its op number.
    pub fn invoke(&self, process: &str, call: Call) -> u64 {
        // The lock is std's: held only to number and append a line, never
        // across an `.await`.
        let mut inner = self.inner.lock().expect("recorder lock poisoned");
        let op = inner.next_op;
        inner.next_op += 1;
        let e = Entry::Invoke {
            t: self.now(),
            process: process.to_string(),
            op,
            call,
        };
        inner.push(e);
        op
    }

    pub fn ok(&self, process: &str, op: u64, reply: Reply) {
        self.push(Entry::Ok {
            t: self.now(),
            process: process.to_string(),
            op,
            reply,
        });
    }

    pub fn fail(&self, process: &str, op: u64, code: &str, unavailable: Vec<String>) {
        self.push(Entry::Fail {
            t: self.now(),
            process: process.to_string(),
            op,
            code: code.to_string(),
            unavailable,
        });
    }

    pub fn info(&self, process: &str, op: u64, reason: &str) {
        self.push(Entry::Info {
            t: self.now(),
            process: process.to_string(),
            op,
            reason: reason.to_string(),
        });
    }

    /// Record a non-operation entry (fault, heal, leader); `t` is filled in.
    pub fn push(&self, mut e: Entry) {
        *e.t_mut() = self.now();
        self.inner.lock().expect("recorder lock poisoned").push(e);
    }

    pub fn tally(&self) -> Tally {
        self.inner.lock().expect("recorder lock poisoned").tally
    }

    /// Flush the file and hand back everything recorded.
    pub fn finish(&self) -> anyhow::Result<History> {
        let mut inner = self.inner.lock().expect("recorder lock poisoned");
        inner.out.flush().context("flush history")?;
        Ok(History {
            entries: inner.entries.clone(),
        })
    }
}

impl RecorderInner {
    fn push(&mut self, e: Entry) {
        // A failed write of one line must not stop the drill; `finish`
        // reports a broken file when it flushes.
        let _ = serde_json::to_writer(&mut self.out, &e);
        let _ = self.out.write_all(b"\n");
        let t = &mut self.tally;
        match &e {
            Entry::Invoke { .. } => t.invoked += 1,
            Entry::Ok { .. } => t.ok += 1,
            Entry::Fail { code, .. } if crate::report::is_refusal(code) => t.refused += 1,
            Entry::Fail { .. } => t.fail += 1,
            Entry::Info { .. } => t.info += 1,
            Entry::Fault { .. } => t.faults += 1,
            Entry::Leader { .. } => t.leader_changes += 1,
            Entry::Heal { .. } | Entry::Skipped { .. } | Entry::NoEffect { .. } => {}
        }
        self.entries.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_invokes_with_completions_and_round_trips() {
        let dir = std::env::temp_dir().join(format!("chaos-hist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.jsonl");
        let rec = Recorder::create(&path).unwrap();
        let call = Call::Hold {
            event: "e".into(),
            seats: vec!["S1".into()],
            edge: "n1".into(),
        };
        let a = rec.invoke("c1", call.clone());
        let b = rec.invoke("c2", call.clone());
        let c = rec.invoke("c3", call);
        rec.ok(
            "c1",
            a,
            Reply::Held {
                hold: "h1-1".into(),
                seats: vec!["S1".into()],
                epoch: 1,
                expires_at_ms: Some(1_800_000_000_000),
            },
        );
        rec.fail("c2", b, "seats_unavailable", vec!["S1".into()]);
        let h = rec.finish().unwrap();
        assert_eq!(History::read(&path).unwrap(), h);
        let ops = h.ops();
        assert_eq!(ops.len(), 3);
        assert!(matches!(ops[0].outcome, Outcome::Ok(_)));
        assert!(matches!(ops[1].outcome, Outcome::Fail { .. }));
        assert_eq!(ops[2].op, c);
        assert!(matches!(ops[2].outcome, Outcome::Unknown(_)));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
