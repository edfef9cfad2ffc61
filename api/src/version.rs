//! The cluster's data format (DESIGN.md §7, `seatfence version`):
//!
//! ```text
//!  GET  /v1/admin/version                  this binary's release and formats, the cluster's
//!                                          active format, and the newest each node reads
//!  POST /v1/admin/version {"format": N}    raise the active format (audited); 409
//!                                          `format_refused` while a live node cannot read it
//! ```
//!
//! Raising is the last step of a rolling upgrade: every node first runs a
//! binary that reads the new format (it reports that at each start), then
//! the directory raises the format, and each node writes it from the moment
//! its replica of the directory says so (`seatfence_core::format`).

use hyper::StatusCode;
use seatfence_core::format::{self, Version};
use seatfence_core::{Command, Directory, GroupId, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::message::{Reply, Req};
use crate::Edge;

/// The answer of both routes: this binary, then the cluster.
fn body(d: &Directory) -> Value {
    let nodes: Vec<Value> = d
        .nodes
        .values()
        .map(|n| {
            json!({"node_id": n.id.0, "region": n.region.0, "format_max": n.format_max,
                   "retired": d.node_state(n.id).is_retired()})
        })
        .collect();
    let readable_by_all = d
        .nodes
        .values()
        .filter(|n| !d.node_state(n.id).is_retired())
        .map(|n| n.format_max)
        .min()
        .unwrap_or(format::V1);
    json!({
        "binary": {"release": env!("CARGO_PKG_VERSION"), "format_newest": format::newest(),
                   "format_writing": format::active()},
        "cluster": {"format": d.format(), "format_readable_by_all": readable_by_all, "nodes": nodes},
    })
}

/// `GET /v1/admin/version`.
pub async fn get(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let d = edge.commands.directory_at_leader().await?;
    Ok(Reply::json(StatusCode::OK, body(&d)).header("cache-control", "no-store"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetFormat {
    #[serde(deserialize_with = "crate::whole::de")]
    format: u64,
}

/// `POST /v1/admin/version`: raise the cluster's active format.
pub async fn set(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let asked: SetFormat = req.json()?;
    let version = Version::try_from(asked.format)
        .ok()
        .filter(|v| *v >= format::V1)
        .ok_or_else(|| ApiError::BadRequest {
            code: "invalid_field",
            message: format!("format: {} is not a data format", asked.format),
        })?;
    let cmd = Command::SetFormat { version };
    let w = edge
        .commands
        .write(GroupId::DIRECTORY, cmd)
        .await
        .map_err(|e| edge.commands.client_error(e))?;
    match w.response {
        Response::FormatSet { version } => {
            tracing::warn!(format = version, "operator: data format set")
        }
        Response::FormatRefused { reason } => {
            return Err(ApiError::Conflict {
                code: "format_refused",
                message: reason,
                extra: json!({}),
            })
        }
        other => return Err(ApiError::Internal(format!("directory answered {other:?}"))),
    }
    let d = edge.commands.directory_at_leader().await?;
    Ok(Reply::json(StatusCode::OK, body(&d)))
}
