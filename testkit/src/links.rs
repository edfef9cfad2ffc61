//! [`LinkNet`]: a userspace TCP proxy on every directed link between two
//! nodes (each node dials its peers through them, `[chaos] via`). Each
//! link is a delay line: what it reads is written on after the link's
//! latency (its one-way trip from the [`Geo`] matrix, plus jitter, plus
//! any extra delay a drill adds), in order and pipelined, so a slow link
//! is far, not narrow. A link can also be cut: its connections stay open
//! but forward nothing (a dropped packet, not a reset), and at heal the
//! ones that lost bytes are closed so the peers reconnect cleanly.
//!
//! The proxies run on a runtime of their own (one thread), so they are
//! started from plain code and never wait on the caller's runtime.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::geo::Geo;

/// Chunks a link holds in flight per direction of one connection before
/// its reader waits (each chunk is at most 64 KiB).
const IN_FLIGHT_CHUNKS: usize = 1024;

struct Link {
    target: String,
    /// The link's own latency (one way, ms) and jitter (ms), from the matrix.
    one_way_ms: u64,
    jitter_ms: u64,
    blocked: AtomicBool,
    /// Extra delay a drill adds to every link (ms; 0: none).
    extra_ms: AtomicU64,
    /// Bumped at heal: connections that lived through a block close.
    tx_heal: watch::Sender<u64>,
}

impl Link {
    /// How long what is read now waits before it is written.
    fn delay(&self) -> Duration {
        let jitter = if self.jitter_ms > 0 {
            rand::thread_rng().gen_range(0..=self.jitter_ms)
        } else {
            0
        };
        Duration::from_millis(self.one_way_ms + jitter + self.extra_ms.load(Ordering::SeqCst))
    }
}

/// A node for [`LinkNet::start`]: its region and gRPC address.
#[derive(Debug, Clone)]
pub struct LinkEnd {
    pub region: String,
    pub addr: String,
}

/// The proxies of every directed link between a set of nodes.
pub struct LinkNet {
    links: BTreeMap<(u64, u64), (SocketAddr, Arc<Link>)>,
    geo: Option<Geo>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl LinkNet {
    /// A proxy for every ordered pair of `nodes`, each listening on its own
    /// port of 127.0.0.1, none of them in `avoid` (ports the nodes were
    /// given but may not have bound yet); with `geo`, each link as far as
    /// its two regions are.
    pub fn start(
        nodes: &BTreeMap<u64, LinkEnd>,
        avoid: &BTreeSet<u16>,
        geo: Option<&Geo>,
    ) -> anyhow::Result<LinkNet> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("seatfence-links")
            .enable_all()
            .build()
            .context("start the link proxies' runtime")?;
        let mut links = BTreeMap::new();
        for (from, a) in nodes {
            for (to, b) in nodes {
                if from == to {
                    continue;
                }
                let listener = bind_avoiding(avoid)?;
                let local = listener.local_addr()?;
                let (tx_heal, _) = watch::channel(0);
                let link = Arc::new(Link {
                    target: b.addr.clone(),
                    one_way_ms: geo.map_or(0, |g| g.one_way(&a.region, &b.region)),
                    jitter_ms: match geo {
                        Some(g) if a.region != b.region => g.jitter_ms,
                        _ => 0,
                    },
                    blocked: AtomicBool::new(false),
                    extra_ms: AtomicU64::new(0),
                    tx_heal,
                });
                let listener = {
                    let _in = runtime.enter();
                    TcpListener::from_std(listener)?
                };
                runtime.spawn(accept_loop(listener, link.clone()));
                links.insert((*from, *to), (local, link));
            }
        }
        Ok(LinkNet {
            links,
            geo: geo.cloned(),
            runtime: Some(runtime),
        })
    }

    /// The matrix the links apply, if any.
    pub fn geo(&self) -> Option<&Geo> {
        self.geo.as_ref()
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

    /// Cut the directed link `from → to`.
    pub fn block(&self, from: u64, to: u64) -> anyhow::Result<()> {
        self.link(from, to)?.blocked.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Add `ms` to every link's latency (0: back to the matrix's).
    pub fn delay_all(&self, ms: u64) {
        for (_, l) in self.links.values() {
            l.extra_ms.store(ms, Ordering::SeqCst);
        }
    }

    /// Undo every cut and extra delay (the matrix's latency stays).
    pub fn heal(&self) {
        for (_, l) in self.links.values() {
            let was = l.blocked.swap(false, Ordering::SeqCst);
            l.extra_ms.store(0, Ordering::SeqCst);
            if was {
                l.tx_heal.send_modify(|g| *g += 1);
            }
        }
    }
}

impl Drop for LinkNet {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A listener on 127.0.0.1 whose port is not in `avoid`.
fn bind_avoiding(avoid: &BTreeSet<u16>) -> anyhow::Result<std::net::TcpListener> {
    let mut taken = Vec::new();
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind a link proxy")?;
        if avoid.contains(&l.local_addr()?.port()) {
            // Keep it bound so the next try gets another port.
            taken.push(l);
            continue;
        }
        l.set_nonblocking(true)?;
        return Ok(l);
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
    // The handshake crosses the link too: one trip there.
    tokio::time::sleep(link.delay()).await;
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

/// One direction of a connection: a reader that stamps each chunk with
/// when it may leave (never before the chunk ahead of it), and a writer
/// that sends each at its time.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    link: Arc<Link>,
    dirty: Arc<AtomicBool>,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT_CHUNKS);
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut last_due = Instant::now();
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if link.blocked.load(Ordering::SeqCst) {
                dirty.store(true, Ordering::SeqCst);
                continue;
            }
            let due = (Instant::now() + link.delay()).max(last_due);
            last_due = due;
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                return;
            }
        }
    };
    // The writer ends when the reader does and its queue is drained.
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_server(rt: &tokio::runtime::Runtime) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap().to_string();
        rt.spawn(async move {
            let l = TcpListener::from_std(l).unwrap();
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

    fn two_nodes(rt: &tokio::runtime::Runtime) -> BTreeMap<u64, LinkEnd> {
        BTreeMap::from([
            (
                1,
                LinkEnd {
                    region: "us-east".into(),
                    addr: echo_server(rt),
                },
            ),
            (
                2,
                LinkEnd {
                    region: "ap-south".into(),
                    addr: echo_server(rt),
                },
            ),
        ])
    }

    #[test]
    fn links_forward_block_one_way_and_heal() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let nodes = two_nodes(&rt);
        let net = LinkNet::start(&nodes, &Default::default(), None).unwrap();
        let to2 = net.via_for(1)[&nodes[&2].addr].clone();
        let to1 = net.via_for(2)[&nodes[&1].addr].clone();
        rt.block_on(async {
            assert!(ping(&to2).await && ping(&to1).await);
            net.block(1, 2).unwrap();
            assert!(!ping(&to2).await, "1 → 2 is cut");
            assert!(ping(&to1).await, "2 → 1 still works");
            net.heal();
            assert!(ping(&to2).await, "healed");
        });
    }

    #[test]
    fn a_far_link_delays_each_trip_and_keeps_pipelining() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let nodes = two_nodes(&rt);
        let mut geo = Geo::default();
        geo.jitter_ms = 0;
        let net = LinkNet::start(&nodes, &Default::default(), Some(&geo)).unwrap();
        let to2 = net.via_for(1)[&nodes[&2].addr].clone();
        rt.block_on(async {
            let mut s = TcpStream::connect(&to2).await.unwrap();
            s.set_nodelay(true).unwrap();
            let t = std::time::Instant::now();
            // Twenty messages sent back to back come back after about one
            // round trip (plus the connect), not twenty.
            for _ in 0..20 {
                s.write_all(b"x").await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let mut buf = [0u8; 20];
            s.read_exact(&mut buf).await.unwrap();
            let took = t.elapsed();
            // 100 ms to connect, 100 + 100 each way: at least 300 ms.
            assert!(took >= Duration::from_millis(290), "far: {took:?}");
            assert!(took < Duration::from_secs(3), "pipelined: {took:?}");
        });
    }
}
