//! `seatfence cluster init` (issue 45) through the binary, as an operator
//! runs it: a topology becomes one directory per host whose `node.toml` a
//! node accepts, with its own certificate, an edge certificate for its
//! address and owner-only secrets; `--add-host` gives the next node id and
//! never a used one; a directory that holds a cluster is not overwritten;
//! a topology that breaks a rule is refused with its line.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use seatfence_raft::network::tls::Principal;

const TOPOLOGY: &str = r#"[[region]]
name = "us-east"
[[region]]
name = "eu-west"
[[region]]
name = "ap-south"
survive = "region"

[[host]]
name = "us1"
address = "10.9.1.1"
region = "us-east"
[[host]]
name = "us2"
address = "10.9.1.2"
region = "us-east"
[[host]]
name = "us3"
address = "10.9.1.3"
region = "us-east"
[[host]]
name = "eu1"
address = "10.9.2.1"
region = "eu-west"
[[host]]
name = "eu2"
address = "10.9.2.2"
region = "eu-west"
[[host]]
name = "eu3"
address = "10.9.2.3"
region = "eu-west"
[[host]]
name = "ap1"
address = "10.9.3.1"
region = "ap-south"
edge = false
"#;

fn init(dir: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_seatfence"))
        .args(["cluster", "init", "--topology"])
        .arg(dir.join("topology.toml"))
        .arg("--out")
        .arg(dir.join("out"))
        .args(extra)
        .output()
        .expect("run seatfence")
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn pem_der(p: &Path) -> Vec<u8> {
    let text = std::fs::read_to_string(p).unwrap();
    let b64: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64_decode(&b64)
}

/// Standard base64 (a certificate's PEM body).
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(val).collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &v)| n | (u32::from(v) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

#[test]
fn t45_cluster_init_lays_out_hosts_and_adds_one_under_a_new_id() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("topology.toml"), TOPOLOGY).unwrap();
    let out = init(dir, &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hosts = report["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 7);
    let voters: Vec<u64> = hosts
        .iter()
        .filter(|h| h["directory_voter"] == true)
        .map(|h| h["node_id"].as_u64().unwrap())
        .collect();
    assert_eq!(voters, vec![1, 4, 7], "each region's first host");
    assert_eq!(hosts[0]["edge_url"], "https://10.9.1.1:8443");
    assert_eq!(
        hosts[6]["edge_url"],
        serde_json::Value::Null,
        "edge = false"
    );

    // us2's files: a config the node accepts, its certificate naming node 2.
    let us2 = dir.join("out/hosts/us2");
    let text = std::fs::read_to_string(us2.join("node.toml")).unwrap();
    let config: seatfence_node::NodeConfig = toml::from_str(&text).unwrap();
    config.validate().expect("the node accepts its config");
    assert_eq!((config.node_id, config.region.as_str()), (2, "us-east"));
    assert_eq!(config.grpc_addr, "10.9.1.2:7100");
    assert_eq!(config.initial_members.len(), 3);
    let edge = config.edge.as_ref().expect("an edge");
    assert_eq!(edge.public_url.as_deref(), Some("https://10.9.1.2:8443"));
    assert_eq!(
        edge.tls.as_ref().map(|t| t.cert.clone()),
        Some("/etc/seatfence/certs/edge.pem".into())
    );
    let cert = pem_der(&us2.join("certs/node-2.pem"));
    assert_eq!(Principal::of_der(&cert), Some(Principal::Node(2)));
    // The edge certificate names no principal: the gRPC port refuses it.
    let edge_cert = pem_der(&us2.join("certs/edge.pem"));
    assert_eq!(Principal::of_der(&edge_cert), None);
    assert!(
        edge_cert.windows(4).any(|w| w == [10, 9, 1, 2]),
        "the edge certificate is for the host's address"
    );
    for secret in [
        "secrets/jwt-secret",
        "certs/node-2.key",
        "certs/edge.key",
        "node.toml",
    ] {
        assert_eq!(mode(&us2.join(secret)), 0o600, "{secret}");
    }
    for d in ["certs", "secrets", "."] {
        assert_eq!(mode(&us2.join(d)), 0o700, "{d}");
    }
    assert!(
        !dir.join("out/hosts/ap1/secrets/jwt-secret").exists(),
        "no edge, no JWT secret"
    );
    assert_eq!(mode(&dir.join("out/ca/ca.key")), 0o600);

    // Again into the same directory: refused, nothing overwritten.
    let before = std::fs::read(us2.join("certs/node-2.pem")).unwrap();
    let again = init(dir, &[]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("exists and holds files"), "{err}");
    assert_eq!(std::fs::read(us2.join("certs/node-2.pem")).unwrap(), before);

    // A host that has an id already cannot be added again.
    let used = init(dir, &["--add-host", "us2"]);
    assert!(!used.status.success());
    let err = String::from_utf8_lossy(&used.stderr);
    assert!(err.contains("us2 already has node id 2"), "{err}");

    // A new host: the next id, the same voters and secrets, others untouched.
    let mut topology = TOPOLOGY.to_string();
    topology.push_str("[[host]]\nname = \"us4\"\naddress = \"10.9.1.4\"\nregion = \"us-east\"\n");
    std::fs::write(dir.join("topology.toml"), &topology).unwrap();
    let added = init(dir, &["--add-host", "us4", "--json"]);
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&added.stdout).unwrap();
    assert_eq!(report["hosts"][0]["node_id"], 8);
    let us4 = dir.join("out/hosts/us4");
    let text = std::fs::read_to_string(us4.join("node.toml")).unwrap();
    let config: seatfence_node::NodeConfig = toml::from_str(&text).unwrap();
    config.validate().expect("valid");
    assert_eq!(config.node_id, 8);
    assert_eq!(
        config
            .initial_members
            .iter()
            .map(|p| p.id)
            .collect::<Vec<_>>(),
        vec![1, 4, 7]
    );
    assert_eq!(
        std::fs::read(us4.join("secrets/jwt-secret")).unwrap(),
        std::fs::read(us2.join("secrets/jwt-secret")).unwrap(),
        "one JWT secret for every edge"
    );
    assert_eq!(std::fs::read(us2.join("certs/node-2.pem")).unwrap(), before);

    // us2 leaves the topology and a replacement takes its address: a new id.
    let replaced = topology.replace("name = \"us2\"", "name = \"us5\"");
    std::fs::write(dir.join("topology.toml"), replaced).unwrap();
    let five = init(dir, &["--add-host", "us5", "--json"]);
    assert!(
        five.status.success(),
        "{}",
        String::from_utf8_lossy(&five.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&five.stdout).unwrap();
    assert_eq!(report["hosts"][0]["node_id"], 9, "never us2's 2");
}

#[test]
fn t45_cluster_init_refuses_a_bad_topology_with_its_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // us-east keeps two hosts: zone survival needs three.
    let text = TOPOLOGY.replace(
        "[[host]]\nname = \"us3\"\naddress = \"10.9.1.3\"\nregion = \"us-east\"\n",
        "",
    );
    std::fs::write(dir.join("topology.toml"), text).unwrap();
    let out = init(dir, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "topology.toml: line 2: region us-east has 2 host(s): zone survival keeps 3 replicas"
        ),
        "{err}"
    );
    assert!(!dir.join("out").exists(), "nothing written");
}
