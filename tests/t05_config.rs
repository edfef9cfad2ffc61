//! `seatfence node` refuses a bad config at start with a precise error, and
//! exits non-zero without creating anything.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn t05_node_refuses_bad_config_with_a_precise_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cases = [
        ("node_id = 1\n", "missing field"),
        (
            &*format!(
                "node_id = 1\nregion = \"eu-west\"\ngrpc_addr = \"127.0.0.1:1\"\ndata_dir = {data:?}\n\
                 [[initial_members]]\nid = 1\nregion = \"us-east\"\ngrpc_addr = \"127.0.0.1:1\"\n"
            ),
            "initial_members entry for node 1 says region \"us-east\"",
        ),
        (
            &*format!(
                "node_id = 1\nregion = \"us-east\"\ngrpc_addr = \"localhost\"\ndata_dir = {data:?}\n\
                 [[initial_members]]\nid = 1\nregion = \"us-east\"\ngrpc_addr = \"localhost\"\n"
            ),
            "grpc_addr \"localhost\" is not host:port",
        ),
        (
            &*format!(
                "node_id = 1\nregion = \"us-east\"\ngrpc_addr = \"127.0.0.1:1\"\ndata_dir = {data:?}\n\
                 [[initial_members]]\nid = 1\nregion = \"us-east\"\ngrpc_addr = \"127.0.0.1:1\"\n"
            ),
            "[tls]: missing: set ca, cert and key",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_seatfence"))
            .arg("node")
            .arg("--config")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A node that accepted the config would serve forever: bound it.
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                child.kill().unwrap();
                panic!("case {i} started a node instead of refusing the config");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "case {i} started anyway");
        assert!(
            stderr.contains(expected),
            "case {i}: expected {expected:?} in:\n{stderr}"
        );
        assert!(!data.exists(), "case {i} created the data dir");
    }
}
