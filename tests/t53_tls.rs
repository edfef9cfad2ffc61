//! The node plane behind mutual TLS, one attack per step: a plaintext
//! client, a TLS client without a certificate, a certificate from another
//! CA, a valid certificate of a node that is not a member, and an operator
//! certificate writing a raw command or reading a raw key. Each is refused
//! and writes nothing; the operator may still read the node's status.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use seatfence_core::{Command, GroupId, NodeId, NodeInfo, RegionId};
use seatfence_proto::v1::node_service_client::NodeServiceClient;
use seatfence_proto::v1::raft_service_client::RaftServiceClient;
use seatfence_proto::v1::{
    MembershipRequest, RaftRequest, StatusRequest, WriteBatchRequest, WriteRequest,
};
use seatfence_raft::network::tls::{TlsConfig, NODE_SERVER_NAME};
use seatfence_raft::types::{TypeConfig, Vote};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// A channel to `addr`: plaintext (`None`) or with `tls`.
async fn dial(addr: &str, tls: Option<ClientTlsConfig>) -> Result<Channel, String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut ep = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10));
    if let Some(t) = tls {
        ep = ep.tls_config(t).map_err(|e| e.to_string())?;
    }
    ep.connect().await.map_err(|e| format!("{e:?}"))
}

fn holder(dir: &Path, stem: &str) -> ClientTlsConfig {
    let t = TlsConfig::in_dir(dir, stem).load().unwrap().unwrap();
    t.client()
}

fn put(key: &str) -> Vec<u8> {
    seatfence_raft::codec::encode(&Command::Put {
        key: key.into(),
        value: b"stolen".to_vec(),
    })
    .unwrap()
}

/// A write of `key` through `channel`: its error, if it was refused.
async fn write(channel: Result<Channel, String>, group: GroupId, key: &str) -> Option<String> {
    let ch = match channel {
        Ok(ch) => ch,
        Err(e) => return Some(e),
    };
    NodeServiceClient::new(ch)
        .write(WriteRequest {
            group_id: group.0,
            command: put(key),
            expected_term: None,
        })
        .await
        .err()
        .map(|s| format!("{:?}: {}", s.code(), s.message()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t53_strangers_are_refused_and_write_nothing() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let g = new_group(&cluster).await;
    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let addr = cluster.addr(leader).unwrap();
    let certs = cluster.certs_dir().expect("local clusters run TLS");
    let ca = std::fs::read(certs.join("ca.pem")).unwrap();

    tracing::info!("--- plaintext gRPC");
    let e = write(dial(&addr, None).await, g, "plain").await;
    assert!(e.is_some(), "a plaintext write was accepted");

    tracing::info!("--- TLS without a client certificate");
    let anonymous = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca))
        .domain_name(NODE_SERVER_NAME);
    let e = write(dial(&addr, Some(anonymous)).await, g, "anonymous").await;
    assert!(e.is_some(), "a write without a certificate was accepted");

    tracing::info!("--- a node certificate from another CA");
    let other = dir.path().join("other-ca");
    seatfence_node::certs::make_cluster(&other, &[leader], "mallory").unwrap();
    let mut forged = holder(&other, &format!("node-{leader}"));
    // It trusts the real CA (so the server side is what refuses it).
    forged = forged.ca_certificate(Certificate::from_pem(&ca));
    let e = write(dial(&addr, Some(forged)).await, g, "other-ca").await;
    assert!(e.is_some(), "another CA's certificate was accepted");

    tracing::info!("--- a valid certificate of node 99, not a member");
    seatfence_node::certs::make_node(&certs, 99, 1).unwrap();
    let stranger = dial(&addr, Some(holder(&certs, "node-99"))).await.unwrap();
    let e = write(Ok(stranger.clone()), g, "stranger").await.unwrap();
    assert!(e.starts_with("PermissionDenied: not_a_member"), "{e}");
    let mut node = NodeServiceClient::new(stranger.clone());
    let refusals = [
        node.write_batch(WriteBatchRequest {
            group_id: g.0,
            commands: vec![put("stranger-batch")],
            expected_term: None,
        })
        .await
        .map(drop),
        node.membership(MembershipRequest {
            group_id: g.0,
            op: vec![0],
        })
        .await
        .map(drop),
        node.status(StatusRequest::default()).await.map(drop),
        // Registering as another node is not joining.
        node.write(WriteRequest {
            group_id: GroupId::DIRECTORY.0,
            command: seatfence_raft::codec::encode(&Command::RegisterNode(NodeInfo {
                id: NodeId(42),
                region: RegionId("us-east".into()),
                grpc_addr: "127.0.0.1:1".into(),
                incarnation: 0,
                format_max: seatfence_core::format::newest(),
            }))
            .unwrap(),
            expected_term: None,
        })
        .await
        .map(drop),
        // Raft traffic for an event's group: refused before it is decoded.
        RaftServiceClient::new(stranger)
            .append_entries(RaftRequest {
                group_id: g.0,
                payload: b"forged".to_vec(),
            })
            .await
            .map(drop),
    ];
    for r in refusals {
        let e = r.expect_err("a non-member's call was accepted");
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    }

    tracing::info!("--- an operator certificate reads the status, no raw key or command");
    let op = dial(&addr, Some(holder(&certs, "operator-operator")))
        .await
        .unwrap();
    let status = NodeServiceClient::new(op.clone())
        .status(StatusRequest::default())
        .await
        .expect("an operator reads a node's status")
        .into_inner();
    assert_eq!(status.node_id, leader);
    // Raw reads too: the directory holds the gateway's token.
    let e = NodeServiceClient::new(op.clone())
        .read(seatfence_proto::v1::ReadRequest {
            group_id: GroupId::DIRECTORY.0,
            key: "gateway/token".into(),
            linearizable: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    let e = write(Ok(op.clone()), g, "operator").await.unwrap();
    assert!(
        e.starts_with("PermissionDenied: node_certificate_required"),
        "{e}"
    );
    let e = RaftServiceClient::new(op)
        .vote(RaftRequest {
            group_id: g.0,
            payload: b"forged".to_vec(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");

    tracing::info!("--- nothing was written; the member still writes");
    let client = cluster.client();
    for key in [
        "plain",
        "anonymous",
        "other-ca",
        "stranger",
        "stranger-batch",
        "operator",
    ] {
        let r = client.read_at(&addr, g, key).await.unwrap();
        assert!(!r.found, "{key} was written");
    }
    common::put(&client, g, "member", b"ok").await;
    let dir_nodes = client.status_at(&addr).await.unwrap().directory_nodes;
    assert_eq!(dir_nodes, 3, "a stranger registered");
}

/// One Raft message for `group` of `kind` through `channel`, its payload
/// encoded from `msg`: the refusal's code and message, if refused.
async fn raft_call<T: serde::Serialize>(
    channel: &Channel,
    kind: &str,
    group: GroupId,
    msg: &T,
) -> Result<(), (tonic::Code, String)> {
    let req = RaftRequest {
        group_id: group.0,
        payload: seatfence_raft::codec::encode(msg).unwrap(),
    };
    let mut c = RaftServiceClient::new(channel.clone());
    // A replica of a group just created may not be open yet on this node.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let r = match kind {
            "vote" => c.vote(req.clone()).await.map(drop),
            "append" => c.append_entries(req.clone()).await.map(drop),
            _ => unreachable!("{kind}"),
        };
        match r {
            Err(s)
                if s.code() == tonic::Code::NotFound && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            r => return r.map_err(|s| (s.code(), s.message().to_string())),
        }
    }
}

fn vote(term: u64, candidate: u64, transfer: bool) -> VoteRequest<TypeConfig> {
    VoteRequest {
        vote: Vote::new(term, candidate),
        last_log_id: None,
        leadership_transfer: transfer,
    }
}

/// A snapshot stream for `group` whose vote is `vote` and whose metadata
/// is garbage: the refusal, if refused.
async fn snapshot_call(
    channel: &Channel,
    group: GroupId,
    vote: Vote,
) -> Result<(), (tonic::Code, String)> {
    let garbage = (b"not a snapshot's metadata".to_vec(), vec![7; 1024]);
    snapshot_of(channel, group, vote, garbage).await
}

/// A snapshot stream for `group` carrying `(meta, data)`: the refusal, if
/// refused.
async fn snapshot_of(
    channel: &Channel,
    group: GroupId,
    vote: Vote,
    (meta, data): (Vec<u8>, Vec<u8>),
) -> Result<(), (tonic::Code, String)> {
    let chunk = seatfence_proto::v1::SnapshotChunk {
        group_id: group.0,
        vote: seatfence_raft::codec::encode(&vote).unwrap(),
        meta,
        data,
        done: true,
    };
    RaftServiceClient::new(channel.clone())
        .install_snapshot(futures::stream::iter([chunk]))
        .await
        .map(drop)
        .map_err(|s| (s.code(), s.message().to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t53_forged_raft_messages_are_refused_and_every_group_still_elects() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let certs = cluster.certs_dir().expect("local clusters run TLS");
    let g = new_group(&cluster).await;
    let (lone, members) = seatfence_node::create_group(
        &cluster.client(),
        None,
        seatfence_core::Placement::Spread { replicas: 1 },
    )
    .await
    .unwrap();
    let member = members[0].0;
    let outsider = [1, 2, 3].into_iter().find(|n| *n != member).unwrap();
    cluster.wait_leader(lone, PATIENCE).await.unwrap();
    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    seatfence_node::certs::make_node(&certs, 99, 1).unwrap();
    let mut stranger = Vec::new();
    let mut insider = Vec::new();
    for id in [1, 2, 3] {
        let addr = cluster.addr(id).unwrap();
        stranger.push(dial(&addr, Some(holder(&certs, "node-99"))).await.unwrap());
        insider.push(
            dial(&addr, Some(holder(&certs, &format!("node-{outsider}"))))
                .await
                .unwrap(),
        );
    }
    let refused = |r: Result<(), (tonic::Code, String)>, code: tonic::Code, why: &str| {
        let (c, m) = r.expect_err(why);
        assert_eq!(c, code, "{why}: {m}");
        m
    };

    tracing::info!("--- node 99 (no member) campaigns for the directory at the largest term");
    for ch in &stranger {
        let m = refused(
            raft_call(ch, "vote", GroupId::DIRECTORY, &vote(u64::MAX, 99, true)).await,
            tonic::Code::PermissionDenied,
            "a non-member's vote",
        );
        assert!(m.starts_with("not_a_member"), "{m}");
        let m = refused(
            raft_call(ch, "vote", GroupId::DIRECTORY, &vote(5, 1, false)).await,
            tonic::Code::PermissionDenied,
            "a non-member's vote for node 1",
        );
        assert!(m.starts_with("not_a_member"), "{m}");
    }

    tracing::info!("--- member {outsider}'s certificate: the largest term, another's name, a group it is not in");
    for ch in &insider {
        let m = refused(
            raft_call(
                ch,
                "vote",
                GroupId::DIRECTORY,
                &vote(u64::MAX, outsider, true),
            )
            .await,
            tonic::Code::InvalidArgument,
            "a vote at u64::MAX",
        );
        assert!(m.starts_with("term_out_of_bounds"), "{m}");
        let m = refused(
            raft_call(ch, "vote", g, &vote(1 << 40, outsider, true)).await,
            tonic::Code::InvalidArgument,
            "a vote 2^40 terms ahead",
        );
        assert!(m.starts_with("term_out_of_bounds"), "{m}");
        let other = if outsider == leader { member } else { leader };
        let m = refused(
            raft_call(ch, "vote", g, &vote(50, other, false)).await,
            tonic::Code::PermissionDenied,
            "a vote in another node's name",
        );
        assert!(m.starts_with("sender_mismatch"), "{m}");
    }
    let to_member = &insider[(member - 1) as usize];
    let append = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(50, outsider),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    let m = refused(
        raft_call(to_member, "append", lone, &append).await,
        tonic::Code::PermissionDenied,
        "an append for a group it is not in",
    );
    assert!(m.starts_with("not_a_group_member"), "{m}");
    let m = refused(
        snapshot_call(to_member, lone, Vote::new_committed(50, outsider)).await,
        tonic::Code::PermissionDenied,
        "a snapshot for a group it is not in",
    );
    assert!(m.starts_with("not_a_group_member"), "{m}");
    tracing::info!("--- a malformed snapshot from a member, in its own name");
    let peer = if outsider == leader { member } else { outsider };
    let m = refused(
        snapshot_call(
            &insider[(peer - 1) as usize],
            g,
            Vote::new_committed(1_000, outsider),
        )
        .await,
        tonic::Code::InvalidArgument,
        "a malformed snapshot",
    );
    assert!(
        m.contains("malformed_payload") || m.contains("snapshot meta"),
        "{m}"
    );
    tracing::info!("--- a well-formed directory snapshot offered to an event group");
    let meta = seatfence_raft::types::SnapshotMeta::default();
    let planted = (
        seatfence_raft::codec::encode(&meta).unwrap(),
        seatfence_raft::codec::encode(&seatfence_core::State::new(GroupId::DIRECTORY)).unwrap(),
    );
    let m = refused(
        snapshot_of(
            &insider[(peer - 1) as usize],
            g,
            Vote::new_committed(1_000, outsider),
            planted,
        )
        .await,
        tonic::Code::InvalidArgument,
        "a snapshot of the other kind of group",
    );
    assert!(m.contains("other kind of group"), "{m}");

    tracing::info!("--- a peer dialling node {member} at another node's address is refused by TLS");
    let pool = seatfence_raft::network::PeerPool::new(cluster.dialer());
    let wrong = cluster.addr(outsider).unwrap();
    pool.probe(outsider, &wrong, 1)
        .await
        .expect("the right node answers");
    let e = pool
        .probe(member, &wrong, 1)
        .await
        .expect_err("another node's certificate answered in its place");
    assert!(
        !e.contains("is node"),
        "refused in the handshake, not after: {e}"
    );

    tracing::info!("--- every group still elects and writes");
    let client = cluster.client();
    for group in [GroupId::DIRECTORY, g, lone] {
        cluster.wait_leader(group, PATIENCE).await.unwrap();
        common::put(&client, group, "after-forgery", b"ok").await;
    }
}

/// A write of `cmd` to the directory through `channel`: its refusal, if any.
async fn write_directory(channel: &Channel, cmd: &Command) -> Option<tonic::Status> {
    NodeServiceClient::new(channel.clone())
        .write(WriteRequest {
            group_id: GroupId::DIRECTORY.0,
            command: seatfence_raft::codec::encode(cmd).unwrap(),
            expected_term: None,
        })
        .await
        .err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t53_a_member_speaks_only_for_itself() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let leader = cluster
        .wait_leader(GroupId::DIRECTORY, PATIENCE)
        .await
        .unwrap();
    let addr = cluster.addr(leader).unwrap();
    let certs = cluster.certs_dir().expect("local clusters run TLS");
    // A member other than the victim: node 2 speaks, node 3 is the victim.
    let (speaker, victim) = (2u64, 3u64);
    let ch = dial(&addr, Some(holder(&certs, &format!("node-{speaker}"))))
        .await
        .unwrap();
    let before = cluster.addr(victim).unwrap();

    tracing::info!("--- node 2 registers node 3 at another address");
    let forged = Command::RegisterNode(NodeInfo {
        id: NodeId(victim),
        region: RegionId("us-east".into()),
        grpc_addr: "127.0.0.1:1".into(),
        incarnation: 0,
        format_max: seatfence_core::format::newest(),
    });
    let e = write_directory(&ch, &forged).await.expect("refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    assert!(e.message().starts_with("sender_mismatch"), "{e}");
    // Packed in a batch too.
    let e = write_directory(&ch, &Command::Batch(vec![forged]))
        .await
        .expect("refused");
    assert!(e.message().starts_with("sender_mismatch"), "{e}");

    tracing::info!("--- node 2 writes a rejoin floor");
    let floor = Command::Node {
        op: seatfence_core::NodeOp::RejoinDemoted {
            node: NodeId(victim),
            group: GroupId(1),
            term: 1,
        },
        at_ms: 0,
    };
    let e = write_directory(&ch, &floor).await.expect("refused");
    assert!(e.message().starts_with("sender_not_leader"), "{e}");

    tracing::info!("--- the directory still dials node 3 where it is");
    let status = cluster
        .client()
        .query(GroupId::DIRECTORY, &seatfence_core::Query::Directory, true)
        .await
        .unwrap()
        .0;
    let text = format!("{status:?}");
    assert!(
        text.contains(&before) && !text.contains("127.0.0.1:1\""),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t53_a_snapshot_comes_from_the_leader_and_a_stalled_one_is_cut() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let certs = cluster.certs_dir().expect("local clusters run TLS");
    let g = new_group(&cluster).await;
    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let follower = [1, 2, 3].into_iter().find(|n| *n != leader).unwrap();
    let other = [1, 2, 3]
        .into_iter()
        .find(|n| *n != leader && *n != follower)
        .unwrap();
    let term = cluster
        .client()
        .status_at(&cluster.addr(follower).unwrap())
        .await
        .unwrap()
        .groups
        .iter()
        .find(|s| s.group_id == g.0)
        .map(|s| s.term)
        .unwrap();
    let ch = dial(
        &cluster.addr(follower).unwrap(),
        Some(holder(&certs, &format!("node-{other}"))),
    )
    .await
    .unwrap();

    tracing::info!("--- a member that does not lead offers a snapshot at the current term");
    let e = snapshot_call(&ch, g, Vote::new_committed(term, other))
        .await
        .unwrap_err();
    assert_eq!(e.0, tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.1.starts_with("snapshot_not_from_leader"), "{e:?}");

    tracing::info!("--- a stream that sends one chunk and stalls is cut");
    let chunk = seatfence_proto::v1::SnapshotChunk {
        group_id: g.0,
        vote: seatfence_raft::codec::encode(&Vote::new_committed(term + 1, other)).unwrap(),
        meta: seatfence_raft::codec::encode(&seatfence_raft::types::SnapshotMeta::default())
            .unwrap(),
        data: vec![0; 64 << 10],
        done: false,
    };
    let stalled =
        futures::StreamExt::chain(futures::stream::iter([chunk]), futures::stream::pending());
    // No client-side timeout on this channel: the node is the one to cut it.
    let patient = Endpoint::from_shared(format!("https://{}", cluster.addr(follower).unwrap()))
        .unwrap()
        .tls_config(holder(&certs, &format!("node-{other}")))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut raft = RaftServiceClient::new(patient);
    let call = raft.install_snapshot(stalled);
    let e = tokio::time::timeout(Duration::from_secs(120), call)
        .await
        .expect("the node cut the stream")
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e}");
    assert!(e.message().starts_with("snapshot_idle"), "{e}");

    tracing::info!("--- the group still takes writes");
    let put = Command::Put {
        key: "after".into(),
        value: b"1".to_vec(),
    };
    cluster.client().write(g, &put).await.unwrap();
}
