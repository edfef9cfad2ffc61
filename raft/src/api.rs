//! [`NodeApi`]: the node's own gRPC API (`NodeService`), a thin adapter
//! over [`Proposer`]: it decodes requests, calls the typed propose path and
//! encodes its answers; errors become a `Status` in `status.rs` alone.

use std::sync::Arc;

use openraft::ReadPolicy;
use seatfence_core::{Command, GroupId, Query};
use seatfence_proto::v1::node_service_server::{NodeService, NodeServiceServer};
use seatfence_proto::v1::{
    membership_reply, query_reply, write_batch_reply, write_reply, BatchCommitted, Committed,
    DumpRequest, GroupStatus, LeaderHint, MembershipReply, MembershipRequest, NotLeader,
    QueryAnswer, QueryReply, QueryRequest, ReadReply, ReadRequest, StatusReply, StatusRequest,
    TransferLeaderReply, TransferLeaderRequest, WriteBatchReply, WriteBatchRequest, WriteReply,
    WriteRequest,
};
use tonic::{Request, Response, Status};

use crate::codec;
use crate::network::gate::{Caller, Gate, Need};
use crate::network::MAX_MESSAGE_BYTES;
use crate::operator::Auditor;
use crate::propose::{self, ProposeError, Proposer, Read};
use crate::registry::Registry;
use crate::status::to_status;

/// The node's `NodeService` gRPC handler: checks the caller and forwards to [`Proposer`].
pub struct NodeApi {
    proposer: Arc<Proposer>,
    region: String,
    gate: Arc<Gate>,
    exposition: Exposition,
    auditor: Auditor,
}

/// The node's whole Prometheus exposition, once its edge can render it
/// (set by the node after the edge starts; until then, or on a node with
/// no edge, the process's recorder alone: [`crate::metrics::render`]).
pub type Exposition = Arc<std::sync::OnceLock<Arc<dyn Fn() -> String + Send + Sync>>>;

impl NodeApi {
    /// This node's edge URL for an answer (empty when it has none).
    fn edge_url(&self) -> String {
        self.proposer
            .edge_url()
            .map(|u| u.to_string())
            .unwrap_or_default()
    }

    /// Serving every caller ([`Gate::open`]) until [`NodeApi::with_gate`].
    pub fn new(proposer: Arc<Proposer>, region: String) -> NodeApi {
        NodeApi {
            proposer,
            region,
            gate: Gate::open(),
            exposition: Exposition::default(),
            auditor: Auditor::default(),
        }
    }

    /// Where operator actions are recorded (without one, an operator's
    /// restore step or dump is refused: nothing it does goes unrecorded).
    pub fn with_auditor(mut self, auditor: Auditor) -> NodeApi {
        self.auditor = auditor;
        self
    }

    /// `cmds` as proposed for `caller`: an operator's restore steps are
    /// checked ([`crate::operator::restore_steps`]) and audited first.
    async fn operator_steps(
        &self,
        caller: &Caller,
        group: GroupId,
        cmds: Vec<Command>,
    ) -> Result<Vec<Command>, Status> {
        let Caller::Operator(name) = caller else {
            return Ok(cmds);
        };
        let cmds = crate::operator::restore_steps(self.registry(), name, group, cmds)?;
        // Recorded where it is proposed: a node that does not lead the
        // group proposes nothing and sends the caller on to the leader,
        // which records it then.
        if !self.proposer.leads(group) {
            return Ok(cmds);
        }
        let action = match cmds.first() {
            Some(Command::Restore(op)) => op.name(),
            _ => "restore",
        };
        self.auditor
            .record(name, action, crate::operator::restore_target(group, &cmds))
            .await?;
        Ok(cmds)
    }

    /// Where `Status { with_metrics }` takes the node's metrics from.
    pub fn with_exposition(mut self, exposition: Exposition) -> NodeApi {
        self.exposition = exposition;
        self
    }

    /// Who may call (a TLS server's [`Gate::new`]).
    pub fn with_gate(mut self, gate: Arc<Gate>) -> NodeApi {
        self.gate = gate;
        self
    }

    /// Wrap as a tonic service with the node's message size limits ([`MAX_MESSAGE_BYTES`]).
    pub fn into_server(self) -> NodeServiceServer<NodeApi> {
        NodeServiceServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn registry(&self) -> &Arc<Registry> {
        self.proposer.registry()
    }

    /// After a `not_leader` answer that named no leader (an election is
    /// under way), wait for one ([`Proposer::await_leader`]): the answer
    /// then names it, and the caller follows it at once. `true`: this
    /// node won, and the caller's command should be proposed here again
    /// (the refused attempt proposed nothing).
    async fn after_election<T>(
        &self,
        group: GroupId,
        outcome: &mut Result<T, ProposeError>,
    ) -> bool {
        if !matches!(outcome, Err(ProposeError::NotLeader { leader: None, .. })) {
            return false;
        }
        let Some(hint) = self.proposer.await_leader(group).await else {
            return false;
        };
        if hint.node_id == self.registry().node_id() {
            // A removed or lease-less leader names itself too: re-run
            // only if this node really leads now.
            return self.proposer.leads(group);
        }
        *outcome = Err(ProposeError::NotLeader {
            group,
            leader: Some(hint),
        });
        false
    }
}

/// The `NotLeader` reply for `e`, or `e` as a `Status`.
pub(crate) fn not_leader_or_status(e: ProposeError) -> Result<NotLeader, Status> {
    match e {
        ProposeError::NotLeader { leader, .. } => Ok(NotLeader {
            leader: leader.map(|h: propose::LeaderHint| LeaderHint {
                node_id: h.node_id,
                grpc_addr: h.addr,
            }),
        }),
        other => Err(to_status(&other)),
    }
}

/// Whether `caller` may write `cmds` to `group`: a member may write
/// anything; a node the directory does not list yet may register itself,
/// as itself, and write nothing else (its registration may travel in a
/// `Write` or, packed by its client, a `WriteBatch`).
fn may_write(gate: &Gate, caller: &Caller, group: u64, cmds: &[Command]) -> Result<(), Status> {
    let joins = |id: u64| {
        group == GroupId::DIRECTORY.0
            && !cmds.is_empty()
            && cmds
                .iter()
                .all(|c| matches!(c, Command::RegisterNode(n) if n.id.0 == id))
    };
    use seatfence_core::NodeOp;
    // What a node says about itself (its registration, its rejoin on an
    // empty data dir) comes from its own certificate: another member's
    // must not re-point a node's address or reset its store identity.
    let foreign = any_command(cmds, &|c| match c {
        Command::RegisterNode(n) => caller.node_id().is_some_and(|id| id != n.id.0),
        Command::Node {
            op: NodeOp::Rejoin { node, .. },
            ..
        } => caller.node_id().is_some_and(|id| id != node.0),
        _ => false,
    });
    if foreign {
        return Err(crate::network::gate::denied(
            "sender_mismatch",
            "a node registers and rejoins only as itself".to_string(),
        ));
    }
    // A rejoin's floor (the term its demotion committed at) is written by
    // the directory's leader, in-process, as its rejoin duty sees the
    // demotion: never sent by another node.
    let floor = any_command(cmds, &|c| {
        matches!(
            c,
            Command::Node {
                op: NodeOp::RejoinDemoted { .. } | NodeOp::RejoinDirectoryDemoted { .. },
                ..
            }
        )
    });
    if floor && !matches!(caller, Caller::Plaintext) {
        return Err(crate::network::gate::denied(
            "sender_not_leader",
            "a rejoin's floor is written by the directory's leader alone".to_string(),
        ));
    }
    // An operator restores a backup into a new cluster (`seatfence
    // restore`), and writes nothing else.
    let restores = !cmds.is_empty() && cmds.iter().all(|c| matches!(c, Command::Restore(_)));
    match caller {
        Caller::Joining(id) if joins(*id) => Ok(()),
        Caller::Operator(_) if restores => Ok(()),
        _ => gate.allows(caller, Need::Write),
    }
}

/// Whether `pred` holds for any of `cmds`, batches included.
fn any_command(cmds: &[Command], pred: &dyn Fn(&Command) -> bool) -> bool {
    cmds.iter().any(|c| match c {
        Command::Batch(inner) => any_command(inner, pred),
        c => pred(c),
    })
}

fn encode<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, Status> {
    codec::encode(v).map_err(|e| to_status(&ProposeError::Internal(e.to_string())))
}

fn decode<T: serde::de::DeserializeOwned>(code: &'static str, b: &[u8]) -> Result<T, Status> {
    codec::decode(b).map_err(|e| {
        to_status(&ProposeError::Malformed {
            code,
            reason: e.to_string(),
        })
    })
}

#[tonic::async_trait]
impl NodeService for NodeApi {
    async fn write(&self, req: Request<WriteRequest>) -> Result<Response<WriteReply>, Status> {
        let caller = self.gate.caller(&req)?;
        let req = req.into_inner();
        let cmd: Command = decode("malformed_command", &req.command)?;
        may_write(
            &self.gate,
            &caller,
            req.group_id,
            std::slice::from_ref(&cmd),
        )?;
        let group = GroupId(req.group_id);
        let cmd = self
            .operator_steps(&caller, group, vec![cmd])
            .await?
            .pop()
            .expect("one step in, one out");
        let mut outcome = self
            .proposer
            .write(group, cmd.clone(), req.expected_term)
            .await;
        if self.after_election(group, &mut outcome).await {
            outcome = self.proposer.write(group, cmd, req.expected_term).await;
        }
        if let (Ok(c), Caller::Member(node)) = (&outcome, &caller) {
            let holds = crate::propose::origins::holds_granted(std::slice::from_ref(&c.response));
            self.proposer.origins().note(group, *node, holds);
        }
        let result = match outcome {
            Ok(c) => write_reply::Result::Committed(Committed {
                response: encode(&c.response)?,
                log_index: c.log_index,
                term: c.term,
                edge_url: self.edge_url(),
            }),
            Err(e) => write_reply::Result::NotLeader(not_leader_or_status(e)?),
        };
        Ok(Response::new(WriteReply {
            result: Some(result),
        }))
    }

    async fn write_batch(
        &self,
        req: Request<WriteBatchRequest>,
    ) -> Result<Response<WriteBatchReply>, Status> {
        let caller = self.gate.caller(&req)?;
        let req = req.into_inner();
        let cmds = req
            .commands
            .iter()
            .map(|c| decode::<Command>("malformed_command", c))
            .collect::<Result<Vec<_>, _>>()?;
        may_write(&self.gate, &caller, req.group_id, &cmds)?;
        let group = GroupId(req.group_id);
        let cmds = self.operator_steps(&caller, group, cmds).await?;
        let mut outcome = self
            .proposer
            .write_batch(group, cmds.clone(), req.expected_term)
            .await;
        if self.after_election(group, &mut outcome).await {
            outcome = self
                .proposer
                .write_batch(group, cmds, req.expected_term)
                .await;
        }
        if let (Ok(c), Caller::Member(node)) = (&outcome, &caller) {
            let holds = crate::propose::origins::holds_granted(&c.responses);
            self.proposer.origins().note(group, *node, holds);
        }
        let result = match outcome {
            Ok(c) => write_batch_reply::Result::Committed(BatchCommitted {
                responses: c.responses.iter().map(encode).collect::<Result<_, _>>()?,
                log_index: c.log_index,
                term: c.term,
                edge_url: self.edge_url(),
            }),
            Err(e) => write_batch_reply::Result::NotLeader(not_leader_or_status(e)?),
        };
        Ok(Response::new(WriteBatchReply {
            result: Some(result),
        }))
    }

    async fn read(&self, req: Request<ReadRequest>) -> Result<Response<ReadReply>, Status> {
        // Raw keys include the directory's shared secrets (the gateway's
        // token): a member node's read only.
        self.gate.check(&req, Need::Read)?;
        let req = req.into_inner();
        let g = self.proposer.group(GroupId(req.group_id)).await?;
        if req.linearizable {
            g.raft
                .ensure_linearizable(ReadPolicy::ReadIndex)
                .await
                .map_err(|e| to_status(&ProposeError::Refused(format!("not the leader: {e}"))))?;
        }
        let reply = g.sm.read(|s| ReadReply {
            found: s.state.kv().contains_key(&req.key),
            value: s.state.kv().get(&req.key).cloned().unwrap_or_default(),
            applied_index: s.last_applied.map(|l| l.index).unwrap_or(0),
        });
        Ok(Response::new(reply))
    }

    async fn query(&self, req: Request<QueryRequest>) -> Result<Response<QueryReply>, Status> {
        self.gate.check(&req, Need::Read)?;
        let req = req.into_inner();
        let q: Query = decode("malformed_query", &req.query)?;
        let group = GroupId(req.group_id);
        let mut outcome = self.proposer.query_with(group, &q, read_of(&req)).await;
        if self.after_election(group, &mut outcome).await {
            outcome = self.proposer.query_with(group, &q, read_of(&req)).await;
        }
        let result = match outcome {
            Ok(a) => query_reply::Result::Answer(QueryAnswer {
                result: encode(&a.result)?,
                applied_index: a.applied_index,
                term: a.term,
                edge_url: self.edge_url(),
            }),
            Err(e) => query_reply::Result::NotLeader(not_leader_or_status(e)?),
        };
        Ok(Response::new(QueryReply {
            result: Some(result),
        }))
    }

    type DumpStream = crate::dump::DumpStream;

    async fn dump(&self, req: Request<DumpRequest>) -> Result<Response<Self::DumpStream>, Status> {
        let caller = self.gate.check(&req, Need::Dump)?;
        let group = GroupId(req.get_ref().group_id);
        let stream =
            crate::dump::serve(self.proposer.clone(), caller, group, &self.auditor).await?;
        Ok(Response::new(stream))
    }

    async fn status(&self, req: Request<StatusRequest>) -> Result<Response<StatusReply>, Status> {
        let caller = self.gate.check(&req, Need::Operate)?;
        let digest = req.get_ref().with_digest && !matches!(caller, Caller::Operator(_));
        let mut groups: Vec<GroupStatus> = self
            .registry()
            .all()
            .values()
            .map(|g| g.status(digest))
            .collect();
        groups.extend(self.registry().dormant_status());
        groups.sort_by_key(|g| g.group_id);
        let directory_nodes = self.registry().view(|d| d.node_count() as u32).unwrap_or(0);
        let metrics = match (req.get_ref().with_metrics, self.exposition.get()) {
            (false, _) => String::new(),
            (true, Some(render)) => render(),
            (true, None) => crate::metrics::render(),
        };
        Ok(Response::new(StatusReply {
            node_id: self.registry().node_id(),
            region: self.region.clone(),
            groups,
            directory_nodes,
            metrics,
        }))
    }

    async fn transfer_leader(
        &self,
        req: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderReply>, Status> {
        // An operator transfers through the edge (checked and audited).
        self.gate.check(&req, Need::Write)?;
        let req = req.into_inner();
        self.proposer
            .transfer_leader(GroupId(req.group_id), req.to)
            .await?;
        Ok(Response::new(TransferLeaderReply {}))
    }

    async fn membership(
        &self,
        req: Request<MembershipRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        self.gate.check(&req, Need::Write)?;
        let req = req.into_inner();
        let op = decode("bad_membership_op", &req.op)?;
        let result = match self.proposer.membership(GroupId(req.group_id), op).await {
            Ok(st) => membership_reply::Result::Status(encode(&st)?),
            Err(e) => membership_reply::Result::NotLeader(not_leader_or_status(e)?),
        };
        Ok(Response::new(MembershipReply {
            result: Some(result),
        }))
    }
}

/// The freshness a query asks for.
fn read_of(req: &QueryRequest) -> Read {
    if req.linearizable && req.lease {
        Read::Lease
    } else {
        Read::linearizable(req.linearizable)
    }
}
