//! Operations on the directory's records of moves and node states, as an
//! operator (the edge's handlers) and the directory's duties
//! (`seatfence-duties`) both propose them: one command each, the
//! directory's answer or its refusal.

use seatfence_core::{
    Command, GroupId, MoveOp, MoveRecord, MoveRefused, NodeOp, NodeOpDone, NodeRefused, Response,
};
use seatfence_raft::ClusterClient;

/// Propose one move operation to the directory; the directory's answer
/// (the move, or why it refused).
pub async fn propose_move(
    client: &ClusterClient,
    at_ms: u64,
    op: MoveOp,
) -> Result<Result<MoveRecord, MoveRefused>, seatfence_raft::ClientError> {
    let out = client
        .write(GroupId::DIRECTORY, &Command::Move { op, at_ms })
        .await?;
    match out.response {
        Response::Move(r) => Ok(r.map(|m| *m)),
        other => Err(seatfence_raft::ClientError::BadReply(format!(
            "directory answered {other}"
        ))),
    }
}

/// Propose one lifecycle operation to the directory.
pub async fn propose_node_op(
    client: &ClusterClient,
    at_ms: u64,
    op: NodeOp,
) -> Result<Result<NodeOpDone, NodeRefused>, seatfence_raft::ClientError> {
    let out = client
        .write(GroupId::DIRECTORY, &Command::Node { op, at_ms })
        .await?;
    match out.response {
        Response::Node(r) => Ok(r.map(|d| *d)),
        other => Err(seatfence_raft::ClientError::BadReply(format!(
            "directory answered {other}"
        ))),
    }
}
