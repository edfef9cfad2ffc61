//! seatfence-console: the operator console's assets (`console/assets/`,
//! mapped page by page to the endpoints they call in
//! `assets/README-console.md`), built into the binary, and how they are
//! served: the HTTP edge (`seatfence-api`) answers `/console` (the page)
//! and `/console/{asset}` (its styles and modules) with [`page`] and
//! [`asset`], each a [`Served`] body with its headers. The page and its assets need no token: every API call the
//! page makes carries the operator's bearer token, and the edge judges
//! those as it judges any client's. Only the files listed here are served
//! (the list is the whole namespace, so no path reaches the disk).
//!
//! Every answer carries a strict Content-Security-Policy (scripts, styles
//! and connections from this origin only; no inline script or style, no
//! framing), `nosniff` and `no-referrer`.

#![warn(missing_docs)]
/// The page's policy: everything from this origin, nothing inline.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; \
require-trusted-types-for 'script'";

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
/// Module scripts must come with a JavaScript type, or browsers refuse them.
const JS: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";

const INDEX: &str = include_str!("../assets/index.html");

/// (name, body, content type) of every asset under `/console/`.
const ASSETS: &[(&str, &str, &str)] = &[
    ("console.css", include_str!("../assets/console.css"), CSS),
    ("favicon.svg", include_str!("../assets/favicon.svg"), SVG),
    ("console.js", include_str!("../assets/console.js"), JS),
    ("api.js", include_str!("../assets/api.js"), JS),
    ("ui.js", include_str!("../assets/ui.js"), JS),
    ("metrics.js", include_str!("../assets/metrics.js"), JS),
    (
        "view-cluster.js",
        include_str!("../assets/view-cluster.js"),
        JS,
    ),
    (
        "view-events.js",
        include_str!("../assets/view-events.js"),
        JS,
    ),
    ("view-moves.js", include_str!("../assets/view-moves.js"), JS),
    ("view-nodes.js", include_str!("../assets/view-nodes.js"), JS),
    ("view-audit.js", include_str!("../assets/view-audit.js"), JS),
    (
        "view-alerts.js",
        include_str!("../assets/view-alerts.js"),
        JS,
    ),
];

/// One answer of the console: its body, content type and headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// The file's contents, built into the binary.
    pub body: &'static str,
    /// The `Content-Type` value, e.g. `text/html; charset=utf-8`.
    pub content_type: &'static str,
}

impl Served {
    /// The headers every console answer carries (with `content-type`).
    pub const HEADERS: [(&'static str, &'static str); 5] = [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("x-frame-options", "DENY"),
        ("cache-control", "no-cache"),
    ];
}

/// `GET /console`: the page.
pub fn page() -> Served {
    Served {
        body: INDEX,
        content_type: HTML,
    }
}

/// `GET /console/{asset}`: one of [`ASSETS`]; `None` for any other name
/// (the edge answers 404 `not_found`).
pub fn asset(name: &str) -> Option<Served> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, body, content_type)| Served { body, content_type })
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
                    assert!(
                        asset(&name).is_some(),
                        "{name} is referenced but not served"
                    );
                }
            }
        }
    }

    #[test]
    fn only_listed_assets_are_served() {
        for name in ["README-console.md", "..", "../Cargo.toml", "index.html", ""] {
            assert!(asset(name).is_none(), "{name:?} was served");
        }
    }
}
