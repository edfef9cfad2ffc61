//! [`LocalCluster`]: real node processes on 127.0.0.1, for the demo, tests
//! and benchmarks.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use seatfence_api::config::{EdgeConfig, PaymentsConfig};
use seatfence_core::GroupId;
use seatfence_node::{NodeConfig, Peer};
use seatfence_raft::{ClusterClient, RaftTuning};
use seatfence_regions::config::MovesConfig;

/// The regions a local cluster spreads its nodes over, in order.
pub const REGIONS: [&str; 3] = ["us-east", "eu-west", "ap-south"];

pub struct NodeProc {
    pub config: NodeConfig,
    config_path: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    /// The network namespace it runs in (`ip netns exec`), if any.
    netns: Option<String>,
}

impl NodeProc {
    pub fn id(&self) -> u64 {
        self.config.node_id
    }

    pub fn addr(&self) -> &str {
        &self.config.grpc_addr
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// `http://host:port` of the node's HTTP edge.
    pub fn edge_url(&self) -> Option<String> {
        self.config
            .edge
            .as_ref()
            .map(|e| format!("http://{}", e.http_addr))
    }
}

/// A cluster of `seatfence node` processes. Dropping it SIGKILLs them all.
pub struct LocalCluster {
    bin: PathBuf,
    pub nodes: Vec<NodeProc>,
}

/// Pids of every process this process started (nodes, gateways), so a
/// harness that gives up half-way can still stop them all ([`reap_all`]).
/// A std mutex: held only to push or drain, never across an `.await`.
static STARTED: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

fn started(child: &Child) {
    STARTED
        .lock()
        .expect("started lock poisoned")
        .push(child.id());
}

/// SIGKILL every process this process started that may still run (a drill
/// that failed half-way leaves no nodes behind). Pids of processes already
/// reaped are skipped by `kill` failing harmlessly.
pub fn reap_all() {
    let pids: Vec<u32> = std::mem::take(&mut *STARTED.lock().expect("started lock poisoned"));
    for pid in pids {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// `n` distinct free ports on 127.0.0.1: all bound to `:0` at once (so the
/// OS cannot hand one out twice), then released for the nodes.
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()?)
}

fn check_regions(regions: usize, per_region: usize) -> anyhow::Result<()> {
    if regions == 0 || regions > REGIONS.len() || per_region == 0 {
        bail!("1 to {} regions, at least one node each", REGIONS.len());
    }
    Ok(())
}

impl LocalCluster {
    /// Write configs for `n` nodes (one directory voter per region, so
    /// `n <= 3`) under `dir` and start them with the binary `bin`. If `dir`
    /// holds the configs of an earlier start, they are reused (same ports).
    pub fn start(
        bin: &Path,
        dir: &Path,
        n: usize,
        tuning: RaftTuning,
    ) -> anyhow::Result<LocalCluster> {
        if n == 0 || n > REGIONS.len() {
            bail!(
                "a local cluster has 1 to {} directory voters (one per region)",
                REGIONS.len()
            );
        }
        Self::start_with_extra(bin, dir, n, 0, tuning)
    }

    /// Like [`start`](Self::start) with `voters` directory voters (one per
    /// region, ids `1..=voters`) plus `extra` nodes that join the cluster
    /// (ids after the voters, regions assigned round-robin).
    pub fn start_with_extra(
        bin: &Path,
        dir: &Path,
        voters: usize,
        extra: usize,
        tuning: RaftTuning,
    ) -> anyhow::Result<LocalCluster> {
        if voters == 0 || voters > REGIONS.len() {
            bail!("1 to {} directory voters (one per region)", REGIONS.len());
        }
        Self::start_layout(
            bin,
            dir,
            voters,
            voters + extra,
            tuning,
            None,
            MovesConfig::default(),
        )
    }

    /// `regions` regions (the first of [`REGIONS`]) with `per_region` nodes
    /// each: `regions × per_region` nodes, ids round-robin over the regions
    /// (node `i` is in region `(i-1) % regions`); the first node of each
    /// region is its directory voter. Every node runs an HTTP edge.
    pub fn start_regions(
        bin: &Path,
        dir: &Path,
        regions: usize,
        per_region: usize,
        tuning: RaftTuning,
    ) -> anyhow::Result<LocalCluster> {
        Self::start_regions_with(bin, dir, regions, per_region, tuning, None)
    }

    /// [`start_regions`](Self::start_regions), with every node taking
    /// payments through the gateway of `payments` when given.
    pub fn start_regions_with(
        bin: &Path,
        dir: &Path,
        regions: usize,
        per_region: usize,
        tuning: RaftTuning,
        payments: Option<PaymentsConfig>,
    ) -> anyhow::Result<LocalCluster> {
        check_regions(regions, per_region)?;
        Self::start_layout(
            bin,
            dir,
            regions,
            regions * per_region,
            tuning,
            payments,
            MovesConfig::default(),
        )
    }

    /// [`start_regions`](Self::start_regions), every node coordinating
    /// moves with `moves` (tests slow the steps down to act between them).
    pub fn start_regions_moves(
        bin: &Path,
        dir: &Path,
        regions: usize,
        per_region: usize,
        tuning: RaftTuning,
        moves: MovesConfig,
    ) -> anyhow::Result<LocalCluster> {
        check_regions(regions, per_region)?;
        Self::start_layout(bin, dir, regions, regions * per_region, tuning, None, moves)
    }

    fn start_layout(
        bin: &Path,
        dir: &Path,
        voters: usize,
        n: usize,
        tuning: RaftTuning,
        payments: Option<PaymentsConfig>,
        moves: MovesConfig,
    ) -> anyhow::Result<LocalCluster> {
        if let Some(existing) = Self::existing_configs(dir, n)? {
            return Self::from_configs(bin, existing, |_| None);
        }
        let configs = Self::layout(dir, voters, n, tuning, payments, moves)?;
        Self::launch(bin, configs)
    }

    /// The configs [`start_regions`](Self::start_regions) would write
    /// (`regions × per_region` nodes, ports chosen, directories created),
    /// for a caller that adjusts them before [`launch`](Self::launch).
    pub fn layout_regions(
        dir: &Path,
        regions: usize,
        per_region: usize,
        tuning: RaftTuning,
        payments: Option<PaymentsConfig>,
        moves: MovesConfig,
    ) -> anyhow::Result<Vec<(PathBuf, NodeConfig)>> {
        check_regions(regions, per_region)?;
        Self::layout(dir, regions, regions * per_region, tuning, payments, moves)
    }

    /// Write each config to `{node_dir}/node.toml` (validated) and start
    /// the nodes.
    pub fn launch(bin: &Path, configs: Vec<(PathBuf, NodeConfig)>) -> anyhow::Result<LocalCluster> {
        Self::launch_in(bin, configs, |_| None)
    }

    /// Like [`launch`](Self::launch), node `id` running (and restarting)
    /// inside the network namespace `netns(id)` when that is `Some`.
    pub fn launch_in(
        bin: &Path,
        configs: Vec<(PathBuf, NodeConfig)>,
        netns: impl Fn(u64) -> Option<String>,
    ) -> anyhow::Result<LocalCluster> {
        for (node_dir, config) in &configs {
            config.validate()?;
            fs::write(node_dir.join("node.toml"), toml::to_string(config)?)?;
        }
        Self::from_configs(bin, configs, netns)
    }

    fn layout(
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
        let mut configs = Vec::new();
        for p in &peers {
            let node_dir = dir.join(format!("n{}", p.id));
            fs::create_dir_all(&node_dir)
                .with_context(|| format!("create {}", node_dir.display()))?;
            let config = NodeConfig {
                node_id: p.id,
                region: p.region.clone(),
                grpc_addr: p.grpc_addr.clone(),
                data_dir: node_dir.join("data"),
                initial_members: members.clone(),
                raft: tuning.clone(),
                moves: moves.clone(),
                edge: Some(EdgeConfig {
                    http_addr: format!("127.0.0.1:{}", ports[n + p.id as usize - 1]),
                    jwt_secret: secret.clone(),
                    max_inflight_mutations: 4096,
                    user_rate_per_sec: 20,
                    user_burst: 40,
                    request_timeout_ms: 5000,
                }),
                payments: payments.clone(),
                chaos: None,
            };
            configs.push((node_dir, config));
        }
        Ok(configs)
    }

    /// Configs written by an earlier `start` in `dir`, so a cluster can be
    /// started again on its data (same ports, same membership).
    fn existing_configs(
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
            let text =
                fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
            let config = NodeConfig::from_toml(&text)
                .with_context(|| format!("invalid {}", path.display()))?;
            out.push((node_dir, config));
        }
        Ok(Some(out))
    }

    fn from_configs(
        bin: &Path,
        configs: Vec<(PathBuf, NodeConfig)>,
        netns: impl Fn(u64) -> Option<String>,
    ) -> anyhow::Result<LocalCluster> {
        let nodes = configs
            .into_iter()
            .map(|(node_dir, config)| NodeProc {
                netns: netns(config.node_id),
                config,
                config_path: node_dir.join("node.toml"),
                log_path: node_dir.join("node.log"),
                child: None,
            })
            .collect::<Vec<_>>();
        let n = nodes.len();
        let mut cluster = LocalCluster {
            bin: bin.to_path_buf(),
            nodes,
        };
        for i in 0..n {
            cluster.spawn(i)?;
        }
        Ok(cluster)
    }

    fn index(&self, id: u64) -> anyhow::Result<usize> {
        self.nodes
            .iter()
            .position(|n| n.id() == id)
            .with_context(|| format!("no node {id}"))
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let n = &mut self.nodes[i];
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log_path)
            .with_context(|| format!("open {}", n.log_path.display()))?;
        // `ip netns exec` execs the node in place: the pid is the node's.
        let mut cmd = match &n.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let child = cmd
            .arg("node")
            .arg("--config")
            .arg(&n.config_path)
            .env(
                "RUST_LOG",
                std::env::var("SEATFENCE_NODE_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {} node", self.bin.display()))?;
        started(&child);
        n.child = Some(child);
        Ok(())
    }

    /// SIGKILL node `id`: no shutdown, no final flush.
    pub fn kill(&mut self, id: u64) -> anyhow::Result<()> {
        let i = self.index(id)?;
        if let Some(mut c) = self.nodes[i].child.take() {
            c.kill().context("SIGKILL node")?;
            c.wait()?;
        }
        Ok(())
    }

    /// SIGTERM node `id` and wait for it to exit (graceful shutdown).
    pub fn stop(&mut self, id: u64) -> anyhow::Result<()> {
        let i = self.index(id)?;
        if let Some(mut c) = self.nodes[i].child.take() {
            let status = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status()?;
            if !status.success() {
                bail!("kill -TERM {} failed", c.id());
            }
            for _ in 0..200 {
                if c.try_wait()?.is_some() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            c.kill()?;
            c.wait()?;
            bail!("node {id} ignored SIGTERM for 10 s");
        }
        Ok(())
    }

    /// SIGSTOP node `id`: it neither sends nor answers anything until
    /// [`resume`](Self::resume) (a node cut off, or a long pause).
    pub fn pause(&mut self, id: u64) -> anyhow::Result<()> {
        self.signal(id, "-STOP")
    }

    /// SIGCONT a paused node.
    pub fn resume(&mut self, id: u64) -> anyhow::Result<()> {
        self.signal(id, "-CONT")
    }

    fn signal(&mut self, id: u64, sig: &str) -> anyhow::Result<()> {
        let i = self.index(id)?;
        let c = self.nodes[i]
            .child
            .as_ref()
            .with_context(|| format!("node {id} is not running"))?;
        let status = Command::new("kill")
            .arg(sig)
            .arg(c.id().to_string())
            .status()?;
        if !status.success() {
            bail!("kill {sig} {} failed", c.id());
        }
        Ok(())
    }

    /// Start node `id` again with its data dir.
    pub fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        let i = self.index(id)?;
        if self.nodes[i].child.is_some() {
            bail!("node {id} is running");
        }
        self.spawn(i)
    }

    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr().to_string()).collect()
    }

    pub fn addr(&self, id: u64) -> anyhow::Result<String> {
        Ok(self.nodes[self.index(id)?].addr().to_string())
    }

    /// The HTTP edge of the first running node of each region, by region.
    pub fn edges(&self) -> std::collections::BTreeMap<String, String> {
        let mut out = std::collections::BTreeMap::new();
        for n in self.nodes.iter().filter(|n| n.is_running()) {
            if let Some(url) = n.edge_url() {
                out.entry(n.config.region.clone()).or_insert(url);
            }
        }
        out
    }

    /// The secret the edges verify tokens with.
    pub fn jwt_secret(&self) -> Option<String> {
        self.nodes
            .first()
            .and_then(|n| n.config.edge.as_ref())
            .map(|e| e.jwt_secret.clone())
    }

    pub fn client(&self) -> ClusterClient {
        ClusterClient::new(self.addrs())
    }

    /// Wait until every running node hosts `group` and one of them leads it;
    /// returns the leader's id.
    pub async fn wait_leader(&self, group: GroupId, timeout: Duration) -> anyhow::Result<u64> {
        let client = self.client();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            for n in self.nodes.iter().filter(|n| n.is_running()) {
                match client.status_at(n.addr()).await {
                    Ok(s) => {
                        if let Some(g) = s.groups.iter().find(|g| g.group_id == group.0) {
                            if g.role == "leader" {
                                return Ok(n.id());
                            }
                            last = format!("node {} sees {} as {}", n.id(), group, g.role);
                        }
                    }
                    Err(e) => last = format!("node {}: {e}", n.id()),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("no leader for {group} within {timeout:?} ({last})")
    }

    /// Wait until the directory has a leader and every node of the cluster
    /// is registered in it (so groups can be placed on all of them).
    pub async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let leader = self.wait_leader(GroupId::DIRECTORY, timeout).await?;
        let client = self.client();
        let deadline = tokio::time::Instant::now() + timeout;
        let addr = self.addr(leader)?;
        loop {
            let s = client.status_at(&addr).await?;
            if s.directory_nodes as usize >= self.nodes.len() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "only {} of {} nodes registered within {timeout:?}",
                    s.directory_nodes,
                    self.nodes.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last lines of a node's log, for failure messages.
    pub fn log_tail(&self, id: u64) -> String {
        let Ok(i) = self.index(id) else {
            return String::new();
        };
        let text = fs::read_to_string(&self.nodes[i].log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// The mock gateway (`seatfence gateway`) as a separate process on a
/// free port. Dropping it SIGKILLs it.
pub struct GatewayProc {
    child: Option<Child>,
    pub url: String,
    pub webhook_secret: String,
    pub client_id: String,
    pub client_secret: String,
    signing_secret: String,
    host: String,
    port: u16,
    grants_per_hour: u32,
    bin: PathBuf,
    log_path: PathBuf,
}

impl GatewayProc {
    /// Start the mock with fresh secrets, logging to `dir/gateway.log`,
    /// and wait until it answers. If `dir/gateway.json` exists (an earlier
    /// start), the same port and secrets are used again.
    pub fn start(bin: &Path, dir: &Path, grants_per_hour: u32) -> anyhow::Result<GatewayProc> {
        Self::start_on(bin, dir, grants_per_hour, "127.0.0.1")
    }

    /// Like [`start`](Self::start), listening on `host` (an address the
    /// nodes reach, such as the host's end of a namespace bridge).
    pub fn start_on(
        bin: &Path,
        dir: &Path,
        grants_per_hour: u32,
        host: &str,
    ) -> anyhow::Result<GatewayProc> {
        fs::create_dir_all(dir)?;
        let saved = dir.join("gateway.json");
        let (port, signing, webhook, client) = match fs::read_to_string(&saved) {
            Ok(text) => {
                serde_json::from_str(&text).with_context(|| format!("parse {}", saved.display()))?
            }
            Err(_) => {
                let secret = || format!("{:032x}", rand::random::<u128>());
                let s = (free_ports(1)?[0], secret(), secret(), secret());
                fs::write(&saved, serde_json::to_string(&s)?)?;
                s
            }
        };
        let mut g = GatewayProc {
            child: None,
            url: format!("http://{host}:{port}"),
            host: host.to_string(),
            webhook_secret: webhook,
            client_id: "seatfence".into(),
            client_secret: client,
            signing_secret: signing,
            port,
            grants_per_hour,
            bin: bin.to_path_buf(),
            log_path: dir.join("gateway.log"),
        };
        g.spawn()?;
        Ok(g)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("open {}", self.log_path.display()))?;
        let child = Command::new(&self.bin)
            .args([
                "gateway",
                "--listen",
                &format!("{}:{}", self.host, self.port),
            ])
            .args(["--grants-per-hour", &self.grants_per_hour.to_string()])
            .env("SEATFENCE_GATEWAY_SIGNING_SECRET", &self.signing_secret)
            .env("SEATFENCE_GATEWAY_WEBHOOK_SECRET", &self.webhook_secret)
            .env("SEATFENCE_GATEWAY_CLIENT_SECRET", &self.client_secret)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {} gateway", self.bin.display()))?;
        started(&child);
        self.child = Some(child);
        for _ in 0..200 {
            if std::net::TcpStream::connect((self.host.as_str(), self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        bail!("gateway did not listen within 5 s: {}", self.log_tail())
    }

    /// SIGKILL the mock and start it again on the same port with the same
    /// secrets. It forgets every payment and token, as a provider whose
    /// state was lost would.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill().context("SIGKILL gateway")?;
            c.wait()?;
        }
        self.spawn()
    }

    /// A node's payments config for this gateway, with the default timings.
    pub fn payments_config(&self) -> PaymentsConfig {
        let text = format!(
            "gateway_url = {:?}\nclient_id = {:?}\nclient_secret = {:?}\nwebhook_secret = {:?}\n",
            self.url, self.client_id, self.client_secret, self.webhook_secret
        );
        toml::from_str(&text).expect("a complete payments config parses")
    }

    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for GatewayProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
