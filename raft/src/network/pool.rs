//! [`PeerPool`]: the sending side. One lazily connected tonic channel per
//! peer, shared by every group; implements openraft-multi's `GroupRouter`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend};
use openraft_multi::{GroupNetworkAdapter, GroupRouter};
use seatfence_core::GroupId;
use seatfence_proto::v1::raft_service_client::RaftServiceClient;
use seatfence_proto::v1::{PingRequest, QuiesceRequest, RaftKind, SnapshotChunk};
use tonic::transport::Channel;

use super::coalesce::Coalescer;
use super::Dialer;
use super::{MAX_MESSAGE_BYTES, SNAPSHOT_CHUNK_BYTES};
use crate::codec;
use crate::types::{Snapshot, TypeConfig, Vote};

/// A vote or an append answered NOT_FOUND (the peer has not opened the
/// group yet) is sent again this many times, this far apart, before it
/// fails.
const NEW_REPLICA_RETRIES: u32 = 4;
const NEW_REPLICA_PAUSE: Duration = Duration::from_millis(50);

/// The shortest deadline a Raft RPC gets on the wire.
const MIN_RPC_TIMEOUT: Duration = Duration::from_secs(1);

/// Cached channels to peers, keyed by node id, each with the
/// [`Coalescer`] that batches Raft messages to it. Cheap to clone.
///
/// The map sits behind a `std::sync::RwLock`, held only to look up or insert
/// a channel, never across an `.await`.
#[derive(Clone, Default)]
pub struct PeerPool {
    peers: Arc<RwLock<HashMap<u64, Peer>>>,
    /// Nodes the directory retired (decommissioned, or declared dead): no
    /// Raft message goes to them, so no answer of theirs counts toward a
    /// quorum (a retired node's key may have leaked). Kept by the node's
    /// directory follower ([`PeerPool::set_retired`]).
    retired: Arc<RwLock<std::collections::BTreeSet<u64>>>,
    /// How peers are dialled (the node's TLS identity; a drill's proxies).
    dialer: Dialer,
}

struct Peer {
    addr: String,
    channel: Channel,
    coalescer: Coalescer,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

impl PeerPool {
    /// A pool dialling its peers through `dialer`.
    pub fn new(dialer: Dialer) -> PeerPool {
        PeerPool {
            dialer,
            ..PeerPool::default()
        }
    }

    /// How this pool dials (for the node's other clients).
    pub fn dialer(&self) -> &Dialer {
        &self.dialer
    }

    /// The nodes no Raft message may go to from now on; whether the set
    /// changed.
    pub fn set_retired(&self, ids: std::collections::BTreeSet<u64>) -> bool {
        let mut retired = self.retired.write().expect("pool lock poisoned");
        if *retired == ids {
            return false;
        }
        *retired = ids;
        true
    }

    /// Refuse to send to a retired node (its answers must not count).
    fn check_not_retired(&self, target: u64) -> Result<(), Unreachable<TypeConfig>> {
        if self
            .retired
            .read()
            .expect("pool lock poisoned")
            .contains(&target)
        {
            return Err(Unreachable::new(&TransportError(format!(
                "node {target} is retired: nothing is sent to it, and none of its answers counts"
            ))));
        }
        Ok(())
    }

    /// The channel to `target`, connecting lazily; a changed address
    /// replaces the cached channel.
    pub fn channel(&self, target: u64, addr: &str) -> Result<Channel, String> {
        if let Some(p) = self.peers.read().expect("pool lock poisoned").get(&target) {
            if p.addr == addr {
                return Ok(p.channel.clone());
            }
        }
        let ch = self
            .dialer
            .endpoint_for_node(addr, target)?
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .connect_lazy();
        // Replacing the entry drops the old coalescer: its task ends once
        // its queued messages are sent.
        self.peers.write().expect("pool lock poisoned").insert(
            target,
            Peer {
                addr: addr.to_string(),
                channel: ch.clone(),
                coalescer: Coalescer::spawn(ch.clone()),
            },
        );
        Ok(ch)
    }

    /// Ping `target` at `addr` (node-level liveness); its incarnation.
    pub async fn ping(&self, target: u64, addr: &str, from: u64) -> Result<u64, String> {
        Ok(self.probe(target, addr, from).await?.incarnation)
    }

    /// Ping `target` at `addr`: its whole answer (what its directory
    /// replica knows of the cluster and of `from`, besides liveness).
    pub async fn probe(
        &self,
        target: u64,
        addr: &str,
        from: u64,
    ) -> Result<seatfence_proto::v1::PingReply, String> {
        let mut client = RaftServiceClient::new(self.channel(target, addr)?);
        let reply = client
            .ping(PingRequest { from })
            .await
            .map_err(|s| s.to_string())?
            .into_inner();
        if reply.node_id != target {
            return Err(format!("{addr} is node {}, not {target}", reply.node_id));
        }
        Ok(reply)
    }

    /// Ask `target` at `addr` to put its replica of a group to sleep;
    /// whether it did.
    pub async fn quiesce(
        &self,
        target: u64,
        addr: &str,
        req: QuiesceRequest,
    ) -> Result<bool, String> {
        let mut client = RaftServiceClient::new(self.channel(target, addr)?);
        let reply = client.quiesce(req).await.map_err(|s| s.to_string())?;
        Ok(reply.into_inner().asleep)
    }

    fn client(&self, target: u64) -> Result<RaftServiceClient<Channel>, Unreachable<TypeConfig>> {
        let peers = self.peers.read().expect("pool lock poisoned");
        let p = peers.get(&target).ok_or_else(|| no_address(target))?;
        Ok(RaftServiceClient::new(p.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// One Raft message to `group` on `target`, coalesced with the other
    /// groups' messages queued for that peer.
    async fn call<Req, Resp>(
        &self,
        target: u64,
        group: GroupId,
        kind: RaftKind,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: serde::Serialize,
        Resp: serde::de::DeserializeOwned,
    {
        self.check_not_retired(target)?;
        let coalescer = {
            let peers = self.peers.read().expect("pool lock poisoned");
            let p = peers.get(&target).ok_or_else(|| no_address(target))?;
            p.coalescer.clone()
        };
        let payload = codec::encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        // openraft bounds appends and votes by the heartbeat interval
        // (100 ms); a follower's flush under load from 100 busy groups can
        // take longer, and timing out only resends the same work.
        let timeout = option.hard_ttl().max(MIN_RPC_TIMEOUT);
        let mut tries = 0;
        let reply = loop {
            match coalescer
                .call(group.0, kind, payload.clone(), timeout)
                .await
            {
                // A new group's first member campaigns as soon as its own
                // directory replica places the group, and a move's leader
                // replicates to its new learners as soon as it adds them;
                // a peer whose replica has not applied that placement yet
                // answers NOT_FOUND. Failing the vote would cost a whole
                // election timeout, and failing the append a WARN from
                // openraft on every move: ask again a few times first (the
                // peer opens the group once it knows).
                Err(s)
                    if s.code() == tonic::Code::NotFound
                        && matches!(
                            kind,
                            RaftKind::Vote | RaftKind::PreVote | RaftKind::AppendEntries
                        )
                        && tries < NEW_REPLICA_RETRIES =>
                {
                    tries += 1;
                    tokio::time::sleep(NEW_REPLICA_PAUSE).await;
                }
                r => break r.map_err(status_to_rpc)?,
            }
        };
        codec::decode(&reply).map_err(|e| RPCError::Network(NetworkError::new(&e)))
    }
}

/// A reply's vote (a higher vote the peer claims to hold) must be one a
/// real peer could answer with: below the largest term and at most
/// [`MAX_TERM_JUMP`](super::service::MAX_TERM_JUMP) above the request's.
/// openraft stores a higher vote it hears in a reply, so one forged answer
/// at `u64::MAX` would wedge the group's next election (`term + 1`) for
/// good, as a forged request would; such a reply is a network error.
fn check_reply_vote(sent: &Vote, got: &Vote, target: u64) -> Result<(), NetworkError<TypeConfig>> {
    let (term, mine) = (got.leader_id.term, sent.leader_id.term);
    if term == u64::MAX || term > mine.saturating_add(super::service::MAX_TERM_JUMP) {
        crate::metrics::METRICS.raft_refused("reply_term_out_of_bounds");
        return Err(NetworkError::new(&TransportError(format!(
            "node {target} answered with term {term} to a message at term {mine}: refused"
        ))));
    }
    Ok(())
}

fn no_address(target: u64) -> Unreachable<TypeConfig> {
    Unreachable::new(&TransportError(format!("no address for node {target}")))
}

fn status_to_rpc(s: tonic::Status) -> RPCError<TypeConfig> {
    let e = TransportError(format!("{}: {}", s.code(), s.message()));
    match s.code() {
        // Not connected, or the group is not (yet) hosted there: back off.
        tonic::Code::Unavailable | tonic::Code::NotFound => {
            RPCError::Unreachable(Unreachable::new(&e))
        }
        _ => RPCError::Network(NetworkError::new(&e)),
    }
}

fn rpc_to_streaming(e: RPCError<TypeConfig>) -> StreamingError<TypeConfig> {
    match e {
        RPCError::Timeout(t) => StreamingError::Timeout(t),
        RPCError::Unreachable(u) => StreamingError::Unreachable(u),
        RPCError::Network(n) => StreamingError::Network(n),
        RPCError::RemoteError(r) => StreamingError::Network(NetworkError::new(&r)),
    }
}

impl GroupRouter<TypeConfig, GroupId> for PeerPool {
    type SnapshotData = crate::types::SnapshotData;

    async fn append_entries(
        &self,
        target: u64,
        group: GroupId,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let r: AppendEntriesResponse<TypeConfig> = self
            .call(target, group, RaftKind::AppendEntries, &rpc, &option)
            .await?;
        if let AppendEntriesResponse::HigherVote(v) = &r {
            check_reply_vote(&rpc.vote, v, target).map_err(RPCError::Network)?;
        }
        Ok(r)
    }

    async fn vote(
        &self,
        target: u64,
        group: GroupId,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let r: VoteResponse<TypeConfig> = self
            .call(target, group, RaftKind::Vote, &rpc, &option)
            .await?;
        check_reply_vote(&rpc.vote, &r.vote, target).map_err(RPCError::Network)?;
        Ok(r)
    }

    async fn pre_vote(
        &self,
        target: u64,
        group: GroupId,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let r: VoteResponse<TypeConfig> = self
            .call(target, group, RaftKind::PreVote, &rpc, &option)
            .await?;
        check_reply_vote(&rpc.vote, &r.vote, target).map_err(RPCError::Network)?;
        Ok(r)
    }

    async fn transfer_leader(
        &self,
        target: u64,
        group: GroupId,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(target, group, RaftKind::TransferLeader, &req, &option)
            .await
    }

    async fn full_snapshot(
        &self,
        target: u64,
        group: GroupId,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        self.check_not_retired(target)
            .map_err(StreamingError::Unreachable)?;
        let mut client = self.client(target).map_err(StreamingError::Unreachable)?;
        let net = |e: std::io::Error| StreamingError::Network(NetworkError::new(&e));
        let sent = vote;
        let vote = codec::encode(&vote).map_err(net)?;
        let meta = codec::encode(&snapshot.meta).map_err(net)?;
        let data = snapshot.snapshot.into_inner();
        let chunk_size = option
            .snapshot_chunk_size()
            .unwrap_or(SNAPSHOT_CHUNK_BYTES)
            .max(1);
        let mut chunks: Vec<SnapshotChunk> = data
            .chunks(chunk_size)
            .map(|c| SnapshotChunk {
                group_id: group.0,
                data: c.to_vec(),
                ..Default::default()
            })
            .collect();
        if chunks.is_empty() {
            chunks.push(SnapshotChunk {
                group_id: group.0,
                ..Default::default()
            });
        }
        chunks[0].vote = vote;
        chunks[0].meta = meta;
        if let Some(last) = chunks.last_mut() {
            last.done = true;
        }
        let n = chunks.len() as u32;
        let mut request = tonic::Request::new(tokio_stream::iter(chunks));
        request.set_timeout(option.hard_ttl() * n.max(1));
        let send = client.install_snapshot(request);
        let reply = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            r = send => r.map_err(|s| rpc_to_streaming(status_to_rpc(s)))?,
        };
        let r: SnapshotResponse<TypeConfig> =
            codec::decode(&reply.into_inner().payload).map_err(net)?;
        check_reply_vote(&sent, &r.vote, target).map_err(StreamingError::Network)?;
        Ok(r)
    }

    fn backoff(&self) -> Option<Backoff> {
        Some(Backoff::new(std::iter::repeat(Duration::from_millis(200))))
    }
}

/// The per-group network factory handed to `Raft::new`.
#[derive(Clone)]
pub struct NetworkFactory {
    /// The node's peer channels, shared by all its groups.
    pub pool: PeerPool,
    /// The group whose Raft messages this factory's clients carry.
    pub group: GroupId,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = GroupNetworkAdapter<TypeConfig, GroupId, PeerPool>;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Self::Network {
        if let Err(e) = self.pool.channel(target, &node.addr) {
            tracing::warn!(group = self.group.0, target, "cannot use peer address: {e}");
        }
        GroupNetworkAdapter::new(self.pool.clone(), target, self.group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn nothing_is_sent_to_a_retired_node_so_its_answers_never_count() {
        let pool = PeerPool::default();
        // A reachable-looking peer: the channel connects lazily, so a
        // message would be queued for it if the pool did not refuse first.
        pool.channel(5, "127.0.0.1:9").unwrap();
        assert!(pool.set_retired([5].into()));
        assert!(!pool.set_retired([5].into()), "the same set is no change");
        let vote = VoteRequest::<TypeConfig>::new(Vote::new(1, 1), None);
        let r: Result<VoteResponse<TypeConfig>, _> = pool
            .call(
                5,
                GroupId(1),
                RaftKind::Vote,
                &vote,
                &RPCOption::new(Duration::from_secs(1)),
            )
            .await;
        match r {
            Err(RPCError::Unreachable(u)) => assert!(u.to_string().contains("retired"), "{u}"),
            other => panic!("a vote went to a retired node: {other:?}"),
        }
        assert!(pool.set_retired(Default::default()), "recommissioned");
    }

    #[test]
    fn an_answer_at_the_largest_term_or_far_ahead_is_refused() {
        let sent = Vote::new(7, 1);
        assert!(check_reply_vote(&sent, &Vote::new(8, 2), 2).is_ok());
        assert!(check_reply_vote(&sent, &Vote::new(7 + (1 << 32), 2), 2).is_ok());
        assert!(check_reply_vote(&sent, &Vote::new(8 + (1 << 32), 2), 2).is_err());
        assert!(check_reply_vote(&sent, &Vote::new(u64::MAX, 2), 2).is_err());
    }
}
