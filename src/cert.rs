//! `seatfence cert`: create the cluster CA and the certificates nodes and
//! operators present on the gRPC port (README "Certificates and TLS").

use std::path::PathBuf;

use clap::Subcommand;
use seatfence_node::certs;

#[derive(Subcommand)]
pub enum CertCmd {
    /// Create the cluster CA: DIR/ca.pem and DIR/ca.key (keep the key off
    /// the nodes; it signs every certificate).
    Ca {
        /// Where the CA and every certificate live.
        #[arg(long)]
        dir: PathBuf,
    },
    /// A node's certificate: DIR/node-ID.pem and DIR/node-ID.key.
    Node {
        #[arg(long)]
        dir: PathBuf,
        /// The node's id (its config's node_id).
        #[arg(long)]
        id: u64,
        /// Days it stays valid.
        #[arg(long, default_value_t = certs::LEAF_DAYS)]
        days: i64,
    },
    /// An operator's client certificate (`seatfence ctl` on the gRPC port):
    /// DIR/operator-NAME.pem and DIR/operator-NAME.key.
    Operator {
        #[arg(long)]
        dir: PathBuf,
        /// Who holds it (A-Z a-z 0-9 - _ .).
        #[arg(long)]
        name: String,
        #[arg(long, default_value_t = certs::LEAF_DAYS)]
        days: i64,
    },
    /// An edge's HTTPS certificate (`[edge.tls]`): DIR/edge-NAME.pem and
    /// DIR/edge-NAME.key, for the addresses and names clients dial.
    Edge {
        #[arg(long)]
        dir: PathBuf,
        /// A name for the file (the host's, A-Z a-z 0-9 - _ .).
        #[arg(long)]
        name: String,
        /// An IP address or DNS name the certificate is for (repeat).
        #[arg(long = "host", required = true)]
        hosts: Vec<String>,
        #[arg(long, default_value_t = certs::LEAF_DAYS)]
        days: i64,
    },
}

pub fn run(cmd: CertCmd) -> anyhow::Result<()> {
    let written = match cmd {
        CertCmd::Ca { dir } => vec![certs::make_ca(&dir)?, dir.join("ca.key")],
        CertCmd::Node { dir, id, days } => files(certs::make_node(&dir, id, days)?),
        CertCmd::Operator { dir, name, days } => files(certs::make_operator(&dir, &name, days)?),
        CertCmd::Edge {
            dir,
            name,
            hosts,
            days,
        } => files(certs::make_edge(&dir, &name, &hosts, days)?),
    };
    for f in written {
        println!("{}", f.display());
    }
    Ok(())
}

fn files(t: seatfence_raft::network::tls::TlsConfig) -> Vec<PathBuf> {
    [t.cert, t.key].into_iter().flatten().collect()
}
