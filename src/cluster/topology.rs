//! `topology.toml`: one file that describes a cluster's regions and hosts
//! (TiUP's topology file, for seatfence), read and checked by `seatfence
//! cluster init`. A topology that breaks the placement rules is refused
//! with the line and the reason ([`TopologyError`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Defaults for every host.
    #[serde(default)]
    pub cluster: Defaults,
    /// The regions, in order (the first host of each is its directory voter).
    #[serde(rename = "region", default)]
    pub regions: Vec<Spanned<RegionSpec>>,
    /// The hosts, in order (node ids follow it).
    #[serde(rename = "host", default)]
    pub hosts: Vec<Spanned<HostSpec>>,
    /// How the edges get their HTTPS certificates.
    #[serde(default)]
    pub edge: EdgeSpec,
    /// The payment gateway (absent: bookings answer 503 `payments_disabled`).
    pub payments: Option<PaymentsSpec>,
}

/// `[cluster]`: what every host gets unless it says otherwise.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Defaults {
    /// The gRPC port (node to node, operators' certificates).
    pub grpc_port: u16,
    /// The HTTPS edge's port.
    pub http_port: u16,
    /// Where a host's files go (`/etc/seatfence`, the package's).
    pub etc_dir: PathBuf,
    /// The node's data dir (under the unit's `StateDirectory`).
    pub data_dir: PathBuf,
    /// The operator certificate's name.
    pub operator: String,
}

impl Default for Defaults {
    fn default() -> Defaults {
        Defaults {
            grpc_port: 7100,
            http_port: 8443,
            etc_dir: "/etc/seatfence".into(),
            data_dir: "/var/lib/seatfence/data".into(),
            operator: "admin".into(),
        }
    }
}

/// `[[region]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionSpec {
    /// The region's name (`us-east`).
    pub name: Spanned<String>,
    /// What its events must survive: `zone` (3 replicas on 3 of its
    /// hosts, the default) or `region` (replicas spread over regions).
    #[serde(default)]
    pub survive: Survive,
}

/// A region's survival goal.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Survive {
    /// Losing one zone (host, rack, datacenter) of the region.
    #[default]
    Zone,
    /// Losing a whole region (events spread their replicas).
    Region,
}

/// `[[host]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// The host's name: its directory under `--out DIR/hosts/`.
    pub name: Spanned<String>,
    /// The IP address peers dial and the edge binds.
    pub address: Spanned<String>,
    /// Its region (a `[[region]]`).
    pub region: Spanned<String>,
    /// Its zone in the region (a rack, a datacenter), if known.
    pub zone: Option<Spanned<String>>,
    /// Overrides `[cluster] grpc_port`.
    pub grpc_port: Option<u16>,
    /// Overrides `[cluster] http_port`.
    pub http_port: Option<u16>,
    /// Whether it runs an HTTPS edge (default true).
    #[serde(default = "yes")]
    pub edge: bool,
    /// How clients reach its edge (default `https://address:http_port`).
    pub public_url: Option<String>,
    /// More names for its edge certificate (DNS names clients dial).
    #[serde(default)]
    pub names: Vec<String>,
}

fn yes() -> bool {
    true
}

/// `[edge]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeSpec {
    /// `issue` (default): `cluster init` issues each edge's certificate
    /// from the cluster CA; `own`: the operator puts `certs/edge.pem` and
    /// `certs/edge.key` on each host.
    #[serde(default)]
    pub certs: EdgeCerts,
}

/// Where the edges' certificates come from.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EdgeCerts {
    /// Issued by `cluster init` from the cluster CA.
    #[default]
    Issue,
    /// The operator's own (a public CA's), placed on each host.
    Own,
}

/// `[payments]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentsSpec {
    /// The gateway's base URL.
    pub gateway_url: String,
    /// The client id the gateway issued.
    #[serde(default = "default_client_id")]
    pub client_id: String,
    /// A file holding the client secret the gateway issued (relative to
    /// the topology file); absent: one is generated for the gateway.
    pub client_secret_file: Option<PathBuf>,
    /// A file holding the gateway's webhook secret (likewise).
    pub webhook_secret_file: Option<PathBuf>,
}

fn default_client_id() -> String {
    "seatfence".into()
}

/// A host with everything resolved: its ports, its place in the file.
#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    pub ip: IpAddr,
    pub region: String,
    pub zone: Option<String>,
    pub grpc_port: u16,
    pub http_port: u16,
    pub edge: bool,
    pub public_url: Option<String>,
    pub names: Vec<String>,
}

impl Host {
    /// `ip:port` (IPv6 in brackets).
    pub fn addr(&self, port: u16) -> String {
        std::net::SocketAddr::new(self.ip, port).to_string()
    }

    /// How clients reach its edge.
    pub fn edge_url(&self) -> String {
        self.public_url
            .clone()
            .unwrap_or_else(|| format!("https://{}", self.addr(self.http_port)))
    }
}

/// Why a topology is refused: the line it is about and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError {
    /// 1-based line in the file.
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for TopologyError {}

/// A checked topology: its defaults, regions in order, hosts in order.
#[derive(Debug)]
pub struct Checked {
    pub defaults: Defaults,
    pub regions: Vec<(String, Survive)>,
    pub hosts: Vec<Host>,
    pub edge: EdgeSpec,
    pub payments: Option<PaymentsSpec>,
}

/// Read and check `text` (a topology file's contents).
pub fn parse(text: &str) -> Result<Checked, TopologyError> {
    let t: Topology = toml::from_str(text).map_err(|e| TopologyError {
        line: e.span().map_or(1, |s| line_of(text, s.start)),
        reason: e.message().to_string(),
    })?;
    check(text, t)
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

fn check(text: &str, t: Topology) -> Result<Checked, TopologyError> {
    let at = |span: std::ops::Range<usize>, reason: String| TopologyError {
        line: line_of(text, span.start),
        reason,
    };
    if t.cluster.grpc_port == 0 || t.cluster.http_port == 0 {
        return Err(at(0..0, "[cluster] ports must be 1 to 65535".into()));
    }
    let mut regions: Vec<(String, Survive)> = Vec::new();
    for r in &t.regions {
        let name = r.get_ref().name.get_ref();
        if name.trim().is_empty() || name.chars().any(char::is_whitespace) {
            return Err(at(
                r.get_ref().name.span(),
                format!("region name {name:?} is blank or has spaces"),
            ));
        }
        if regions.iter().any(|(n, _)| n == name) {
            return Err(at(
                r.get_ref().name.span(),
                format!("region {name} is declared twice"),
            ));
        }
        regions.push((name.clone(), r.get_ref().survive));
    }
    if regions.len() < 3 {
        let line = t.regions.first().map_or(0..0, |r| r.span());
        return Err(at(
            line,
            format!(
                "{} region(s): the directory has one voter per region and needs at least 3 regions to survive losing one",
                regions.len()
            ),
        ));
    }
    let mut hosts: Vec<Host> = Vec::new();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut addrs: BTreeMap<(IpAddr, u16), String> = BTreeMap::new();
    for h in &t.hosts {
        let spec = h.get_ref();
        let name = spec.name.get_ref().clone();
        if let Err(e) = seatfence_node::certs::check_name("host", &name) {
            return Err(at(spec.name.span(), e.to_string()));
        }
        if let Some(first) = names.insert(name.clone(), line_of(text, spec.name.span().start)) {
            return Err(at(
                spec.name.span(),
                format!("host {name} is named twice (first at line {first})"),
            ));
        }
        let ip: IpAddr = spec.address.get_ref().parse().map_err(|_| {
            at(
                spec.address.span(),
                format!(
                    "host {name}: address {:?} is not an IP address",
                    spec.address.get_ref()
                ),
            )
        })?;
        if ip.is_unspecified() {
            return Err(at(
                spec.address.span(),
                format!("host {name}: address {ip} is not one peers can dial"),
            ));
        }
        let region = spec.region.get_ref().clone();
        if !regions.iter().any(|(r, _)| *r == region) {
            return Err(at(
                spec.region.span(),
                format!("host {name}: region {region} is not declared in a [[region]]"),
            ));
        }
        let grpc_port = spec.grpc_port.unwrap_or(t.cluster.grpc_port);
        let http_port = spec.http_port.unwrap_or(t.cluster.http_port);
        if grpc_port == 0 || http_port == 0 {
            return Err(at(
                h.span(),
                format!("host {name}: ports must be 1 to 65535"),
            ));
        }
        let mut ports = vec![grpc_port];
        if spec.edge {
            ports.push(http_port);
        }
        if spec.edge && grpc_port == http_port {
            return Err(at(
                h.span(),
                format!("host {name}: grpc_port and http_port are both {grpc_port}"),
            ));
        }
        for port in ports {
            if let Some(other) = addrs.insert((ip, port), name.clone()) {
                return Err(at(
                    spec.address.span(),
                    format!(
                        "duplicate address {}: hosts {other} and {name}",
                        std::net::SocketAddr::new(ip, port)
                    ),
                ));
            }
        }
        if let Some(u) = &spec.public_url {
            if !u.starts_with("https://") || u.len() <= "https://".len() {
                return Err(at(
                    h.span(),
                    format!("host {name}: public_url {u:?} must be an https:// URL"),
                ));
            }
        }
        hosts.push(Host {
            name,
            ip,
            region,
            zone: spec.zone.as_ref().map(|z| z.get_ref().clone()),
            grpc_port,
            http_port,
            edge: spec.edge,
            public_url: spec.public_url.clone(),
            names: spec.names.clone(),
        });
    }
    for (r, (name, survive)) in t.regions.iter().zip(&regions) {
        let of: Vec<&Host> = hosts.iter().filter(|h| h.region == *name).collect();
        let span = r.get_ref().name.span();
        if of.is_empty() {
            return Err(at(span, format!("region {name} has no host")));
        }
        if *survive == Survive::Zone && of.len() < 3 {
            return Err(at(
                span,
                format!(
                    "region {name} has {} host(s): zone survival keeps 3 replicas on 3 hosts of the region (add hosts, or say survive = \"region\")",
                    of.len()
                ),
            ));
        }
        let zones: BTreeSet<&str> = of.iter().filter_map(|h| h.zone.as_deref()).collect();
        if *survive == Survive::Zone && !zones.is_empty() && zones.len() < 3 {
            return Err(at(
                span,
                format!(
                    "region {name}'s hosts are in {} zone(s): zone survival needs them in at least 3 zones, or losing one zone loses a majority",
                    zones.len()
                ),
            ));
        }
    }
    Ok(Checked {
        defaults: t.cluster,
        regions,
        hosts,
        edge: t.edge,
        payments: t.payments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGIONS: &str = "[[region]]\nname = \"us-east\"\n[[region]]\nname = \"eu-west\"\n[[region]]\nname = \"ap-south\"\n";

    /// Three hosts in each region (zones a, b, c), then `extra`.
    fn nine(extra: &str) -> String {
        let mut s = String::from(REGIONS);
        for (r, region) in ["us-east", "eu-west", "ap-south"].iter().enumerate() {
            for i in 1..=3 {
                s.push_str(&format!(
                    "[[host]]\nname = \"h{r}{i}\"\naddress = \"10.0.{r}.{i}\"\nregion = \"{region}\"\nzone = \"{}\"\n",
                    ["a", "b", "c"][i - 1]
                ));
            }
        }
        s.push_str(extra);
        s
    }

    fn refused(text: &str) -> TopologyError {
        parse(text).expect_err("refused")
    }

    #[test]
    fn nine_hosts_in_three_regions_pass() {
        let t = parse(&nine("")).expect("a good topology");
        assert_eq!(t.hosts.len(), 9);
        assert_eq!(t.hosts[4].addr(t.hosts[4].grpc_port), "10.0.1.2:7100");
        assert_eq!(t.hosts[0].edge_url(), "https://10.0.0.1:8443");
    }

    #[test]
    fn a_zone_survival_region_with_two_hosts_is_refused_at_its_line() {
        let text = nine("").replace("[[host]]\nname = \"h23\"\naddress = \"10.0.2.3\"\nregion = \"ap-south\"\nzone = \"c\"\n", "");
        let e = refused(&text);
        assert_eq!(e.line, 6, "the region's line: {e}");
        assert!(
            e.reason
                .starts_with("region ap-south has 2 host(s): zone survival keeps 3 replicas"),
            "{e}"
        );
        // The same hosts pass when the region asks only for region survival.
        let text = text.replace(
            "name = \"ap-south\"\n",
            "name = \"ap-south\"\nsurvive = \"region\"\n",
        );
        parse(&text).expect("region survival needs one host");
    }

    #[test]
    fn a_duplicate_address_is_refused_naming_both_hosts() {
        let e = refused(&nine(
            "[[host]]\nname = \"x\"\naddress = \"10.0.1.2\"\nregion = \"us-east\"\n",
        ));
        assert_eq!(e.line, 54, "the address's line: {e}");
        assert_eq!(e.reason, "duplicate address 10.0.1.2:7100: hosts h12 and x");
        // Another port on the same address is another address.
        parse(&nine("[[host]]\nname = \"x\"\naddress = \"10.0.1.2\"\nregion = \"us-east\"\ngrpc_port = 7200\nhttp_port = 8444\n"))
            .expect("other ports");
    }

    #[test]
    fn a_host_named_twice_is_refused() {
        let e = refused(&nine(
            "[[host]]\nname = \"h11\"\naddress = \"10.0.9.9\"\nregion = \"us-east\"\n",
        ));
        assert_eq!(e.reason, "host h11 is named twice (first at line 23)");
    }

    #[test]
    fn an_undeclared_region_is_refused() {
        let e = refused(&nine(
            "[[host]]\nname = \"x\"\naddress = \"10.0.9.9\"\nregion = \"mars\"\n",
        ));
        assert_eq!(
            e.reason,
            "host x: region mars is not declared in a [[region]]"
        );
        assert_eq!(e.line, 55, "the region's line");
    }

    #[test]
    fn a_host_named_dot_dot_and_a_node_server_name_on_an_edge_are_refused() {
        let e = refused(&nine(
            "[[host]]\nname = \"..\"\naddress = \"10.0.9.9\"\nregion = \"us-east\"\n",
        ));
        assert!(e.reason.contains("not starting with ."), "{e}");
        let dir = tempfile::tempdir().unwrap();
        seatfence_node::certs::make_ca(dir.path()).unwrap();
        for name in ["seatfence-node", "node-3.seatfence-node", "*.example.com"] {
            let r = seatfence_node::certs::make_edge(dir.path(), "x", &[name.to_string()], 1);
            assert!(r.is_err(), "{name} on an edge certificate");
        }
    }

    #[test]
    fn fewer_than_three_regions_are_refused() {
        let e = refused("[[region]]\nname = \"us-east\"\n[[region]]\nname = \"eu-west\"\n");
        assert!(
            e.reason
                .starts_with("2 region(s): the directory has one voter per region"),
            "{e}"
        );
    }

    #[test]
    fn hosts_in_two_zones_are_refused() {
        let e = refused(&nine("").replace("zone = \"c\"", "zone = \"b\""));
        assert!(
            e.reason
                .starts_with("region us-east's hosts are in 2 zone(s)"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_address_and_an_unknown_field_are_refused_at_their_lines() {
        let e = refused(&nine(
            "[[host]]\nname = \"x\"\naddress = \"us1.example\"\nregion = \"us-east\"\n",
        ));
        assert_eq!(
            (e.line, e.reason.as_str()),
            (54, "host x: address \"us1.example\" is not an IP address")
        );
        let e = refused(&nine(
            "[[host]]\nname = \"x\"\nadress = \"10.0.9.9\"\nregion = \"us-east\"\n",
        ));
        assert_eq!(e.line, 54, "{e}");
        assert!(e.reason.contains("unknown field `adress`"), "{e}");
    }
}
