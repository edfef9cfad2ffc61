//! The client's side that finds a group's leader: cached channels and
//! leaders, the per-group write queues, and `at_leader`, which follows
//! hints, probes members and seeds, and backs off until a deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seatfence_core::GroupId;
use seatfence_proto::v1::node_service_client::NodeServiceClient;
use seatfence_proto::v1::{write_batch_reply, WriteBatchRequest};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::transport::Channel;

use super::{ClientError, MemberResolver};
use crate::codec;
use crate::network::MAX_MESSAGE_BYTES;
use crate::propose::{Committed, ProposeError};
use crate::status::from_status;

pub(super) struct Inner {
    pub(super) seeds: Vec<String>,
    pub(super) members: Option<MemberResolver>,
    /// How this client dials (its TLS identity).
    pub(super) dialer: crate::network::Dialer,
    pub(super) channels: Mutex<HashMap<String, Channel>>,
    pub(super) leaders: Mutex<HashMap<GroupId, String>>,
    /// The HTTP edge URL each node (by gRPC address) named in its answers.
    pub(super) edges: Mutex<HashMap<String, Arc<str>>>,
    /// `not_leader` answers followed (for the edge's metrics).
    pub(super) redirects: AtomicU64,
    /// Rotates the first node asked when no leader is known, across calls,
    /// so one unresponsive candidate cannot fail every call.
    pub(super) rotation: std::sync::atomic::AtomicUsize,
}

pub(super) struct Queued {
    pub(super) cmd: Vec<u8>,
    pub(super) tx: oneshot::Sender<Result<Committed, ClientError>>,
}

/// One try of a call at a group's leader.
pub(super) enum Attempt<T> {
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

/// A group's write queue idle this long stops (its task ends and it leaves
/// the client's map); the next write to the group starts another. Without
/// it a long-lived client (a node's edge) kept a task and a map entry for
/// every group it ever wrote to.
pub(super) const QUEUE_IDLE: Duration = Duration::from_secs(30);

/// The write queues of a client, one per group.
pub(super) type QueueMap = HashMap<GroupId, mpsc::UnboundedSender<Queued>>;
pub(super) type Queues = Arc<Mutex<QueueMap>>;

/// The queue task of one group: take what is queued, send it as one batch.
/// `me` is the sender the map holds for it: after [`QUEUE_IDLE`] without a
/// write the task removes it from `queues` (if it is still there), closes
/// the channel, sends what was queued before the close, and ends; a writer
/// whose send then fails starts a fresh queue. Both are weak: a client
/// dropped with all its clones ends its queues at once.
pub(super) async fn run_queue(
    inner: Arc<Inner>,
    deadline: Duration,
    group: GroupId,
    queues: std::sync::Weak<Mutex<QueueMap>>,
    me: mpsc::WeakUnboundedSender<Queued>,
    mut rx: mpsc::UnboundedReceiver<Queued>,
) {
    let inflight = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENT_INFLIGHT));
    let mut buf = Vec::with_capacity(MAX_CLIENT_BATCH);
    let mut me = Some(me);
    loop {
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            return;
        };
        let got = match &me {
            None => rx.recv_many(&mut buf, MAX_CLIENT_BATCH).await,
            // `recv_many` is cancel safe: a timeout loses nothing.
            Some(sender) => {
                match tokio::time::timeout(QUEUE_IDLE, rx.recv_many(&mut buf, MAX_CLIENT_BATCH))
                    .await
                {
                    Ok(n) => n,
                    Err(_idle) => {
                        if let (Some(q), Some(s)) = (queues.upgrade(), sender.upgrade()) {
                            leave(&q, group, &s);
                        }
                        me = None;
                        rx.close();
                        continue;
                    }
                }
            }
        };
        if got == 0 {
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

/// Remove `sender` from `queues` if it is still `group`'s queue.
pub(super) fn leave(queues: &Queues, group: GroupId, sender: &mpsc::UnboundedSender<Queued>) {
    let mut q = queues.lock().expect("queue lock poisoned");
    if q.get(&group).is_some_and(|s| s.same_channel(sender)) {
        q.remove(&group);
    }
}

impl Inner {
    pub(super) fn fresh(
        seeds: Vec<String>,
        members: Option<MemberResolver>,
        dialer: crate::network::Dialer,
    ) -> Inner {
        Inner {
            seeds,
            members,
            dialer,
            channels: Default::default(),
            leaders: Default::default(),
            edges: Default::default(),
            redirects: AtomicU64::new(0),
            rotation: Default::default(),
        }
    }

    pub(super) fn node(&self, addr: &str) -> Result<NodeServiceClient<Channel>, ClientError> {
        let mut channels = self.channels.lock().expect("channel lock poisoned");
        let ch = match channels.get(addr) {
            Some(ch) => ch.clone(),
            None => {
                let ch = self
                    .dialer
                    .endpoint(addr)
                    .map_err(ClientError::BadReply)?
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
    pub(super) fn candidate(&self, group: GroupId, n: usize) -> String {
        let mut all = self.members.as_ref().map(|r| r(group)).unwrap_or_default();
        all.extend(self.seeds.iter().cloned());
        all[n % all.len()].clone()
    }

    /// A `not_leader` answer from `addr`: remember the hinted leader (retry
    /// at once) or forget the leader (pause first). Returns whether to retry
    /// now, and why, for the error if the deadline passes.
    pub(super) fn follow_hint(
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

    /// The node at `addr` answered naming its edge `url` ("" for none).
    pub(super) fn note_edge(&self, addr: &str, url: &str) {
        if url.is_empty() {
            return;
        }
        let mut edges = self.edges.lock().expect("edge lock poisoned");
        if edges.get(addr).is_none_or(|u| &**u != url) {
            edges.insert(addr.to_string(), Arc::from(url));
        }
    }

    /// The edge URL of the node that last answered for `group` as its leader.
    pub(super) fn leader_edge(&self, group: GroupId) -> Option<Arc<str>> {
        let addr = self.leader(group)?;
        self.edges
            .lock()
            .expect("edge lock poisoned")
            .get(&addr)
            .cloned()
    }

    pub(super) fn leader(&self, group: GroupId) -> Option<String> {
        self.leaders
            .lock()
            .expect("leader lock poisoned")
            .get(&group)
            .cloned()
    }

    pub(super) fn set_leader(&self, group: GroupId, addr: Option<String>) {
        let mut leaders = self.leaders.lock().expect("leader lock poisoned");
        match addr {
            Some(a) => leaders.insert(group, a),
            None => leaders.remove(&group),
        };
    }

    /// Send `cmds` to the leader of `group`, following hints, until
    /// committed or `deadline` passes.
    pub(super) async fn write_batch(
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
                        self.note_edge(&addr, &c.edge_url);
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
    /// returned at once; `overloaded` only while no earlier attempt may
    /// have proposed (its "nothing was proposed" is then the call's).
    pub(super) async fn at_leader<T, F, Fut>(
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
        // An attempt failed in a way that may have proposed (no answer in
        // time, a leader gone): from then on an `overloaded` answer does
        // not say nothing happened, so it is retried like any failure.
        let mut maybe_proposed = false;
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
                Attempt::Failed(e @ ProposeError::Overloaded(_)) if maybe_proposed => {
                    last = format!("{addr}: {}: {e}", e.code());
                }
                Attempt::Failed(e) if e.is_final() => return Err(ClientError::Rejected(e)),
                Attempt::Failed(e) => {
                    last = format!("{addr}: {}: {e}", e.code());
                    self.set_leader(group, None);
                    maybe_proposed = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `at_leader` over attempts answered in turn by `answers`.
    async fn scripted(answers: Vec<Attempt<u32>>) -> Result<u32, ClientError> {
        let inner = Inner::fresh(
            vec!["127.0.0.1:1".into()],
            None,
            crate::network::Dialer::default(),
        );
        let script = Mutex::new(std::collections::VecDeque::from(answers));
        let call = |_addr: String| {
            let next = script.lock().unwrap().pop_front().expect("scripted");
            async move { Ok(next) }
        };
        inner
            .at_leader(GroupId(3), Duration::from_secs(5), call)
            .await
    }

    fn overloaded() -> Attempt<u32> {
        Attempt::Failed(ProposeError::Overloaded("full".into()))
    }

    /// A first `overloaded` is the call's answer (nothing was proposed);
    /// after an attempt that may have proposed, it is retried like any
    /// failure, so the caller never reads "no" for a write that may be in.
    #[tokio::test(start_paused = true)]
    async fn overloaded_is_final_only_while_nothing_may_have_been_proposed() {
        let r = scripted(vec![overloaded(), Attempt::Done(1)]).await;
        assert!(
            matches!(r, Err(ClientError::Rejected(ProposeError::Overloaded(_)))),
            "{r:?}"
        );
        let r = scripted(vec![
            Attempt::Failed(ProposeError::Unavailable("no answer within 2s".into())),
            overloaded(),
            Attempt::Done(7),
        ])
        .await;
        assert_eq!(r.ok(), Some(7), "retried past overloaded to the answer");
    }

    /// An idle queue ends its task and leaves the map; a write after that
    /// finds its old sender closed (and the client starts a fresh queue).
    #[tokio::test(start_paused = true)]
    async fn an_idle_queue_stops_and_leaves_the_map() {
        let queues: Queues = Default::default();
        let (tx, rx) = mpsc::unbounded_channel();
        queues.lock().unwrap().insert(GroupId(7), tx.clone());
        let inner = Arc::new(Inner::fresh(
            Vec::new(),
            None,
            crate::network::Dialer::default(),
        ));
        let task = tokio::spawn(run_queue(
            inner,
            Duration::from_secs(1),
            GroupId(7),
            Arc::downgrade(&queues),
            tx.downgrade(),
            rx,
        ));
        tokio::time::sleep(QUEUE_IDLE / 2).await;
        assert_eq!(queues.lock().unwrap().len(), 1, "not idle long enough yet");
        tokio::time::sleep(QUEUE_IDLE).await;
        task.await.expect("the queue task ends");
        assert!(queues.lock().unwrap().is_empty());
        let (otx, _orx) = oneshot::channel();
        let late = Queued {
            cmd: Vec::new(),
            tx: otx,
        };
        assert!(tx.send(late).is_err(), "a stopped queue refuses the send");
    }
}
