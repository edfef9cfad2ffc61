//! [`World`]: a benchmark's cluster, started and ready, with what every
//! benchmark needs to drive it over HTTP.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::{ClusterBuilder, LocalCluster};

pub struct World {
    pub cluster: LocalCluster,
    /// The edges' JWT secret, to mint buyers' tokens.
    pub secret: String,
    /// Every node's edge, in node order.
    pub edges: Vec<String>,
    pub http: HttpClient,
    /// An operator's token.
    pub op: String,
}

impl World {
    /// Start `builder`'s cluster with the binary `bin` and wait (at most
    /// `ready_within`) until it serves.
    pub async fn start(
        builder: ClusterBuilder,
        bin: &Path,
        ready_within: Duration,
    ) -> anyhow::Result<World> {
        let cluster = builder.start(bin)?;
        cluster.wait_ready(ready_within).await?;
        let secret = cluster.jwt_secret().context("no edge secret")?;
        let edges: Vec<String> = cluster.nodes.iter().filter_map(|n| n.edge_url()).collect();
        let op = seatfence_api::auth::mint(&secret, "bench-operator", true, 3600);
        // HTTPS edges carry certificates of the cluster's CA.
        let http = match cluster.edge_ca() {
            Some(ca) => HttpClient::trusting(&ca)?,
            None => HttpClient::default(),
        };
        Ok(World {
            cluster,
            secret,
            edges,
            http,
            op,
        })
    }
}
