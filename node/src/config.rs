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
    pub id: u64,
    pub region: String,
    pub grpc_addr: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    pub node_id: u64,
    pub region: String,
    /// `host:port` the gRPC server listens on and peers dial.
    pub grpc_addr: String,
    pub data_dir: PathBuf,
    /// The directory's voters, one per region. A node that is not one of
    /// them joins: it registers through them and the directory's leader
    /// adds it to group 0 as a learner.
    pub initial_members: Vec<Peer>,
    /// Mutual TLS on the gRPC port: the cluster CA, this node's certificate
    /// and key (`seatfence cert`), or `insecure = true`. Required.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
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

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("cannot parse config: {0}")]
    Parse(String),
    #[error("node_id must be at least 1 (got 0)")]
    ZeroNodeId,
    #[error("grpc_addr {addr:?} is not host:port: {reason}")]
    BadAddr { addr: String, reason: String },
    #[error("region must not be empty")]
    EmptyRegion,
    #[error("initial_members is empty: list the directory voters, one per region")]
    NoMembers,
    #[error("initial_members lists node {0} twice")]
    DuplicateMember(u64),
    #[error("initial_members lists region {0:?} twice: the directory has one voter per region")]
    DuplicateRegion(String),
    #[error(
        "initial_members entry for node {id} says {field} {theirs:?}, this config says {ours:?}"
    )]
    MemberMismatch {
        id: u64,
        field: &'static str,
        theirs: String,
        ours: String,
    },
    #[error("[tls]: {0}")]
    Tls(String),
    #[error("{0}")]
    Raft(String),
    #[error("edge: {0}")]
    Edge(String),
    #[error("payments: {0}")]
    Payments(String),
    #[error("[chaos] plant_bug: this build cannot plant bugs (a test build can, or a build with `--features planted-bugs`)")]
    PlantedBugsOff,
}

impl ConfigError {
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::Parse(_) => "config_parse",
            _ => "config_invalid",
        }
    }
}

impl NodeConfig {
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
            if self.edge.is_none() {
                return Err(ConfigError::Payments("payments need an [edge]".into()));
            }
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

    pub fn directory_members(&self) -> BTreeMap<u64, openraft::BasicNode> {
        self.initial_members
            .iter()
            .map(|p| (p.id, openraft::BasicNode::new(&p.grpc_addr)))
            .collect()
    }

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
