//! [`Dialer`]: how a node (or a tool) dials the node plane — its client TLS
//! identity, and, in drills, the address rewrites that send each link
//! through the harness's proxy (`[chaos] via`) and the local address to dial
//! from. A value each node owns (its peer pool and its cluster clients carry
//! a clone), not process state: several nodes in one process (the
//! in-process tests) each dial as themselves.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{ClientTlsConfig, Endpoint};

use super::tls::{node_server_name, Tls};

/// How channels to nodes are dialled. Cheap to clone.
#[derive(Clone, Default)]
pub struct Dialer {
    /// The identity every channel presents (and the CA it trusts); `None`:
    /// plaintext (`insecure = true`, or a test's in-process server).
    tls: Option<Arc<ClientTlsConfig>>,
    /// Drills only: the address to dial in place of a node's own.
    via: Arc<BTreeMap<String, String>>,
    /// Drills only: the local address outgoing channels bind to.
    source: Option<IpAddr>,
}

impl Dialer {
    /// A dialer presenting `tls` (`None`: plaintext).
    pub fn new(tls: Option<&Tls>) -> Dialer {
        Dialer {
            tls: tls.map(|t| Arc::new(t.client())),
            ..Dialer::default()
        }
    }

    /// The same dialer, presenting `tls` instead (a client built by hand).
    pub fn with_client_tls(mut self, tls: ClientTlsConfig) -> Dialer {
        self.tls = Some(Arc::new(tls));
        self
    }

    /// The same dialer, dialling `via[addr]` in place of `addr` and binding
    /// to `source` (a drill's proxies and its per-node loopback address).
    pub fn with_via(mut self, via: BTreeMap<String, String>, source: Option<IpAddr>) -> Dialer {
        self.via = Arc::new(via);
        self.source = source;
        self
    }

    /// Whether channels present a TLS identity.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// An endpoint for any node of the cluster at `addr`.
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, String> {
        self.endpoint_with(addr, self.tls.as_deref().cloned())
    }

    /// An endpoint for node `id` at `addr`: over TLS, the server must
    /// present node `id`'s certificate ([`node_server_name`]), not just any
    /// node's.
    pub fn endpoint_for_node(&self, addr: &str, id: u64) -> Result<Endpoint, String> {
        let tls = self
            .tls
            .as_deref()
            .map(|t| t.clone().domain_name(node_server_name(id)));
        self.endpoint_with(addr, tls)
    }

    fn endpoint_with(&self, addr: &str, tls: Option<ClientTlsConfig>) -> Result<Endpoint, String> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let target = self.via.get(addr).map(String::as_str).unwrap_or(addr);
        let ep = Endpoint::from_shared(format!("{scheme}://{target}"))
            .map_err(|e| format!("bad address {addr}: {e}"))?
            .local_address(self.source)
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true);
        match tls {
            Some(t) => ep.tls_config(t).map_err(|e| format!("TLS for {addr}: {e}")),
            None => Ok(ep),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewritten_address_is_dialled_in_place_of_the_nodes_own() {
        let via = BTreeMap::from([("127.0.0.1:7001".to_string(), "127.0.0.1:9001".to_string())]);
        let d = Dialer::default().with_via(via, None);
        let ep = d.endpoint("127.0.0.1:7001").unwrap();
        assert_eq!(ep.uri().to_string(), "http://127.0.0.1:9001/");
        let ep = d.endpoint("127.0.0.1:7002").unwrap();
        assert_eq!(ep.uri().to_string(), "http://127.0.0.1:7002/");
        // Another dialer in the same process is not affected.
        let plain = Dialer::default().endpoint("127.0.0.1:7001").unwrap();
        assert_eq!(plain.uri().to_string(), "http://127.0.0.1:7001/");
    }
}
