//! Who `seatfence ctl` speaks to and as whom: the edges and the bearer
//! token (`--edge`/`--token`, else `demo.json`), and tokens minted for
//! `ctl token`.

use anyhow::{bail, Context};

use super::edge::Edges;
use super::events::EdgeTarget;
use crate::demo::DemoFile;

/// A bearer token for `user`, signed with $SEATFENCE_JWT_SECRET or the
/// demo's secret.
pub(super) fn mint_token(
    demo: &anyhow::Result<DemoFile>,
    user: &str,
    operator: bool,
    ttl_secs: u64,
) -> anyhow::Result<String> {
    if user.is_empty() || user.len() > 128 || !user.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("--user must be 1-128 printable ASCII characters (the edge refuses anything else)");
    }
    let secret = match (std::env::var("SEATFENCE_JWT_SECRET"), demo) {
        (Ok(s), _) => s,
        (_, Ok(d)) => d.jwt_secret.clone(),
        (_, Err(e)) => bail!("no secret: set SEATFENCE_JWT_SECRET or start the demo ({e:#})"),
    };
    Ok(seatfence_api::auth::mint(&secret, user, operator, ttl_secs))
}

/// The edges to talk to: `--edge` alone, else every edge demo.json lists
/// (each tried in turn while one refuses the connection).
pub(super) fn edges(target: &EdgeTarget, demo: &anyhow::Result<DemoFile>) -> anyhow::Result<Edges> {
    Ok(match (&target.edge, demo) {
        (Some(e), _) => Edges::given(e),
        (None, Ok(d)) => Edges::demo(&d.edges).context("demo.json lists no edge")?,
        (None, Err(e)) => bail!("no edge: pass --edge URL or start the demo ({e:#})"),
    })
}

/// The bearer token: `--token`, else demo.json's operator token.
pub(super) fn bearer_token(
    target: &EdgeTarget,
    demo: &anyhow::Result<DemoFile>,
) -> anyhow::Result<String> {
    Ok(match (&target.token, demo) {
        (Some(t), _) => t.clone(),
        (None, Ok(d)) => d
            .tokens
            .get("operator")
            .cloned()
            .context("demo.json has no operator token")?,
        (None, Err(e)) => bail!("no token: pass --token or start the demo ({e:#})"),
    })
}
