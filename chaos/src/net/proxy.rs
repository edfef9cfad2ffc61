//! [`ProxyNet`]: a userspace TCP proxy on every directed link.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::Partitioner;

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
}
