//! [`RaftGrpc`]: the receiving side. Routes each Raft RPC to its group.
//!
//! Never trusts the wire: an unknown group answers NOT_FOUND, an undecodable
//! payload INVALID_ARGUMENT, and neither touches any group's state.

use std::io::Cursor;
use std::sync::Arc;

use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest};
use seatfence_proto::v1::raft_service_server::RaftService;
use seatfence_proto::v1::{
    PingReply, PingRequest, QuiesceReply, QuiesceRequest, RaftBatch, RaftBatchReply, RaftKind,
    RaftOutcome, RaftReply, RaftRequest, SnapshotChunk,
};
use tonic::{Request, Response, Status, Streaming};

use super::gate::{Gate, Need};
use super::MAX_MESSAGE_BYTES;
use crate::codec;
use crate::propose::ProposeError;
use crate::registry::{GroupHandle, Registry};
use crate::status::to_status;
use crate::types::{Snapshot, SnapshotMeta, TypeConfig, Vote};

/// Largest snapshot a node accepts.
const MAX_SNAPSHOT_BYTES: usize = 1 << 30;

/// Most messages one [`RaftBatch`] may carry (a sender packs fewer).
pub const MAX_BATCH_MESSAGES: usize = 4096;

pub struct RaftGrpc {
    registry: Arc<Registry>,
    gate: Arc<Gate>,
}

impl RaftGrpc {
    /// Serving every caller ([`Gate::open`]) until [`RaftGrpc::with_gate`].
    pub fn new(registry: Arc<Registry>) -> RaftGrpc {
        RaftGrpc {
            registry,
            gate: Gate::open(),
        }
    }

    /// Who may call (a TLS server's [`Gate::new`]).
    pub fn with_gate(mut self, gate: Arc<Gate>) -> RaftGrpc {
        self.gate = gate;
        self
    }

    /// Wrap as a tonic service with the node's message size limits.
    pub fn into_server(
        self,
    ) -> seatfence_proto::v1::raft_service_server::RaftServiceServer<RaftGrpc> {
        seatfence_proto::v1::raft_service_server::RaftServiceServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// The group `id` hosted here (reopened if dormant), opened now if the
    /// directory has just placed it here ([`Registry::open_if_placed`]);
    /// else NOT_FOUND.
    async fn group(&self, id: u64) -> Result<Arc<GroupHandle>, Status> {
        let id = seatfence_core::GroupId(id);
        if let Some(g) = self.registry.hosted(id).await {
            return Ok(g);
        }
        self.registry
            .open_if_placed(id)
            .await
            .ok_or_else(|| to_status(&ProposeError::UnknownGroup(id)))
    }

    /// The addressed group (NOT_FOUND if not hosted here), then the payload
    /// (INVALID_ARGUMENT if it does not decode).
    async fn decode<T: serde::de::DeserializeOwned>(
        &self,
        group_id: u64,
        payload: &[u8],
    ) -> Result<(Arc<GroupHandle>, T), Status> {
        let group = self.group(group_id).await?;
        let msg = codec::decode(payload).map_err(|e| malformed(e.to_string()))?;
        Ok((group, msg))
    }

    /// Refuse new data (entries, snapshots) while this node's disk is below
    /// its free-space reserve; heartbeats and votes still pass (a few bytes
    /// each, which the reserve is for). The leader retries, and this replica
    /// catches up once space returns.
    fn room_for_data(&self) -> Result<(), Status> {
        if self.registry.db().is_full() {
            return Err(to_status(&ProposeError::StorageFull(format!(
                "node {} is out of disk space (below its reserve): no new entries until space returns",
                self.registry.node_id()
            ))));
        }
        Ok(())
    }

    /// One Raft message of `kind` for `group_id`: the encoded reply. Both
    /// the unary RPCs and [`RaftService::batch`] come here.
    async fn handle(
        &self,
        kind: RaftKind,
        group_id: u64,
        payload: &[u8],
    ) -> Result<Vec<u8>, Status> {
        match kind {
            RaftKind::AppendEntries => {
                let (g, rpc): (_, AppendEntriesRequest<TypeConfig>) =
                    self.decode(group_id, payload).await?;
                if !rpc.entries.is_empty() {
                    self.room_for_data()?;
                }
                // A heartbeat from the leader it follows leaves a sleeping
                // replica asleep (a sleeping leader renewing its lease sends
                // those); entries or another leader wake it, after the
                // append has reset its election timer.
                let wakes =
                    g.is_asleep() && (!rpc.entries.is_empty() || rpc.vote > current_vote(&g));
                let r = g.raft.append_entries(rpc).await;
                // Not for an append it refused (a stale leader's).
                if wakes && !matches!(r, Ok(AppendEntriesResponse::HigherVote(_)) | Err(_)) {
                    g.wake();
                }
                reply(r)
            }
            RaftKind::Vote => {
                let (g, rpc) = self.decode(group_id, payload).await?;
                let r = g.raft.vote(rpc).await;
                g.wake();
                reply(r)
            }
            RaftKind::PreVote => {
                let (g, rpc): (_, VoteRequest<TypeConfig>) = self.decode(group_id, payload).await?;
                if let Some(refusal) = g.refuse_pre_vote(&self.registry.peers) {
                    return reply(Ok::<_, std::convert::Infallible>(refusal));
                }
                // Not woken: a pre-vote changes nothing here and does not
                // restart the election timer, so a replica woken by one
                // (silent leader, timer long run out) campaigned at once
                // against the candidate asking: split votes in ~10% of
                // groups after a leader's node died, each costing an
                // election timeout. The candidate's vote wakes it.
                reply(g.raft.pre_vote(rpc).await)
            }
            RaftKind::TransferLeader => {
                let (g, rpc) = self.decode(group_id, payload).await?;
                g.wake();
                reply(g.raft.handle_transfer_leader(rpc).await)
            }
        }
    }

    async fn unary(
        &self,
        kind: RaftKind,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        let group = seatfence_core::GroupId(req.get_ref().group_id);
        self.gate.check(&req, Need::Raft(group))?;
        let req = req.into_inner();
        let payload = self.handle(kind, req.group_id, &req.payload).await?;
        Ok(Response::new(RaftReply { payload }))
    }
}

fn reply<T: serde::Serialize, E: std::fmt::Display>(r: Result<T, E>) -> Result<Vec<u8>, Status> {
    let v = r.map_err(|e| to_status(&ProposeError::Unavailable(e.to_string())))?;
    codec::encode(&v).map_err(|e| to_status(&ProposeError::Internal(e.to_string())))
}

/// A payload that did not decode: INVALID_ARGUMENT `malformed_payload`.
fn malformed(reason: String) -> Status {
    to_status(&ProposeError::Malformed {
        code: "malformed_payload",
        reason,
    })
}

#[tonic::async_trait]
impl RaftService for RaftGrpc {
    async fn append_entries(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        self.unary(RaftKind::AppendEntries, req).await
    }

    async fn vote(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        self.unary(RaftKind::Vote, req).await
    }

    async fn pre_vote(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        self.unary(RaftKind::PreVote, req).await
    }

    async fn transfer_leader(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        self.unary(RaftKind::TransferLeader, req).await
    }

    /// Every message is handled at once (they belong to different groups,
    /// or are independent messages of one group, as separate RPCs would
    /// be); the answers come back in the order of the messages.
    async fn batch(&self, req: Request<RaftBatch>) -> Result<Response<RaftBatchReply>, Status> {
        // Any node not retired; each message then needs its group's right.
        let caller = self.gate.check(&req, Need::Ping)?;
        let messages = req.into_inner().messages;
        if messages.len() > MAX_BATCH_MESSAGES {
            return Err(to_status(&ProposeError::Malformed {
                code: "batch_too_large",
                reason: format!(
                    "{} messages in one batch; at most {MAX_BATCH_MESSAGES}",
                    messages.len()
                ),
            }));
        }
        let caller = &caller;
        let outcomes = futures::future::join_all(messages.iter().map(|m| async move {
            let group = seatfence_core::GroupId(m.group_id);
            let answer = match RaftKind::try_from(m.kind) {
                Ok(kind) => match self.gate.allows(caller, Need::Raft(group)) {
                    Ok(()) => self.handle(kind, m.group_id, &m.payload).await,
                    Err(denied) => Err(denied),
                },
                Err(_) => Err(malformed(format!("unknown raft message kind {}", m.kind))),
            };
            match answer {
                Ok(payload) => RaftOutcome {
                    payload,
                    ..Default::default()
                },
                Err(s) => RaftOutcome {
                    payload: Vec::new(),
                    code: s.code() as i32,
                    message: s.message().to_string(),
                },
            }
        }))
        .await;
        Ok(Response::new(RaftBatchReply { outcomes }))
    }

    async fn install_snapshot(
        &self,
        req: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftReply>, Status> {
        let caller = self.gate.check(&req, Need::Ping)?;
        let mut stream = req.into_inner();
        let first = stream
            .message()
            .await?
            .ok_or_else(|| malformed("empty snapshot stream".into()))?;
        self.gate
            .allows(&caller, Need::Raft(seatfence_core::GroupId(first.group_id)))?;
        let group = self.group(first.group_id).await?;
        self.room_for_data()?;
        let vote: Vote =
            codec::decode(&first.vote).map_err(|e| malformed(format!("snapshot vote: {e}")))?;
        let meta: SnapshotMeta =
            codec::decode(&first.meta).map_err(|e| malformed(format!("snapshot meta: {e}")))?;
        // Chunks are held in memory until the last one: nothing reaches the
        // state machine unless the whole snapshot arrived.
        let mut data = first.data;
        let mut done = first.done;
        while !done {
            let chunk = stream
                .message()
                .await?
                .ok_or_else(|| malformed("snapshot stream ended early".into()))?;
            if chunk.group_id != first.group_id {
                return Err(malformed("snapshot chunk for another group".into()));
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
        let r = group.raft.install_full_snapshot(vote, snapshot).await;
        group.wake();
        Ok(Response::new(RaftReply { payload: reply(r)? }))
    }

    async fn ping(&self, req: Request<PingRequest>) -> Result<Response<PingReply>, Status> {
        self.gate.check(&req, Need::Ping)?;
        Ok(Response::new(PingReply {
            node_id: self.registry.node_id(),
            incarnation: crate::sleep::liveness::incarnation(),
        }))
    }

    async fn quiesce(
        &self,
        req: Request<QuiesceRequest>,
    ) -> Result<Response<QuiesceReply>, Status> {
        let group = seatfence_core::GroupId(req.get_ref().group_id);
        self.gate.check(&req, Need::Raft(group))?;
        let req = req.into_inner();
        // A dormant replica agreed to exactly this before it was unloaded.
        if let Some(d) = self.registry.dormant_record(group) {
            if d.agrees(req.term, req.leader, req.last_log_index) {
                return Ok(Response::new(QuiesceReply { asleep: true }));
            }
        }
        let g = self.group(req.group_id).await?;
        let asleep = g.quiesce_follower(req.term, req.leader, req.last_log_index);
        Ok(Response::new(QuiesceReply { asleep }))
    }
}

/// The vote a replica holds now.
fn current_vote(g: &GroupHandle) -> Vote {
    use openraft::async_runtime::watch::WatchReceiver;
    g.raft.metrics().borrow_watched().vote
}
