//! Address rewriting for node-to-node gRPC: the chaos harness puts a
//! proxy on every link between two nodes and tells each node (`[chaos]
//! via` in its config) to dial the proxy instead of the peer. Installed
//! once at start; without it every address is dialled as given.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::OnceLock;

static VIA: OnceLock<BTreeMap<String, String>> = OnceLock::new();
static SOURCE: OnceLock<IpAddr> = OnceLock::new();

/// Set the rewrite table and the local address to dial from (the first
/// call wins; later calls are ignored).
pub fn install(table: BTreeMap<String, String>, source: Option<IpAddr>) {
    if !table.is_empty() {
        let _ = VIA.set(table);
    }
    if let Some(ip) = source {
        let _ = SOURCE.set(ip);
    }
}

/// The local address outgoing node-to-node connections bind to, if set.
pub fn source_ip() -> Option<IpAddr> {
    SOURCE.get().copied()
}

/// The address to dial to reach `addr`.
pub fn resolve(addr: &str) -> &str {
    VIA.get()
        .and_then(|t| t.get(addr))
        .map(String::as_str)
        .unwrap_or(addr)
}
