//! [`RaftGrpc`]: the receiving side. Routes each Raft RPC to its group.
//!
//! Never trusts the wire: an unknown group answers NOT_FOUND, an undecodable
//! payload INVALID_ARGUMENT, and neither touches any group's state.

use std::io::Cursor;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, TransferLeaderRequest, VoteRequest,
};
use seatfence_proto::v1::raft_service_server::RaftService;
use seatfence_proto::v1::{
    PingReply, PingRequest, QuiesceReply, QuiesceRequest, RaftBatch, RaftBatchReply, RaftKind,
    RaftOutcome, RaftReply, RaftRequest, SnapshotChunk,
};
use tonic::{Request, Response, Status, Streaming};

use super::gate::{Caller, Gate, Need};
use super::{snapshot_in, MAX_MESSAGE_BYTES};
use crate::codec;
use crate::propose::ProposeError;
use crate::registry::{GroupHandle, Registry};
use crate::status::to_status;
use crate::types::{Snapshot, SnapshotMeta, TypeConfig, Vote};

/// Largest snapshot a node accepts.
const MAX_SNAPSHOT_BYTES: usize = 1 << 30;

/// Most messages one [`RaftBatch`] may carry (a sender packs fewer).
pub const MAX_BATCH_MESSAGES: usize = 4096;

/// The node's `RaftService` gRPC handler: hands peers' Raft messages to the groups hosted here.
pub struct RaftGrpc {
    registry: Arc<Registry>,
    gate: Arc<Gate>,
    /// Whether this node's data dir is admitted (see
    /// [`crate::storage::ident`]): until it is, every Raft message is
    /// refused (`not_admitted`), so a node that forgot its log never votes
    /// or acknowledges under its id. Pings are answered.
    admitted: Arc<AtomicBool>,
}

impl RaftGrpc {
    /// Serving every caller ([`Gate::open`]) until [`RaftGrpc::with_gate`].
    pub fn new(registry: Arc<Registry>) -> RaftGrpc {
        RaftGrpc {
            registry,
            gate: Gate::open(),
            admitted: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Refuse Raft messages until `admitted` turns true.
    pub fn with_admission(mut self, admitted: Arc<AtomicBool>) -> RaftGrpc {
        self.admitted = admitted;
        self
    }

    fn check_admitted(&self) -> Result<(), Status> {
        if self.admitted.load(Ordering::SeqCst) {
            return Ok(());
        }
        Err(Status::unavailable(format!(
            "not_admitted: node {} is on a new data dir and has not yet learned whether its id is \
             new to the cluster; it takes no Raft message until then",
            self.registry.node_id()
        )))
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

    /// A Raft message speaks for the node whose vote it carries (the
    /// candidate's, the leader's): refused unless that node is the caller
    /// (its certificate's id), a member of the group in this node's view
    /// ([`Registry::may_speak_for`]), and its term is within
    /// [`MAX_TERM_JUMP`] of this replica's and can still be incremented (a
    /// term of `u64::MAX` would wrap the next election's `term + 1`).
    fn check_sender(&self, caller: &Caller, g: &GroupHandle, vote: &Vote) -> Result<(), Status> {
        let claimed = vote.leader_id.voted_for;
        if let Some(id) = caller.node_id().filter(|id| *id != claimed) {
            return Err(sender_mismatch(id, claimed));
        }
        self.check_term(g, vote)?;
        if !self.registry.may_speak_for(g, claimed) {
            crate::metrics::METRICS.raft_refused("not_a_group_member");
            return Err(Status::permission_denied(format!(
                "not_a_group_member: node {claimed} is not a member of group {} here",
                g.id
            )));
        }
        Ok(())
    }

    /// A snapshot comes from the group's leader: the one this replica
    /// follows, or one of a term above this replica's (a leader it has not
    /// heard from yet). Anything else openraft would refuse only once the
    /// whole stream sat in memory.
    fn check_snapshot_sender(&self, g: &GroupHandle, vote: &Vote) -> Result<(), Status> {
        use openraft::async_runtime::watch::WatchReceiver;
        let (mine, leader) = {
            let m = g.raft.metrics();
            let m = m.borrow_watched();
            (m.current_term, m.current_leader)
        };
        let term = vote.leader_id.term;
        let claimed = vote.leader_id.voted_for;
        if term > mine || (term == mine && leader.is_none_or(|l| l == claimed)) {
            return Ok(());
        }
        crate::metrics::METRICS.raft_refused("snapshot_not_from_leader");
        Err(Status::failed_precondition(format!(
            "snapshot_not_from_leader: node {claimed} at term {term} is not group {}'s leader here \
             (term {mine}, leader {leader:?})",
            g.id
        )))
    }

    /// A campaign (vote, pre-vote, leadership transfer) for the directory
    /// from a node it does not list is refused: appends from a leader this
    /// replica does not know yet are how it learns newer members, votes
    /// are not.
    fn check_campaign(&self, caller: &Caller, g: &GroupHandle) -> Result<(), Status> {
        if let (true, Caller::Joining(id)) = (g.id.is_directory(), caller) {
            // A voter this replica's log already has (promoted while its
            // registration is not applied here yet) may campaign.
            if in_membership(g, *id) {
                return Ok(());
            }
            crate::metrics::METRICS.raft_refused("not_a_group_member");
            return Err(Status::permission_denied(format!(
                "not_a_member: node {id} is not in the directory: it may not campaign in it"
            )));
        }
        Ok(())
    }

    /// A replica of a node that came back on an empty data dir votes
    /// nowhere until its group took it back (see
    /// [`joining`](crate::joining)): to a candidate it is a voter that is
    /// down.
    fn check_not_rejoining(&self, g: &GroupHandle) -> Result<(), Status> {
        if !g.joining.refuses_votes() {
            return Ok(());
        }
        crate::metrics::METRICS.raft_refused("rejoining");
        Err(Status::unavailable(format!(
            "rejoining: node {} came back on an empty data dir and does not vote in group {} \
             until the group has taken it back as a caught-up voter",
            self.registry.node_id(),
            g.id
        )))
    }

    /// A rejoining replica of an event group forgot its term: it takes
    /// appends and snapshots only from the term at which the group's leader
    /// took it out of the voters (the directory's `Rejoin::floors`), none
    /// before that, so a deposed leader cannot count it toward a quorum its
    /// successor overruled. Group 0's replica takes them (it learns the
    /// floors from them); that is the rejoin's remaining window (see
    /// ARCHITECTURE.md).
    fn check_rejoin_floor(&self, g: &GroupHandle, vote: &Vote) -> Result<(), Status> {
        if !g.joining.refuses_votes() || g.id.is_directory() {
            return Ok(());
        }
        let term = vote.leader_id.term;
        match self.registry.rejoin_floor(g.id) {
            Some(floor) if term >= floor => Ok(()),
            floor => {
                crate::metrics::METRICS.raft_refused("rejoining");
                Err(Status::unavailable(format!(
                    "rejoining: node {} came back on an empty data dir and takes group {}'s \
                     entries only from the term its leader demoted it at ({floor:?}), not {term}",
                    self.registry.node_id(),
                    g.id
                )))
            }
        }
    }

    fn check_term(&self, g: &GroupHandle, vote: &Vote) -> Result<(), Status> {
        let claimed = vote.leader_id.voted_for;
        let term = vote.leader_id.term;
        let mine = g.term();
        if term == u64::MAX || term > mine.saturating_add(MAX_TERM_JUMP) {
            crate::metrics::METRICS.raft_refused("term_out_of_bounds");
            return Err(Status::invalid_argument(format!(
                "term_out_of_bounds: term {term} from node {claimed} for group {}, which is at \
                 term {mine} (at most {MAX_TERM_JUMP} above, never the largest term)",
                g.id
            )));
        }
        Ok(())
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
        caller: &Caller,
        kind: RaftKind,
        group_id: u64,
        payload: &[u8],
    ) -> Result<Vec<u8>, Status> {
        self.check_admitted()?;
        match kind {
            RaftKind::AppendEntries => {
                let (g, rpc): (_, AppendEntriesRequest<TypeConfig>) =
                    self.decode(group_id, payload).await?;
                self.check_sender(caller, &g, &rpc.vote)?;
                self.check_rejoin_floor(&g, &rpc.vote)?;
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
                let (g, rpc): (_, VoteRequest<TypeConfig>) = self.decode(group_id, payload).await?;
                self.check_campaign(caller, &g)?;
                self.check_sender(caller, &g, &rpc.vote)?;
                self.check_not_rejoining(&g)?;
                let r = g.raft.vote(rpc).await;
                g.wake();
                reply(r)
            }
            RaftKind::PreVote => {
                let (g, rpc): (_, VoteRequest<TypeConfig>) = self.decode(group_id, payload).await?;
                self.check_campaign(caller, &g)?;
                self.check_sender(caller, &g, &rpc.vote)?;
                self.check_not_rejoining(&g)?;
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
                let (g, rpc): (_, TransferLeaderRequest<TypeConfig>) =
                    self.decode(group_id, payload).await?;
                self.check_campaign(caller, &g)?;
                self.check_sender(caller, &g, rpc.from_leader())?;
                self.check_not_rejoining(&g)?;
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
        let caller = self.gate.check(&req, Need::Raft(group))?;
        let req = req.into_inner();
        let payload = self
            .handle(&caller, kind, req.group_id, &req.payload)
            .await?;
        Ok(Response::new(RaftReply { payload }))
    }
}

fn reply<T: serde::Serialize, E: std::fmt::Display>(r: Result<T, E>) -> Result<Vec<u8>, Status> {
    let v = r.map_err(|e| to_status(&ProposeError::Unavailable(e.to_string())))?;
    codec::encode(&v).map_err(|e| to_status(&ProposeError::Internal(e.to_string())))
}

/// Largest term step a message may take above the receiving replica's.
/// Terms rise by one per election (pre-votes keep a partitioned node from
/// raising its own), so no legitimate message comes near; a hostile
/// member needs 2^32 accepted, persisted votes per step toward the top.
pub const MAX_TERM_JUMP: u64 = 1 << 32;

/// PERMISSION_DENIED `sender_mismatch`: a node spoke for another.
fn sender_mismatch(caller: u64, claimed: u64) -> Status {
    crate::metrics::METRICS.raft_refused("sender_mismatch");
    Status::permission_denied(format!(
        "sender_mismatch: node {caller}'s certificate sent a message in the name of node {claimed}"
    ))
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
                    Ok(()) => self.handle(caller, kind, m.group_id, &m.payload).await,
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
        self.check_admitted()?;
        let mut stream = req.into_inner();
        let first = snapshot_in::next(snapshot_in::IDLE, stream.message())
            .await?
            .ok_or_else(|| malformed("empty snapshot stream".into()))?;
        self.gate
            .allows(&caller, Need::Raft(seatfence_core::GroupId(first.group_id)))?;
        let group = self.group(first.group_id).await?;
        self.room_for_data()?;
        let vote: Vote =
            codec::decode(&first.vote).map_err(|e| malformed(format!("snapshot vote: {e}")))?;
        self.check_sender(&caller, &group, &vote)?;
        self.check_snapshot_sender(&group, &vote)?;
        self.check_rejoin_floor(&group, &vote)?;
        let meta: SnapshotMeta =
            codec::decode(&first.meta).map_err(|e| malformed(format!("snapshot meta: {e}")))?;
        // Chunks are held in memory until the last one: nothing reaches the
        // state machine unless the whole snapshot arrived. Every byte held
        // takes its share of the node's and its sender's budgets first, and
        // a stream that stops sending is cut (`snapshot_in`).
        let mut held = snapshot_in::Budget::global().start(vote.leader_id.voted_for);
        held.take(first.data.len())?;
        let mut data = first.data;
        let mut done = first.done;
        while !done {
            let chunk = snapshot_in::next(snapshot_in::IDLE, stream.message())
                .await?
                .ok_or_else(|| malformed("snapshot stream ended early".into()))?;
            if chunk.group_id != first.group_id {
                return Err(malformed("snapshot chunk for another group".into()));
            }
            if data.len() + chunk.data.len() > MAX_SNAPSHOT_BYTES {
                return Err(Status::resource_exhausted("snapshot_too_large"));
            }
            held.take(chunk.data.len())?;
            data.extend_from_slice(&chunk.data);
            done = chunk.done;
        }
        // Decoded here first, so a malformed state is refused with a code
        // instead of failing inside openraft's state-machine worker (which
        // stops the replica).
        match codec::decode::<seatfence_core::State>(&data) {
            Ok(state) if state.is_for(seatfence_core::GroupId(first.group_id)) => {}
            Ok(_) => return Err(malformed("snapshot of the other kind of group".into())),
            Err(e) => return Err(malformed(format!("snapshot data: {e}"))),
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
        let caller = match self.gate.check(&req, Need::Ping)? {
            Caller::Member(id) | Caller::Joining(id) => id,
            _ => req.get_ref().from,
        };
        let (directory_initialized, known) = self.registry.directory_knows(caller);
        Ok(Response::new(PingReply {
            node_id: self.registry.node_id(),
            incarnation: crate::sleep::liveness::incarnation(),
            directory_initialized,
            knows_caller: known.is_some(),
            known_incarnation: known.unwrap_or(0),
        }))
    }

    async fn quiesce(
        &self,
        req: Request<QuiesceRequest>,
    ) -> Result<Response<QuiesceReply>, Status> {
        let group = seatfence_core::GroupId(req.get_ref().group_id);
        let caller = self.gate.check(&req, Need::Raft(group))?;
        self.check_admitted()?;
        let req = req.into_inner();
        if let Some(id) = caller.node_id().filter(|id| *id != req.leader) {
            return Err(sender_mismatch(id, req.leader));
        }
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

/// Whether `node` is a voter or learner of the replica's own membership.
fn in_membership(g: &GroupHandle, node: u64) -> bool {
    use openraft::async_runtime::watch::WatchReceiver;
    let rx = g.raft.metrics();
    let m = rx.borrow_watched();
    m.membership_config.membership().get_node(&node).is_some()
}

/// The vote a replica holds now.
fn current_vote(g: &GroupHandle) -> Vote {
    use openraft::async_runtime::watch::WatchReceiver;
    g.raft.metrics().borrow_watched().vote
}
