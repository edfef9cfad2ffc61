//! Operator endpoints of the node lifecycle (DESIGN.md §7):
//!
//! ```text
//!  POST /v1/admin/nodes/{id}/decommission   retire: its replicas and leaderships move off, then `decommissioned`
//!  POST /v1/admin/nodes/{id}/recommission   undo a decommission that has not completed
//!  POST /v1/admin/nodes/{id}/declare-dead   a suspect node will not come back: replace its replicas now
//! ```
//!
//! Each is one directory command (`Command::Node`); the directory's leader
//! does the work (`seatfence_duties::directory::lifecycle`). The answer is the node's
//! state at once; `GET /v1/admin/cluster` shows the progress.

use hyper::StatusCode;
use seatfence_core::{NodeId, NodeOp, NodeOpDone, NodeState};
use serde_json::json;

use crate::admin::parse_id;
use crate::error::ApiError;
use crate::message::{Reply, Req};
use crate::Edge;

/// `POST /v1/admin/nodes/{id}/decommission`: 409 `no_spare_node` when a
/// group with a voter there has no live node of its region to go to.
pub async fn decommission(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    node_op(edge, req, id, |node| NodeOp::Decommission { node }).await
}

/// `POST /v1/admin/nodes/{id}/recommission`: 409 `not_decommissioning`
/// once it completed (or when it never started).
pub async fn recommission(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    node_op(edge, req, id, |node| NodeOp::Recommission { node }).await
}

/// `POST /v1/admin/nodes/{id}/declare-dead`: only a node the directory
/// already holds `suspect` (or dead); the state machine answers a live one
/// 409 `node_alive`, so a slip of the finger cannot strip a working node of
/// its replicas.
pub async fn declare_dead(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    node_op(edge, req, id, |node| NodeOp::SetState {
        node,
        state: NodeState::Dead { declared: true },
    })
    .await
}

fn not_found(node: NodeId) -> ApiError {
    ApiError::NotFound {
        code: "node_not_found",
        what: format!("node {}", node.0),
    }
}

async fn node_op(
    edge: &Edge,
    req: &Req,
    id: &str,
    op: impl FnOnce(NodeId) -> NodeOp,
) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let node = NodeId(parse_id(id, "node_not_found")?);
    let answer = seatfence_regions::ops::propose_node_op(
        &edge.commands.client,
        edge.clock.now_ms(),
        op(node),
    )
    .await
    .map_err(|e| edge.commands.client_error(e))?;
    match answer {
        Ok(NodeOpDone::State(state)) => Ok(Reply::json(
            StatusCode::OK,
            json!({"node_id": node.0, "state": state.name()}),
        )),
        Ok(other) => Err(ApiError::Internal(format!("directory answered {other:?}"))),
        Err(r) if r.code == "node_not_found" => Err(not_found(node)),
        Err(r) => Err(ApiError::Conflict {
            code: leak(&r.code),
            message: r.message,
            extra: json!({"node_id": node.0}),
        }),
    }
}

/// The directory's refusal codes as the `&'static str` errors carry.
fn leak(code: &str) -> &'static str {
    match code {
        "no_spare_node" => "no_spare_node",
        "not_decommissioning" => "not_decommissioning",
        "state_refused" => "state_refused",
        "node_alive" => "node_alive",
        _ => "refused",
    }
}
