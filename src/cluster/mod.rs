//! `seatfence cluster init`: lay a cluster out from one topology file
//! ([`topology`]): per host its `node.toml`, certificates and secret files,
//! ready to copy to `/etc/seatfence`; the CA, the operator's certificate
//! and the shared secrets kept apart; and `cluster.json`, which remembers
//! every node id ever given so `--add-host` never reuses one.

pub mod render;
pub mod topology;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use seatfence_node::certs;
use serde::{Deserialize, Serialize};
use serde_json::json;

use self::render::HostFiles;
use self::topology::{Checked, EdgeCerts, Host};

#[derive(Subcommand)]
pub enum ClusterCmd {
    /// Write every host's node.toml, certificates and secrets from a
    /// topology file (README "Deploying on hosts").
    Init(InitArgs),
}

#[derive(Args)]
pub struct InitArgs {
    /// The topology: regions, hosts (address, region, zone), ports.
    #[arg(long)]
    pub topology: PathBuf,
    /// Where to write (created; refused when it holds files, unless
    /// `--add-host`).
    #[arg(long)]
    pub out: PathBuf,
    /// Only the files of this new host of the cluster `--out` already
    /// describes (a new node id, never one given before). Repeatable.
    #[arg(long = "add-host", value_name = "NAME")]
    pub add_hosts: Vec<String>,
    /// Print JSON (hosts, node ids, where each host's files are).
    #[arg(long)]
    pub json: bool,
}

/// `cluster.json`: what `cluster init` gave out, so `--add-host` goes on
/// from it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterFile {
    /// Host name → node id, every id ever given (hosts gone included).
    pub ids: BTreeMap<String, u64>,
    /// The next node id to give.
    pub next_id: u64,
    /// The directory's voters every node lists (fixed at init).
    pub initial_members: Vec<seatfence_node::config::Peer>,
}

pub fn run(cmd: ClusterCmd) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Init(args) => init(&args),
    }
}

fn init(args: &InitArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.topology)
        .with_context(|| format!("read {}", args.topology.display()))?;
    let topo =
        topology::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.topology.display()))?;
    let base = args.topology.parent().unwrap_or(Path::new("."));
    let out = &args.out;
    let (mut state, new): (ClusterFile, Vec<&Host>) = if args.add_hosts.is_empty() {
        if out.exists() && std::fs::read_dir(out)?.next().is_some() {
            bail!(
                "{} exists and holds files: init writes a new cluster into an empty directory \
                 (--add-host NAME adds a host to the cluster it describes)",
                out.display()
            );
        }
        (first_ids(&topo), topo.hosts.iter().collect())
    } else {
        let state = load_state(out)?;
        let mut new = Vec::new();
        for name in &args.add_hosts {
            let Some(h) = topo.hosts.iter().find(|h| &h.name == name) else {
                bail!("--add-host {name}: the topology has no host named {name}: add its [[host]] first");
            };
            if let Some(id) = state.ids.get(name) {
                bail!(
                    "--add-host {name}: {name} already has node id {id}; a replacement is a new host \
                     under a new name (node ids are never reused)"
                );
            }
            new.push(h);
        }
        (state, new)
    };
    for h in &new {
        if !state.ids.contains_key(&h.name) {
            state.ids.insert(h.name.clone(), state.next_id);
            state.next_id += 1;
        }
    }
    make_dir(out, 0o700)?;
    let shared = shared_files(out, &topo, base)?;
    let mut written = Vec::new();
    for h in new {
        let id = state.ids[&h.name];
        written.push(write_host(out, &topo, &state, &shared, h, id)?);
    }
    write_private(
        &out.join("cluster.json"),
        serde_json::to_vec_pretty(&state)?.as_slice(),
    )?;
    report(out, &topo, &state, &written, args.json)
}

/// Node ids 1.. in the file's order; each region's first host is its
/// directory voter.
fn first_ids(topo: &Checked) -> ClusterFile {
    let ids: BTreeMap<String, u64> = topo
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.name.clone(), i as u64 + 1))
        .collect();
    let initial_members = topo
        .regions
        .iter()
        .filter_map(|(r, _)| topo.hosts.iter().find(|h| &h.region == r))
        .map(|h| seatfence_node::config::Peer {
            id: ids[&h.name],
            region: h.region.clone(),
            grpc_addr: h.addr(h.grpc_port),
        })
        .collect();
    ClusterFile {
        next_id: ids.len() as u64 + 1,
        ids,
        initial_members,
    }
}

fn load_state(out: &Path) -> anyhow::Result<ClusterFile> {
    let path = out.join("cluster.json");
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "read {}: --add-host needs the directory `cluster init` wrote for this cluster",
            path.display()
        )
    })?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not cluster init's", path.display()))
}

/// What every host shares: the CA (made once, in `ca/`), the operator's
/// certificate (`operator/`), and the secrets (`secrets/`, 0600).
struct Shared {
    ca: PathBuf,
    secrets: Vec<(&'static str, PathBuf)>,
}

fn shared_files(out: &Path, topo: &Checked, base: &Path) -> anyhow::Result<Shared> {
    let ca = out.join("ca");
    make_dir(&ca, 0o700)?;
    if !ca.join("ca.pem").exists() {
        certs::make_ca(&ca)?;
    }
    let operator = out.join("operator");
    make_dir(&operator, 0o700)?;
    let stem = format!("operator-{}", topo.defaults.operator);
    if !operator.join(format!("{stem}.pem")).exists() {
        let made = certs::make_operator(&ca, &topo.defaults.operator, certs::LEAF_DAYS)?;
        for f in [made.cert, made.key].into_iter().flatten() {
            move_into(&f, &operator)?;
        }
        std::fs::copy(ca.join("ca.pem"), operator.join("ca.pem"))?;
    }
    let dir = out.join("secrets");
    make_dir(&dir, 0o700)?;
    let mut secrets = vec![(render::JWT_SECRET, None)];
    if let Some(p) = &topo.payments {
        secrets.push((render::CLIENT_SECRET, p.client_secret_file.as_ref()));
        secrets.push((render::WEBHOOK_SECRET, p.webhook_secret_file.as_ref()));
    }
    let mut files = Vec::new();
    for (name, given) in secrets {
        let path = dir.join(name);
        if !path.exists() {
            let value = match given {
                Some(f) => std::fs::read(base.join(f))
                    .with_context(|| format!("read {}", base.join(f).display()))?,
                None => format!("{:032x}\n", rand::random::<u128>()).into_bytes(),
            };
            write_private(&path, &value)?;
        }
        files.push((name, path));
    }
    Ok(Shared { ca, secrets: files })
}

/// `hosts/<name>/`: what goes into the host's `/etc/seatfence`.
fn write_host(
    out: &Path,
    topo: &Checked,
    state: &ClusterFile,
    shared: &Shared,
    h: &Host,
    id: u64,
) -> anyhow::Result<(String, u64, PathBuf)> {
    let dir = out.join("hosts").join(&h.name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let certs_dir = dir.join("certs");
    let secrets_dir = dir.join("secrets");
    make_dir(&out.join("hosts"), 0o700)?;
    make_dir(&dir, 0o700)?;
    make_dir(&certs_dir, 0o700)?;
    make_dir(&secrets_dir, 0o700)?;
    let node = certs::make_node(&shared.ca, id, certs::LEAF_DAYS)?;
    for f in [node.cert, node.key].into_iter().flatten() {
        move_into(&f, &certs_dir)?;
    }
    std::fs::copy(shared.ca.join("ca.pem"), certs_dir.join("ca.pem"))?;
    if h.edge && topo.edge.certs == EdgeCerts::Issue {
        let mut names = vec![h.ip.to_string()];
        names.extend(h.names.iter().cloned());
        if let Some(host) = h.public_url.as_deref().and_then(url_host) {
            names.push(host);
        }
        names.dedup();
        let edge = certs::make_edge(&shared.ca, &h.name, &names, certs::LEAF_DAYS)?;
        let (cert, key) = (edge.cert.unwrap_or_default(), edge.key.unwrap_or_default());
        std::fs::rename(&cert, certs_dir.join("edge.pem"))?;
        std::fs::rename(&key, certs_dir.join("edge.key"))?;
    }
    for (name, path) in &shared.secrets {
        if *name == render::JWT_SECRET && !h.edge {
            continue;
        }
        std::fs::copy(path, secrets_dir.join(name))?;
    }
    let text = render::node_toml(&HostFiles {
        host: h,
        id,
        defaults: &topo.defaults,
        members: &state.initial_members,
        payments: topo.payments.as_ref(),
    });
    // The file is what the node will read: check it as the node does.
    let config: seatfence_node::config::NodeConfig =
        toml::from_str(&text).context("the node.toml written does not parse (a bug)")?;
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("host {}: {e}", h.name))?;
    write_private(&dir.join("node.toml"), text.as_bytes())?;
    Ok((h.name.clone(), id, dir))
}

/// The host part of an `https://host[:port]/…` URL.
fn url_host(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.split(':').next()?,
    };
    (!host.is_empty()).then(|| host.to_string())
}

fn report(
    out: &Path,
    topo: &Checked,
    state: &ClusterFile,
    written: &[(String, u64, PathBuf)],
    json: bool,
) -> anyhow::Result<()> {
    let voters: Vec<u64> = state.initial_members.iter().map(|p| p.id).collect();
    let hosts: Vec<serde_json::Value> = written
        .iter()
        .map(|(name, id, dir)| {
            let h = topo
                .hosts
                .iter()
                .find(|h| &h.name == name)
                .expect("written hosts are the topology's");
            json!({
                "name": name,
                "node_id": id,
                "region": h.region,
                "zone": h.zone,
                "address": h.ip.to_string(),
                "grpc_addr": h.addr(h.grpc_port),
                "edge_url": h.edge.then(|| h.edge_url()),
                "directory_voter": voters.contains(id),
                "files": dir,
                "copy_to": topo.defaults.etc_dir,
            })
        })
        .collect();
    let operator = out.join("operator");
    let op = &topo.defaults.operator;
    if json {
        let doc = json!({
            "out": out,
            "hosts": hosts,
            "ca": out.join("ca/ca.pem"),
            "ca_key": out.join("ca/ca.key"),
            "operator": {
                "ca": operator.join("ca.pem"),
                "cert": operator.join(format!("operator-{op}.pem")),
                "key": operator.join(format!("operator-{op}.key")),
            },
            "secrets": out.join("secrets"),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "wrote {} host(s) into {} (the cluster's node ids and voters: {}):",
        written.len(),
        out.display(),
        out.join("cluster.json").display()
    );
    for h in &hosts {
        println!(
            "  {:<12} node {:<3} {:<10} {}{}  copy {}/. to {} on {}",
            h["name"].as_str().unwrap_or_default(),
            h["node_id"],
            h["region"].as_str().unwrap_or_default(),
            h["grpc_addr"].as_str().unwrap_or_default(),
            if h["directory_voter"] == true {
                " (directory voter)"
            } else {
                ""
            },
            h["files"].as_str().unwrap_or_default(),
            topo.defaults.etc_dir.display(),
            h["address"].as_str().unwrap_or_default(),
        );
    }
    println!(
        "keep {} off the hosts (it signs every certificate); the operator's certificate is in {}",
        out.join("ca/ca.key").display(),
        operator.display()
    );
    if topo.edge.certs == EdgeCerts::Own {
        println!("[edge] certs = \"own\": put each host's edge.pem and edge.key in certs/ before it starts");
    }
    if topo.payments.is_some() {
        println!(
            "the gateway's client secret and webhook secret are in {} (give them to the gateway when generated)",
            out.join("secrets").display()
        );
    }
    Ok(())
}

fn make_dir(dir: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", dir.display()))
}

fn move_into(file: &Path, dir: &Path) -> anyhow::Result<()> {
    let name = file.file_name().context("a file name")?;
    std::fs::rename(file, dir.join(name)).with_context(|| format!("move {}", file.display()))
}

/// Write `path` owner-only (0600), replacing it.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("write {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("write {}", path.display()))
}
