//! [`ClusterClient`]: proposes commands to a group and asks it questions,
//! from anywhere (tests, benchmarks, `seatfence ctl`, and a node's own edge,
//! workers and move coordinator). Follows leader hints, backs off when no
//! leader is known, gives up at a deadline.
//!
//! A client built inside a node ([`ClusterClient::with_local`]) calls the
//! node's [`Proposer`] directly for the groups this node leads: no encode,
//! no gRPC, no tonic types on that path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};

use seatfence_core::{Command, GroupId, Query, QueryResult};
use seatfence_proto::v1::node_service_client::NodeServiceClient;
use seatfence_proto::v1::{
    query_reply, write_batch_reply, QueryRequest, ReadReply, ReadRequest, StatusReply,
    StatusRequest, WriteBatchRequest,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use crate::codec;
use crate::network::MAX_MESSAGE_BYTES;
use crate::propose::{Committed, ProposeError, Proposer};
use crate::status::from_status;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("no leader for group {group} within {waited:?}: {last}")]
    NoLeader {
        group: GroupId,
        waited: Duration,
        last: String,
    },
    /// The leader (or the node asked) refused for good.
    #[error("rejected by node: {code}: {0}", code = .0.code())]
    Rejected(ProposeError),
    #[error("reply did not decode: {0}")]
    BadReply(String),
}

impl ClientError {
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::NoLeader { .. } => "no_leader",
            ClientError::Rejected(e) => e.code(),
            ClientError::BadReply(_) => "bad_reply",
        }
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
    queues: Arc<Mutex<HashMap<GroupId, mpsc::UnboundedSender<Queued>>>>,
    deadline: Duration,
    /// This node's own leader side, for the groups it leads.
    local: Option<Arc<Proposer>>,
}

/// Where a group's replicas are: gRPC addresses to try when its leader is
/// unknown (an edge answers from its replica of the directory).
pub type MemberResolver = Arc<dyn Fn(GroupId) -> Vec<String> + Send + Sync>;

struct Inner {
    seeds: Vec<String>,
    members: Option<MemberResolver>,
    channels: Mutex<HashMap<String, Channel>>,
    leaders: Mutex<HashMap<GroupId, String>>,
    /// `not_leader` answers followed (for the edge's metrics).
    redirects: AtomicU64,
    /// Rotates the first node asked when no leader is known, across calls,
    /// so one unresponsive candidate cannot fail every call.
    rotation: std::sync::atomic::AtomicUsize,
}

struct Queued {
    cmd: Vec<u8>,
    tx: oneshot::Sender<Result<Committed, ClientError>>,
}

/// One try of a call at a group's leader.
enum Attempt<T> {
    Done(T),
    NotLeader(seatfence_proto::v1::NotLeader),
    Failed(ProposeError),
}

/// How long a node asked only to find a group's leader may take to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Most commands one `WriteBatch` carries.
const MAX_CLIENT_BATCH: usize = 512;

/// `WriteBatch` RPCs of one group in flight at once; further writes wait
/// in the queue and leave together.
const MAX_CLIENT_INFLIGHT: usize = 4;

impl ClusterClient {
    /// `seeds`: gRPC addresses of any nodes of the cluster.
    pub fn new(seeds: Vec<String>) -> ClusterClient {
        ClusterClient {
            inner: Arc::new(Inner {
                seeds,
                members: None,
                channels: Default::default(),
                leaders: Default::default(),
                redirects: AtomicU64::new(0),
                rotation: Default::default(),
            }),
            queues: Default::default(),
            deadline: Duration::from_secs(15),
            local: None,
        }
    }

    /// Try the members `resolver` names for a group (then the seeds) when
    /// its leader is unknown, instead of the seeds alone.
    pub fn with_members(self, resolver: MemberResolver) -> ClusterClient {
        let inner = Inner {
            seeds: self.inner.seeds.clone(),
            members: Some(resolver),
            channels: Default::default(),
            leaders: Default::default(),
            redirects: AtomicU64::new(0),
            rotation: Default::default(),
        };
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
                return r;
            }
        }
        let bytes = codec::encode(cmd).map_err(|e| ClientError::BadReply(e.to_string()))?;
        let (tx, rx) = oneshot::channel();
        let queued = Queued { cmd: bytes, tx };
        let sender = {
            let mut queues = self.queues.lock().expect("queue lock poisoned");
            queues
                .entry(group)
                .or_insert_with(|| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    tokio::spawn(run_queue(self.inner.clone(), self.deadline, group, rx));
                    tx
                })
                .clone()
        };
        sender
            .send(queued)
            .map_err(|_| ClientError::BadReply("write queue stopped".into()))?;
        rx.await
            .map_err(|_| ClientError::BadReply("write queue stopped".into()))?
    }

    /// How many `not_leader` answers this client has followed.
    pub fn redirects(&self) -> u64 {
        self.inner.redirects.load(Ordering::Relaxed)
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
        if let Some(p) = self.local_leader(group) {
            if let Some(r) = self.local(group, p.query(group, q, linearizable)).await {
                return r.map(|a| (a.result, a.term));
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
                        linearizable,
                    });
                    req.set_timeout(Duration::from_secs(2));
                    let reply = inner.node(&addr)?.query(req).await;
                    Ok(match reply.map(|r| r.into_inner().result) {
                        Ok(Some(query_reply::Result::Answer(a))) => {
                            let r = codec::decode(&a.result)
                                .map_err(|e| ClientError::BadReply(e.to_string()))?;
                            Attempt::Done((r, a.term))
                        }
                        Ok(Some(query_reply::Result::NotLeader(nl))) => Attempt::NotLeader(nl),
                        Ok(None) => return Err(ClientError::BadReply("empty query reply".into())),
                        Err(s) => Attempt::Failed(from_status(group, &s)),
                    })
                }
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
            .map_err(|s| ClientError::Rejected(from_status(group, &s)))?
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

    /// The status of the node at `addr`.
    pub async fn status_at(&self, addr: &str) -> Result<StatusReply, ClientError> {
        let mut req = tonic::Request::new(StatusRequest {});
        req.set_timeout(Duration::from_secs(5));
        Ok(self
            .node(addr)?
            .status(req)
            .await
            .map_err(|s| ClientError::Rejected(from_status(GroupId::DIRECTORY, &s)))?
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

/// The queue task of one group: take what is queued, send it as one batch.
async fn run_queue(
    inner: Arc<Inner>,
    deadline: Duration,
    group: GroupId,
    mut rx: mpsc::UnboundedReceiver<Queued>,
) {
    let inflight = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENT_INFLIGHT));
    let mut buf = Vec::with_capacity(MAX_CLIENT_BATCH);
    loop {
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            return;
        };
        if rx.recv_many(&mut buf, MAX_CLIENT_BATCH).await == 0 {
            return;
        }
        let batch: Vec<Queued> = std::mem::take(&mut buf);
        let inner = inner.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let (cmds, txs): (Vec<_>, Vec<_>) = batch.into_iter().map(|q| (q.cmd, q.tx)).unzip();
            match inner.write_batch(group, cmds, deadline).await {
                Ok(outcomes) => {
                    for (tx, o) in txs.into_iter().zip(outcomes) {
                        let _ = tx.send(Ok(o));
                    }
                }
                Err(e) => {
                    for tx in txs {
                        let _ = tx.send(Err(e.clone()));
                    }
                }
            }
        });
    }
}

impl Inner {
    fn node(&self, addr: &str) -> Result<NodeServiceClient<Channel>, ClientError> {
        let mut channels = self.channels.lock().expect("channel lock poisoned");
        let ch = match channels.get(addr) {
            Some(ch) => ch.clone(),
            None => {
                let ch =
                    Endpoint::from_shared(format!("http://{}", crate::network::via::resolve(addr)))
                        .map_err(|e| ClientError::BadReply(format!("bad address {addr}: {e}")))?
                        .local_address(crate::network::via::source_ip())
                        .connect_timeout(Duration::from_millis(500))
                        .tcp_nodelay(true)
                        .connect_lazy();
                channels.insert(addr.to_string(), ch.clone());
                ch
            }
        };
        Ok(NodeServiceClient::new(ch)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// The `n`th node to ask about `group` when its leader is unknown: its
    /// members (if a resolver knows them), then the seeds.
    fn candidate(&self, group: GroupId, n: usize) -> String {
        let mut all = self.members.as_ref().map(|r| r(group)).unwrap_or_default();
        all.extend(self.seeds.iter().cloned());
        all[n % all.len()].clone()
    }

    /// A `not_leader` answer from `addr`: remember the hinted leader (retry
    /// at once) or forget the leader (pause first). Returns whether to retry
    /// now, and why, for the error if the deadline passes.
    fn follow_hint(
        &self,
        group: GroupId,
        addr: &str,
        nl: seatfence_proto::v1::NotLeader,
    ) -> (bool, String) {
        self.redirects.fetch_add(1, Ordering::Relaxed);
        match nl.leader {
            Some(h) if h.grpc_addr != addr => {
                let why = format!("{addr}: not leader, try {}", h.grpc_addr);
                self.set_leader(group, Some(h.grpc_addr));
                (true, why)
            }
            _ => {
                self.set_leader(group, None);
                (false, format!("{addr}: not leader, no leader known"))
            }
        }
    }

    fn leader(&self, group: GroupId) -> Option<String> {
        self.leaders
            .lock()
            .expect("leader lock poisoned")
            .get(&group)
            .cloned()
    }

    fn set_leader(&self, group: GroupId, addr: Option<String>) {
        let mut leaders = self.leaders.lock().expect("leader lock poisoned");
        match addr {
            Some(a) => leaders.insert(group, a),
            None => leaders.remove(&group),
        };
    }

    /// Send `cmds` to the leader of `group`, following hints, until
    /// committed or `deadline` passes.
    async fn write_batch(
        &self,
        group: GroupId,
        cmds: Vec<Vec<u8>>,
        deadline: Duration,
    ) -> Result<Vec<Committed>, ClientError> {
        let n = cmds.len();
        self.at_leader(group, deadline, |addr| {
            let cmds = cmds.clone();
            async move {
                let mut req = tonic::Request::new(WriteBatchRequest {
                    group_id: group.0,
                    commands: cmds,
                    expected_term: None,
                });
                req.set_timeout(Duration::from_secs(5));
                let reply = self.node(&addr)?.write_batch(req).await;
                Ok(match reply.map(|r| r.into_inner().result) {
                    Ok(Some(write_batch_reply::Result::Committed(c))) => {
                        if c.responses.len() != n {
                            return Err(ClientError::BadReply(format!(
                                "{} responses for {n} commands",
                                c.responses.len()
                            )));
                        }
                        let outcomes = c
                            .responses
                            .iter()
                            .map(|r| {
                                Ok(Committed {
                                    response: codec::decode(r)
                                        .map_err(|e| ClientError::BadReply(e.to_string()))?,
                                    log_index: c.log_index,
                                    term: c.term,
                                })
                            })
                            .collect::<Result<Vec<_>, ClientError>>()?;
                        Attempt::Done(outcomes)
                    }
                    Ok(Some(write_batch_reply::Result::NotLeader(nl))) => Attempt::NotLeader(nl),
                    Ok(None) => return Err(ClientError::BadReply("empty write reply".into())),
                    Err(s) => Attempt::Failed(from_status(group, &s)),
                })
            }
        })
        .await
    }

    /// Run `call` against the leader of `group` until it answers or
    /// `deadline` passes: follow `not_leader` hints, try members and seeds
    /// when no leader is known, back off (20 ms doubling to 300 ms) between
    /// failures. An error no retry can fix ([`ProposeError::is_final`]) is
    /// returned at once.
    async fn at_leader<T, F, Fut>(
        &self,
        group: GroupId,
        deadline: Duration,
        mut call: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = Result<Attempt<T>, ClientError>>,
    {
        let start = Instant::now();
        let mut last = String::from("no attempt");
        let mut pause = Duration::from_millis(20);
        while start.elapsed() < deadline {
            let known = self.leader(group);
            let probing = known.is_none();
            let addr = known.unwrap_or_else(|| {
                let n = self.rotation.fetch_add(1, Ordering::Relaxed);
                self.candidate(group, n)
            });
            // No single attempt may outlive the deadline (a paused node
            // never answers; its RPC deadline may be longer than ours), and
            // a node merely probed for the leader gets a short one.
            let mut remaining = deadline.saturating_sub(start.elapsed());
            if probing {
                remaining = remaining.min(PROBE_TIMEOUT);
            }
            let attempt = match tokio::time::timeout(remaining, call(addr.clone())).await {
                Ok(a) => a?,
                Err(_) => Attempt::Failed(ProposeError::Unavailable(format!(
                    "no answer within {remaining:?}"
                ))),
            };
            match attempt {
                Attempt::Done(v) => {
                    self.set_leader(group, Some(addr));
                    return Ok(v);
                }
                Attempt::NotLeader(nl) => {
                    let (retry_now, why) = self.follow_hint(group, &addr, nl);
                    last = why;
                    if retry_now {
                        continue;
                    }
                }
                Attempt::Failed(e) if e.is_final() => return Err(ClientError::Rejected(e)),
                Attempt::Failed(e) => {
                    last = format!("{addr}: {}: {e}", e.code());
                    self.set_leader(group, None);
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(300));
        }
        Err(ClientError::NoLeader {
            group,
            waited: start.elapsed(),
            last,
        })
    }
}
