//! [`ClusterClient`]: proposes commands to a group and asks it questions,
//! from anywhere (tests, benchmarks, `seatfence ctl`, and a node's own edge,
//! workers and move coordinator). Follows leader hints, backs off when no
//! leader is known, gives up at a deadline.
//!
//! A client built inside a node ([`ClusterClient::with_local`]) calls the
//! node's [`Proposer`] directly for the groups this node leads: no encode,
//! no gRPC, no tonic types on that path.

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering;

use seatfence_core::{Command, GroupId, Query, QueryResult};
use seatfence_proto::v1::node_service_client::NodeServiceClient;
use seatfence_proto::v1::{
    dump_chunk, query_reply, DumpChunk, DumpHeader, DumpRequest, QueryRequest, ReadReply,
    ReadRequest, StatusReply, StatusRequest,
};
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;

mod leader;

use leader::{leave, run_queue, Attempt, Inner, Queued, Queues};

use crate::codec;
use crate::network::Dialer;
use crate::propose::{Committed, ProposeError, Proposer, Read};
use crate::status::from_status;

/// Why a [`ClusterClient`] call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// No leader of the group answered before the client's deadline passed.
    #[error("no leader for group {group} within {waited:?}: {last}")]
    NoLeader {
        /// The group asked.
        group: GroupId,
        /// How long the client kept looking for a leader.
        waited: Duration,
        /// Why the last attempt failed ("no attempt" when none was made).
        last: String,
    },
    /// The leader (or the node asked) refused for good.
    #[error("rejected by node: {code}: {0}", code = .0.code())]
    Rejected(ProposeError),
    /// A reply did not decode or made no sense; also used when the client itself
    /// fails (a command that did not encode, a bad address, a stopped write queue).
    #[error("reply did not decode: {0}")]
    BadReply(String),
    /// The node could not be reached at all (nothing listens there, or
    /// the connection broke): it did not refuse anything.
    #[error("node {addr} unreachable: {reason}")]
    Unreachable {
        /// The node's gRPC address.
        addr: String,
        /// The transport's error message.
        reason: String,
    },
}

impl ClientError {
    /// A stable `snake_case` name for the error (a [`ProposeError`]'s own code when rejected).
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::NoLeader { .. } => "no_leader",
            ClientError::Rejected(e) => e.code(),
            ClientError::BadReply(_) => "bad_reply",
            ClientError::Unreachable { .. } => "unreachable",
        }
    }

    /// A call to the node at `addr` about `group` failed with `s`: a
    /// transport failure (tonic's own status, with a source) is
    /// `Unreachable`; a status the node sent is its refusal.
    fn of_call(addr: &str, group: GroupId, s: &tonic::Status) -> ClientError {
        if s.code() == tonic::Code::Unavailable && std::error::Error::source(s).is_some() {
            return ClientError::Unreachable {
                addr: addr.to_string(),
                reason: s.message().to_string(),
            };
        }
        ClientError::Rejected(from_status(group, s))
    }
}

/// Shared by many tasks; clones share channels, the leader cache and the
/// per-group write queues.
///
/// Concurrent writes to one group are packed into one `WriteBatch` RPC (and
/// one log entry) by a queue task per group; each write still gets its own
/// response. Batches pipeline: the queue never waits for one to commit
/// before sending the next. A batch that fails in transport is retried
/// whole, so a command may be applied twice: commands must be idempotent
/// (a `Put` is; later commands carry idempotency keys).
#[derive(Clone)]
pub struct ClusterClient {
    inner: Arc<Inner>,
    queues: Queues,
    deadline: Duration,
    /// This node's own leader side, for the groups it leads.
    local: Option<Arc<Proposer>>,
}

/// Where a group's replicas are: gRPC addresses to try when its leader is
/// unknown (an edge answers from its replica of the directory).
pub type MemberResolver = Arc<dyn Fn(GroupId) -> Vec<String> + Send + Sync>;

impl ClusterClient {
    /// `seeds`: gRPC addresses of any nodes of the cluster, dialled (like
    /// every node this client finds) through `dialer`.
    pub fn new(seeds: Vec<String>, dialer: Dialer) -> ClusterClient {
        ClusterClient {
            inner: Arc::new(Inner::fresh(seeds, None, dialer)),
            queues: Default::default(),
            deadline: Duration::from_secs(15),
            local: None,
        }
    }

    /// Try the members `resolver` names for a group (then the seeds) when
    /// its leader is unknown, instead of the seeds alone.
    pub fn with_members(self, resolver: MemberResolver) -> ClusterClient {
        let inner = Inner::fresh(
            self.inner.seeds.clone(),
            Some(resolver),
            self.inner.dialer.clone(),
        );
        ClusterClient {
            inner: Arc::new(inner),
            queues: Default::default(),
            deadline: self.deadline,
            local: self.local,
        }
    }

    /// Call `proposer` in-process for every group its node leads; other
    /// groups (or a leadership lost meanwhile) go over gRPC as before.
    pub fn with_local(mut self, proposer: Arc<Proposer>) -> ClusterClient {
        self.local = Some(proposer);
        self
    }

    /// This node's proposer, if it leads `group` now.
    fn local_leader(&self, group: GroupId) -> Option<&Proposer> {
        self.local.as_deref().filter(|p| p.leads(group))
    }

    /// How long a write may keep looking for a leader before `no_leader`.
    pub fn with_deadline(mut self, d: Duration) -> ClusterClient {
        self.deadline = d;
        self.queues = Default::default();
        self
    }

    /// A client to the node at `addr` (one cached channel per address).
    pub fn node(&self, addr: &str) -> Result<NodeServiceClient<Channel>, ClientError> {
        self.inner.node(addr)
    }

    /// Propose `cmd` to `group` and wait until it is committed and applied.
    pub async fn write(&self, group: GroupId, cmd: &Command) -> Result<Committed, ClientError> {
        if let Some(p) = self.local_leader(group) {
            if let Some(r) = self.local(group, p.write(group, cmd.clone(), None)).await {
                if let Ok(c) = &r {
                    let holds =
                        crate::propose::origins::holds_granted(std::slice::from_ref(&c.response));
                    p.origins().note(group, p.node_id(), holds);
                }
                return r;
            }
        }
        let bytes = codec::encode(cmd).map_err(|e| ClientError::BadReply(e.to_string()))?;
        let (tx, rx) = oneshot::channel();
        let mut queued = Queued { cmd: bytes, tx };
        // A queue that went idle and closed between the lookup and the
        // send: the next lookup starts a fresh one (which cannot close
        // before the send, unless the runtime is shutting down).
        for attempt in 0.. {
            let sender = self.queue(group);
            match sender.send(queued) {
                Ok(()) => break,
                Err(mpsc::error::SendError(q)) if attempt < 2 => {
                    leave(&self.queues, group, &sender);
                    queued = q;
                }
                Err(_) => return Err(ClientError::BadReply("write queue stopped".into())),
            }
        }
        rx.await
            .map_err(|_| ClientError::BadReply("write queue stopped".into()))?
    }

    /// `group`'s write queue, started if it has none.
    fn queue(&self, group: GroupId) -> mpsc::UnboundedSender<Queued> {
        let mut queues = self.queues.lock().expect("queue lock poisoned");
        queues
            .entry(group)
            .or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(run_queue(
                    self.inner.clone(),
                    self.deadline,
                    group,
                    Arc::downgrade(&self.queues),
                    tx.downgrade(),
                    rx,
                ));
                tx
            })
            .clone()
    }

    /// Groups with a write queue (a task each) now.
    pub fn write_queues(&self) -> usize {
        self.queues.lock().expect("queue lock poisoned").len()
    }

    /// How many `not_leader` answers this client has followed.
    pub fn redirects(&self) -> u64 {
        self.inner.redirects.load(Ordering::Relaxed)
    }

    /// The public URL of the HTTP edge on the node leading `group`, as far
    /// as this client knows: its own node's when it leads the group here,
    /// else the one the leader named in its last answer to this client
    /// (`None`: no leader known, or it named none). A hint, never proof.
    pub fn leader_edge(&self, group: GroupId) -> Option<Arc<str>> {
        match self.local_leader(group) {
            Some(p) => p.edge_url().cloned(),
            None => self.inner.leader_edge(group),
        }
    }

    /// Whether this node leads `group` (its commands are proposed in-process).
    pub fn leads(&self, group: GroupId) -> bool {
        self.local_leader(group).is_some()
    }

    /// The gRPC address of `group`'s leader as this client last learned it
    /// (`None`: not known yet, or this node leads it). A hint, never proof.
    pub fn known_leader(&self, group: GroupId) -> Option<String> {
        self.inner.leader(group)
    }

    /// Forget the cached leader of `group` (after a reply that looked stale).
    pub fn forget_leader(&self, group: GroupId) {
        self.inner.set_leader(group, None);
    }

    /// Ask `group` a question at its leader, following hints until
    /// answered or the deadline passes. `linearizable` confirms leadership
    /// first (read index). Returns the answer and the answering term.
    pub async fn query(
        &self,
        group: GroupId,
        q: &Query,
        linearizable: bool,
    ) -> Result<(QueryResult, u64), ClientError> {
        self.query_with(group, q, Read::linearizable(linearizable))
            .await
    }

    /// [`ClusterClient::query`] as fresh as `read` asks ([`Read::Lease`]:
    /// the leader's lease confirms it when fresh, see [`Read`]).
    pub async fn query_with(
        &self,
        group: GroupId,
        q: &Query,
        read: Read,
    ) -> Result<(QueryResult, u64), ClientError> {
        self.query_indexed(group, q, read)
            .await
            .map(|(r, term, _)| (r, term))
    }

    /// [`ClusterClient::query_with`], also returning the answering
    /// leader's applied index: with [`Read::ReadIndex`] or [`Read::Lease`]
    /// it covers every write acknowledged before the call began.
    pub async fn query_indexed(
        &self,
        group: GroupId,
        q: &Query,
        read: Read,
    ) -> Result<(QueryResult, u64, u64), ClientError> {
        if let Some(p) = self.local_leader(group) {
            if let Some(r) = self.local(group, p.query_with(group, q, read)).await {
                return r.map(|a| (a.result, a.term, a.applied_index));
            }
        }
        let bytes = codec::encode(q).map_err(|e| ClientError::BadReply(e.to_string()))?;
        let inner = &self.inner;
        inner
            .at_leader(group, self.deadline, |addr| {
                let bytes = bytes.clone();
                async move {
                    let mut req = tonic::Request::new(QueryRequest {
                        group_id: group.0,
                        query: bytes,
                        linearizable: read != Read::Replica,
                        lease: read == Read::Lease,
                    });
                    req.set_timeout(Duration::from_secs(2));
                    let reply = inner.node(&addr)?.query(req).await;
                    Ok(match reply.map(|r| r.into_inner().result) {
                        Ok(Some(query_reply::Result::Answer(a))) => {
                            let r = codec::decode(&a.result)
                                .map_err(|e| ClientError::BadReply(e.to_string()))?;
                            inner.note_edge(&addr, &a.edge_url);
                            Attempt::Done((r, a.term, a.applied_index))
                        }
                        Ok(Some(query_reply::Result::NotLeader(nl))) => Attempt::NotLeader(nl),
                        Ok(None) => return Err(ClientError::BadReply("empty query reply".into())),
                        Err(s) => Attempt::Failed(from_status(group, &s)),
                    })
                }
            })
            .await
    }

    /// Ask the replica of `group` on the node at `addr` (`None`: this
    /// node's own, in-process), confirming nothing: its answer, term and
    /// the index it has applied, however far behind that is. One attempt,
    /// bounded by `timeout`.
    pub async fn query_replica(
        &self,
        group: GroupId,
        addr: Option<&str>,
        q: &Query,
        timeout: Duration,
    ) -> Result<(QueryResult, u64, u64), ClientError> {
        let Some(addr) = addr else {
            let p = self
                .local
                .as_deref()
                .ok_or_else(|| ClientError::BadReply("no replica on this node".into()))?;
            let call = p.query_with(group, q, Read::Replica);
            return match tokio::time::timeout(timeout, call).await {
                Ok(Ok(a)) => Ok((a.result, a.term, a.applied_index)),
                Ok(Err(e)) => Err(ClientError::Rejected(e)),
                Err(_) => Err(ClientError::BadReply(
                    "this node's replica did not answer in time".into(),
                )),
            };
        };
        let bytes = codec::encode(q).map_err(|e| ClientError::BadReply(e.to_string()))?;
        let mut req = tonic::Request::new(QueryRequest {
            group_id: group.0,
            query: bytes,
            linearizable: false,
            lease: false,
        });
        req.set_timeout(timeout);
        let reply = self.inner.node(addr)?.query(req).await;
        match reply.map(|r| r.into_inner().result) {
            Ok(Some(query_reply::Result::Answer(a))) => {
                let r =
                    codec::decode(&a.result).map_err(|e| ClientError::BadReply(e.to_string()))?;
                Ok((r, a.term, a.applied_index))
            }
            Ok(_) => Err(ClientError::BadReply(format!(
                "node {addr} has no replica of group {}",
                group.0
            ))),
            Err(s) => Err(ClientError::Rejected(from_status(group, &s))),
        }
    }

    /// Start a dump of `group` at its leader (`NodeService.Dump`, for a
    /// backup): its header, and the stream of the chunks that follow (the
    /// records, then the trailer).
    pub async fn dump(
        &self,
        group: GroupId,
    ) -> Result<(DumpHeader, tonic::Streaming<DumpChunk>), ClientError> {
        let inner = &self.inner;
        inner
            .at_leader(group, self.deadline, |addr| async move {
                let reply = inner
                    .node(&addr)?
                    .dump(DumpRequest { group_id: group.0 })
                    .await;
                let mut stream = match reply {
                    Ok(r) => r.into_inner(),
                    Err(s) => return Ok(Attempt::Failed(from_status(group, &s))),
                };
                Ok(match stream.message().await {
                    Ok(Some(DumpChunk {
                        part: Some(dump_chunk::Part::Header(h)),
                    })) => Attempt::Done((h, stream)),
                    Ok(Some(DumpChunk {
                        part: Some(dump_chunk::Part::NotLeader(nl)),
                    })) => Attempt::NotLeader(nl),
                    Ok(other) => {
                        return Err(ClientError::BadReply(format!(
                            "a dump began with {other:?}"
                        )))
                    }
                    Err(s) => Attempt::Failed(from_status(group, &s)),
                })
            })
            .await
    }

    /// Read `key` from the replica of `group` on the node at `addr`.
    pub async fn read_at(
        &self,
        addr: &str,
        group: GroupId,
        key: &str,
    ) -> Result<ReadReply, ClientError> {
        let req = ReadRequest {
            group_id: group.0,
            key: key.to_string(),
            linearizable: false,
        };
        Ok(self
            .node(addr)?
            .read(req)
            .await
            .map_err(|s| ClientError::of_call(addr, group, &s))?
            .into_inner())
    }

    /// Run a membership operation at the leader of `group` (following
    /// hints); answers the group's membership afterwards.
    pub async fn membership(
        &self,
        group: GroupId,
        op: &crate::membership::MembershipOp,
    ) -> Result<crate::membership::MembershipStatus, ClientError> {
        use seatfence_proto::v1::{membership_reply, MembershipRequest};
        if let Some(p) = self.local_leader(group) {
            if let Some(r) = self.local(group, p.membership(group, op.clone())).await {
                return r;
            }
        }
        let bytes = codec::encode(op).map_err(|e| ClientError::BadReply(e.to_string()))?;
        let inner = &self.inner;
        inner
            .at_leader(group, self.deadline, |addr| {
                let bytes = bytes.clone();
                async move {
                    let mut req = tonic::Request::new(MembershipRequest {
                        group_id: group.0,
                        op: bytes,
                    });
                    req.set_timeout(Duration::from_secs(10));
                    let reply = inner.node(&addr)?.membership(req).await;
                    Ok(match reply.map(|r| r.into_inner().result) {
                        Ok(Some(membership_reply::Result::Status(b))) => Attempt::Done(
                            codec::decode(&b).map_err(|e| ClientError::BadReply(e.to_string()))?,
                        ),
                        Ok(Some(membership_reply::Result::NotLeader(nl))) => Attempt::NotLeader(nl),
                        Ok(None) => {
                            return Err(ClientError::BadReply("empty membership reply".into()))
                        }
                        Err(s) => Attempt::Failed(from_status(group, &s)),
                    })
                }
            })
            .await
    }

    /// Ask the leader of `group` to hand its leadership to the voter `to`
    /// (returns once asked; the caller watches for the new leader).
    pub async fn transfer_leader(&self, group: GroupId, to: u64) -> Result<(), ClientError> {
        use seatfence_proto::v1::TransferLeaderRequest;
        if let Some(p) = self.local_leader(group) {
            if let Some(r) = self.local(group, p.transfer_leader(group, to)).await {
                return r;
            }
        }
        let inner = &self.inner;
        inner
            .at_leader(group, self.deadline, |addr| async move {
                let mut req = tonic::Request::new(TransferLeaderRequest {
                    group_id: group.0,
                    to,
                });
                req.set_timeout(Duration::from_secs(2));
                Ok(match inner.node(&addr)?.transfer_leader(req).await {
                    Ok(_) => Attempt::Done(()),
                    Err(s) => Attempt::Failed(from_status(group, &s)),
                })
            })
            .await
    }

    /// The status of the node at `addr` (no state digests: see
    /// [`status_with_digests_at`](Self::status_with_digests_at)).
    pub async fn status_at(&self, addr: &str) -> Result<StatusReply, ClientError> {
        self.status_of(addr, false).await
    }

    /// The status of the node at `addr` with every group's `state_digest`
    /// (a hash of all its records: for tests and drills comparing
    /// replicas).
    pub async fn status_with_digests_at(&self, addr: &str) -> Result<StatusReply, ClientError> {
        self.status_of(addr, true).await
    }

    async fn status_of(&self, addr: &str, with_digest: bool) -> Result<StatusReply, ClientError> {
        let mut req = tonic::Request::new(StatusRequest {
            with_digest,
            with_metrics: false,
        });
        req.set_timeout(Duration::from_secs(5));
        Ok(self
            .node(addr)?
            .status(req)
            .await
            .map_err(|s| ClientError::of_call(addr, GroupId::DIRECTORY, &s))?
            .into_inner())
    }
}

impl ClusterClient {
    /// An in-process call at this node's leader, bounded by the client's
    /// deadline like any remote attempt (a leader that lost its quorum
    /// answers nothing); what it settles, as [`settled`] says.
    async fn local<T>(
        &self,
        group: GroupId,
        call: impl std::future::Future<Output = Result<T, ProposeError>>,
    ) -> Option<Result<T, ClientError>> {
        match tokio::time::timeout(self.deadline, call).await {
            Ok(r) => settled(r),
            Err(_) => Some(Err(ClientError::NoLeader {
                group,
                waited: self.deadline,
                last: "this node's own leader did not answer in time".into(),
            })),
        }
    }
}

/// What an in-process call at this node's leader settles: its answer, or
/// an error no retry can fix; `None` (ask the leader over gRPC, retrying
/// until the deadline) when it was `not_leader` or may pass.
fn settled<T>(r: Result<T, ProposeError>) -> Option<Result<T, ClientError>> {
    match r {
        Ok(v) => Some(Ok(v)),
        Err(e) if e.is_final() => Some(Err(ClientError::Rejected(e))),
        Err(_) => None,
    }
}
