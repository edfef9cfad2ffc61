//! `seatfence gateway`: the mock's flags, and running it until shutdown.

use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::{serve, Mock, MockConfig};

#[derive(Args)]
pub struct GatewayArgs {
    #[arg(long, default_value = "127.0.0.1:7300")]
    pub listen: String,
    /// Base URL clients use (default: http://<listen>).
    #[arg(long)]
    pub public_url: Option<String>,
    /// Signs payments (callback signatures).
    #[arg(long, env = "SEATFENCE_GATEWAY_SIGNING_SECRET")]
    pub signing_secret: String,
    /// Signs webhook bodies; nodes need the same value.
    #[arg(long, env = "SEATFENCE_GATEWAY_WEBHOOK_SECRET")]
    pub webhook_secret: String,
    #[arg(long, default_value = "seatfence")]
    pub client_id: String,
    #[arg(long, env = "SEATFENCE_GATEWAY_CLIENT_SECRET")]
    pub client_secret: String,
    /// Lifetime of a granted token, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub token_ttl_secs: u64,
    /// Token grants allowed per hour.
    #[arg(long, default_value_t = 5)]
    pub grants_per_hour: u32,
}

impl GatewayArgs {
    /// Serve the mock until `shutdown` resolves.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.signing_secret.len() >= 16 && self.webhook_secret.len() >= 16,
            "--signing-secret and --webhook-secret must be at least 16 bytes"
        );
        let listener = tokio::net::TcpListener::bind(&self.listen)
            .await
            .with_context(|| format!("bind gateway on {}", self.listen))?;
        let addr = listener.local_addr()?;
        let mock = Mock::new(MockConfig {
            public_url: self.public_url.unwrap_or_else(|| format!("http://{addr}")),
            signing_secret: self.signing_secret,
            webhook_secret: self.webhook_secret,
            client_id: self.client_id,
            client_secret: self.client_secret,
            token_ttl: Duration::from_secs(self.token_ttl_secs.max(1)),
            grants_per_hour: self.grants_per_hour,
        });
        tracing::info!(%addr, "mock gateway serving");
        tokio::select! {
            _ = serve(mock, listener) => {}
            _ = shutdown => {}
        }
        Ok(())
    }
}
