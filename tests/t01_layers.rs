//! The crates depend one way (ARCHITECTURE.md, "Crates"): each product
//! crate only on crates below it in `LAYERS`, and no product crate on a
//! tooling crate. A new `seatfence-*` dependency that points up the stack
//! (or a new crate missing here) fails this test.

use std::collections::BTreeMap;

/// Product crates, bottom first: a crate may depend only on crates of a
/// lower layer.
const LAYERS: &[&[&str]] = &[
    &["seatfence-core", "seatfence-proto"],
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
