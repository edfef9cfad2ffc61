//! How a [`LocalCluster`] is laid out: the builder, each node's config
//! (ports, data directory, edge, payments, moves), its certificates, and
//! the configs of an earlier start in the same directory.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use seatfence_api::config::{EdgeConfig, PaymentsConfig};
use seatfence_node::{NodeConfig, Peer};
use seatfence_raft::network::tls::TlsConfig;
use seatfence_raft::RaftTuning;
use seatfence_regions::config::MovesConfig;

use crate::cluster::LocalCluster;
use crate::geo::Geo;
use crate::links::{LinkEnd, LinkNet};
use crate::procs::free_ports;

/// The operator certificate every local cluster gets
/// (`certs/operator-operator.pem`), for `seatfence ctl`.
pub const OPERATOR_CERT: &str = "operator";

/// The regions a local cluster spreads its nodes over, in order.
pub const REGIONS: [&str; 3] = ["us-east", "eu-west", "ap-south"];

/// How a local cluster is laid out: `LocalCluster::builder(dir)`, then
/// [`regions`](ClusterBuilder::regions) or [`voters`](ClusterBuilder::voters),
/// optional tuning, payments and moves, then [`start`](ClusterBuilder::start)
/// (or [`layout`](ClusterBuilder::layout) to adjust the configs first and
/// [`LocalCluster::launch`] them).
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    dir: PathBuf,
    voters: usize,
    nodes: usize,
    tuning: RaftTuning,
    payments: Option<PaymentsConfig>,
    moves: MovesConfig,
    edge_tls: bool,
    geo: Option<Geo>,
}

impl ClusterBuilder {
    /// Put the regions as far apart as `geo` says (`None`: together): every
    /// node dials its peers through a link proxy with the latency of the
    /// two regions, and the Raft timings stretch to match
    /// ([`Geo::tuning`]). The proxies live as long as the cluster.
    pub fn geo(mut self, geo: Option<Geo>) -> ClusterBuilder {
        self.geo = geo;
        self
    }

    /// The geography this builder lays out, if any.
    pub fn geography(&self) -> Option<&Geo> {
        self.geo.as_ref()
    }

    /// Every edge serves HTTPS (`[edge.tls]`) with a certificate of the
    /// cluster's CA for 127.0.0.1 ([`LocalCluster::edge_ca`] to trust).
    pub fn edge_tls(mut self, on: bool) -> ClusterBuilder {
        self.edge_tls = on;
        self
    }

    /// `regions` regions (the first of [`REGIONS`]) with `per_region` nodes
    /// each, ids round-robin over the regions (node `i` is in region
    /// `(i-1) % regions`); the first node of each region is its directory
    /// voter.
    pub fn regions(mut self, regions: usize, per_region: usize) -> ClusterBuilder {
        self.voters = regions;
        self.nodes = regions * per_region;
        self
    }

    /// `voters` directory voters (one per region, ids `1..=voters`) plus
    /// `joiners` nodes that join the cluster (regions round-robin).
    pub fn voters(mut self, voters: usize, joiners: usize) -> ClusterBuilder {
        self.voters = voters;
        self.nodes = voters + joiners;
        self
    }

    pub fn tuning(mut self, tuning: RaftTuning) -> ClusterBuilder {
        self.tuning = tuning;
        self
    }

    /// Every node takes payments through this gateway.
    pub fn payments(mut self, payments: PaymentsConfig) -> ClusterBuilder {
        self.payments = Some(payments);
        self
    }

    /// Every node coordinates moves with `moves` (tests slow the steps
    /// down to act between them).
    pub fn moves(mut self, moves: MovesConfig) -> ClusterBuilder {
        self.moves = moves;
        self
    }

    /// Fresh configs (ports chosen, directories created) for a caller that
    /// adjusts them before [`LocalCluster::launch`].
    pub fn layout(&self) -> anyhow::Result<Vec<(PathBuf, NodeConfig)>> {
        if self.voters == 0 || self.voters > REGIONS.len() || self.nodes < self.voters {
            bail!(
                "1 to {} directory voters (one per region), at least one node each",
                REGIONS.len()
            );
        }
        let mut configs = layout(
            &self.dir,
            self.voters,
            self.nodes,
            match &self.geo {
                Some(g) => g.tuning(self.tuning.clone()),
                None => self.tuning.clone(),
            },
            self.payments.clone(),
            self.moves.clone(),
        )?;
        if self.edge_tls {
            let certs = self.dir.join("certs");
            for (_, c) in &mut configs {
                let made = seatfence_node::certs::make_edge(
                    &certs,
                    &format!("n{}", c.node_id),
                    &["127.0.0.1".to_string()],
                    seatfence_node::certs::LEAF_DAYS,
                )?;
                if let (Some(edge), Some(cert), Some(key)) = (c.edge.as_mut(), made.cert, made.key)
                {
                    edge.tls = Some(seatfence_api::config::EdgeTls { cert, key });
                }
            }
        }
        Ok(configs)
    }

    /// Write the configs and start the nodes with the binary `bin`. If the
    /// directory holds the configs of an earlier start, they are reused
    /// (same ports, same data).
    pub fn start(&self, bin: &Path) -> anyhow::Result<LocalCluster> {
        let (mut configs, fresh) = match existing_configs(&self.dir, self.nodes)? {
            Some(existing) => (existing, false),
            None => (self.layout()?, true),
        };
        let links = match &self.geo {
            Some(geo) => Some(start_links(&mut configs, Some(geo))?),
            None => None,
        };
        let mut cluster = if fresh || links.is_some() {
            LocalCluster::launch(bin, configs, |_| None)?
        } else {
            LocalCluster::from_configs(bin, configs, |_| None)?
        };
        cluster.links = links.map(std::sync::Arc::new);
        Ok(cluster)
    }
}

impl LocalCluster {
    /// A cluster under `dir`: by default one directory voter in each of
    /// the three regions and nothing else.
    pub fn builder(dir: &Path) -> ClusterBuilder {
        ClusterBuilder {
            dir: dir.to_path_buf(),
            voters: REGIONS.len(),
            nodes: REGIONS.len(),
            tuning: RaftTuning::default(),
            payments: None,
            // Tests place leaders where they want them; the balancer would
            // move them back. A test (or drill) that wants it sets `moves`.
            moves: MovesConfig {
                balance_every_ms: 0,
                rebalance_parallel: 0,
                ..MovesConfig::default()
            },
            edge_tls: false,
            geo: None,
        }
    }
}

/// A link proxy for every directed link between the nodes of `configs`
/// (as far apart as `geo` says), on ports no node was given; each node's
/// config dials its peers through them (`[chaos] via`).
pub fn start_links(
    configs: &mut [(PathBuf, NodeConfig)],
    geo: Option<&Geo>,
) -> anyhow::Result<LinkNet> {
    let ends: BTreeMap<u64, LinkEnd> = configs
        .iter()
        .map(|(_, c)| {
            (
                c.node_id,
                LinkEnd {
                    region: c.region.clone(),
                    addr: c.grpc_addr.clone(),
                },
            )
        })
        .collect();
    let port = |a: &str| a.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
    let avoid: BTreeSet<u16> = configs
        .iter()
        .flat_map(|(_, c)| {
            [
                Some(c.grpc_addr.as_str()),
                c.edge.as_ref().map(|e| e.http_addr.as_str()),
            ]
        })
        .flatten()
        .filter_map(port)
        .collect();
    let links = LinkNet::start(&ends, &avoid, geo)?;
    for (_, c) in configs.iter_mut() {
        c.chaos.get_or_insert_with(Default::default).via = links.via_for(c.node_id);
    }
    Ok(links)
}

pub(crate) fn layout(
    dir: &Path,
    voters: usize,
    n: usize,
    tuning: RaftTuning,
    payments: Option<PaymentsConfig>,
    moves: MovesConfig,
) -> anyhow::Result<Vec<(PathBuf, NodeConfig)>> {
    let secret = format!("{:032x}", rand::random::<u128>());
    let ports = free_ports(2 * n)?;
    let all: Vec<Peer> = (0..n)
        .map(|i| {
            Ok(Peer {
                id: i as u64 + 1,
                region: REGIONS[i % voters].to_string(),
                grpc_addr: format!("127.0.0.1:{}", ports[i]),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let members: Vec<Peer> = all[..voters].to_vec();
    let peers = all;
    // One CA per cluster directory; a node's certificate names its id.
    let certs = dir.join("certs");
    let ids: Vec<u64> = peers.iter().map(|p| p.id).collect();
    seatfence_node::certs::make_cluster(&certs, &ids, OPERATOR_CERT)
        .with_context(|| format!("certificates in {}", certs.display()))?;
    let mut configs = Vec::new();
    for p in &peers {
        let node_dir = dir.join(format!("n{}", p.id));
        fs::create_dir_all(&node_dir).with_context(|| format!("create {}", node_dir.display()))?;
        let config = NodeConfig {
            node_id: p.id,
            region: p.region.clone(),
            grpc_addr: p.grpc_addr.clone(),
            data_dir: node_dir.join("data"),
            initial_members: members.clone(),
            tls: Some(TlsConfig::in_dir(&certs, &format!("node-{}", p.id))),
            raft: tuning.clone(),
            moves: moves.clone(),
            edge: Some(EdgeConfig {
                http_addr: format!("127.0.0.1:{}", ports[n + p.id as usize - 1]),
                jwt_secret: seatfence_api::config::Secret::new(secret.clone()),
                max_inflight_mutations: 4096,
                max_inflight_other: 4096,
                user_rate_per_sec: 20,
                user_burst: 40,
                anonymous_rate_per_ip: 5_000,
                request_timeout_ms: 5000,
                header_timeout_ms: 10_000,
                body_timeout_ms: 30_000,
                idle_timeout_ms: 60_000,
                max_connections: 10_000,
                max_connections_per_ip: None,
                max_body_buffer_mb: 64,
                public_url: None,
                tls: None,
            }),
            payments: payments.clone(),
            chaos: None,
            rejoin_empty: false,
        };
        configs.push((node_dir, config));
    }
    Ok(configs)
}

/// Configs written by an earlier `start` in `dir`, so a cluster can be
/// started again on its data (same ports, same membership).
pub(crate) fn existing_configs(
    dir: &Path,
    n: usize,
) -> anyhow::Result<Option<Vec<(PathBuf, NodeConfig)>>> {
    let mut out = Vec::new();
    for id in 1..=n {
        let node_dir = dir.join(format!("n{id}"));
        let path = node_dir.join("node.toml");
        if !path.exists() {
            return Ok(None);
        }
        let text = fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        let config =
            NodeConfig::from_toml(&text).with_context(|| format!("invalid {}", path.display()))?;
        out.push((node_dir, config));
    }
    Ok(Some(out))
}
