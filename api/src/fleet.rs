//! The fleet's metrics in one answer (`GET /v1/admin/fleet/metrics`): every
//! node's whole `/metrics`, asked of it over the node plane
//! (`NodeService.Status { with_metrics }`) in parallel with a short
//! deadline, each sample labelled with the node and its region, so the
//! console and `ctl` can sum what one node's `/metrics` only shows a part
//! of (the holds of an event arrive where its group's leader is).
//!
//! ```text
//!  seatfence_holds_created_total{node="4",region="us-east",result="ok"} 12
//!  seatfence_fleet_node_up{node="7",region="ap-south"} 0     a node that did not answer
//! ```

use std::collections::BTreeMap;

use hyper::StatusCode;

use crate::error::ApiError;
use crate::message::{Reply, Req};
use crate::Edge;

/// The family that says which nodes answered.
pub const NODE_UP: &str = "seatfence_fleet_node_up";

/// `GET /v1/admin/fleet/metrics` (operators).
pub async fn metrics(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let view = edge.operators.cluster_view_with(true).await?;
    let mut merged = Merged::default();
    for n in view.directory.nodes.values() {
        let (id, region) = (n.id.0, n.region.0.as_str());
        let text = view
            .status
            .get(&id)
            .and_then(Option::as_ref)
            .map(|s| s.metrics.as_str());
        merged.node_up(id, region, text.is_some());
        if let Some(text) = text {
            merged.add(id, region, text);
        }
    }
    Ok(Reply::text(
        StatusCode::OK,
        merged.render(),
        "text/plain; version=0.0.4",
    ))
}

/// Families in the order first seen, each with its `# HELP`/`# TYPE`
/// lines (once) and the samples of every node.
#[derive(Default)]
struct Merged {
    order: Vec<String>,
    families: BTreeMap<String, Family>,
}

#[derive(Default)]
struct Family {
    meta: Vec<String>,
    samples: Vec<String>,
}

impl Merged {
    fn family(&mut self, name: &str) -> &mut Family {
        if !self.families.contains_key(name) {
            self.order.push(name.to_string());
        }
        self.families.entry(name.to_string()).or_default()
    }

    fn node_up(&mut self, id: u64, region: &str, up: bool) {
        let f = self.family(NODE_UP);
        if f.meta.is_empty() {
            f.meta.push(format!(
                "# HELP {NODE_UP} 1 when the node answered the fleet's scrape, 0 when it did not (its samples are absent)."
            ));
            f.meta.push(format!("# TYPE {NODE_UP} gauge"));
        }
        f.samples
            .push(format!("{NODE_UP}{} {}", labels(id, region), u8::from(up)));
    }

    /// Node `id`'s exposition: a sample belongs to the family of the last
    /// `# TYPE` line before it (a histogram's `_bucket`, `_sum`, `_count`
    /// to their family), else to a family of its own name.
    fn add(&mut self, id: u64, region: &str, text: &str) {
        let mut current: Option<String> = None;
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(rest) = line.strip_prefix('#') {
                let mut words = rest.split_whitespace();
                let (Some(kw @ ("HELP" | "TYPE")), Some(name)) = (words.next(), words.next())
                else {
                    continue;
                };
                if kw == "TYPE" {
                    current = Some(name.to_string());
                }
                let f = self.family(name);
                if !f.meta.iter().any(|m| m.starts_with(&format!("# {kw} "))) {
                    f.meta.push(line.to_string());
                }
                continue;
            }
            let end = line
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(line.len());
            let (name, rest) = line.split_at(end);
            if name.is_empty() {
                continue;
            }
            let family = match &current {
                Some(c) if name.starts_with(c.as_str()) => c.clone(),
                _ => name.to_string(),
            };
            let sample = format!("{name}{}", relabel(id, region, rest));
            self.family(&family).samples.push(sample);
        }
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for name in &self.order {
            let f = &self.families[name];
            for l in f.meta.iter().chain(&f.samples) {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

/// A sample's text after its name (`{a="b"} 1` or ` 1`) with the node's
/// labels first.
fn relabel(id: u64, region: &str, rest: &str) -> String {
    let ours = labels(id, region);
    match rest.strip_prefix('{') {
        Some(inner) => match inner.strip_prefix('}') {
            Some(value) => format!("{ours}{value}"),
            None => format!("{},{inner}", &ours[..ours.len() - 1]),
        },
        None => format!("{ours}{rest}"),
    }
}

/// `{node="4",region="us-east"}` (the region escaped as Prometheus
/// escapes label values).
fn labels(id: u64, region: &str) -> String {
    let region = region
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!("{{node=\"{id}\",region=\"{region}\"}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_names_its_node_and_each_family_is_described_once() {
        let a = "# HELP x_total Things.\n# TYPE x_total counter\nx_total{kind=\"a\"} 1\nx_total 2\n\
                 # HELP h A histogram.\n# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_sum 4\nh_count 3\n";
        let b = "# HELP x_total Things.\n# TYPE x_total counter\nx_total{} 5\n";
        let mut m = Merged::default();
        m.node_up(1, "us-east", true);
        m.add(1, "us-east", a);
        m.node_up(2, "eu-\"west", true);
        m.add(2, "eu-\"west", b);
        m.node_up(3, "ap-south", false);
        let out = m.render();
        assert_eq!(out.matches("# TYPE x_total counter").count(), 1, "{out}");
        assert_eq!(out.matches("# HELP x_total").count(), 1, "{out}");
        assert!(
            out.contains("x_total{node=\"1\",region=\"us-east\",kind=\"a\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_total{node=\"1\",region=\"us-east\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_total{node=\"2\",region=\"eu-\\\"west\"} 5\n"),
            "{out}"
        );
        assert!(
            out.contains("h_bucket{node=\"1\",region=\"us-east\",le=\"1\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("seatfence_fleet_node_up{node=\"3\",region=\"ap-south\"} 0\n"),
            "{out}"
        );
        // A family's samples follow its own TYPE line, both nodes' together.
        let t = out.find("# TYPE x_total").unwrap();
        let h = out.find("# TYPE h ").unwrap();
        let x2 = out.find("x_total{node=\"2\"").unwrap();
        assert!(t < x2 && x2 < h, "{out}");
    }
}
