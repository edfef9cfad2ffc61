//! `seatfence version` (and `seatfence ctl version`): this binary's release
//! and data formats, the cluster's active format and the newest each node
//! reads (`GET /v1/admin/version`); `--activate N` raises the cluster's
//! format (`POST /v1/admin/version`), the last step of a rolling upgrade
//! (README "Upgrading").

use serde_json::json;

use super::edge::Edge;
use super::show::{Align, Table};

/// This binary alone, for when no cluster is asked.
pub fn binary_line() -> String {
    format!(
        "this binary: seatfence {}, reads data formats v1 to v{}",
        env!("CARGO_PKG_VERSION"),
        seatfence_core::format::newest()
    )
}

/// Ask (or raise) the cluster's format through `edge` and print it.
pub(super) async fn version(
    edge: &Edge,
    activate: Option<u64>,
    as_json: bool,
) -> anyhow::Result<()> {
    let a = match activate {
        Some(v) => {
            edge.post("/v1/admin/version", &json!({"format": v}))
                .await?
        }
        None => edge.get("/v1/admin/version").await?,
    };
    if as_json {
        println!("{}", a.body);
        return Ok(());
    }
    let b = &a.body;
    println!("{}", binary_line());
    println!(
        "the edge at {}: seatfence {}, writes v{}",
        edge.url(),
        b["binary"]["release"].as_str().unwrap_or("?"),
        b["binary"]["format_writing"]
    );
    println!(
        "cluster: data format v{} (every live node reads up to v{})",
        b["cluster"]["format"], b["cluster"]["format_readable_by_all"]
    );
    if activate.is_some() {
        println!(
            "raised: every node writes v{} from now on",
            b["cluster"]["format"]
        );
    }
    let mut t = Table::new(&[
        ("NODE", Align::Right),
        ("REGION", Align::Left),
        ("READS UP TO", Align::Left),
        ("RETIRED", Align::Left),
    ]);
    for n in b["cluster"]["nodes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        t.row(vec![
            n["node_id"].to_string(),
            n["region"].as_str().unwrap_or("?").to_string(),
            format!("v{}", n["format_max"]),
            String::from(if n["retired"] == true { "yes" } else { "no" }),
        ]);
    }
    t.print();
    Ok(())
}
