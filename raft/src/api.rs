//! [`NodeApi`]: the node's own gRPC API (`NodeService`): proposals with leader
//! hints, replica reads, status, leader transfer.

use std::sync::Arc;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::impls::ProgressResponder;
use openraft::{ReadPolicy, ServerState};
use seatfence_core::inventory::{EventReply, Outcome};
use seatfence_core::{Command, GroupId, Query, Response as CoreResponse};
use seatfence_proto::v1::node_service_server::{NodeService, NodeServiceServer};
use seatfence_proto::v1::{
    membership_reply, query_reply, write_batch_reply, write_reply, BatchCommitted, Committed,
    GroupStatus, LeaderHint, MembershipReply, MembershipRequest, NotLeader, QueryAnswer,
    QueryReply, QueryRequest, ReadReply, ReadRequest, StatusReply, StatusRequest,
    TransferLeaderReply, TransferLeaderRequest, WriteBatchReply, WriteBatchRequest, WriteReply,
    WriteRequest,
};
use tonic::{Request, Response, Status};

use crate::clock::Clock;
use crate::config::PlantedBug;
use crate::metrics::{RaftMetrics, METRICS};
use crate::network::MAX_MESSAGE_BYTES;
use crate::registry::{GroupHandle, Registry};
use crate::storage;
use crate::types::TypeConfig;

pub struct NodeApi {
    registry: Arc<Registry>,
    region: String,
    clock: Arc<dyn Clock>,
    /// Chaos drills only: a bug planted on purpose (see [`PlantedBug`]).
    planted: Option<PlantedBug>,
}

impl NodeApi {
    pub fn new(registry: Arc<Registry>, region: String, clock: Arc<dyn Clock>) -> NodeApi {
        NodeApi {
            registry,
            region,
            clock,
            planted: None,
        }
    }

    /// Plant `bug` (drills prove they catch it; never in production).
    pub fn with_planted_bug(mut self, bug: Option<PlantedBug>) -> NodeApi {
        if let Some(b) = bug {
            tracing::warn!(bug = ?b, "PLANTED BUG active: this node is deliberately wrong");
        }
        self.planted = bug;
        self
    }

    pub fn into_server(self) -> NodeServiceServer<NodeApi> {
        NodeServiceServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn group(&self, id: u64) -> Result<Arc<GroupHandle>, Status> {
        self.registry.hosted(id)
    }

    /// Leader-side preparation of event commands, before proposing: stamp
    /// `now_ms` from this node's clock, and refuse a command whose epoch is
    /// older than the event's (fence check 2 of DESIGN §5; `apply` checks
    /// again). Returns the command to propose, or the answer to give now.
    fn prepare(&self, g: &GroupHandle, mut cmd: Command) -> Result<Command, CoreResponse> {
        if let Command::Event(c) = &mut cmd {
            c.now_ms = self.clock.now_ms();
            // A create carries no epoch yet: nothing to fence.
            if matches!(c.action, seatfence_core::inventory::EventAction::Create(_)) {
                return Ok(cmd);
            }
            let current = g.sm.read(|s| {
                s.state
                    .inventory
                    .event
                    .as_ref()
                    .map(|e| (e.epoch, e.owner.clone()))
            });
            // Only a strictly older epoch is refused here: a newer one may
            // be ahead of this replica's applies, and `apply` decides.
            if let Some((epoch, owner)) = current {
                if c.epoch < epoch && self.planted == Some(PlantedBug::AcceptStaleEpoch) {
                    c.epoch = epoch;
                }
                if c.epoch < epoch {
                    RaftMetrics::inc(&METRICS.stale_epoch_propose);
                    return Err(CoreResponse::Event(EventReply {
                        epoch,
                        owner: owner.clone(),
                        outcome: Outcome::StaleEpoch {
                            current: epoch,
                            owner,
                        },
                    }));
                }
            }
        }
        Ok(cmd)
    }

    /// The term event commands are fenced to: the caller's, or this
    /// leader's own, so a deposed leader can never commit them.
    fn fence_term(g: &GroupHandle, asked: Option<u64>, cmds: &[Command]) -> Option<u64> {
        asked.or_else(|| {
            cmds.iter()
                .any(|c| matches!(c, Command::Event(_)))
                .then(|| g.raft.metrics().borrow_watched().current_term)
        })
    }
}

/// A replica that believes it leads but is no longer a voter (removed by a
/// move): it can commit nothing, so it answers `not_leader` at once.
fn removed_leader(g: &GroupHandle) -> bool {
    g.raft.is_leader() && !g.leads()
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
        if removed_leader(&g) {
            RaftMetrics::inc(&METRICS.not_leader_answers);
            return Ok(Response::new(WriteReply {
                result: Some(write_reply::Result::NotLeader(NotLeader { leader: None })),
            }));
        }
        let cmd = match self.prepare(&g, cmd) {
            Ok(cmd) => cmd,
            Err(answer) => {
                return Ok(Response::new(WriteReply {
                    result: Some(write_reply::Result::Committed(Committed {
                        response: storage::encode(&answer)
                            .map_err(|e| Status::internal(e.to_string()))?,
                        log_index: 0,
                        term: g.raft.metrics().borrow_watched().current_term,
                    })),
                }))
            }
        };
        let term = Self::fence_term(&g, req.expected_term, std::slice::from_ref(&cmd));
        let reply = g.batcher.propose(cmd, term).await?;
        if matches!(reply.result, Some(write_reply::Result::NotLeader(_))) {
            RaftMetrics::inc(&METRICS.not_leader_answers);
        }
        Ok(Response::new(reply))
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
        let g = self.group(req.group_id)?;
        if removed_leader(&g) {
            RaftMetrics::inc(&METRICS.not_leader_answers);
            return Ok(Response::new(WriteBatchReply {
                result: Some(write_batch_reply::Result::NotLeader(NotLeader {
                    leader: None,
                })),
            }));
        }
        // Commands refused before proposing keep their answer; the rest
        // are proposed as one entry and their answers slotted back in order.
        let mut answers: Vec<Option<CoreResponse>> = Vec::with_capacity(cmds.len());
        let mut to_propose = Vec::with_capacity(cmds.len());
        for cmd in cmds {
            match self.prepare(&g, cmd) {
                Ok(c) => {
                    answers.push(None);
                    to_propose.push(c);
                }
                Err(a) => answers.push(Some(a)),
            }
        }
        let encode_all = |rs: Vec<CoreResponse>| {
            rs.iter()
                .map(storage::encode)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Status::internal(e.to_string()))
        };
        if to_propose.is_empty() {
            return Ok(Response::new(WriteBatchReply {
                result: Some(write_batch_reply::Result::Committed(BatchCommitted {
                    responses: encode_all(answers.into_iter().flatten().collect())?,
                    log_index: 0,
                    term: g.raft.metrics().borrow_watched().current_term,
                })),
            }));
        }
        let n = to_propose.len();
        let term = Self::fence_term(&g, req.expected_term, &to_propose);
        let reply = g.batcher.propose(Command::Batch(to_propose), term).await?;
        let result = match reply.result {
            Some(write_reply::Result::Committed(c)) => {
                let responses = match storage::decode::<CoreResponse>(&c.response) {
                    Ok(CoreResponse::Batch(rs)) if rs.len() == n => {
                        let mut rs = rs.into_iter();
                        let merged = answers
                            .into_iter()
                            .map(|a| a.or_else(|| rs.next()))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| Status::internal("batch answers misaligned"))?;
                        encode_all(merged)?
                    }
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
            Some(write_reply::Result::NotLeader(nl)) => {
                RaftMetrics::inc(&METRICS.not_leader_answers);
                write_batch_reply::Result::NotLeader(nl)
            }
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

    async fn query(&self, req: Request<QueryRequest>) -> Result<Response<QueryReply>, Status> {
        let req = req.into_inner();
        let q: Query = storage::decode(&req.query)
            .map_err(|e| Status::invalid_argument(format!("malformed_query: {e}")))?;
        let g = self.group(req.group_id)?;
        if req.linearizable && removed_leader(&g) {
            return Ok(Response::new(QueryReply {
                result: Some(query_reply::Result::NotLeader(NotLeader { leader: None })),
            }));
        }
        if req.linearizable {
            if let Err(e) = g.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
                let forward = match e {
                    RaftError::APIError(
                        openraft::error::LinearizableReadError::ForwardToLeader(f),
                    ) => f,
                    other => {
                        return Err(Status::unavailable(format!("group_unavailable: {other}")))
                    }
                };
                let nl = not_leader(forward);
                let Some(write_reply::Result::NotLeader(nl)) = nl.result else {
                    unreachable!("not_leader builds a NotLeader")
                };
                return Ok(Response::new(QueryReply {
                    result: Some(query_reply::Result::NotLeader(nl)),
                }));
            }
        }
        let term = g.raft.metrics().borrow_watched().current_term;
        let (result, applied) = g.sm.read(|s| {
            (
                s.state.query(&q),
                s.last_applied.map(|l| l.index).unwrap_or(0),
            )
        });
        Ok(Response::new(QueryReply {
            result: Some(query_reply::Result::Answer(QueryAnswer {
                result: storage::encode(&result).map_err(|e| Status::internal(e.to_string()))?,
                applied_index: applied,
                term,
            })),
        }))
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

    async fn membership(
        &self,
        req: Request<MembershipRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        use crate::membership::{self, MembershipError, MembershipOp};
        let req = req.into_inner();
        let g = self.group(req.group_id)?;
        let op: MembershipOp = storage::decode(&req.op)
            .map_err(|e| Status::invalid_argument(format!("bad_membership_op: {e}")))?;
        let result = match membership::apply(&g, op).await {
            Ok(st) => membership_reply::Result::Status(
                storage::encode(&st).map_err(|e| Status::internal(e.to_string()))?,
            ),
            Err(MembershipError::NotLeader(hint)) => {
                membership_reply::Result::NotLeader(NotLeader {
                    leader: hint.map(|(node_id, grpc_addr)| LeaderHint { node_id, grpc_addr }),
                })
            }
            Err(MembershipError::Failed(e)) => {
                return Err(Status::unavailable(format!(
                    "membership_change_failed: {e}"
                )))
            }
        };
        Ok(Response::new(MembershipReply {
            result: Some(result),
        }))
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
