//! `seatfence cert`: the cluster CA and the certificates it signs (rcgen).
//! Every file lives in one directory: `ca.pem`/`ca.key`, `node-<id>.pem`/
//! `.key`, `operator-<name>.pem`/`.key`. Keys are written owner-only; no
//! file is overwritten (a new CA would lock every existing node out).
//!
//! A node certificate names `seatfence://node/<id>` (who) and the DNS name
//! `seatfence-node` (what clients verify a server by), and serves as both
//! server and client. An operator certificate names
//! `seatfence://operator/<name>` and is a client certificate only.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use seatfence_raft::network::tls::{node_server_name, Principal, TlsConfig, NODE_SERVER_NAME};

/// How long a new CA stays valid.
pub const CA_DAYS: i64 = 3650;
/// How long a new node or operator certificate stays valid by default.
pub const LEAF_DAYS: i64 = 365;

/// Create `dir/ca.pem` and `dir/ca.key`.
pub fn make_ca(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name("seatfence cluster CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    valid_for(&mut params, CA_DAYS);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    write_pair(dir, "ca", &cert.pem(), &key.serialize_pem())?;
    Ok(dir.join("ca.pem"))
}

/// Create `dir/node-<id>.pem` and `.key`, signed by the CA in `dir`.
pub fn make_node(dir: &Path, id: u64, days: i64) -> anyhow::Result<TlsConfig> {
    if id == 0 {
        bail!("node ids start at 1");
    }
    let who = Principal::Node(id);
    let mut params = leaf(&who, days)?;
    params
        .subject_alt_names
        .push(SanType::DnsName(NODE_SERVER_NAME.try_into()?));
    // What a peer dialling this node verifies (`tls::endpoint_for_node`).
    params
        .subject_alt_names
        .push(SanType::DnsName(node_server_name(id).try_into()?));
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    sign(dir, &format!("node-{id}"), params)
}

/// Create `dir/operator-<name>.pem` and `.key`, signed by the CA in `dir`.
pub fn make_operator(dir: &Path, operator: &str, days: i64) -> anyhow::Result<TlsConfig> {
    check_name("operator", operator)?;
    let mut params = leaf(&Principal::Operator(operator.into()), days)?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    sign(dir, &format!("operator-{operator}"), params)
}

/// Create `dir/edge-<name>.pem` and `.key`: an HTTPS server certificate
/// for an edge (`[edge.tls]`), for `hosts` (IP addresses or DNS names, as
/// clients dial it), signed by the CA in `dir`. It names no principal, so
/// a node's gRPC port refuses it as a client.
pub fn make_edge(dir: &Path, edge: &str, hosts: &[String], days: i64) -> anyhow::Result<TlsConfig> {
    check_name("edge", edge)?;
    if hosts.is_empty() {
        bail!("an edge certificate needs at least one --host (the address or name clients dial)");
    }
    if !(1..=CA_DAYS).contains(&days) {
        bail!("--days must be 1 to {CA_DAYS} (got {days})");
    }
    // A node's server name on an edge certificate would let whoever holds
    // the edge's key answer as a node to node-plane clients.
    if let Some(h) = hosts.iter().find(|h| {
        h.contains('*')
            || h.to_ascii_lowercase()
                .trim_end_matches('.')
                .ends_with(NODE_SERVER_NAME)
    }) {
        bail!("{h:?} cannot be on an edge certificate: wildcards and the node plane's server names are refused");
    }
    let mut params = CertificateParams::default();
    params.distinguished_name = name(&format!("seatfence edge {edge}"));
    for h in hosts {
        params
            .subject_alt_names
            .push(match h.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => {
                    SanType::DnsName(h.as_str().try_into().with_context(|| {
                        format!("{h:?} is neither an IP address nor a DNS name")
                    })?)
                }
            });
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    valid_for(&mut params, days);
    sign(dir, &format!("edge-{edge}"), params)
}

/// `name` is 1 to 64 of `A-Z a-z 0-9 - _ .` (what certificate file names
/// and host names may be), else an error naming `what`.
pub fn check_name(what: &str, name: &str) -> anyhow::Result<()> {
    // Never `.` or `..` (a file or directory name): not starting with a dot.
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !ok {
        bail!("{what} names are 1 to 64 of A-Z a-z 0-9 - _ . not starting with . (got {name:?})");
    }
    Ok(())
}

/// A CA in `dir` (made unless there is one) and a certificate for each
/// node and for one operator: what a local cluster (demo, tests, drills)
/// runs with.
pub fn make_cluster(dir: &Path, nodes: &[u64], operator: &str) -> anyhow::Result<()> {
    if !dir.join("ca.pem").exists() {
        make_ca(dir)?;
    }
    for id in nodes {
        if !dir.join(format!("node-{id}.pem")).exists() {
            make_node(dir, *id, LEAF_DAYS)?;
        }
    }
    if !dir.join(format!("operator-{operator}.pem")).exists() {
        make_operator(dir, operator, LEAF_DAYS)?;
    }
    Ok(())
}

fn leaf(who: &Principal, days: i64) -> anyhow::Result<CertificateParams> {
    if !(1..=CA_DAYS).contains(&days) {
        bail!("--days must be 1 to {CA_DAYS} (got {days})");
    }
    let mut params = CertificateParams::default();
    params.distinguished_name = name(&who.to_string());
    params.subject_alt_names = vec![SanType::URI(who.uri().try_into()?)];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    valid_for(&mut params, days);
    Ok(params)
}

fn sign(dir: &Path, stem: &str, params: CertificateParams) -> anyhow::Result<TlsConfig> {
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f)).with_context(|| {
            format!(
                "read {}: create the CA first (seatfence cert ca --dir {})",
                dir.join(f).display(),
                dir.display()
            )
        })
    };
    let ca_key = KeyPair::from_pem(&read("ca.key")?).context("ca.key")?;
    let issuer = Issuer::from_ca_cert_pem(&read("ca.pem")?, ca_key).context("ca.pem")?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    write_pair(dir, stem, &cert.pem(), &key.serialize_pem())?;
    Ok(TlsConfig::in_dir(dir, stem))
}

fn name(common: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "seatfence");
    dn.push(DnType::CommonName, common);
    dn
}

fn valid_for(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    // An hour of slack for clocks a little behind the CA's.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

/// Write `stem.pem` (readable) and `stem.key` (owner only), never over an
/// existing file.
fn write_pair(dir: &Path, stem: &str, cert: &str, key: &str) -> anyhow::Result<()> {
    for (file, text, mode) in [
        (format!("{stem}.key"), key, 0o600),
        (format!("{stem}.pem"), cert, 0o644),
    ] {
        let path = dir.join(&file);
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, mode);
        let mut f = opts.open(&path).with_context(|| {
            format!(
                "create {} (an existing file is never overwritten)",
                path.display()
            )
        })?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    Ok(())
}
