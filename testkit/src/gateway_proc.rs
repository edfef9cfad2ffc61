//! [`GatewayProc`]: the mock payment gateway (`seatfence gateway`) as its
//! own process, for the demo, tests, drills and benchmarks.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use seatfence_api::config::PaymentsConfig;

use crate::procs::{free_ports, started};

/// The mock gateway (`seatfence gateway`) as a separate process on a
/// free port. Dropping it SIGKILLs it.
pub struct GatewayProc {
    child: Option<Child>,
    pub url: String,
    pub webhook_secret: String,
    pub client_id: String,
    pub client_secret: String,
    signing_secret: String,
    host: String,
    port: u16,
    grants_per_hour: u32,
    bin: PathBuf,
    log_path: PathBuf,
    /// A CA the mock trusts for HTTPS webhooks (`SSL_CERT_FILE`).
    trust: Option<PathBuf>,
}

impl GatewayProc {
    /// Start the mock with fresh secrets, logging to `dir/gateway.log`,
    /// and wait until it answers. If `dir/gateway.json` exists (an earlier
    /// start), the same port and secrets are used again.
    pub fn start(bin: &Path, dir: &Path, grants_per_hour: u32) -> anyhow::Result<GatewayProc> {
        Self::start_on(bin, dir, grants_per_hour, "127.0.0.1")
    }

    /// Like [`start`](Self::start), listening on `host` (an address the
    /// nodes reach, such as the host's end of a namespace bridge).
    pub fn start_on(
        bin: &Path,
        dir: &Path,
        grants_per_hour: u32,
        host: &str,
    ) -> anyhow::Result<GatewayProc> {
        Self::start_trusting(bin, dir, grants_per_hour, host, None)
    }

    /// Like [`start_on`](Self::start_on), the mock trusting the CA
    /// certificate in `ca` for its webhooks to HTTPS edges (`[edge.tls]`).
    pub fn start_trusting(
        bin: &Path,
        dir: &Path,
        grants_per_hour: u32,
        host: &str,
        ca: Option<PathBuf>,
    ) -> anyhow::Result<GatewayProc> {
        fs::create_dir_all(dir)?;
        let saved = dir.join("gateway.json");
        let (port, signing, webhook, client) = match fs::read_to_string(&saved) {
            Ok(text) => {
                serde_json::from_str(&text).with_context(|| format!("parse {}", saved.display()))?
            }
            Err(_) => {
                let secret = || format!("{:032x}", rand::random::<u128>());
                let s = (free_ports(1)?[0], secret(), secret(), secret());
                fs::write(&saved, serde_json::to_string(&s)?)?;
                s
            }
        };
        let mut g = GatewayProc {
            child: None,
            url: format!("http://{host}:{port}"),
            host: host.to_string(),
            webhook_secret: webhook,
            client_id: "seatfence".into(),
            client_secret: client,
            signing_secret: signing,
            port,
            grants_per_hour,
            bin: bin.to_path_buf(),
            log_path: dir.join("gateway.log"),
            trust: ca,
        };
        g.spawn()?;
        Ok(g)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("open {}", self.log_path.display()))?;
        let mut cmd = Command::new(&self.bin);
        if let Some(ca) = &self.trust {
            cmd.env("SSL_CERT_FILE", ca);
        }
        let child = cmd
            .args([
                "gateway",
                "--listen",
                &format!("{}:{}", self.host, self.port),
            ])
            .args(["--grants-per-hour", &self.grants_per_hour.to_string()])
            .env("SEATFENCE_GATEWAY_SIGNING_SECRET", &self.signing_secret)
            .env("SEATFENCE_GATEWAY_WEBHOOK_SECRET", &self.webhook_secret)
            .env("SEATFENCE_GATEWAY_CLIENT_SECRET", &self.client_secret)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {} gateway", self.bin.display()))?;
        started(&child);
        self.child = Some(child);
        for _ in 0..200 {
            if std::net::TcpStream::connect((self.host.as_str(), self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        bail!("gateway did not listen within 5 s: {}", self.log_tail())
    }

    /// SIGKILL the mock and start it again on the same port with the same
    /// secrets. It forgets every payment and token, as a provider whose
    /// state was lost would.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill().context("SIGKILL gateway")?;
            c.wait()?;
        }
        self.spawn()
    }

    /// A node's payments config for this gateway, with the default timings.
    pub fn payments_config(&self) -> PaymentsConfig {
        let text = format!(
            "gateway_url = {:?}\nclient_id = {:?}\nclient_secret = {:?}\nwebhook_secret = {:?}\n",
            self.url, self.client_id, self.client_secret, self.webhook_secret
        );
        toml::from_str(&text).expect("a complete payments config parses")
    }

    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for GatewayProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
