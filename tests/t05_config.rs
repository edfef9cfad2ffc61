//! `seatfence node` refuses a bad config at start with a precise error, and
//! exits non-zero without creating anything.

use std::process::Command;

#[test]
fn t05_node_refuses_bad_config_with_a_precise_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cases = [
        ("node_id = 1\n", "missing field"),
        (
            &*format!(
                "node_id = 4\nregion = \"us-east\"\ngrpc_addr = \"127.0.0.1:1\"\ndata_dir = {data:?}\n\
                 [[initial_members]]\nid = 1\nregion = \"us-east\"\ngrpc_addr = \"127.0.0.1:1\"\n"
            ),
            "node 4 is not in initial_members",
        ),
        (
            &*format!(
                "node_id = 1\nregion = \"us-east\"\ngrpc_addr = \"localhost\"\ndata_dir = {data:?}\n\
                 [[initial_members]]\nid = 1\nregion = \"us-east\"\ngrpc_addr = \"localhost\"\n"
            ),
            "grpc_addr \"localhost\" is not host:port",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_seatfence"))
            .arg("node")
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "case {i} started anyway");
        assert!(
            stderr.contains(expected),
            "case {i}: expected {expected:?} in:\n{stderr}"
        );
        assert!(!data.exists(), "case {i} created the data dir");
    }
}
