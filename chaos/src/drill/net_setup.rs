//! The drill's network set-up: which partition mechanism runs here, and
//! starting it (namespaces, loopback iptables rules or link proxies), with
//! the node configs changed to match.

use std::path::PathBuf;
use std::sync::Arc;

use crate::net::{IptablesNet, NetnsNet, Partitioner};
use seatfence_node::NodeConfig;
use seatfence_testkit::Geo;

use super::NetChoice;

/// The partition mechanism: `auto` takes the first that works here of
/// namespaces, loopback iptables and the proxy; a named one must work.
/// Also why each of the others was passed over (recorded in the run).
pub(super) fn choose_mechanism(
    choice: NetChoice,
    global: bool,
) -> anyhow::Result<(NetChoice, Vec<(String, String)>)> {
    let mut unavailable = Vec::new();
    let mech = match choice {
        // Only the proxies can put distance between the regions.
        NetChoice::Auto if global => {
            unavailable.push((
                "netns".to_string(),
                "not chosen (--global needs the link proxies' latency)".to_string(),
            ));
            NetChoice::Proxy
        }
        NetChoice::Netns | NetChoice::Iptables if global => {
            anyhow::bail!("--global needs --net proxy or auto: only the link proxies add latency")
        }
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
/// dialing through the proxies (as far apart as `geo` says).
pub(super) async fn start_partitioner(
    configs: &mut [(PathBuf, NodeConfig)],
    mech: NetChoice,
    netns: Option<Arc<NetnsNet>>,
    ids: &[u64],
    geo: Option<&Geo>,
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
        Arc::new(seatfence_testkit::start_links(configs, geo)?)
    };
    Ok(net)
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
