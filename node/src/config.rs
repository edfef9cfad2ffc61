//! [`NodeConfig`]: what `seatfence node --config node.toml` reads, validated
//! at start with precise errors. Each section belongs to the crate that
//! uses it (`[raft]`: `seatfence-raft`, `[moves]`: `seatfence-regions`,
//! `[edge]`, `[payments]`: `seatfence-api`); this file puts them together
//! and checks what spans them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use seatfence_api::config::{EdgeConfig, PaymentsConfig};
use seatfence_raft::config::RaftTuning;
use seatfence_raft::network::tls::TlsConfig;
use seatfence_raft::propose::PlantedBug;
use seatfence_regions::config::MovesConfig;
use serde::{Deserialize, Serialize};

/// A directory voter known before the cluster exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// The voter's node id.
    pub id: u64,
    /// The voter's region (one voter per region).
    pub region: String,
    /// The voter's gRPC address as peers dial it (an `ip:port`).
    pub grpc_addr: String,
}

/// A node's config file (`node.toml`), as read and validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id: at least 1, unique in the cluster.
    pub node_id: u64,
    /// The region this node is in (not blank).
    pub region: String,
    /// `host:port` the gRPC server listens on and peers dial.
    pub grpc_addr: String,
    /// Where the node keeps its sled database (created if missing; mail goes to
    /// `{data_dir}/mail` unless `[payments]` names another directory).
    pub data_dir: PathBuf,
    /// The directory's voters, one per region. A node that is not one of
    /// them joins: it registers through them and the directory's leader
    /// adds it to group 0 as a learner.
    pub initial_members: Vec<Peer>,
    /// Mutual TLS on the gRPC port: the cluster CA, this node's certificate
    /// and key (`seatfence cert`), or `insecure = true`. Required.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// `[raft]`: Raft timing and storage knobs (defaults when absent).
    #[serde(default)]
    pub raft: RaftTuning,
    /// Ownership moves: coordinator pacing and retired replicas.
    #[serde(default)]
    pub moves: MovesConfig,
    /// The node's HTTP edge (absent: no edge on this node).
    #[serde(default)]
    pub edge: Option<EdgeConfig>,
    /// The payment gateway (absent: bookings answer 503 `payments_disabled`).
    #[serde(default)]
    pub payments: Option<PaymentsConfig>,
    /// Test and drill hooks (the chaos harness); absent in production.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chaos: Option<ChaosHooks>,
    /// `seatfence node --rejoin-empty` (never from the file): a node whose
    /// id the directory lists may start on an empty data dir, rejoining
    /// every group as a learner (see `admit`).
    #[serde(skip)]
    pub rejoin_empty: bool,
}

/// `[chaos]`: what the chaos harness may do to a node it supervises. None
/// of it is meant for production; every field defaults to "off".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChaosHooks {
    /// Dial these addresses instead of the peers' own (peer `grpc_addr` →
    /// a per-link proxy the harness controls), for node-to-node gRPC.
    pub via: BTreeMap<String, String>,
    /// A file holding the leader clock's skew in milliseconds (signed
    /// integer); re-read every 100 ms, missing or unreadable means 0.
    pub skew_file: Option<PathBuf>,
    /// A bug planted on purpose so a drill can prove it catches it.
    pub plant_bug: Option<PlantedBug>,
    /// Dial peers from this local address (the iptables mechanism gives
    /// every node its own loopback address).
    pub source_ip: Option<std::net::IpAddr>,
}

/// Why a node config was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The text is not TOML of the config's shape (says line and column, never the line).
    #[error("cannot parse config: {0}")]
    Parse(String),
    /// `node_id` is 0.
    #[error("node_id must be at least 1 (got 0)")]
    ZeroNodeId,
    /// A `grpc_addr` (this node's or an initial member's) is not an `ip:port`.
    #[error("grpc_addr {addr:?} is not host:port: {reason}")]
    BadAddr {
        /// The address as given.
        addr: String,
        /// Why it did not parse as a socket address.
        reason: String,
    },
    /// `region` is empty or blank.
    #[error("region must not be empty")]
    EmptyRegion,
    /// `initial_members` lists no voter.
    #[error("initial_members is empty: list the directory voters, one per region")]
    NoMembers,
    /// Two `initial_members` entries have this node id.
    #[error("initial_members lists node {0} twice")]
    DuplicateMember(u64),
    /// Two `initial_members` entries are in this region.
    #[error("initial_members lists region {0:?} twice: the directory has one voter per region")]
    DuplicateRegion(String),
    /// This node's own `initial_members` entry disagrees with its `region` or `grpc_addr`.
    #[error(
        "initial_members entry for node {id} says {field} {theirs:?}, this config says {ours:?}"
    )]
    MemberMismatch {
        /// This node's id.
        id: u64,
        /// The field that differs: `region` or `grpc_addr`.
        field: &'static str,
        /// The value in the `initial_members` entry.
        theirs: String,
        /// The value at the config's top level.
        ours: String,
    },
    /// `[tls]` is missing or does not check.
    #[error("[tls]: {0}")]
    Tls(String),
    /// `[raft]`'s timings do not check.
    #[error("{0}")]
    Raft(String),
    /// `[edge]` does not check, or one of its secrets cannot be read.
    #[error("edge: {0}")]
    Edge(String),
    /// `[payments]` does not check, or one of its secrets cannot be read.
    #[error("payments: {0}")]
    Payments(String),
    /// `[chaos] plant_bug` is set, and this build cannot plant bugs.
    #[error("[chaos] plant_bug: this build cannot plant bugs (a test build can, or a build with `--features planted-bugs`)")]
    PlantedBugsOff,
}

impl ConfigError {
    /// `config_parse` for a [`ConfigError::Parse`], else `config_invalid`.
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::Parse(_) => "config_parse",
            _ => "config_invalid",
        }
    }
}

impl NodeConfig {
    /// Parse `text`, read its `env:`/`file:` secrets, and validate the result.
    pub fn from_toml(text: &str) -> Result<NodeConfig, ConfigError> {
        let mut c: NodeConfig =
            toml::from_str(text).map_err(|e| ConfigError::Parse(parse_error(text, &e)))?;
        c.resolve_secrets()?;
        c.validate()?;
        Ok(c)
    }

    /// Read the secrets given as `env:NAME` or `file:/path`.
    pub fn resolve_secrets(&mut self) -> Result<(), ConfigError> {
        if let Some(e) = &mut self.edge {
            e.resolve_secrets().map_err(ConfigError::Edge)?;
        }
        if let Some(p) = &mut self.payments {
            p.resolve_secrets().map_err(ConfigError::Payments)?;
        }
        Ok(())
    }

    /// Check the config as a whole: ids, addresses, regions, `initial_members`, every
    /// section, and what spans them; the first problem found is the error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.node_id == 0 {
            return Err(ConfigError::ZeroNodeId);
        }
        if self.region.trim().is_empty() {
            return Err(ConfigError::EmptyRegion);
        }
        check_addr(&self.grpc_addr)?;
        if self.initial_members.is_empty() {
            return Err(ConfigError::NoMembers);
        }
        let mut ids = BTreeSet::new();
        let mut regions = BTreeSet::new();
        for p in &self.initial_members {
            check_addr(&p.grpc_addr)?;
            if !ids.insert(p.id) {
                return Err(ConfigError::DuplicateMember(p.id));
            }
            if !regions.insert(p.region.clone()) {
                return Err(ConfigError::DuplicateRegion(p.region.clone()));
            }
        }
        if let Some(me) = self.initial_members.iter().find(|p| p.id == self.node_id) {
            for (field, theirs, ours) in [
                ("region", &me.region, &self.region),
                ("grpc_addr", &me.grpc_addr, &self.grpc_addr),
            ] {
                if theirs != ours {
                    return Err(ConfigError::MemberMismatch {
                        id: me.id,
                        field,
                        theirs: theirs.clone(),
                        ours: ours.clone(),
                    });
                }
            }
        }
        match &self.tls {
            None => {
                return Err(ConfigError::Tls(
                    "missing: set ca, cert and key (`seatfence cert` makes them), \
                     or insecure = true for plaintext"
                        .into(),
                ))
            }
            Some(t) => t.check().map_err(ConfigError::Tls)?,
        }
        self.raft.check().map_err(ConfigError::Raft)?;
        if let Some(e) = &self.edge {
            e.check().map_err(ConfigError::Edge)?;
        }
        if let Some(p) = &self.payments {
            p.check().map_err(ConfigError::Payments)?;
        }
        let planted = self.chaos.as_ref().and_then(|c| c.plant_bug);
        if planted.is_some() && !seatfence_raft::propose::PLANTED_BUGS {
            return Err(ConfigError::PlantedBugsOff);
        }
        Ok(())
    }

    /// Whether this node is one of the directory's initial voters.
    pub fn is_directory_voter(&self) -> bool {
        self.initial_members.iter().any(|p| p.id == self.node_id)
    }

    /// The node that initializes the directory: the lowest member id.
    pub fn is_bootstrapper(&self) -> bool {
        self.initial_members.iter().map(|p| p.id).min() == Some(self.node_id)
    }

    /// The initial directory voters as openraft members: node id → gRPC address.
    pub fn directory_members(&self) -> BTreeMap<u64, openraft::BasicNode> {
        self.initial_members
            .iter()
            .map(|p| (p.id, openraft::BasicNode::new(&p.grpc_addr)))
            .collect()
    }

    /// The openraft configuration of every group on the node, from `[raft]`.
    pub fn openraft_config(&self) -> Arc<openraft::Config> {
        self.raft.openraft_config()
    }
}

/// A parse error without the source line it quotes (which may hold a
/// secret): the message and where.
fn parse_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {}", e.message())
        }
        None => e.message().to_string(),
    }
}

fn check_addr(addr: &str) -> Result<(), ConfigError> {
    addr.parse::<SocketAddr>()
        .map(drop)
        .map_err(|e| ConfigError::BadAddr {
            addr: addr.to_string(),
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
node_id = 1
region = "us-east"
grpc_addr = "127.0.0.1:7001"
data_dir = "/tmp/n1"
[[initial_members]]
id = 1
region = "us-east"
grpc_addr = "127.0.0.1:7001"
[[initial_members]]
id = 2
region = "eu-west"
grpc_addr = "127.0.0.1:7002"
[tls]
insecure = true
"#;

    #[test]
    fn a_planted_bug_is_refused_by_a_build_that_cannot_plant_one() {
        let text = format!("{GOOD}\n[chaos]\nplant_bug = \"accept-stale-epoch\"\n");
        let parsed = NodeConfig::from_toml(&text);
        if seatfence_raft::propose::PLANTED_BUGS {
            assert!(parsed.is_ok(), "{parsed:?}");
        } else {
            let e = parsed.unwrap_err();
            assert!(matches!(e, ConfigError::PlantedBugsOff), "{e}");
            assert_eq!(e.code(), "config_invalid");
        }
    }

    #[test]
    fn a_good_config_parses_with_defaults() {
        let c = NodeConfig::from_toml(GOOD).unwrap();
        assert!(c.is_bootstrapper());
        assert_eq!(c.raft, RaftTuning::default());
        let joiner = NodeConfig::from_toml(&GOOD.replace("node_id = 1", "node_id = 3").replace(
            "grpc_addr = \"127.0.0.1:7001\"\ndata",
            "grpc_addr = \"127.0.0.1:7003\"\ndata",
        ))
        .unwrap();
        assert!(!joiner.is_bootstrapper() && !joiner.is_directory_voter());
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let e = NodeConfig::from_toml(&GOOD.replace(
            "region = \"us-east\"\ngrpc_addr = \"127.0.0.1:7001\"\ndata",
            "region = \"eu-west\"\ngrpc_addr = \"127.0.0.1:7001\"\ndata",
        ))
        .unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::MemberMismatch {
                    id: 1,
                    field: "region",
                    ..
                }
            ),
            "{e}"
        );
        let e = NodeConfig::from_toml(&GOOD.replace("\"eu-west\"", "\"us-east\"")).unwrap_err();
        assert_eq!(e, ConfigError::DuplicateRegion("us-east".into()));
        let e = NodeConfig::from_toml(&GOOD.replace(
            "grpc_addr = \"127.0.0.1:7001\"\ndata",
            "grpc_addr = \"nope\"\ndata",
        ))
        .unwrap_err();
        assert!(matches!(e, ConfigError::BadAddr { .. }), "{e}");
        let e =
            NodeConfig::from_toml(&format!("{GOOD}\n[raft]\nheartbeat_ms = 900\n")).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Raft(m) if m.contains("heartbeat_ms (900)")),
            "{e}"
        );
        let e = NodeConfig::from_toml(&format!("{GOOD}\nbogus = 1\n")).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        // A parse error names the place, never the line's text (a secret).
        let e = NodeConfig::from_toml(&format!(
            "{GOOD}\n[edge]\nhttp_addr = \"127.0.0.1:1\"\njwt_secret = \"s3cret\\q-0123456789\"\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("line"), "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }
}
