//! [`NodeConfig`]: what `seatfence node --config node.toml` reads, validated
//! at start with precise errors.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::storage::FlushMode;

/// A directory voter known before the cluster exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    pub id: u64,
    pub region: String,
    pub grpc_addr: String,
}

/// Raft timing and storage knobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftTuning {
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Build a snapshot after this many applied entries.
    pub snapshot_every: u64,
    /// Entries kept in the log behind a snapshot (lets a lagging follower
    /// catch up without a snapshot).
    pub logs_to_keep: u64,
    pub flush: FlushMode,
}

impl Default for RaftTuning {
    fn default() -> Self {
        RaftTuning {
            heartbeat_ms: 100,
            election_timeout_min_ms: 400,
            election_timeout_max_ms: 800,
            snapshot_every: 20_000,
            logs_to_keep: 5_000,
            flush: FlushMode::Shared,
        }
    }
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

/// Bugs a drill can plant (`seatfence chaos drill --plant-bug NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlantedBug {
    /// The leader stamps the event's current epoch on a command carrying
    /// an older one instead of refusing it (fence checks 2 and 3 skipped).
    AcceptStaleEpoch,
}

/// `[moves]`: how this node coordinates ownership moves (while it leads
/// the directory) and when it deletes replicas it no longer hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MovesConfig {
    /// A learner counts as caught up within this many entries of the
    /// leader's log.
    pub catch_up_slack: u64,
    /// Wait this long after each step (drills and tests use it to act in
    /// the middle of a move; 0 in production).
    pub step_delay_ms: u64,
    /// A replica this node stopped hosting (moved away, aborted learner) is
    /// shut down at once; its data is deleted after this grace period.
    pub retired_grace_ms: u64,
}

impl Default for MovesConfig {
    fn default() -> Self {
        MovesConfig {
            catch_up_slack: 100,
            step_delay_ms: 0,
            retired_grace_ms: 60_000,
        }
    }
}

/// How the node reaches the payment gateway and runs the payment workers
/// (reconciler, outbox) for the groups it leads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentsConfig {
    /// `http://host:port` of the gateway.
    pub gateway_url: String,
    /// Credentials for the gateway's token grant.
    pub client_id: String,
    pub client_secret: String,
    /// HMAC secret of the gateway's webhooks (at least 16 bytes).
    pub webhook_secret: String,
    /// Base URL of this edge as the gateway and browsers reach it (for
    /// `return_url` and `webhook_url`); default `http://{edge.http_addr}`.
    #[serde(default)]
    pub public_url: Option<String>,
    /// Deadline of one gateway call.
    #[serde(default = "default_call_timeout")]
    pub call_timeout_ms: u64,
    /// Reconciler: time between sweeps, how close to its deadline a hold
    /// is looked at, holds per batch, time budget of one sweep, and how
    /// far a deadline is pushed back when the payment's state is unknown.
    #[serde(default = "default_sweep")]
    pub reconcile_interval_ms: u64,
    #[serde(default = "default_margin")]
    pub reconcile_margin_ms: u64,
    #[serde(default = "default_batch")]
    pub reconcile_batch: u32,
    #[serde(default = "default_budget")]
    pub reconcile_budget_ms: u64,
    #[serde(default = "default_extension")]
    pub extension_ms: u64,
    /// Outbox: time between scans for undelivered items.
    #[serde(default = "default_outbox_interval")]
    pub outbox_interval_ms: u64,
    /// Confirmation emails are written here as `.eml` files (default
    /// `{data_dir}/mail`).
    #[serde(default)]
    pub mail_dir: Option<PathBuf>,
}

fn default_call_timeout() -> u64 {
    2_000
}
fn default_sweep() -> u64 {
    20_000
}
fn default_margin() -> u64 {
    360_000
}
fn default_batch() -> u32 {
    8
}
fn default_budget() -> u64 {
    45_000
}
fn default_extension() -> u64 {
    120_000
}
fn default_outbox_interval() -> u64 {
    1_000
}

/// The HTTP edge every node runs for its region (served by `seatfence-api`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeConfig {
    /// `host:port` the HTTP edge listens on.
    pub http_addr: String,
    /// HS256 secret for bearer tokens (at least 16 bytes).
    pub jwt_secret: String,
    /// Mutations in flight on this edge before it answers 429.
    #[serde(default = "default_inflight")]
    pub max_inflight_mutations: usize,
    /// Per-user token bucket: sustained requests per second, and burst.
    #[serde(default = "default_rate")]
    pub user_rate_per_sec: u32,
    #[serde(default = "default_burst")]
    pub user_burst: u32,
    /// How long a request may look for a leader before 503.
    #[serde(default = "default_timeout")]
    pub request_timeout_ms: u64,
}

fn default_inflight() -> usize {
    4096
}
fn default_rate() -> u32 {
    20
}
fn default_burst() -> u32 {
    40
}
fn default_timeout() -> u64 {
    5000
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
        "node {0} is not in initial_members (joining an existing cluster is not supported yet)"
    )]
    NotAMember(u64),
    #[error(
        "initial_members entry for node {id} says {field} {theirs:?}, this config says {ours:?}"
    )]
    MemberMismatch {
        id: u64,
        field: &'static str,
        theirs: String,
        ours: String,
    },
    #[error("raft timing: need 0 < heartbeat_ms ({hb}) < election_timeout_min_ms ({min}) < election_timeout_max_ms ({max})")]
    Timing { hb: u64, min: u64, max: u64 },
    #[error("raft.snapshot_every must be at least 1")]
    SnapshotEvery,
    #[error("edge: {0}")]
    Edge(String),
    #[error("payments: {0}")]
    Payments(String),
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
        let c: NodeConfig = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        c.validate()?;
        Ok(c)
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
        let r = &self.raft;
        if !(0 < r.heartbeat_ms
            && r.heartbeat_ms < r.election_timeout_min_ms
            && r.election_timeout_min_ms < r.election_timeout_max_ms)
        {
            return Err(ConfigError::Timing {
                hb: r.heartbeat_ms,
                min: r.election_timeout_min_ms,
                max: r.election_timeout_max_ms,
            });
        }
        if r.snapshot_every == 0 {
            return Err(ConfigError::SnapshotEvery);
        }
        if let Some(e) = &self.edge {
            if e.http_addr.parse::<SocketAddr>().is_err() {
                return Err(ConfigError::Edge(format!(
                    "http_addr {:?} is not ip:port",
                    e.http_addr
                )));
            }
            if e.jwt_secret.len() < 16 {
                return Err(ConfigError::Edge(
                    "jwt_secret must be at least 16 bytes".into(),
                ));
            }
            if e.max_inflight_mutations == 0 || e.user_rate_per_sec == 0 || e.user_burst == 0 {
                return Err(ConfigError::Edge(
                    "max_inflight_mutations, user_rate_per_sec and user_burst must be at least 1"
                        .into(),
                ));
            }
            if e.request_timeout_ms < 100 {
                return Err(ConfigError::Edge(
                    "request_timeout_ms must be at least 100".into(),
                ));
            }
        }
        if let Some(p) = &self.payments {
            let bad = |m: &str| Err(ConfigError::Payments(m.to_string()));
            if self.edge.is_none() {
                return bad("payments need an [edge]");
            }
            let url_ok = |u: &str| u.starts_with("http://") || u.starts_with("https://");
            if !url_ok(&p.gateway_url) || p.public_url.as_deref().is_some_and(|u| !url_ok(u)) {
                return bad("gateway_url and public_url must be http(s) URLs");
            }
            if p.webhook_secret.len() < 16 {
                return bad("webhook_secret must be at least 16 bytes");
            }
            if p.call_timeout_ms < 10
                || p.reconcile_interval_ms < 10
                || p.reconcile_batch == 0
                || p.reconcile_budget_ms < 10
                || p.extension_ms < 10
                || p.outbox_interval_ms < 10
            {
                return bad("timeouts and intervals must be at least 10 ms, the batch at least 1");
            }
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
        let r = &self.raft;
        let c = openraft::Config {
            cluster_name: "seatfence".into(),
            heartbeat_interval: r.heartbeat_ms,
            // A node back from a partition asks before it campaigns, so it
            // cannot depose a healthy leader by inflating its term.
            enable_pre_vote: Some(true),
            election_timeout_min: r.election_timeout_min_ms,
            election_timeout_max: r.election_timeout_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(r.snapshot_every),
            max_in_snapshot_log_to_keep: r.logs_to_keep,
            install_snapshot_timeout: 10_000,
            ..Default::default()
        };
        Arc::new(c.validate().expect("timings were validated above"))
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
"#;

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
        assert!(matches!(e, ConfigError::Timing { hb: 900, .. }), "{e}");
        let e = NodeConfig::from_toml(&format!("{GOOD}\nbogus = 1\n")).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }
}
