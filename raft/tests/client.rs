//! `ClusterClient` against fake nodes on 127.0.0.1: it follows a
//! `not_leader` hint to the leader, and stops at an answer no retry can fix
//! (an outcome that may or may not have committed) instead of resending.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seatfence_core::{Command, GroupId, Response};
use seatfence_proto::v1::node_service_server::{NodeService, NodeServiceServer};
use seatfence_proto::v1::*;
use seatfence_raft::codec::encode;
use seatfence_raft::status::to_status;
use seatfence_raft::{ClientError, ClusterClient, ProposeError};
use tonic::{Request, Response as TonicResponse, Status};

/// What a fake node answers to `WriteBatch`.
enum Answer {
    /// Not the leader; the leader is at this address.
    NotLeader(String),
    /// Committed: `Written` for every command.
    Commit,
    /// The entry was discarded by a leader change.
    OutcomeUnknown,
}

struct FakeNode {
    answer: Answer,
    calls: AtomicUsize,
}

#[tonic::async_trait]
impl NodeService for FakeNode {
    async fn write(&self, _: Request<WriteRequest>) -> Result<TonicResponse<WriteReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn write_batch(
        &self,
        req: Request<WriteBatchRequest>,
    ) -> Result<TonicResponse<WriteBatchReply>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let n = req.into_inner().commands.len();
        let result = match &self.answer {
            Answer::NotLeader(addr) => write_batch_reply::Result::NotLeader(NotLeader {
                leader: Some(LeaderHint {
                    node_id: 2,
                    grpc_addr: addr.clone(),
                }),
            }),
            Answer::Commit => {
                let written = encode(&Response::Written { existed: false }).unwrap();
                write_batch_reply::Result::Committed(BatchCommitted {
                    responses: vec![written; n],
                    log_index: 7,
                    term: 3,
                    edge_url: String::new(),
                })
            }
            Answer::OutcomeUnknown => {
                return Err(to_status(&ProposeError::OutcomeUnknown(
                    "entry discarded".into(),
                )))
            }
        };
        Ok(TonicResponse::new(WriteBatchReply {
            result: Some(result),
        }))
    }

    async fn read(&self, _: Request<ReadRequest>) -> Result<TonicResponse<ReadReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn query(&self, _: Request<QueryRequest>) -> Result<TonicResponse<QueryReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn status(
        &self,
        _: Request<StatusRequest>,
    ) -> Result<TonicResponse<StatusReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn transfer_leader(
        &self,
        _: Request<TransferLeaderRequest>,
    ) -> Result<TonicResponse<TransferLeaderReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn membership(
        &self,
        _: Request<MembershipRequest>,
    ) -> Result<TonicResponse<MembershipReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    type DumpStream = seatfence_raft::dump::DumpStream;

    async fn dump(
        &self,
        _: Request<seatfence_proto::v1::DumpRequest>,
    ) -> Result<TonicResponse<Self::DumpStream>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

/// Serve a fake node on a free port; its address.
async fn serve(node: Arc<FakeNode>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(NodeServiceServer::from_arc(node))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

fn fake(answer: Answer) -> Arc<FakeNode> {
    Arc::new(FakeNode {
        answer,
        calls: AtomicUsize::new(0),
    })
}

fn put() -> Command {
    Command::Put {
        key: "k".into(),
        value: vec![1],
    }
}

#[tokio::test]
async fn a_not_leader_hint_is_followed_to_the_leader() {
    let leader = fake(Answer::Commit);
    let leader_addr = serve(leader.clone()).await;
    let follower = fake(Answer::NotLeader(leader_addr));
    let follower_addr = serve(follower.clone()).await;
    let client = ClusterClient::new(vec![follower_addr], Default::default())
        .with_deadline(Duration::from_secs(10));

    let c = client.write(GroupId(5), &put()).await.expect("committed");
    assert!(matches!(c.response, Response::Written { existed: false }));
    assert_eq!((c.log_index, c.term), (7, 3));
    assert_eq!(follower.calls.load(Ordering::SeqCst), 1);
    assert_eq!(leader.calls.load(Ordering::SeqCst), 1);
    assert_eq!(client.redirects(), 1);

    // The leader is remembered: the next write goes straight to it.
    client.write(GroupId(5), &put()).await.expect("committed");
    assert_eq!(follower.calls.load(Ordering::SeqCst), 1);
    assert_eq!(leader.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_unknown_outcome_is_returned_not_resent() {
    let node = fake(Answer::OutcomeUnknown);
    let addr = serve(node.clone()).await;
    let client =
        ClusterClient::new(vec![addr], Default::default()).with_deadline(Duration::from_secs(10));
    let e = client.write(GroupId(5), &put()).await.unwrap_err();
    assert!(
        matches!(e, ClientError::Rejected(ProposeError::OutcomeUnknown(_))),
        "{e:?}"
    );
    assert_eq!(e.code(), "outcome_unknown");
    assert_eq!(node.calls.load(Ordering::SeqCst), 1, "sent once");
}
