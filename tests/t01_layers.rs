//! The crates depend one way (ARCHITECTURE.md, "Crates"): each product
//! crate only on crates below it in `LAYERS`, and no product crate on a
//! tooling crate. A new `seatfence-*` dependency that points up the stack
//! (or a new crate missing here) fails this test.

use std::collections::BTreeMap;

/// Product crates, bottom first: a crate may depend only on crates of a
/// lower layer.
const LAYERS: &[&[&str]] = &[
    // seatfence-client speaks only the HTTP contract: it depends on no
    // seatfence crate.
    &["seatfence-core", "seatfence-proto", "seatfence-client"],
    &["seatfence-raft"],
    &["seatfence-regions"],
    &["seatfence-payments", "seatfence-console"],
    &["seatfence-duties", "seatfence-api"],
    &["seatfence-node"],
];

/// Tooling crates: they may depend on any product crate (and the binary
/// on everything); no product crate depends on them.
const TOOLS: &[&str] = &[
    "seatfence-testkit",
    "seatfence-chaos",
    "seatfence-bench",
    "seatfence-export",
    "seatfence",
];

/// (package name, its `seatfence-*` normal dependencies) of every
/// workspace member.
fn members() -> BTreeMap<String, Vec<String>> {
    let root = env!("CARGO_MANIFEST_DIR");
    let workspace: toml::Value =
        toml::from_str(&std::fs::read_to_string(format!("{root}/Cargo.toml")).unwrap()).unwrap();
    let dirs = workspace["workspace"]["members"].as_array().unwrap();
    dirs.iter()
        .map(|dir| {
            let path = format!("{root}/{}/Cargo.toml", dir.as_str().unwrap());
            let manifest: toml::Value =
                toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let name = manifest["package"]["name"].as_str().unwrap().to_string();
            let deps = manifest
                .get("dependencies")
                .and_then(|d| d.as_table())
                .map(|t| {
                    t.keys()
                        .filter(|k| k.starts_with("seatfence"))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            (name, deps)
        })
        .collect()
}

fn layer(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&name))
}

#[test]
fn every_crate_is_placed() {
    for name in members().keys() {
        assert!(
            layer(name).is_some() || TOOLS.contains(&name.as_str()),
            "{name} is in neither LAYERS nor TOOLS of tests/t01_layers.rs: place it"
        );
    }
}

#[test]
fn product_crates_depend_only_downward() {
    for (name, deps) in members() {
        let Some(mine) = layer(&name) else { continue };
        for dep in deps {
            assert!(
                !TOOLS.contains(&dep.as_str()),
                "{name} depends on the tooling crate {dep}"
            );
            let theirs = layer(&dep).unwrap_or(usize::MAX);
            assert!(
                theirs < mine,
                "{name} (layer {mine}) depends on {dep} (layer {theirs}): dependencies point down \
                 the stack (ARCHITECTURE.md)"
            );
        }
    }
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A group's Raft instance and state machine are `seatfence-raft`'s own
/// (private fields); the one way around that, `GroupHandle::raw_raft`,
/// exists for raft's own integration tests and is called nowhere else.
#[test]
fn only_raft_reaches_a_groups_raft_instance() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace: toml::Value =
        toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let mut files = Vec::new();
    for dir in workspace["workspace"]["members"].as_array().unwrap() {
        let dir = dir.as_str().unwrap();
        if dir == "raft" {
            continue;
        }
        for sub in ["src", "tests", "benches", "examples"] {
            let path = root.join(dir).join(sub);
            if path.is_dir() {
                rust_files(&path, &mut files);
            }
        }
    }
    assert!(files.len() > 50, "found only {} files", files.len());
    let me = root.join("tests/t01_layers.rs");
    for file in files.iter().filter(|f| **f != me) {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(
            !text.contains(".raw_raft()"),
            "{} calls GroupHandle::raw_raft: read through `read`, `leads`, `subscribe_applied`, \
             change through a command, `membership::apply` or `hand_over`",
            file.display()
        );
    }
}
