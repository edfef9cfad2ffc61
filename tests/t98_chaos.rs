//! The chaos harness end to end: `seatfence chaos drill` on fixed seeds
//! must PASS (every checker, every scheduled fault injected), and a drill
//! against nodes with a planted bug (the leader accepts stale epochs) must
//! FAIL on the stale-epoch checker. Under root the three drills use the
//! three partition mechanisms (proxy, namespaces, loopback iptables). One
//! drill at a time: each runs nine node processes.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use seatfence_chaos::net::{IptablesNet, NetnsNet};
use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A drill's temporary directory, kept (and its path printed) when the
/// test fails, so the history and report of a failed drill survive.
struct RunDir(Option<tempfile::TempDir>);

impl RunDir {
    fn new() -> RunDir {
        RunDir(Some(
            tempfile::Builder::new()
                .prefix("seatfence-t98-")
                .tempdir()
                .unwrap(),
        ))
    }

    fn path(&self) -> &Path {
        self.0.as_ref().expect("present until dropped").path()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(d) = self.0.take() {
                eprintln!("drill kept for inspection: {}", d.keep().display());
            }
        }
    }
}

fn drill(dir: &Path, seed: u64, secs: u64, extra: &[&str]) -> (i32, Value) {
    drill_env(dir, seed, secs, extra, &[])
}

/// [`drill`] with extra environment variables (inherited by the nodes).
fn drill_env(
    dir: &Path,
    seed: u64,
    secs: u64,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_seatfence"))
        .envs(env.iter().copied())
        .args(["chaos", "drill", "--seed", &seed.to_string()])
        .args(["--duration", &secs.to_string()])
        .arg("--out")
        .arg(dir)
        .args(extra)
        .output()
        .expect("run seatfence chaos drill");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    let code = out.status.code().expect("drill exited with a code");
    assert_ne!(code, 2, "the harness could not run:\n{stderr}");
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("summary.json")).expect("summary.json written"),
    )
    .expect("summary.json is JSON");
    for f in [
        "report.html",
        "timeline.svg",
        "history.jsonl",
        "run.json",
        "final.json",
        "schedule.json",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    (code, summary)
}

fn checker<'a>(summary: &'a Value, name: &str) -> &'a Value {
    summary["checkers"]
        .as_array()
        .expect("checkers")
        .iter()
        .find(|c| c["checker"] == name)
        .unwrap_or_else(|| panic!("no checker {name} in {summary}"))
}

fn assert_passes(dir: &Path, seed: u64, extra: &[&str]) -> Value {
    let (code, summary) = drill(dir, seed, 120, extra);
    assert_eq!(summary["verdict"], "PASS", "{summary:#}");
    assert_eq!(code, 0);
    for c in summary["checkers"].as_array().expect("checkers") {
        assert_eq!(c["verdict"], "PASS", "{c}");
    }
    assert_eq!(summary["faults_injected"], summary["faults_scheduled"]);
    // A full round: every kind of fault took effect at least once.
    let cov = checker(&summary, "coverage");
    assert!(
        cov["summary"].as_str().unwrap().contains("kinds covered")
            && !cov["summary"].as_str().unwrap().contains("not reached"),
        "{cov}"
    );
    assert!(
        summary["faults_scheduled"].as_u64().unwrap() >= 10,
        "{summary}"
    );
    assert!(summary["ops"]["ok"].as_u64().unwrap() > 500, "{summary}");
    assert!(summary["moves_done"].as_u64().unwrap() >= 5, "{summary}");
    assert!(
        summary["leader_changes"].as_u64().unwrap() >= 3,
        "{summary}"
    );
    // `chaos check` re-checks the recorded run to the same verdict.
    let again = Command::new(env!("CARGO_BIN_EXE_seatfence"))
        .args(["chaos", "check"])
        .arg(dir)
        .output()
        .expect("run seatfence chaos check");
    assert_eq!(again.status.code(), Some(0));
    summary
}

#[test]
fn drill_seed_1_over_link_proxies_passes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = RunDir::new();
    assert_passes(&dir.path().join("run"), 1, &["--net", "proxy"]);
}

#[test]
fn drill_seed_2_passes() {
    // `auto`: network namespaces when running as root with `ip` and
    // iptables (CI installs them), the proxy without privileges.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = RunDir::new();
    let summary = assert_passes(&dir.path().join("run"), 2, &[]);
    // What `auto` must have picked on this machine.
    let expected = if NetnsNet::probe().is_ok() {
        "netns"
    } else if IptablesNet::probe().is_ok() {
        "iptables"
    } else {
        "proxy"
    };
    assert_eq!(summary["partition_mechanism"], expected, "{summary:#}");
}

#[test]
fn planted_stale_epoch_bug_is_caught() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = RunDir::new();
    let (code, summary) = drill(
        &dir.path().join("run"),
        3,
        45,
        &[
            "--net",
            // The third mechanism gets its CI run here when it can.
            if IptablesNet::probe().is_ok() {
                "iptables"
            } else {
                "proxy"
            },
            "--plant-bug",
            "accept-stale-epoch",
        ],
    );
    assert_eq!(code, 1, "{summary:#}");
    assert_eq!(summary["verdict"], "FAIL");
    let c = checker(&summary, "no_stale_epoch");
    assert_eq!(c["verdict"], "FAIL", "{c}");
    assert!(c["violations"].as_u64().unwrap() >= 1);
    // The timeline marks the violating ops, and its legend says what the
    // mark means.
    let svg = std::fs::read_to_string(dir.path().join("run/timeline.svg")).expect("timeline.svg");
    assert!(svg.contains("✗ no_stale_epoch"), "no violation marked");
    assert!(svg.contains("op a checker flagged"), "no legend");
}

/// A drill whose nodes ignore the storage fault hook, as a release build
/// does, cannot pass coverage over the fsync failure it scheduled: the
/// node kept running, so the fault is recorded as having had no effect.
#[test]
fn a_fault_the_nodes_cannot_inject_fails_coverage() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = RunDir::new();
    let (code, summary) = drill_env(
        &dir.path().join("run"),
        4,
        25,
        &[
            "--net",
            "proxy",
            "--faults",
            "fsync-fail",
            "--sleeping-events",
            "10",
        ],
        &[(seatfence_raft::storage::health::IGNORE_FSYNC_HOOK_ENV, "1")],
    );
    assert_eq!(code, 1, "{summary:#}");
    assert_eq!(summary["faults_scheduled"], 1, "{summary:#}");
    let c = checker(&summary, "coverage");
    assert_eq!(c["verdict"], "FAIL", "{c}");
    let line = c["summary"].as_str().unwrap();
    assert!(
        line.starts_with("0/1 scheduled faults injected (1 more had no effect)"),
        "{c}"
    );
    assert!(line.contains("not reached: fsync-fail"), "{c}");
    let report = std::fs::read_to_string(dir.path().join("run/report.html")).expect("report");
    assert!(
        report.contains("had no effect"),
        "the report names the fault"
    );
}

/// A short drill with the regions far apart (`--global`: the link
/// proxies carry the default latency matrix, the Raft timings stretched to
/// match): every checker passes, the faults named all take effect, and the
/// run records the matrix it ran under.
#[test]
fn global_drill_over_far_regions_passes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = RunDir::new();
    let run = dir.path().join("run");
    let faults = "isolate-leader,partition-region-leader-minority,kill-minority,slow-network";
    let (code, summary) = drill(&run, 46, 60, &["--global", "--faults", faults]);
    assert_eq!(summary["verdict"], "PASS", "{summary:#}");
    assert_eq!(code, 0);
    for c in summary["checkers"].as_array().expect("checkers") {
        assert_eq!(c["verdict"], "PASS", "{c}");
    }
    assert_eq!(summary["faults_injected"], summary["faults_scheduled"]);
    assert_eq!(summary["partition_mechanism"], "proxy", "{summary:#}");
    assert!(summary["ops"]["ok"].as_u64().unwrap() > 50, "{summary}");
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        info["geo"]["rtt_ms"]["ap-south/us-east"], 200,
        "{}",
        info["geo"]
    );
}

/// A drill whose nemesis wipes disks: a follower of the hot group is
/// SIGKILLed, its data dir deleted and the node started again with
/// `--rejoin-empty` (and so again whenever `kill-minority` kills it
/// mid-rejoin): every checker passes over the sale, and the wipe took
/// effect. Before `allow_log_reversion`, a wiped directory learner's
/// first append panicked the directory's leader, and the drill never
/// settled.
#[test]
fn wiped_disk_drill_passes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = RunDir::new();
    let run = dir.path().join("run");
    let faults = "wipe-disk,kill-minority";
    // Fewer sleeping groups than the default 200: a node rejoins about two
    // groups a second, and a wipe waits for the last one to be back.
    let args = [
        "--net",
        "proxy",
        "--faults",
        faults,
        "--sleeping-events",
        "30",
    ];
    let (code, summary) = drill(&run, 7, 60, &args);
    assert_eq!(summary["verdict"], "PASS", "{summary:#}");
    assert_eq!(code, 0);
    for c in summary["checkers"].as_array().expect("checkers") {
        assert_eq!(c["verdict"], "PASS", "{c}");
    }
    assert_eq!(summary["faults_injected"], summary["faults_scheduled"]);
    let cov = checker(&summary, "coverage");
    let line = cov["summary"].as_str().unwrap();
    assert!(!line.contains("not reached"), "{cov}");
    let schedule = std::fs::read_to_string(run.join("schedule.json")).expect("schedule.json");
    assert!(schedule.contains("\"wipe-disk\""), "{schedule}");
    assert!(summary["ops"]["ok"].as_u64().unwrap() > 100, "{summary}");
}
