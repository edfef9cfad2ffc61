//! [`NodeApi`]: the node's own gRPC API (`NodeService`): proposals with leader
//! hints, replica reads, status, leader transfer.

use std::sync::Arc;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::impls::ProgressResponder;
use openraft::{ReadPolicy, ServerState};
use seatfence_core::{Command, GroupId};
use seatfence_proto::v1::node_service_server::{NodeService, NodeServiceServer};
use seatfence_proto::v1::{
    write_batch_reply, write_reply, BatchCommitted, Committed, GroupStatus, LeaderHint, NotLeader,
    ReadReply, ReadRequest, StatusReply, StatusRequest, TransferLeaderReply, TransferLeaderRequest,
    WriteBatchReply, WriteBatchRequest, WriteReply, WriteRequest,
};
use tonic::{Request, Response, Status};

use crate::network::MAX_MESSAGE_BYTES;
use crate::registry::{GroupHandle, Registry};
use crate::storage;
use crate::types::TypeConfig;

pub struct NodeApi {
    registry: Arc<Registry>,
    region: String,
}

impl NodeApi {
    pub fn new(registry: Arc<Registry>, region: String) -> NodeApi {
        NodeApi { registry, region }
    }

    pub fn into_server(self) -> NodeServiceServer<NodeApi> {
        NodeServiceServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn group(&self, id: u64) -> Result<Arc<GroupHandle>, Status> {
        self.registry.hosted(id)
    }
}

fn not_leader(f: openraft::error::ForwardToLeader<TypeConfig>) -> WriteReply {
    WriteReply {
        result: Some(write_reply::Result::NotLeader(NotLeader {
            leader: match (f.leader_id, f.leader_node) {
                (Some(id), Some(node)) => Some(LeaderHint {
                    node_id: id,
                    grpc_addr: node.addr,
                }),
                _ => None,
            },
        })),
    }
}

/// Propose `cmd` as one entry; `expected_term` fences it to one leader term.
pub async fn propose(
    raft: &crate::types::Raft,
    cmd: Command,
    expected_term: Option<u64>,
) -> Result<WriteReply, Status> {
    let result = match expected_term {
        None => raft.client_write(cmd).await.map_err(|e| match e {
            RaftError::APIError(e) => Ok(e),
            RaftError::Fatal(f) => Err(Status::unavailable(format!("group_unavailable: {f}"))),
        }),
        Some(term) => {
            let (responder, rx) = ProgressResponder::complete_only();
            raft.write(cmd)
                .with_leader(term)
                .responder(responder)
                .await
                .map_err(|f| Status::unavailable(format!("group_unavailable: {f}")))?;
            let r = rx
                .await
                .map_err(|_| Status::unavailable("group_unavailable: write dropped"))?;
            r.map_err(Ok)
        }
    };
    match result {
        Ok(resp) => Ok(WriteReply {
            result: Some(write_reply::Result::Committed(Committed {
                response: storage::encode(&resp.data).map_err(|e| Status::internal(e.to_string()))?,
                log_index: resp.log_id.index,
                term: resp.log_id.leader_id.term,
            })),
        }),
        Err(Err(status)) => Err(status),
        Err(Ok(ClientWriteError::ForwardToLeader(f))) => Ok(not_leader(f)),
        Err(Ok(ClientWriteError::LogEntryDiscarded(f))) => Err(Status::aborted(format!(
            "outcome_unknown: entry discarded on leader change ({f}); retry with the same operation key"
        ))),
        Err(Ok(e)) => Err(Status::failed_precondition(e.to_string())),
    }
}

#[tonic::async_trait]
impl NodeService for NodeApi {
    async fn write(&self, req: Request<WriteRequest>) -> Result<Response<WriteReply>, Status> {
        let req = req.into_inner();
        let cmd: Command = storage::decode(&req.command)
            .map_err(|e| Status::invalid_argument(format!("malformed_command: {e}")))?;
        let g = self.group(req.group_id)?;
        g.batcher
            .propose(cmd, req.expected_term)
            .await
            .map(Response::new)
    }

    async fn write_batch(
        &self,
        req: Request<WriteBatchRequest>,
    ) -> Result<Response<WriteBatchReply>, Status> {
        let req = req.into_inner();
        let cmds = req
            .commands
            .iter()
            .map(|c| storage::decode::<Command>(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Status::invalid_argument(format!("malformed_command: {e}")))?;
        if cmds.is_empty() {
            return Err(Status::invalid_argument("malformed_command: empty batch"));
        }
        let n = cmds.len();
        let g = self.group(req.group_id)?;
        let reply = g
            .batcher
            .propose(Command::Batch(cmds), req.expected_term)
            .await?;
        let result = match reply.result {
            Some(write_reply::Result::Committed(c)) => {
                let responses = match storage::decode::<seatfence_core::Response>(&c.response) {
                    Ok(seatfence_core::Response::Batch(rs)) if rs.len() == n => rs
                        .iter()
                        .map(storage::encode)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| Status::internal(e.to_string()))?,
                    other => {
                        return Err(Status::internal(format!(
                            "batch of {n} answered with {other:?}"
                        )))
                    }
                };
                write_batch_reply::Result::Committed(BatchCommitted {
                    responses,
                    log_index: c.log_index,
                    term: c.term,
                })
            }
            Some(write_reply::Result::NotLeader(nl)) => write_batch_reply::Result::NotLeader(nl),
            None => return Err(Status::internal("empty reply")),
        };
        Ok(Response::new(WriteBatchReply {
            result: Some(result),
        }))
    }

    async fn read(&self, req: Request<ReadRequest>) -> Result<Response<ReadReply>, Status> {
        let req = req.into_inner();
        let g = self.group(req.group_id)?;
        if req.linearizable {
            g.raft
                .ensure_linearizable(ReadPolicy::ReadIndex)
                .await
                .map_err(|e| Status::failed_precondition(format!("not_leader: {e}")))?;
        }
        let reply = g.sm.read(|s| ReadReply {
            found: s.state.kv.contains_key(&req.key),
            value: s.state.kv.get(&req.key).cloned().unwrap_or_default(),
            applied_index: s.last_applied.map(|l| l.index).unwrap_or(0),
        });
        Ok(Response::new(reply))
    }

    async fn status(&self, _req: Request<StatusRequest>) -> Result<Response<StatusReply>, Status> {
        let mut groups = Vec::new();
        for (id, g) in self.registry.all() {
            let m = g.raft.metrics().borrow_watched().clone();
            let (digest, keys) =
                g.sm.read(|s| (state_digest(&s.state), s.state.kv.len() as u64));
            let membership = m.membership_config.membership();
            groups.push(GroupStatus {
                group_id: id.0,
                role: match m.state {
                    ServerState::Leader => "leader",
                    ServerState::Follower => "follower",
                    ServerState::Candidate => "candidate",
                    ServerState::Learner => "learner",
                    ServerState::Shutdown => "shutdown",
                }
                .to_string(),
                term: m.current_term,
                leader: m.current_leader,
                last_log_index: m.last_log_index.unwrap_or(0),
                applied_index: m.last_applied.map(|l| l.index).unwrap_or(0),
                snapshot_index: m.snapshot.map(|l| l.index).unwrap_or(0),
                purged_index: m.purged.map(|l| l.index).unwrap_or(0),
                voters: membership.voter_ids().collect(),
                learners: membership.learner_ids().collect(),
                state_digest: digest,
                key_count: keys,
            });
        }
        let directory_nodes = self
            .registry
            .get(GroupId::DIRECTORY)
            .map(|d| d.sm.read(|s| s.state.directory.nodes.len() as u32))
            .unwrap_or(0);
        Ok(Response::new(StatusReply {
            node_id: self.registry.node_id(),
            region: self.region.clone(),
            groups,
            directory_nodes,
        }))
    }

    async fn transfer_leader(
        &self,
        req: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderReply>, Status> {
        let req = req.into_inner();
        let g = self.group(req.group_id)?;
        if !g.raft.voter_ids().any(|v| v == req.to) {
            return Err(Status::failed_precondition(format!(
                "not_a_voter: node {} is not a voter of group {}",
                req.to, req.group_id
            )));
        }
        g.raft
            .trigger()
            .transfer_leader(req.to)
            .await
            .map_err(|e| Status::unavailable(format!("group_unavailable: {e}")))?;
        Ok(Response::new(TransferLeaderReply {}))
    }
}

/// FNV-1a over every stored record: equal digests mean equal replicas.
pub fn state_digest(state: &seatfence_core::State) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (k, v) in state.records() {
        for b in k.iter().chain(&[0xff]).chain(v.iter()).chain(&[0xfe]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
