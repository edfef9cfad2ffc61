//! Partitions. Two mechanisms behind [`Partitioner`]:
//! - [`ProxyNet`]: a userspace TCP proxy on every directed link between two
//!   nodes (each node dials its peers through the proxy of that link, set
//!   by `[chaos] via` in its config). Needs no privileges; can add delay.
//!   A blocked link keeps its connections open but forwards nothing (like a
//!   dropped packet, not a reset); at heal those connections are closed so
//!   the peers reconnect cleanly.
//! - [`NetnsNet`]: every node in a network namespace of its own
//!   (`ip netns`), joined to the host by a veth pair on one bridge, with
//!   `iptables -j DROP` inside the sending node's namespace. Needs root,
//!   `ip` and `iptables`; cannot add delay (that needs tc netem).
//! - [`IptablesNet`]: `iptables -j DROP` between per-node loopback addresses
//!   (node `i` listens on and dials from `127.0.0.{i+1}`), for machines that
//!   allow iptables but not namespaces. Needs root and a working
//!   `iptables`; cannot add delay.
//!
//! A link is directed: blocking `a → b` drops what `a` sends on the
//! connections it opens to `b`; `b`'s own connections to `a` still work.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub trait Partitioner: Send + Sync {
    fn name(&self) -> &'static str;
    /// Drop traffic on the directed link `from → to`.
    fn block(&self, from: u64, to: u64) -> anyhow::Result<()>;
    /// Add `ms` of delay to every chunk on every link (0: none). Errors
    /// when the mechanism cannot delay.
    fn delay_all(&self, ms: u64) -> anyhow::Result<()>;
    /// Undo every block and delay.
    fn heal(&self) -> anyhow::Result<()>;
    fn supports_delay(&self) -> bool;
}

/// Cut every link between the two sides, both ways.
pub fn cut(net: &dyn Partitioner, a: &[u64], b: &[u64]) -> anyhow::Result<()> {
    for x in a {
        for y in b {
            if x != y {
                net.block(*x, *y)?;
                net.block(*y, *x)?;
            }
        }
    }
    Ok(())
}

struct Link {
    target: String,
    blocked: AtomicBool,
    delay_ms: AtomicU64,
    /// Bumped at heal: connections that lived through a block close.
    tx_heal: watch::Sender<u64>,
}

/// The userspace proxy mechanism.
pub struct ProxyNet {
    links: BTreeMap<(u64, u64), (SocketAddr, Arc<Link>)>,
    // Held only to flip flags, never across an `.await`.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl ProxyNet {
    /// A proxy for every ordered pair of `nodes` (`id → grpc_addr`), each
    /// listening on its own port of 127.0.0.1, none of them in `avoid`
    /// (ports the nodes were given but may not have bound yet).
    pub async fn start(
        nodes: &BTreeMap<u64, String>,
        avoid: &std::collections::BTreeSet<u16>,
    ) -> anyhow::Result<ProxyNet> {
        let mut links = BTreeMap::new();
        let mut tasks = Vec::new();
        for from in nodes.keys() {
            for (to, addr) in nodes {
                if from == to {
                    continue;
                }
                let mut taken = Vec::new();
                let listener = loop {
                    let l = TcpListener::bind("127.0.0.1:0")
                        .await
                        .context("bind a link proxy")?;
                    if avoid.contains(&l.local_addr()?.port()) {
                        // Keep it bound so the next try gets another port.
                        taken.push(l);
                        continue;
                    }
                    break l;
                };
                drop(taken);
                let local = listener.local_addr()?;
                let (tx_heal, _) = watch::channel(0);
                let link = Arc::new(Link {
                    target: addr.clone(),
                    blocked: AtomicBool::new(false),
                    delay_ms: AtomicU64::new(0),
                    tx_heal,
                });
                tasks.push(tokio::spawn(accept_loop(listener, link.clone())));
                links.insert((*from, *to), (local, link));
            }
        }
        Ok(ProxyNet {
            links,
            tasks: Mutex::new(tasks),
        })
    }

    /// For node `from`'s config: peer address → the proxy to dial instead.
    pub fn via_for(&self, from: u64) -> BTreeMap<String, String> {
        self.links
            .iter()
            .filter(|((f, _), _)| *f == from)
            .map(|(_, (local, link))| (link.target.clone(), local.to_string()))
            .collect()
    }

    fn link(&self, from: u64, to: u64) -> anyhow::Result<&Arc<Link>> {
        self.links
            .get(&(from, to))
            .map(|(_, l)| l)
            .with_context(|| format!("no proxied link {from} → {to}"))
    }
}

impl Drop for ProxyNet {
    fn drop(&mut self) {
        for t in self
            .tasks
            .lock()
            .expect("proxy task lock poisoned")
            .drain(..)
        {
            t.abort();
        }
    }
}

impl Partitioner for ProxyNet {
    fn name(&self) -> &'static str {
        "proxy"
    }

    fn block(&self, from: u64, to: u64) -> anyhow::Result<()> {
        self.link(from, to)?.blocked.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn delay_all(&self, ms: u64) -> anyhow::Result<()> {
        for (_, l) in self.links.values() {
            l.delay_ms.store(ms, Ordering::SeqCst);
        }
        Ok(())
    }

    fn heal(&self) -> anyhow::Result<()> {
        for (_, l) in self.links.values() {
            let was = l.blocked.swap(false, Ordering::SeqCst);
            l.delay_ms.store(0, Ordering::SeqCst);
            if was {
                l.tx_heal.send_modify(|g| *g += 1);
            }
        }
        Ok(())
    }

    fn supports_delay(&self) -> bool {
        true
    }
}

async fn accept_loop(listener: TcpListener, link: Arc<Link>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = inbound.set_nodelay(true);
        tokio::spawn(serve(inbound, link.clone()));
    }
}

/// One proxied connection: forward both ways while the link is open; while
/// it is blocked swallow everything; after a heal that followed a block,
/// close (the stream has holes now).
async fn serve(inbound: TcpStream, link: Arc<Link>) {
    let mut rx_heal = link.tx_heal.subscribe();
    let generation = *rx_heal.borrow_and_update();
    if link.blocked.load(Ordering::SeqCst) {
        // A connection attempt over a cut link: accepted (the kernel did
        // that already) but never answered, like a dropped SYN-ACK.
        let _ = rx_heal.wait_for(|g| *g != generation).await;
        return;
    }
    let Ok(outbound) = TcpStream::connect(&link.target).await else {
        return;
    };
    let _ = outbound.set_nodelay(true);
    let (ri, wi) = inbound.into_split();
    let (ro, wo) = outbound.into_split();
    let dirty = Arc::new(AtomicBool::new(false));
    let up = pump(ri, wo, link.clone(), dirty.clone());
    let down = pump(ro, wi, link.clone(), dirty.clone());
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = async {
            loop {
                if rx_heal.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                if dirty.load(Ordering::SeqCst) {
                    return;
                }
            }
        } => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    link: Arc<Link>,
    dirty: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if link.blocked.load(Ordering::SeqCst) {
            dirty.store(true, Ordering::SeqCst);
            continue;
        }
        let delay = link.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The root mechanism: each node has its own loopback address; a blocked
/// link is an `iptables -A SEATFENCE-CHAOS -s FROM -d TO -j DROP` rule in a
/// chain of its own, jumped to from INPUT, flushed at heal and removed at
/// the end. The rules name addresses only, so one iptables drill runs on a
/// machine at a time; a chain left by a drill that was killed is flushed
/// when the next one starts.
pub struct IptablesNet {
    ips: BTreeMap<u64, String>,
}

const CHAIN: &str = "SEATFENCE-CHAOS";

impl IptablesNet {
    /// Whether this machine can run it, and if not, why.
    pub fn probe() -> Result<(), String> {
        is_root().map_err(|e| format!("{e} (iptables rules)"))?;
        let out = std::process::Command::new("iptables")
            .args(["-w", "-L", "INPUT", "-n"])
            .output()
            .map_err(|e| format!("iptables not found: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "iptables does not work here: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(())
    }

    /// The loopback address of node `id`.
    pub fn ip_of(id: u64) -> String {
        format!("127.0.0.{}", id + 1)
    }

    pub fn start(ids: &[u64]) -> anyhow::Result<IptablesNet> {
        let net = IptablesNet {
            ips: ids.iter().map(|i| (*i, Self::ip_of(*i))).collect(),
        };
        let _ = net.run(&["-N", CHAIN]);
        net.run(&["-F", CHAIN])?;
        if net.run(&["-C", "INPUT", "-j", CHAIN]).is_err() {
            net.run(&["-I", "INPUT", "-j", CHAIN])?;
        }
        IPTABLES_IN_USE.store(true, Ordering::SeqCst);
        Ok(net)
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<()> {
        run_cmd("iptables", &[&["-w"][..], args].concat())
    }

    /// Remove the chain and its jump.
    fn remove_chain() {
        let _ = run_cmd("iptables", &["-w", "-D", "INPUT", "-j", CHAIN]);
        let _ = run_cmd("iptables", &["-w", "-F", CHAIN]);
        let _ = run_cmd("iptables", &["-w", "-X", CHAIN]);
    }
}

impl Drop for IptablesNet {
    fn drop(&mut self) {
        Self::remove_chain();
        IPTABLES_IN_USE.store(false, Ordering::SeqCst);
    }
}

/// Whether this process has set up namespaces / the iptables chain that
/// are not removed yet, for [`remove_after_interrupt`].
static NETNS_IN_USE: AtomicBool = AtomicBool::new(false);
static IPTABLES_IN_USE: AtomicBool = AtomicBool::new(false);

/// Remove what this process's partition mechanism set up on the machine
/// (namespaces and bridge, or the iptables chain), for a drill stopped by
/// a signal while tasks still hold the mechanism.
pub fn remove_after_interrupt() {
    if NETNS_IN_USE.swap(false, Ordering::SeqCst) {
        NetnsNet::remove_all();
    }
    if IPTABLES_IN_USE.swap(false, Ordering::SeqCst) {
        IptablesNet::remove_chain();
    }
}

impl Partitioner for IptablesNet {
    fn name(&self) -> &'static str {
        "iptables"
    }

    fn block(&self, from: u64, to: u64) -> anyhow::Result<()> {
        let (Some(a), Some(b)) = (self.ips.get(&from), self.ips.get(&to)) else {
            anyhow::bail!("no address for link {from} → {to}");
        };
        // What `from` sends to `to`: its connections' packets, and its
        // answers on `to`'s connections would need a reverse rule; like
        // the proxy, block only the connections `from` opens (dport side)
        // by dropping packets from a to b that are not replies.
        self.run(&[&["-A", CHAIN, "-s", a, "-d", b][..], &OWN_CONNECTIONS_DROP].concat())
    }

    fn delay_all(&self, _ms: u64) -> anyhow::Result<()> {
        anyhow::bail!("iptables cannot delay packets (that needs tc netem)")
    }

    fn heal(&self) -> anyhow::Result<()> {
        self.run(&["-F", CHAIN])
    }

    fn supports_delay(&self) -> bool {
        false
    }
}

/// The tail of a DROP rule for the packets a sender sends on the TCP
/// connections it opened (its answers on the other side's connections,
/// direction REPLY, still pass).
const OWN_CONNECTIONS_DROP: [&str; 12] = [
    "-p",
    "tcp",
    "-m",
    "conntrack",
    "--ctstate",
    "NEW,ESTABLISHED",
    "-m",
    "conntrack",
    "--ctdir",
    "ORIGINAL",
    "-j",
    "DROP",
];

/// Run a command, failing with its stderr.
fn run_cmd(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("run {program}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

fn is_root() -> Result<(), String> {
    let uid = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| format!("cannot run id: {e}"))?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("needs root".into());
    }
    Ok(())
}

/// The namespace mechanism. Node `i` runs (through `ip netns exec`) in
/// namespace `sfchaos-n{i}` whose only link, `eth0` with address
/// `10.231.0.{i+1}/16`, is one end of a veth pair; the other end is on
/// the host's bridge `sfchaos0` (`10.231.0.1`), where the harness and the
/// mock gateway live. Blocking `a → b` is an `iptables -A OUTPUT -d b`
/// DROP rule inside `a`'s namespace for the connections `a` opens; heal
/// flushes every namespace's OUTPUT chain. Namespaces and bridge are
/// removed at the end; those a killed drill left are removed when the
/// next one starts, so one namespace drill runs on a machine at a time.
pub struct NetnsNet {
    ids: Vec<u64>,
}

const BRIDGE: &str = "sfchaos0";
const NS_PREFIX: &str = "sfchaos-n";

impl NetnsNet {
    /// The host's address on the bridge: where nodes reach the harness
    /// and the mock gateway.
    pub const HOST_IP: &'static str = "10.231.0.1";

    /// Whether this machine can run it, and if not, why: creates and
    /// removes a namespace with a veth pair and lists its iptables.
    pub fn probe() -> Result<(), String> {
        is_root().map_err(|e| format!("{e} (ip netns, iptables)"))?;
        let ns = "sfchaos-probe";
        let _ = run_cmd("ip", &["netns", "del", ns]);
        let tried = (|| -> anyhow::Result<()> {
            run_cmd("ip", &["netns", "add", ns])?;
            run_cmd(
                "ip",
                &[
                    "link",
                    "add",
                    "sfchaosp0",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "sfchaosp1",
                ],
            )?;
            run_cmd("ip", &["link", "set", "sfchaosp1", "netns", ns])?;
            run_cmd(
                "ip",
                &["netns", "exec", ns, "iptables", "-w", "-L", "OUTPUT", "-n"],
            )?;
            Ok(())
        })();
        let _ = run_cmd("ip", &["link", "del", "sfchaosp0"]);
        let _ = run_cmd("ip", &["netns", "del", ns]);
        tried.map_err(|e| format!("namespaces do not work here: {e:#}"))
    }

    /// The address of node `id` in its namespace.
    pub fn ip_of(id: u64) -> String {
        format!("10.231.0.{}", id + 1)
    }

    /// The namespace node `id` runs in.
    pub fn ns_of(id: u64) -> String {
        format!("{NS_PREFIX}{id}")
    }

    /// Create the bridge and one namespace per node.
    pub fn start(ids: &[u64]) -> anyhow::Result<NetnsNet> {
        anyhow::ensure!(
            ids.iter().all(|i| (1..=250).contains(i)),
            "node ids 1 to 250 only"
        );
        Self::remove_all();
        let net = NetnsNet { ids: ids.to_vec() };
        NETNS_IN_USE.store(true, Ordering::SeqCst);
        run_cmd("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
        run_cmd(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/16", Self::HOST_IP),
                "dev",
                BRIDGE,
            ],
        )?;
        run_cmd("ip", &["link", "set", BRIDGE, "up"])?;
        // With br_netfilter the host's FORWARD chain sees bridged frames; a
        // host whose policy is DROP (docker's) must still pass ours.
        let forward = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"];
        if run_cmd("iptables", &[&["-w", "-C"][..], &forward].concat()).is_err() {
            run_cmd("iptables", &[&["-w", "-I"][..], &forward].concat())?;
        }
        for id in ids {
            let (ns, host_end, ns_end) = (
                Self::ns_of(*id),
                format!("sfchaos{id}h"),
                format!("sfchaos{id}p"),
            );
            let addr = format!("{}/16", Self::ip_of(*id));
            run_cmd("ip", &["netns", "add", &ns])?;
            run_cmd(
                "ip",
                &[
                    "link", "add", &host_end, "type", "veth", "peer", "name", &ns_end,
                ],
            )?;
            run_cmd("ip", &["link", "set", &ns_end, "netns", &ns])?;
            run_cmd("ip", &["-n", &ns, "link", "set", &ns_end, "name", "eth0"])?;
            run_cmd("ip", &["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            run_cmd("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
            run_cmd("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            run_cmd("ip", &["link", "set", &host_end, "master", BRIDGE])?;
            run_cmd("ip", &["link", "set", &host_end, "up"])?;
        }
        Ok(net)
    }

    /// Remove every namespace, veth pair and the bridge this mechanism
    /// creates. The host ends are deleted first and explicitly: a deleted
    /// namespace takes its veth pairs with it only asynchronously.
    fn remove_all() {
        if let Ok(out) = std::process::Command::new("ip")
            .args(["-o", "link", "show"])
            .output()
        {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                // "12: sfchaos3h@if11: <...>"
                let name = line.split(':').nth(1).unwrap_or("").trim();
                let name = name.split('@').next().unwrap_or("");
                if name.starts_with("sfchaos") && name.ends_with('h') {
                    let _ = run_cmd("ip", &["link", "del", name]);
                }
            }
        }
        if let Ok(out) = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
        {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let name = line.split_whitespace().next().unwrap_or("");
                if name.starts_with(NS_PREFIX) {
                    let _ = run_cmd("ip", &["netns", "del", name]);
                }
            }
        }
        let _ = run_cmd("ip", &["link", "del", BRIDGE]);
        let _ = run_cmd(
            "iptables",
            &[
                "-w", "-D", "FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT",
            ],
        );
    }

    fn iptables_in(&self, id: u64, args: &[&str]) -> anyhow::Result<()> {
        let ns = Self::ns_of(id);
        run_cmd(
            "ip",
            &[&["netns", "exec", &ns, "iptables", "-w"][..], args].concat(),
        )
    }
}

impl Drop for NetnsNet {
    fn drop(&mut self) {
        Self::remove_all();
        NETNS_IN_USE.store(false, Ordering::SeqCst);
    }
}

impl Partitioner for NetnsNet {
    fn name(&self) -> &'static str {
        "netns"
    }

    fn block(&self, from: u64, to: u64) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.ids.contains(&from) && self.ids.contains(&to),
            "no namespace for link {from} → {to}"
        );
        // As with the loopback rules: `from`'s packets on the connections
        // it opens to `to`; its answers on `to`'s connections still go.
        let to_ip = Self::ip_of(to);
        self.iptables_in(
            from,
            &[&["-A", "OUTPUT", "-d", &to_ip][..], &OWN_CONNECTIONS_DROP].concat(),
        )
    }

    fn delay_all(&self, _ms: u64) -> anyhow::Result<()> {
        anyhow::bail!("netns cannot delay packets here (that needs tc netem)")
    }

    fn heal(&self) -> anyhow::Result<()> {
        for id in &self.ids {
            self.iptables_in(*id, &["-F", "OUTPUT"])?;
        }
        Ok(())
    }

    fn supports_delay(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn ping(addr: &str) -> bool {
        let attempt = async {
            let mut s = TcpStream::connect(addr).await.ok()?;
            s.write_all(b"ping").await.ok()?;
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.ok()?;
            Some(&buf == b"ping")
        };
        tokio::time::timeout(Duration::from_millis(300), attempt)
            .await
            .ok()
            .flatten()
            .unwrap_or(false)
    }

    #[tokio::test]
    async fn proxy_forwards_blocks_one_way_and_heals() {
        let a = echo_server().await;
        let b = echo_server().await;
        let nodes = BTreeMap::from([(1, a), (2, b)]);
        let net = ProxyNet::start(&nodes, &Default::default()).await.unwrap();
        let to2 = net.via_for(1)[&nodes[&2]].clone();
        let to1 = net.via_for(2)[&nodes[&1]].clone();
        assert!(ping(&to2).await && ping(&to1).await);
        net.block(1, 2).unwrap();
        assert!(!ping(&to2).await, "1 → 2 is cut");
        assert!(ping(&to1).await, "2 → 1 still works");
        net.heal().unwrap();
        assert!(ping(&to2).await, "healed");
        net.delay_all(150).unwrap();
        let t = std::time::Instant::now();
        let mut s = TcpStream::connect(&to2).await.unwrap();
        s.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 1];
        s.read_exact(&mut buf).await.unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(290),
            "both directions delayed"
        );
    }

    /// Run `f` on a thread that has entered node `id`'s namespace; the
    /// sockets it creates stay in that namespace wherever they are used.
    fn in_ns<T: Send + 'static>(id: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
        use std::os::fd::AsRawFd;
        std::thread::spawn(move || {
            let ns = std::fs::File::open(format!("/var/run/netns/{}", NetnsNet::ns_of(id)))
                .expect("open the namespace");
            // SAFETY: setns on a valid namespace fd changes only this
            // (short-lived) thread's network namespace.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("namespace thread")
    }

    /// An echo server listening in node `id`'s namespace on its address.
    fn ns_echo(id: u64) -> std::net::SocketAddr {
        use std::io::{Read, Write};
        let listener = in_ns(id, move || {
            std::net::TcpListener::bind((NetnsNet::ip_of(id).as_str(), 0)).expect("bind")
        });
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            for mut c in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut b = [0u8; 1];
                    if c.read_exact(&mut b).is_ok() {
                        let _ = c.write_all(&b);
                    }
                });
            }
        });
        addr
    }

    /// From inside node `from`'s namespace: connect, send a byte, read it back.
    fn ns_ping(from: u64, to: std::net::SocketAddr) -> bool {
        use std::io::{Read, Write};
        in_ns(from, move || {
            let t = Duration::from_millis(800);
            let Ok(mut c) = std::net::TcpStream::connect_timeout(&to, t) else {
                return false;
            };
            let _ = c.set_read_timeout(Some(t));
            let mut b = [7u8; 1];
            c.write_all(&b).is_ok() && c.read_exact(&mut b).is_ok()
        })
    }

    /// Needs root and namespaces (skipped otherwise, saying why). It
    /// removes the namespaces of a namespace drill running on this machine.
    #[test]
    fn netns_blocks_one_way_and_heals() {
        if let Err(why) = NetnsNet::probe() {
            eprintln!("skipped: {why}");
            return;
        }
        let net = NetnsNet::start(&[1, 2]).expect("namespaces");
        let (at1, at2) = (ns_echo(1), ns_echo(2));
        assert!(ns_ping(1, at2) && ns_ping(2, at1), "the bridge joins them");
        net.block(1, 2).unwrap();
        assert!(!ns_ping(1, at2), "1 → 2 is cut");
        assert!(ns_ping(2, at1), "2 → 1 still works");
        let host = std::net::TcpStream::connect_timeout(&at2, Duration::from_secs(1));
        assert!(host.is_ok(), "the host still reaches node 2");
        net.heal().unwrap();
        assert!(ns_ping(1, at2), "healed");
        drop(net);
        let left = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&left.stdout).contains(NS_PREFIX),
            "namespaces removed at the end"
        );
    }
}
