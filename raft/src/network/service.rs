//! [`RaftGrpc`]: the receiving side. Routes each Raft RPC to its group.
//!
//! Never trusts the wire: an unknown group answers NOT_FOUND, an undecodable
//! payload INVALID_ARGUMENT, and neither touches any group's state.

use std::io::Cursor;
use std::sync::Arc;

use seatfence_proto::v1::raft_service_server::RaftService;
use seatfence_proto::v1::{RaftReply, RaftRequest, SnapshotChunk};
use tonic::{Request, Response, Status, Streaming};

use super::MAX_MESSAGE_BYTES;
use crate::registry::{GroupHandle, Registry};
use crate::storage;
use crate::types::{Snapshot, SnapshotMeta, Vote};

/// Largest snapshot a node accepts.
const MAX_SNAPSHOT_BYTES: usize = 1 << 30;

pub struct RaftGrpc {
    registry: Arc<Registry>,
}

impl RaftGrpc {
    pub fn new(registry: Arc<Registry>) -> RaftGrpc {
        RaftGrpc { registry }
    }

    /// Wrap as a tonic service with the node's message size limits.
    pub fn into_server(
        self,
    ) -> seatfence_proto::v1::raft_service_server::RaftServiceServer<RaftGrpc> {
        seatfence_proto::v1::raft_service_server::RaftServiceServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn group(&self, id: u64) -> Result<Arc<GroupHandle>, Status> {
        self.registry.hosted(id)
    }

    /// The addressed group (NOT_FOUND if not hosted here), then the payload
    /// (INVALID_ARGUMENT if it does not decode).
    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<(Arc<GroupHandle>, T), Status> {
        let req = req.into_inner();
        let group = self.group(req.group_id)?;
        let msg = storage::decode(&req.payload)
            .map_err(|e| Status::invalid_argument(format!("malformed_payload: {e}")))?;
        Ok((group, msg))
    }
}

fn reply<T: serde::Serialize, E: std::fmt::Display>(
    r: Result<T, E>,
) -> Result<Response<RaftReply>, Status> {
    let v = r.map_err(|e| Status::unavailable(format!("group_unavailable: {e}")))?;
    let payload = storage::encode(&v).map_err(|e| Status::internal(e.to_string()))?;
    Ok(Response::new(RaftReply { payload }))
}

#[tonic::async_trait]
impl RaftService for RaftGrpc {
    async fn append_entries(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        let (g, rpc) = self.decode(req)?;
        reply(g.raft.append_entries(rpc).await)
    }

    async fn vote(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let (g, rpc) = self.decode(req)?;
        reply(g.raft.vote(rpc).await)
    }

    async fn pre_vote(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let (g, rpc) = self.decode(req)?;
        reply(g.raft.pre_vote(rpc).await)
    }

    async fn transfer_leader(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        let (g, rpc) = self.decode(req)?;
        reply(g.raft.handle_transfer_leader(rpc).await)
    }

    async fn install_snapshot(
        &self,
        req: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftReply>, Status> {
        let mut stream = req.into_inner();
        let first = stream
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("malformed_payload: empty snapshot stream"))?;
        let group = self.group(first.group_id)?;
        let vote: Vote = storage::decode(&first.vote).map_err(|e| {
            Status::invalid_argument(format!("malformed_payload: snapshot vote: {e}"))
        })?;
        let meta: SnapshotMeta = storage::decode(&first.meta).map_err(|e| {
            Status::invalid_argument(format!("malformed_payload: snapshot meta: {e}"))
        })?;
        // Chunks are held in memory until the last one: nothing reaches the
        // state machine unless the whole snapshot arrived.
        let mut data = first.data;
        let mut done = first.done;
        while !done {
            let chunk = stream.message().await?.ok_or_else(|| {
                Status::invalid_argument("malformed_payload: snapshot stream ended early")
            })?;
            if chunk.group_id != first.group_id {
                return Err(Status::invalid_argument(
                    "malformed_payload: snapshot chunk for another group",
                ));
            }
            if data.len() + chunk.data.len() > MAX_SNAPSHOT_BYTES {
                return Err(Status::resource_exhausted("snapshot_too_large"));
            }
            data.extend_from_slice(&chunk.data);
            done = chunk.done;
        }
        let snapshot = Snapshot {
            meta,
            snapshot: Cursor::new(data),
        };
        reply(group.raft.install_full_snapshot(vote, snapshot).await)
    }
}
