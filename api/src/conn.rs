//! The edge's connections: accepting within `max_connections` and
//! `max_connections_per_ip` ([`Peers`]), and cutting slow or idle clients
//! off (header, body and idle timeouts), each counted in the metrics; with
//! `[edge.tls]`, the TLS handshake first (`crate::tls`). Requests are
//! answered by [`crate::http`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::http::handle;
use crate::Edge;

/// Serve the edge on `listener` until `rx_stop` turns true. Slow clients
/// are cut off: headers within `header_timeout_ms`, a body within
/// `body_timeout_ms` (408; an oversized one's drain too, 413), an idle
/// keep-alive connection after `idle_timeout_ms`; at most
/// `max_connections` are open, at most `max_connections_per_ip` from one
/// address (more are closed on accept). Each has a metric. With `tls`,
/// every connection is HTTPS: its handshake must finish within
/// `header_timeout_ms`, and anything else (plain HTTP) is closed.
pub async fn serve(
    edge: Arc<Edge>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    mut rx_stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(edge.config.max_connections));
    let peers = Arc::new(Peers::new(edge.config.connections_per_ip()));
    loop {
        let (stream, addr) = tokio::select! {
            biased;
            _ = stopped(&mut rx_stop) => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("edge accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            edge.metrics.inc(|m| &m.connections_refused);
            drop(stream);
            continue;
        };
        let Some(peer_slot) = Peers::open(&peers, Peer::of(addr.ip())) else {
            edge.metrics.inc(|m| &m.connections_refused_per_ip);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(
            edge.clone(),
            stream,
            Peer::of(addr.ip()),
            (slot, peer_slot),
            tls.clone(),
            rx_stop.clone(),
        ));
    }
}

/// Whom a per-address limit counts: an IPv4 address (also one mapped into
/// IPv6), or an IPv6 /64 — one subscriber's network, which gives its
/// holder 2^64 addresses to open connections from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Peer {
    V4(std::net::Ipv4Addr),
    V6Net(u64),
}

impl Peer {
    pub(crate) fn of(ip: IpAddr) -> Peer {
        match ip {
            IpAddr::V4(v4) => Peer::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer::V4(v4),
                None => Peer::V6Net((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// Connections open per [`Peer`], each at most `limit`. The mutex guards
/// one map update at a time and is never held across an `.await`; a peer
/// leaves the map when its last connection closes, so it holds at most
/// `max_connections` entries.
struct Peers {
    limit: usize,
    open: Mutex<HashMap<Peer, usize>>,
}

/// One connection's place in [`Peers`], given back when it is dropped.
struct PeerSlot {
    peers: Arc<Peers>,
    peer: Peer,
}

impl Peers {
    fn new(limit: usize) -> Peers {
        Peers {
            limit,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// A place for one more connection of `peer`, unless it has `limit`.
    fn open(peers: &Arc<Peers>, peer: Peer) -> Option<PeerSlot> {
        let mut open = peers.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.get(&peer).copied().unwrap_or(0);
        if n >= peers.limit {
            return None;
        }
        open.insert(peer, n + 1);
        Some(PeerSlot {
            peers: peers.clone(),
            peer,
        })
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.open.lock().unwrap().len()
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

/// When a connection last finished a request, last received bytes, and how
/// many requests it is serving.
#[derive(Default)]
struct Activity {
    inflight: std::sync::atomic::AtomicUsize,
    /// Milliseconds since the connection opened (`+ 1`, so 0 means never).
    last_ms: std::sync::atomic::AtomicU64,
    read_ms: std::sync::atomic::AtomicU64,
}

impl Activity {
    /// Nothing received since the last answer: a slow-header timeout now is
    /// an idle keep-alive connection's.
    fn idle(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let last = self.last_ms.load(Relaxed);
        last > 0 && self.inflight.load(Relaxed) == 0 && self.read_ms.load(Relaxed) <= last
    }
}

/// The connection's socket, noting when bytes arrive (see [`Activity`]).
struct Tracked {
    inner: tokio::net::TcpStream,
    activity: Arc<Activity>,
    opened: Instant,
}

impl tokio::io::AsyncRead for Tracked {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let now = self.opened.elapsed().as_millis() as u64 + 1;
            self.activity
                .read_ms
                .store(now, std::sync::atomic::Ordering::Relaxed);
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Tracked {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn serve_connection(
    edge: Arc<Edge>,
    stream: tokio::net::TcpStream,
    peer: Peer,
    _slots: (tokio::sync::OwnedSemaphorePermit, PeerSlot),
    tls: Option<TlsAcceptor>,
    rx_stop: watch::Receiver<bool>,
) {
    edge.metrics.connections.increment(1.0);
    let opened = Instant::now();
    let activity = Arc::new(Activity::default());
    let tracked = Tracked {
        inner: stream,
        activity: activity.clone(),
        opened,
    };
    match tls {
        None => drive(&edge, tracked, peer, false, activity, opened, rx_stop).await,
        Some(acceptor) => {
            let within = Duration::from_millis(edge.config.header_timeout_ms);
            match tokio::time::timeout(within, acceptor.accept(tracked)).await {
                Ok(Ok(stream)) => drive(&edge, stream, peer, true, activity, opened, rx_stop).await,
                Ok(Err(e)) => {
                    edge.metrics.inc(|m| &m.tls_handshake_failures);
                    tracing::debug!("edge TLS handshake: {e}");
                }
                Err(_) => edge.metrics.inc(|m| &m.tls_handshake_failures),
            }
        }
    }
    edge.metrics.connections.decrement(1.0);
}

/// Serve one connection's requests (`https`: its answers carry
/// `Strict-Transport-Security`) until it closes, times out or the edge
/// stops.
async fn drive<S>(
    edge: &Arc<Edge>,
    stream: S,
    peer: Peer,
    https: bool,
    activity: Arc<Activity>,
    opened: Instant,
    mut rx_stop: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use std::sync::atomic::Ordering::Relaxed;
    let idle = Duration::from_millis(edge.config.idle_timeout_ms);
    let svc = {
        let (edge, activity) = (edge.clone(), activity.clone());
        service_fn(move |req| {
            let (edge, activity) = (edge.clone(), activity.clone());
            async move {
                activity.inflight.fetch_add(1, Relaxed);
                let mut resp = handle(edge, req, peer).await;
                if https {
                    resp.headers_mut().insert(
                        hyper::header::STRICT_TRANSPORT_SECURITY,
                        hyper::header::HeaderValue::from_static(crate::tls::HSTS),
                    );
                }
                activity.inflight.fetch_sub(1, Relaxed);
                activity
                    .last_ms
                    .store(opened.elapsed().as_millis() as u64 + 1, Relaxed);
                Ok::<_, Infallible>(resp)
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_millis(edge.config.header_timeout_ms))
        .serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    // hyper's header timer also runs while a keep-alive
                    // connection waits for its next request.
                    if e.is_timeout() && activity.idle() {
                        edge.metrics.inc(|m| &m.idle_timeouts);
                    } else if e.is_timeout() {
                        edge.metrics.inc(|m| &m.header_timeouts);
                    }
                    tracing::debug!("edge connection: {e}");
                }
                break;
            }
            _ = stopped(&mut rx_stop), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep(idle / 4), if !closing => {
                let last = activity.last_ms.load(Relaxed).max(activity.read_ms.load(Relaxed));
                let since = (opened.elapsed().as_millis() as u64 + 1).saturating_sub(last);
                if activity.idle() && since >= idle.as_millis() as u64 {
                    edge.metrics.inc(|m| &m.idle_timeouts);
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
            // A client that never reads its last answer does not keep the
            // connection (and its slot) after a graceful close.
            _ = tokio::time::sleep(CLOSE_GRACE), if closing => break,
        }
    }
}

/// How long a closing connection may take to finish its answer.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_its_limit_and_its_places_back() {
        let peers = Arc::new(Peers::new(2));
        let a = Peer::of("10.0.0.1".parse().unwrap());
        let b = Peer::of("10.0.0.2".parse().unwrap());
        let a1 = Peers::open(&peers, a).expect("first");
        let a2 = Peers::open(&peers, a).expect("second");
        assert!(Peers::open(&peers, a).is_none(), "a third from one address");
        let b1 = Peers::open(&peers, b).expect("another address has its own");
        drop(a1);
        let a3 = Peers::open(&peers, a).expect("a closed one's place");
        drop((a2, a3, b1));
        assert_eq!(peers.tracked(), 0, "no entry outlives its connections");
    }

    #[test]
    fn ipv6_counts_by_network_and_mapped_ipv4_as_ipv4() {
        let of = |s: &str| Peer::of(s.parse().unwrap());
        assert_eq!(of("2001:db8:1:2::1"), of("2001:db8:1:2:ffff::9"));
        assert_ne!(of("2001:db8:1:2::1"), of("2001:db8:1:3::1"));
        assert_eq!(of("::ffff:10.0.0.1"), of("10.0.0.1"));
        assert_ne!(of("127.0.0.1"), of("127.0.0.2"));
    }
}
