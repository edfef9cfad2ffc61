//! [`LocalCluster`]: real node processes on 127.0.0.1, for the demo, tests
//! and benchmarks.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use seatfence_core::GroupId;
use seatfence_node::NodeConfig;
use seatfence_raft::network::tls::Tls;
use seatfence_raft::ClusterClient;

pub use crate::layout::{ClusterBuilder, OPERATOR_CERT, REGIONS};
pub use crate::procs::reap_all;
use crate::procs::started;

pub struct NodeProc {
    pub config: NodeConfig,
    config_path: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    /// The network namespace it runs in (`ip netns exec`), if any.
    netns: Option<String>,
    /// Environment variables set for its next starts ([`LocalCluster::set_env`]).
    env: Vec<(String, String)>,
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

    /// The process id, while running (outside a network namespace: inside
    /// one it is `ip netns exec`'s, which execs the node, so the same).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// `http://host:port` of the node's HTTP edge (`https://` with
    /// `[edge.tls]`).
    pub fn edge_url(&self) -> Option<String> {
        self.config.edge.as_ref().map(|e| {
            let scheme = if e.tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{}", e.http_addr)
        })
    }
}

/// A cluster of `seatfence node` processes. Dropping it SIGKILLs them all.
pub struct LocalCluster {
    bin: PathBuf,
    pub nodes: Vec<NodeProc>,
    /// The identity the harness speaks to its nodes with (node 1's).
    harness: Option<Tls>,
    /// The link proxies between the nodes, when the regions are far apart
    /// ([`crate::ClusterBuilder::geo`]); dropped with the cluster.
    pub links: Option<std::sync::Arc<crate::links::LinkNet>>,
}

impl LocalCluster {
    /// Write each config to `{node_dir}/node.toml` (validated) and start
    /// the nodes, node `id` running (and restarting) inside the network
    /// namespace `netns(id)` when that is `Some`.
    pub fn launch(
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

    pub(crate) fn from_configs(
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
                env: Vec::new(),
            })
            .collect::<Vec<_>>();
        // The harness speaks to the nodes as the lowest node (it holds the
        // cluster's keys): tests and benchmarks write raw commands, which
        // only a member node may. Plaintext only for `insecure` configs.
        let harness = nodes
            .iter()
            .min_by_key(|n| n.config.node_id)
            .and_then(|n| n.config.tls.as_ref())
            .map(|t| t.load())
            .transpose()?
            .flatten();
        let n = nodes.len();
        let mut cluster = LocalCluster {
            bin: bin.to_path_buf(),
            nodes,
            harness,
            links: None,
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
        self.spawn_with(i, &[])
    }

    fn spawn_with(&mut self, i: usize, extra: &[&str]) -> anyhow::Result<()> {
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
            .args(extra)
            .envs(n.env.iter().map(|(k, v)| (k, v)))
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

    /// How node `id` ended, once its process has exited by itself (it is
    /// then no longer running); `None` while it runs.
    pub fn exited(&mut self, id: u64) -> anyhow::Result<Option<std::process::ExitStatus>> {
        let i = self.index(id)?;
        let Some(c) = self.nodes[i].child.as_mut() else {
            bail!("node {id} is not running");
        };
        let status = c.try_wait()?;
        if status.is_some() {
            self.nodes[i].child = None;
        }
        Ok(status)
    }

    /// SIGTERM every running node at once, then wait for all of them (10 s
    /// in all; stragglers are SIGKILLed and named in the error).
    pub fn stop_all(&mut self) -> anyhow::Result<()> {
        let mut children = Vec::new();
        for n in &mut self.nodes {
            if let Some(c) = n.child.take() {
                let _ = Command::new("kill")
                    .arg("-TERM")
                    .arg(c.id().to_string())
                    .status();
                children.push((n.config.node_id, c));
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut stuck = Vec::new();
        for (id, mut c) in children {
            loop {
                if c.try_wait()?.is_some() {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    c.kill()?;
                    c.wait()?;
                    stuck.push(id);
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if !stuck.is_empty() {
            bail!("nodes {stuck:?} ignored SIGTERM for 10 s and were killed");
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

    /// Set (`Some`) or unset an environment variable for node `id`'s next
    /// starts (SEATFENCE_FORMAT_NEXT=1: the next data format's release).
    pub fn set_env(&mut self, id: u64, key: &str, value: Option<&str>) -> anyhow::Result<()> {
        let i = self.index(id)?;
        let env = &mut self.nodes[i].env;
        env.retain(|(k, _)| k != key);
        if let Some(v) = value {
            env.push((key.to_string(), v.to_string()));
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

    /// [`restart`](Self::restart) with extra arguments of `seatfence node`
    /// (`--rejoin-empty`).
    pub fn restart_with(&mut self, id: u64, extra: &[&str]) -> anyhow::Result<()> {
        let i = self.index(id)?;
        if self.nodes[i].child.is_some() {
            bail!("node {id} is running");
        }
        self.spawn_with(i, extra)
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

    /// Every node's edge, running or not: (node id, region, URL).
    pub fn all_edges(&self) -> Vec<(u64, String, String)> {
        self.nodes
            .iter()
            .filter_map(|n| Some((n.config.node_id, n.config.region.clone(), n.edge_url()?)))
            .collect()
    }

    /// The secret the edges verify tokens with.
    pub fn jwt_secret(&self) -> Option<String> {
        self.nodes
            .first()
            .and_then(|n| n.config.edge.as_ref())
            .map(|e| e.jwt_secret.expose().to_string())
    }

    /// The directory with the cluster's CA and certificates (`ca.pem`,
    /// `node-<id>.pem`, `operator-operator.pem`, their keys), if it runs TLS.
    pub fn certs_dir(&self) -> Option<PathBuf> {
        let tls = self.nodes.first()?.config.tls.as_ref()?;
        Some(tls.ca.as_ref()?.parent()?.to_path_buf())
    }

    /// A client of this cluster, speaking as the harness (node 1).
    pub fn client(&self) -> ClusterClient {
        ClusterClient::new(self.addrs(), self.dialer())
    }

    /// How the harness dials the nodes (as node 1, over TLS unless the
    /// cluster is `insecure`).
    pub fn dialer(&self) -> seatfence_raft::network::Dialer {
        seatfence_raft::network::Dialer::new(self.harness.as_ref())
    }

    /// A gRPC endpoint of the node at `addr`, as the harness (for a test
    /// that speaks raw RPCs).
    pub fn endpoint(&self, addr: &str) -> anyhow::Result<tonic::transport::Endpoint> {
        self.dialer().endpoint(addr).map_err(anyhow::Error::msg)
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

    /// Wait until the directory has a leader, every node of the cluster is
    /// registered in it (so groups can be placed on all of them), and every
    /// running node serves: its gRPC port answers (it binds only after its
    /// groups are open) and its edge, if any, says `/readyz` 200. A restart
    /// on old data already has every node registered and a leader may be
    /// back before the others have opened their groups, so registration
    /// alone is not readiness. On a timeout the error names the nodes that
    /// did not come up and their logs.
    pub async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        let leader = self.wait_leader(GroupId::DIRECTORY, timeout).await?;
        let client = self.client();
        let addr = self.addr(leader)?;
        // Every running node's directory replica lists every node, not
        // only the leader's: a node whose replica lags refuses a member it
        // does not know yet (`not_a_member`) when that member's edge
        // forwards it a write (seen in t85 on a loaded machine).
        loop {
            let mut listed = vec![client.status_at(&addr).await?.directory_nodes];
            for n in self.nodes.iter().filter(|n| n.is_running()) {
                listed.push(
                    client
                        .status_at(n.addr())
                        .await
                        .map_or(0, |s| s.directory_nodes),
                );
            }
            let s = listed.into_iter().min().unwrap_or(0);
            if s as usize >= self.nodes.len() {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "a node's directory lists only {s} of {} nodes within {timeout:?}",
                    self.nodes.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut http = reqwest::Client::builder().timeout(Duration::from_secs(2));
        if let Some(ca) = self.edge_ca() {
            let pem = std::fs::read(&ca).with_context(|| format!("read {}", ca.display()))?;
            http = http.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
        }
        let http = http.build()?;
        loop {
            let mut down = Vec::new();
            for n in self.nodes.iter().filter(|n| n.is_running()) {
                let grpc = client.status_at(n.addr()).await.is_ok();
                let edge = match n.edge_url() {
                    None => true,
                    Some(url) => http
                        .get(format!("{url}/readyz"))
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success()),
                };
                if !grpc || !edge {
                    let what = if grpc {
                        "edge not ready"
                    } else {
                        "gRPC not serving"
                    };
                    down.push(format!(
                        "node {} ({what}; log {})",
                        n.id(),
                        n.log_path.display()
                    ));
                }
            }
            if down.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("not serving within {timeout:?}: {}", down.join(", "));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The cluster CA's certificate when an edge serves HTTPS
    /// (`[edge.tls]`, certificates of that CA): what a client trusts.
    pub fn edge_ca(&self) -> Option<PathBuf> {
        let https = self
            .nodes
            .iter()
            .any(|n| n.config.edge.as_ref().is_some_and(|e| e.tls.is_some()));
        https
            .then(|| {
                self.nodes
                    .iter()
                    .find_map(|n| n.config.tls.as_ref()?.ca.clone())
            })
            .flatten()
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
