//! Mutual TLS on the node plane (both gRPC services): one cluster CA signs
//! every certificate; a certificate's identity is a URI in its subject
//! alternative names, `seatfence://node/<id>` for a node (which also names
//! `seatfence-node` as a DNS name, the name clients verify a server by) or
//! `seatfence://operator/<name>` for an operator's client. The server side
//! requires a client certificate from the same CA; [`super::gate`] decides
//! what each identity may call.
//!
//! The client side is a node's [`super::Dialer`]: every channel the node
//! dials (peers, leaders, seeds) presents the node's identity; a dialer
//! without one dials plaintext (`insecure = true`, or a test's in-process
//! server).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The DNS name every node certificate carries and every client verifies:
/// any node of the cluster may answer at any address (and through a drill's
/// proxy), so the name says "a node of this cluster", the URI which one.
pub const NODE_SERVER_NAME: &str = "seatfence-node";

/// The DNS name node `id`'s certificate also carries, which a peer dialling
/// that node (Raft traffic, pings) verifies: another member's certificate
/// cannot answer in its place.
pub fn node_server_name(id: u64) -> String {
    format!("node-{id}.{NODE_SERVER_NAME}")
}
const NODE_URI: &str = "seatfence://node/";
const OPERATOR_URI: &str = "seatfence://operator/";

/// How long a TLS handshake may take before the server drops the socket
/// (a client that connects and says nothing holds no task for long).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client waits for a server's side of the TLS handshake.
const CLIENT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// Who a certificate says its holder is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A node, by its id (never 0).
    Node(u64),
    /// An operator's client, by its name.
    Operator(String),
}

impl Principal {
    /// The URI naming this identity in a certificate.
    pub fn uri(&self) -> String {
        match self {
            Principal::Node(id) => format!("{NODE_URI}{id}"),
            Principal::Operator(name) => format!("{OPERATOR_URI}{name}"),
        }
    }

    /// The identity a DER certificate names; `None` if it names none or
    /// more than one (a certificate is one identity).
    pub fn of_der(der: &[u8]) -> Option<Principal> {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let san = cert.subject_alternative_name().ok()??;
        let mut found = None;
        for name in &san.value.general_names {
            let GeneralName::URI(uri) = name else {
                continue;
            };
            let id = if let Some(n) = uri.strip_prefix(NODE_URI) {
                Principal::Node(n.parse().ok().filter(|n| *n > 0)?)
            } else if let Some(name) = uri.strip_prefix(OPERATOR_URI) {
                Principal::Operator(name.to_string())
            } else {
                continue;
            };
            if found.replace(id).is_some() {
                return None;
            }
        }
        found
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Node(id) => write!(f, "node {id}"),
            Principal::Operator(name) => write!(f, "operator {name:?}"),
        }
    }
}

/// `[tls]` of a node's config, and the files `seatfence ctl` reads: PEM
/// paths of the cluster CA, this holder's certificate and its private key.
/// `insecure = true` instead turns TLS off (every start says so in the log).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Turn TLS off (plaintext); then `ca`, `cert` and `key` must be unset.
    #[serde(default)]
    pub insecure: bool,
    /// Path of the cluster CA's certificate (PEM).
    pub ca: Option<PathBuf>,
    /// Path of this holder's certificate (PEM).
    pub cert: Option<PathBuf>,
    /// Path of this holder's private key (PEM).
    pub key: Option<PathBuf>,
}

impl TlsConfig {
    /// The three files of `dir` that `seatfence cert` writes for `name`
    /// (`node-7`, `operator-alice`).
    pub fn in_dir(dir: &Path, name: &str) -> TlsConfig {
        TlsConfig {
            insecure: false,
            ca: Some(dir.join("ca.pem")),
            cert: Some(dir.join(format!("{name}.pem"))),
            key: Some(dir.join(format!("{name}.key"))),
        }
    }

    /// A config that says what it means: either `insecure = true` alone or
    /// all three files.
    pub fn check(&self) -> Result<(), String> {
        match (self.insecure, &self.ca, &self.cert, &self.key) {
            (true, None, None, None) => Ok(()),
            (true, ..) => Err("insecure = true turns TLS off: drop ca, cert and key".into()),
            (false, Some(_), Some(_), Some(_)) => Ok(()),
            _ => Err(
                "set ca, cert and key (PEM files; `seatfence cert` makes them), \
                      or insecure = true for plaintext"
                    .into(),
            ),
        }
    }

    /// The loaded files, or `None` for `insecure = true`.
    pub fn load(&self) -> anyhow::Result<Option<Tls>> {
        self.check().map_err(anyhow::Error::msg)?;
        match (&self.ca, &self.cert, &self.key) {
            (Some(ca), Some(cert), Some(key)) if !self.insecure => {
                Tls::load(ca, cert, key).map(Some)
            }
            _ => Ok(None),
        }
    }
}

/// A holder's loaded TLS material.
#[derive(Clone)]
pub struct Tls {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
    identity: Principal,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        write!(f, "Tls({})", self.identity)
    }
}

impl Tls {
    /// Read the PEM files at `ca`, `cert` and `key` ([`Tls::from_pem`]).
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> anyhow::Result<Tls> {
        let read = |p: &Path, what: &str| {
            std::fs::read(p).map_err(|e| anyhow::anyhow!("read {what} {}: {e}", p.display()))
        };
        Tls::from_pem(
            read(ca, "CA certificate")?,
            read(cert, "certificate")?,
            read(key, "private key")?,
        )
        .map_err(|e| anyhow::anyhow!("{}: {e}", cert.display()))
    }

    /// Material from PEM bytes: `cert` must name exactly one seatfence identity and `ca`
    /// hold a certificate (the key is not checked here).
    pub fn from_pem(ca: Vec<u8>, cert: Vec<u8>, key: Vec<u8>) -> anyhow::Result<Tls> {
        let der = first_der(&cert).ok_or_else(|| anyhow::anyhow!("no PEM certificate"))?;
        let identity = Principal::of_der(&der).ok_or_else(|| {
            anyhow::anyhow!(
                "the certificate names no seatfence identity (seatfence cert makes them)"
            )
        })?;
        first_der(&ca).ok_or_else(|| anyhow::anyhow!("no PEM CA certificate"))?;
        Ok(Tls {
            ca,
            cert,
            key,
            identity,
        })
    }

    /// Who this material says its holder is.
    pub fn identity(&self) -> &Principal {
        &self.identity
    }

    /// Whether the certificate names DNS name `name` (a node's own
    /// [`node_server_name`], which its peers verify).
    pub fn names_dns(&self, name: &str) -> bool {
        let Some(der) = first_der(&self.cert) else {
            return false;
        };
        let Ok((_, cert)) = X509Certificate::from_der(&der) else {
            return false;
        };
        let Ok(Some(san)) = cert.subject_alternative_name() else {
            return false;
        };
        san.value
            .general_names
            .iter()
            .any(|n| matches!(n, GeneralName::DNSName(d) if *d == name))
    }

    /// A server that presents this certificate and requires a client
    /// certificate from the same CA.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
            .client_auth_optional(false)
            .timeout(HANDSHAKE_TIMEOUT)
    }

    /// A client that presents this certificate and accepts only a node of
    /// the same CA as the server.
    pub fn client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
            .domain_name(NODE_SERVER_NAME)
            .assume_http2(true)
            // A peer that accepts the TCP connection but never answers (a
            // stopped process: the kernel still completes the connect)
            // must not hold a call forever.
            .timeout(CLIENT_HANDSHAKE_TIMEOUT)
    }
}

/// The DER bytes of the first certificate in a PEM text.
fn first_der(pem: &[u8]) -> Option<Vec<u8>> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    (pem.label == "CERTIFICATE").then_some(pem.contents)
}
