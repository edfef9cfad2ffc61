//! The drill's network set-up: which partition mechanism runs here, and
//! starting it (namespaces, loopback iptables rules or link proxies), with
//! the node configs changed to match.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::net::{IptablesNet, NetnsNet, Partitioner, ProxyNet};
use seatfence_node::NodeConfig;

use super::NetChoice;

/// The partition mechanism: `auto` takes the first that works here of
/// namespaces, loopback iptables and the proxy; a named one must work.
/// Also why each of the others was passed over (recorded in the run).
pub(super) fn choose_mechanism(
    choice: NetChoice,
) -> anyhow::Result<(NetChoice, Vec<(String, String)>)> {
    let mut unavailable = Vec::new();
    let mech = match choice {
        NetChoice::Proxy => NetChoice::Proxy,
        NetChoice::Netns => {
            NetnsNet::probe().map_err(|why| anyhow::anyhow!("--net netns: {why}"))?;
            NetChoice::Netns
        }
        NetChoice::Iptables => {
            IptablesNet::probe().map_err(|why| anyhow::anyhow!("--net iptables: {why}"))?;
            NetChoice::Iptables
        }
        NetChoice::Auto => match NetnsNet::probe() {
            Ok(()) => NetChoice::Netns,
            Err(why) => {
                unavailable.push(("netns".to_string(), why));
                match IptablesNet::probe() {
                    Ok(()) => NetChoice::Iptables,
                    Err(why) => {
                        unavailable.push(("iptables".to_string(), why));
                        NetChoice::Proxy
                    }
                }
            }
        },
    };
    if choice != NetChoice::Auto {
        for (name, m) in [
            ("netns", NetChoice::Netns),
            ("iptables", NetChoice::Iptables),
        ] {
            if m != mech {
                unavailable.push((
                    name.to_string(),
                    format!("not chosen (--net {:?})", choice).to_lowercase(),
                ));
            }
        }
    }
    Ok((mech, unavailable))
}

/// The partition mechanism, running: the namespaces (already started, as
/// `netns`), loopback iptables rules over the nodes `ids`, or a proxy per
/// link. The configs change to match: each node on its own address, or
/// dialing through the proxies.
pub(super) async fn start_partitioner(
    configs: &mut [(PathBuf, NodeConfig)],
    mech: NetChoice,
    netns: Option<Arc<NetnsNet>>,
    ids: &[u64],
) -> anyhow::Result<Arc<dyn Partitioner>> {
    let net: Arc<dyn Partitioner> = if let Some(ns) = netns {
        for (_, c) in configs.iter_mut() {
            give_own_address(c, NetnsNet::ip_of, false);
        }
        ns
    } else if mech == NetChoice::Iptables {
        for (_, c) in configs.iter_mut() {
            give_own_address(c, IptablesNet::ip_of, true);
        }
        Arc::new(IptablesNet::start(ids)?)
    } else {
        Arc::new(start_proxies(configs).await?)
    };
    Ok(net)
}

/// A proxy per link, on ports no node was given; each node dials its peers
/// through them.
async fn start_proxies(configs: &mut [(PathBuf, NodeConfig)]) -> anyhow::Result<ProxyNet> {
    let addrs: BTreeMap<u64, String> = configs
        .iter()
        .map(|(_, c)| (c.node_id, c.grpc_addr.clone()))
        .collect();
    let port = |a: &str| a.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
    let avoid: BTreeSet<u16> = configs
        .iter()
        .flat_map(|(_, c)| {
            [
                Some(c.grpc_addr.as_str()),
                c.edge.as_ref().map(|e| e.http_addr.as_str()),
            ]
        })
        .flatten()
        .filter_map(port)
        .collect();
    let proxy = ProxyNet::start(&addrs, &avoid).await?;
    for (_, c) in configs.iter_mut() {
        if let Some(h) = c.chaos.as_mut() {
            h.via = proxy.via_for(c.node_id);
        }
    }
    Ok(proxy)
}

/// Node `id` listens (gRPC and HTTP) on its own address `ip_of(id)` (and
/// with `bind_source`, dials from it), so rules can tell the nodes apart.
fn give_own_address(c: &mut NodeConfig, ip_of: fn(u64) -> String, bind_source: bool) {
    let own = |addr: &str, id: u64| -> String {
        let port = addr.rsplit(':').next().unwrap_or("0");
        format!("{}:{port}", ip_of(id))
    };
    c.grpc_addr = own(&c.grpc_addr, c.node_id);
    for p in &mut c.initial_members {
        p.grpc_addr = own(&p.grpc_addr, p.id);
    }
    if let Some(e) = c.edge.as_mut() {
        e.http_addr = own(&e.http_addr, c.node_id);
    }
    if let Some(h) = c.chaos.as_mut().filter(|_| bind_source) {
        h.source_ip = ip_of(c.node_id).parse().ok();
    }
}
