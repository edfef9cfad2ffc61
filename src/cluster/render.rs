//! A host's `node.toml` as `cluster init` writes it: every path under the
//! host's config dir (`/etc/seatfence`), every secret a `file:` reference.
//! The package's `/etc/seatfence/node.toml.example` is this text for an
//! example host ([`example`]; a test keeps the two the same).

use std::fmt::Write;

use seatfence_node::config::Peer;

use super::topology::{Defaults, Host, PaymentsSpec};

/// The secret files' names, under `secrets/`.
pub const JWT_SECRET: &str = "jwt-secret";
pub const CLIENT_SECRET: &str = "gateway-client-secret";
pub const WEBHOOK_SECRET: &str = "webhook-secret";

/// What one host's config is made of.
pub struct HostFiles<'a> {
    pub host: &'a Host,
    pub id: u64,
    pub defaults: &'a Defaults,
    pub members: &'a [Peer],
    pub payments: Option<&'a PaymentsSpec>,
}

/// The host's `node.toml`.
pub fn node_toml(f: &HostFiles) -> String {
    let h = f.host;
    let etc = f.defaults.etc_dir.display();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Written by `seatfence cluster init` for host {} (README \"Deploying on hosts\").",
        h.name
    );
    let _ = writeln!(
        s,
        "# Every path is under {etc}; secrets are files there (0600)."
    );
    let _ = writeln!(s, "node_id = {}", f.id);
    let _ = writeln!(s, "region = {:?}", h.region);
    let _ = writeln!(s, "grpc_addr = {:?}", h.addr(h.grpc_port));
    let _ = writeln!(
        s,
        "data_dir = {:?}",
        f.defaults.data_dir.display().to_string()
    );
    let _ = writeln!(
        s,
        "\n# The directory's voters (one per region): every node lists the same ones."
    );
    for p in f.members {
        let _ = writeln!(
            s,
            "[[initial_members]]\nid = {}\nregion = {:?}\ngrpc_addr = {:?}",
            p.id, p.region, p.grpc_addr
        );
    }
    let _ = writeln!(
        s,
        "\n[tls]                        # mutual TLS on the gRPC port"
    );
    let _ = writeln!(s, "ca = \"{etc}/certs/ca.pem\"");
    let _ = writeln!(s, "cert = \"{etc}/certs/node-{}.pem\"", f.id);
    let _ = writeln!(s, "key = \"{etc}/certs/node-{}.key\"", f.id);
    if h.edge {
        let _ = writeln!(
            s,
            "\n[edge]                       # the HTTPS edge buyers and operators call"
        );
        let _ = writeln!(s, "http_addr = {:?}", h.addr(h.http_port));
        let _ = writeln!(s, "public_url = {:?}", h.edge_url());
        let _ = writeln!(s, "jwt_secret = \"file:{etc}/secrets/{JWT_SECRET}\"");
        let _ = writeln!(
            s,
            "\n[edge.tls]                   # HTTPS only; Strict-Transport-Security"
        );
        let _ = writeln!(s, "cert = \"{etc}/certs/edge.pem\"");
        let _ = writeln!(s, "key = \"{etc}/certs/edge.key\"");
    }
    if let Some(p) = f.payments {
        let _ = writeln!(
            s,
            "\n[payments]                   # the gateway; its callbacks reach public_url"
        );
        let _ = writeln!(s, "gateway_url = {:?}", p.gateway_url);
        let _ = writeln!(s, "client_id = {:?}", p.client_id);
        let _ = writeln!(s, "client_secret = \"file:{etc}/secrets/{CLIENT_SECRET}\"");
        let _ = writeln!(
            s,
            "webhook_secret = \"file:{etc}/secrets/{WEBHOOK_SECRET}\""
        );
    }
    let _ = writeln!(
        s,
        "\n# [raft], [moves] and more [edge] settings: README \"Running a node\"."
    );
    s
}

/// The package's config template: an example host's `node.toml`.
pub fn example() -> String {
    let host = Host {
        name: "us1".into(),
        ip: "10.0.1.1".parse().expect("an address"),
        region: "us-east".into(),
        zone: None,
        grpc_port: 7100,
        http_port: 8443,
        edge: true,
        public_url: None,
        names: vec![],
    };
    let members: Vec<Peer> = [
        (1, "us-east", "10.0.1.1"),
        (4, "eu-west", "10.0.2.1"),
        (7, "ap-south", "10.0.3.1"),
    ]
    .into_iter()
    .map(|(id, region, ip)| Peer {
        id,
        region: region.into(),
        grpc_addr: format!("{ip}:7100"),
    })
    .collect();
    let payments = PaymentsSpec {
        gateway_url: "https://pay.example.com".into(),
        client_id: "seatfence".into(),
        client_secret_file: None,
        webhook_secret_file: None,
    };
    let mut text = String::from(
        "# /etc/seatfence/node.toml.example: the template `seatfence cluster init` fills in\n\
         # for each host of a topology (README \"Deploying on hosts\"). Copy the generated\n\
         # node.toml here as /etc/seatfence/node.toml, never this file.\n",
    );
    text.push_str(&node_toml(&HostFiles {
        host: &host,
        id: 1,
        defaults: &Defaults::default(),
        members: &members,
        payments: Some(&payments),
    }));
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_packaged_template_is_what_cluster_init_writes() {
        let packaged = include_str!("../../packaging/node.toml.example");
        assert_eq!(
            packaged,
            super::example(),
            "packaging/node.toml.example drifted: regenerate it with \
             `cargo test -p seatfence --lib cluster::render -- --ignored`"
        );
    }

    #[test]
    #[ignore = "writes packaging/node.toml.example (run by hand after changing the template)"]
    fn write_the_packaged_template() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/node.toml.example");
        std::fs::write(path, super::example()).expect("write the template");
    }
}
