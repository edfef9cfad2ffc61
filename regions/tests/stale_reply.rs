//! Fence check 1 (DESIGN §5): the edge's command path (`Commands`) keeps the highest `(epoch, term)` seen
//! per event and discards a reply stamped lower, retrying the command (same
//! idempotency key). Driven against a fake leader on a real gRPC port that
//! answers with the fences it is told to.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seatfence_core::inventory::{
    EventAction, EventCommand, EventReply, Hold, HoldStatus, Outcome, SeatPick, Survival,
};
use seatfence_core::{Epoch, EventId, EventRoute, GroupId, RegionId, Response, UserId};
use seatfence_proto::v1::node_service_server::{NodeService, NodeServiceServer};
use seatfence_proto::v1::*;
use seatfence_raft::codec::encode;
use seatfence_raft::registry::Registry;
use seatfence_raft::storage::{FlushMode, NodeDb};
use seatfence_raft::ClusterClient;
use seatfence_regions::Commands;
use tonic::{Request, Response as TonicResponse, Status};

/// Answers each `WriteBatch` with a granted hold (seq = call number) stamped
/// with the next term from `terms`.
struct FakeLeader {
    terms: Mutex<Vec<u64>>,
    calls: AtomicUsize,
}

#[tonic::async_trait]
impl NodeService for FakeLeader {
    async fn write(&self, _: Request<WriteRequest>) -> Result<TonicResponse<WriteReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn write_batch(
        &self,
        req: Request<WriteBatchRequest>,
    ) -> Result<TonicResponse<WriteBatchReply>, Status> {
        let n = req.into_inner().commands.len();
        let call = self.calls.fetch_add(1, Ordering::SeqCst) as u64 + 1;
        let term = self.terms.lock().unwrap().remove(0);
        let reply = Response::Event(EventReply {
            replayed: false,
            epoch: Epoch(1),
            owner: RegionId("us-east".into()),
            outcome: Outcome::Held(Hold {
                seq: call,
                owner: UserId("u".into()),
                seats: vec!["A1".into()],
                created_ms: 0,
                expires_at_ms: 1,
                status: HoldStatus::Held,
                extensions: 0,
            }),
        });
        let responses = (0..n).map(|_| encode(&reply).unwrap()).collect();
        Ok(TonicResponse::new(WriteBatchReply {
            result: Some(write_batch_reply::Result::Committed(BatchCommitted {
                responses,
                log_index: call,
                term,
                edge_url: String::new(),
            })),
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
        _: Request<seatfence_proto::v1::MembershipRequest>,
    ) -> Result<TonicResponse<seatfence_proto::v1::MembershipReply>, Status> {
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

#[tokio::test]
async fn a_reply_below_the_highest_fence_is_discarded_and_the_command_retried() {
    let fake = Arc::new(FakeLeader {
        // first command: term 3; second: a stale term-2 reply, then term 3
        terms: Mutex::new(vec![3, 2, 3]),
        calls: AtomicUsize::new(0),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let svc = NodeServiceServer::from_arc(fake.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );

    let dir = tempfile::tempdir().unwrap();
    let db = NodeDb::open(dir.path(), FlushMode::Shared).unwrap();
    let registry = Arc::new(Registry::new(
        9,
        db,
        Default::default(),
        seatfence_raft::config::RaftTuning::default().openraft_config(),
    ));
    seatfence_raft::metrics::install();
    let commands = Commands::new(
        ClusterClient::new(vec![addr], Default::default()).with_deadline(Duration::from_secs(5)),
        registry,
    );
    let route = EventRoute {
        event_id: EventId("e".into()),
        group: GroupId(5),
        home_region: RegionId("us-east".into()),
        owner_region: RegionId("us-east".into()),
        epoch: Epoch(1),
        survival: Survival::Zone,
        state: Default::default(),
    };
    commands.routes.learn(route.clone());
    let cmd = |key: &str| EventCommand {
        event_id: EventId("e".into()),
        epoch: Epoch(1),
        now_ms: 0,
        idempotency: Some((UserId("u".into()), key.into())),
        action: EventAction::Hold {
            owner: UserId("u".into()),
            pick: SeatPick::Quantity {
                section: None,
                quantity: 1,
            },
        },
    };

    let (first, fence) = commands.execute(&route, cmd("k1")).await.unwrap();
    assert_eq!(fence.term, 3);
    assert!(matches!(first.outcome, Outcome::Held(ref h) if h.seq == 1));

    let (second, fence) = commands.execute(&route, cmd("k2")).await.unwrap();
    assert_eq!(fence.term, 3, "the term-2 reply was not used");
    assert!(
        matches!(second.outcome, Outcome::Held(ref h) if h.seq == 3),
        "the answer is the retry's, not the stale one: {second:?}"
    );
    assert_eq!(
        fake.calls.load(Ordering::SeqCst),
        3,
        "the stale reply caused one retry"
    );
    assert!(seatfence_raft::metrics::render()
        .contains("seatfence_stale_epoch_rejections_total{layer=\"edge\"} 1"));
}
