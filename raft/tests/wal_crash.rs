//! The node-wide log killed with SIGKILL at an arbitrary moment loses no
//! append it acknowledged: a child process appends to several groups at
//! once (their appends share flush rounds, with purges mixed in) and
//! prints each acknowledgement; the test kills it after a varying number of
//! them, reopens the data dir, and finds every acknowledged entry. Four
//! rounds on one data dir, each child going on from what the last left.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use seatfence_core::GroupId;
use seatfence_raft::storage::{FlushMode, LogStore, NodeDb};
use seatfence_raft::types::{Entry, LogId, TypeConfig};

const CHILD_ENV: &str = "SEATFENCE_WAL_CRASH_CHILD";
const GROUPS: u64 = 4;

/// Not a test by itself: the process the crash test kills (does nothing
/// unless the crash test started it).
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let db = NodeDb::open(Path::new(&dir), FlushMode::Shared).unwrap();
        let mut tasks = Vec::new();
        for g in 1..=GROUPS {
            let mut log = LogStore::open(&db, GroupId(g)).unwrap();
            tasks.push(tokio::spawn(async move {
                let state = log.get_log_state().await.unwrap();
                let mut next = state.last_log_id.map(|l| l.index() + 1).unwrap_or(1);
                loop {
                    // Entries of varying size, some spanning many pages.
                    let n = 1 + (next % 7) as usize;
                    let entries: Vec<Entry> = (0..n as u64)
                        .map(|k| Entry::new_blank(LogId::new_term_index(1, next + k)))
                        .collect();
                    let (tx, rx) = TypeConfig::oneshot();
                    log.append(entries, IOFlushed::signal(tx)).await.unwrap();
                    rx.await.unwrap().unwrap();
                    next += n as u64;
                    println!("acked {g} {}", next - 1);
                    if next % 100 < n as u64 {
                        log.purge(LogId::new_term_index(1, next - 50))
                            .await
                            .unwrap();
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn a_sigkill_at_any_moment_loses_no_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: HashMap<u64, u64> = HashMap::new();
    for round in 0..4u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let kill_after = 200 + round * 311;
        let mut seen = 0;
        for line in out.lines() {
            let line = line.unwrap();
            let Some(rest) = line.strip_prefix("acked ") else {
                continue;
            };
            let (g, i) = rest.split_once(' ').unwrap();
            let (g, i): (u64, u64) = (g.parse().unwrap(), i.parse().unwrap());
            let max = acked.entry(g).or_default();
            *max = (*max).max(i);
            seen += 1;
            if seen >= kill_after {
                break;
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert_eq!(seen, kill_after, "round {round}: the child stopped early");
        check(dir.path(), &acked, round);
    }
}

/// Every acknowledged entry of every group is readable, after the purge
/// point and without a gap.
fn check(dir: &Path, acked: &HashMap<u64, u64>, round: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let db = NodeDb::open(dir, FlushMode::Shared).unwrap();
        for (&g, &max) in acked {
            let mut log = LogStore::open(&db, GroupId(g)).unwrap();
            let state = log.get_log_state().await.unwrap();
            let last = state.last_log_id.map(|l| l.index()).unwrap_or(0);
            assert!(
                last >= max,
                "round {round}, group {g}: acked {max}, log ends at {last}"
            );
            let from = state.last_purged_log_id.map(|l| l.index() + 1).unwrap_or(1);
            assert!(
                from <= max,
                "round {round}, group {g}: purged past the acked end"
            );
            let got: Vec<u64> = log
                .try_get_log_entries(from..=max)
                .await
                .unwrap()
                .iter()
                .map(|e| e.index())
                .collect();
            assert_eq!(
                got,
                (from..=max).collect::<Vec<_>>(),
                "round {round}, group {g}"
            );
        }
    });
}
