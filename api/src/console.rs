//! The operator console's assets (`api/console/`), built into the binary
//! and served at `/console` (the page) and `/console/{asset}` (its styles
//! and modules). The page and its assets need no token: every API call the
//! page makes carries the operator's bearer token, and the edge judges
//! those as it judges any client's. Only the files listed here are served
//! (the list is the whole namespace, so no path reaches the disk).
//!
//! Every answer carries a strict Content-Security-Policy (scripts, styles
//! and connections from this origin only; no inline script or style, no
//! framing), `nosniff` and `no-referrer`.

use hyper::StatusCode;

use crate::error::ApiError;
use crate::http::Reply;

/// The page's policy: everything from this origin, nothing inline.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; \
require-trusted-types-for 'script'";

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
/// Module scripts must come with a JavaScript type, or browsers refuse them.
const JS: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";

const INDEX: &str = include_str!("../console/index.html");

/// (name, body, content type) of every asset under `/console/`.
const ASSETS: &[(&str, &str, &str)] = &[
    ("console.css", include_str!("../console/console.css"), CSS),
    ("favicon.svg", include_str!("../console/favicon.svg"), SVG),
    ("console.js", include_str!("../console/console.js"), JS),
    ("api.js", include_str!("../console/api.js"), JS),
    ("ui.js", include_str!("../console/ui.js"), JS),
    ("metrics.js", include_str!("../console/metrics.js"), JS),
    (
        "view-cluster.js",
        include_str!("../console/view-cluster.js"),
        JS,
    ),
    (
        "view-events.js",
        include_str!("../console/view-events.js"),
        JS,
    ),
    (
        "view-moves.js",
        include_str!("../console/view-moves.js"),
        JS,
    ),
    (
        "view-nodes.js",
        include_str!("../console/view-nodes.js"),
        JS,
    ),
    (
        "view-audit.js",
        include_str!("../console/view-audit.js"),
        JS,
    ),
    (
        "view-alerts.js",
        include_str!("../console/view-alerts.js"),
        JS,
    ),
];

/// `GET /console`: the page.
pub fn page() -> Reply {
    served(INDEX, HTML)
}

/// `GET /console/{asset}`: one of [`ASSETS`], else 404 `not_found`.
pub fn asset(name: &str) -> Result<Reply, ApiError> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, body, content_type)| served(body, content_type))
        .ok_or_else(|| ApiError::NoRoute(format!("/console/{name}")))
}

fn served(body: &str, content_type: &'static str) -> Reply {
    Reply::text(StatusCode::OK, body.to_string(), content_type)
        .header("content-security-policy", CSP)
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .header("x-frame-options", "DENY")
        .header("cache-control", "no-cache")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every module, style sheet and icon the page or a module refers to is
    /// served.
    #[test]
    fn every_imported_module_is_served() {
        let sources = std::iter::once(INDEX).chain(ASSETS.iter().map(|a| a.1));
        for src in sources {
            for part in src
                .split("/console/")
                .skip(1)
                .chain(src.split("from \"./").skip(1))
            {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
                    .collect();
                if [".js", ".css", ".svg"]
                    .iter()
                    .any(|ext| name.ends_with(ext))
                {
                    assert!(asset(&name).is_ok(), "{name} is referenced but not served");
                }
            }
        }
    }

    #[test]
    fn only_listed_assets_are_served() {
        for name in ["README-console.md", "..", "../Cargo.toml", "index.html", ""] {
            assert!(asset(name).is_err(), "{name:?} was served");
        }
    }
}
