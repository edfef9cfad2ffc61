//! [`HttpClient`]: a small JSON client for the edge's API, used by
//! `seatfence ctl`, the benchmarks and the integration tests. Keeps
//! connections alive (one pool per client). Speaks HTTPS to `https://`
//! URLs, trusting the system's roots, or the file `SSL_CERT_FILE` names
//! (a cluster CA: `SSL_CERT_FILE=ca.pem seatfence ctl …`).

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio_rustls::rustls;

/// An answer: status, a few headers, and the body as JSON (`Value::Null`
/// when empty, a string when not JSON).
#[derive(Debug, Clone)]
pub struct HttpAnswer {
    pub status: StatusCode,
    pub body: Value,
    pub retry_after: Option<String>,
    pub epoch: Option<u64>,
    pub cache_control: Option<String>,
    /// Every header of the answer.
    pub headers: hyper::HeaderMap,
}

#[derive(Clone)]
pub struct HttpClient {
    /// `http://` URLs: the TCP connector alone, no TLS layer on the path.
    plain: Client<HttpConnector, Full<Bytes>>,
    /// `https://` URLs, made at the first one (loading the roots then).
    tls: std::sync::Arc<std::sync::OnceLock<Client<HttpsConnector<HttpConnector>, Full<Bytes>>>>,
    /// CA certificates trusted beyond the system's ([`HttpClient::trusting`]).
    extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    timeout: Duration,
}

impl Default for HttpClient {
    fn default() -> Self {
        HttpClient {
            plain: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(512)
                .build(tcp()),
            tls: Default::default(),
            extra_roots: Vec::new(),
            timeout: Duration::from_secs(30),
        }
    }
}

impl HttpClient {
    /// A client that also trusts the CA certificate(s) in the PEM file
    /// `ca` for HTTPS (a cluster CA that issued the edges' certificates).
    pub fn trusting(ca: &std::path::Path) -> anyhow::Result<HttpClient> {
        use rustls::pki_types::pem::PemObject;
        let mut extra = Vec::new();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)
            .with_context(|| format!("read {}", ca.display()))?
        {
            extra.push(cert.with_context(|| format!("{}: not PEM certificates", ca.display()))?);
        }
        // Checked now, so a bad file is an error here, not at a request.
        let mut roots = rustls::RootCertStore::empty();
        for cert in &extra {
            roots
                .add(cert.clone())
                .with_context(|| format!("{}: not a CA certificate", ca.display()))?;
        }
        Ok(HttpClient {
            extra_roots: extra,
            ..HttpClient::default()
        })
    }

    /// The client for `https://` URLs: the system's roots and ours.
    fn tls(&self) -> &Client<HttpsConnector<HttpConnector>, Full<Bytes>> {
        self.tls.get_or_init(|| {
            let mut roots = native_roots();
            for cert in &self.extra_roots {
                let _ = roots.add(cert.clone());
            }
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls_client(roots))
                .https_only()
                .enable_http1()
                .wrap_connector(tcp());
            Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(512)
                .build(https)
        })
    }
}

/// The TCP connector under both clients.
fn tcp() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.enforce_http(false);
    connector
}

/// The system's roots (or `SSL_CERT_FILE`'s); none found, none trusted.
fn native_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    roots
}

/// TLS for `https://` URLs, trusting `roots`.
fn tls_client(roots: rustls::RootCertStore) -> rustls::ClientConfig {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

impl HttpClient {
    /// Give up on an answer after `d` (default 30 s).
    pub fn with_timeout(mut self, d: Duration) -> HttpClient {
        self.timeout = d;
        self
    }

    /// Send a request; `body` is sent as JSON when given.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        idempotency_key: Option<&str>,
        body: Option<&Value>,
    ) -> anyhow::Result<HttpAnswer> {
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        self.send_raw(method, url, token, idempotency_key, Bytes::from(bytes))
            .await
    }

    /// Send raw bytes as the body (for malformed-input tests).
    pub async fn send_raw(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        idempotency_key: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<HttpAnswer> {
        self.send_with(method, url, token, idempotency_key, &[], body)
            .await
    }

    /// POST `body` as JSON with extra `headers` (e.g. `Admission-Ticket`).
    pub async fn post_with(
        &self,
        url: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> anyhow::Result<HttpAnswer> {
        let bytes = Bytes::from(body.to_string());
        self.send_with(Method::POST, url, token, None, headers, bytes)
            .await
    }

    async fn send_with(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        idempotency_key: Option<&str>,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> anyhow::Result<HttpAnswer> {
        let mut b = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            b = b.header(*name, *value);
        }
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        if let Some(k) = idempotency_key {
            b = b.header("idempotency-key", k);
        }
        if !body.is_empty() {
            b = b.header("content-type", "application/json");
        }
        let req = b.body(Full::new(body)).context("build request")?;
        let resp = tokio::time::timeout(self.timeout, async {
            if req.uri().scheme_str() == Some("https") {
                self.tls().request(req).await
            } else {
                self.plain.request(req).await
            }
        })
        .await
        .with_context(|| format!("{url}: no answer within {:?}", self.timeout))?
        .with_context(|| format!("send to {url}"))?;
        let status = resp.status();
        let h = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let retry_after = h("retry-after");
        let epoch = h("x-seatfence-epoch").and_then(|v| v.parse().ok());
        let cache_control = h("cache-control");
        let headers = resp.headers().clone();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .context("read body")?
            .to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Ok(HttpAnswer {
            status,
            body,
            retry_after,
            epoch,
            cache_control,
            headers,
        })
    }

    pub async fn get(&self, url: &str, token: Option<&str>) -> anyhow::Result<HttpAnswer> {
        self.send(Method::GET, url, token, None, None).await
    }

    pub async fn post(
        &self,
        url: &str,
        token: Option<&str>,
        key: Option<&str>,
        body: &Value,
    ) -> anyhow::Result<HttpAnswer> {
        self.send(Method::POST, url, token, key, Some(body)).await
    }
}

impl HttpAnswer {
    /// The value of header `name` ("" when absent or not text).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The stable error code of an error answer.
    pub fn code(&self) -> Option<&str> {
        self.body["error"]["code"].as_str()
    }
}
