//! HTTPS at the edge (`[edge.tls]`): the server side of rustls with the
//! ring provider (the node plane's), TLS 1.2 and 1.3, HTTP/1.1 by ALPN. An
//! edge with `[edge.tls]` serves only HTTPS: a client that speaks plain
//! HTTP fails the handshake and is closed (`conn.rs`), and every answer
//! carries `Strict-Transport-Security`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::EdgeTls;

/// What HTTPS answers send: browsers use only HTTPS for this host for a
/// year (subdomains are the operator's to decide, so not included).
pub const HSTS: &str = "max-age=31536000";

/// The edge's TLS acceptor from `[edge.tls]`'s certificate chain and key
/// (PEM files, read at start; an error names the file).
pub fn acceptor(tls: &EdgeTls) -> anyhow::Result<TlsAcceptor> {
    let chain = read_chain(&tls.cert)?;
    let key = PrivateKeyDer::from_pem_file(&tls.key).with_context(|| {
        format!(
            "[edge.tls] key {}: not a PEM private key",
            tls.key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .with_context(|| {
            format!(
                "[edge.tls]: {} and {} are not a certificate and its key",
                tls.cert.display(),
                tls.key.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read_chain(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("[edge.tls] cert {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("[edge.tls] cert {}: not PEM certificates", path.display()))?;
    if chain.is_empty() {
        anyhow::bail!("[edge.tls] cert {}: no certificate in it", path.display());
    }
    Ok(chain)
}
