//! Garbage bytes and wrong group ids on the gRPC port: an error comes back,
//! nothing is written, the node keeps serving. A batch of Raft messages for
//! several groups reaches each group, and one bad message (unknown group,
//! garbage, unknown kind) fails alone.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::*;
use openraft::raft::{VoteRequest, VoteResponse};
use seatfence_core::{Command, GroupId};
use seatfence_proto::v1::raft_service_client::RaftServiceClient;
use seatfence_proto::v1::{
    RaftBatch, RaftKind, RaftMessage, RaftRequest, WriteBatchRequest, WriteRequest,
};
use seatfence_raft::types::{TypeConfig, Vote};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t50_garbage_and_unknown_groups_are_refused_and_change_nothing() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let g = new_group(&cluster).await;
    let g2 = new_group(&cluster).await;
    let client = cluster.client();
    put(&client, g, "k", b"v").await;
    for i in 0..3 {
        put(&client, g2, &format!("k{i}"), b"v").await;
    }
    let leader = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let addr = cluster.addr(leader).unwrap();
    let log_index = |s: &seatfence_proto::v1::StatusReply| {
        s.groups
            .iter()
            .map(|g| (g.group_id, g.last_log_index, g.state_digest))
            .collect::<Vec<_>>()
    };
    // Let the no-op entries of fresh leaders settle before taking the baseline.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = log_index(&client.status_with_digests_at(&addr).await.unwrap());

    tracing::info!("--- raw garbage on the gRPC port");
    {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"\x00\x01garbage that is not HTTP/2 at all\r\n\r\n\xff\xfe")
            .unwrap();
        let mut buf = [0u8; 256];
        // The server answers with an HTTP/2 GOAWAY or closes: either way the
        // read ends instead of hanging.
        let _ = s.read(&mut buf);
    }

    tracing::info!("--- a Raft RPC for a group this node does not host");
    // As a member node (the harness holds node 1's certificate): what
    // reaches the handlers here has passed TLS and the gate.
    let channel = cluster.endpoint(&addr).unwrap().connect().await.unwrap();
    let mut raft = RaftServiceClient::new(channel);
    let err = raft
        .append_entries(RaftRequest {
            group_id: 9_999,
            payload: vec![1, 2, 3],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    assert!(err.message().contains("unknown_group"), "{err}");

    tracing::info!("--- a malformed payload for a real group");
    // Garbage in a format this build reads, and a payload naming a newer
    // format than it knows (a peer running a newer release whose format
    // the cluster never activated): refused, and the newer one says so.
    for (call, payload) in (0..3).flat_map(|c| {
        [
            (c, b"\x01\xff\xff\xff not a value".to_vec()),
            (c, b"\xff\xff\xff\xff from the future".to_vec()),
        ]
    }) {
        let newer = payload[0] == 0xff;
        let req = RaftRequest {
            group_id: g.0,
            payload,
        };
        let err = match call {
            0 => raft.append_entries(req).await,
            1 => raft.vote(req).await,
            _ => raft.pre_vote(req).await,
        }
        .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
        let says = if newer {
            "data format v255 is newer than this binary reads"
        } else {
            "malformed v1 value"
        };
        assert!(err.message().contains(says), "{err}");
    }

    tracing::info!("--- one batch: two real groups, an unknown group, garbage, an unknown kind");
    {
        // A pre-vote at term 0 (in the harness's own name, node 1: a
        // message in another node's name is refused `sender_mismatch`)
        // changes nothing; each answer carries its group's last log id, so
        // a swapped answer shows.
        let pre_vote = |group: GroupId| RaftMessage {
            group_id: group.0,
            kind: RaftKind::PreVote as i32,
            payload: seatfence_raft::codec::encode(&VoteRequest::<TypeConfig>::new(
                Vote::new(0, 1),
                None,
            ))
            .unwrap(),
        };
        let mut garbage = pre_vote(g);
        garbage.payload = b"\x01\xff\xff not a value".to_vec();
        let mut odd_kind = pre_vote(g);
        odd_kind.kind = 77;
        let mut unknown = pre_vote(g);
        unknown.group_id = 9_999;
        let batch = RaftBatch {
            messages: vec![pre_vote(g), unknown, garbage, odd_kind, pre_vote(g2)],
        };
        let out = raft.batch(batch).await.unwrap().into_inner().outcomes;
        assert_eq!(out.len(), 5, "one answer per message");
        let status = client.status_with_digests_at(&addr).await.unwrap();
        for (i, group) in [(0, g), (4, g2)] {
            assert_eq!(out[i].code, 0, "{group}: {}", out[i].message);
            let r: VoteResponse<TypeConfig> =
                seatfence_raft::codec::decode(&out[i].payload).unwrap();
            let hosted = status
                .groups
                .iter()
                .find(|s| s.group_id == group.0)
                .unwrap();
            assert_eq!(
                r.last_log_id.map(|l| l.index),
                Some(hosted.last_log_index),
                "{group} answered with its own log"
            );
            assert!(!r.vote_granted, "a candidate at term 0 gets nothing");
        }
        assert_eq!(
            out[1].code,
            tonic::Code::NotFound as i32,
            "{}",
            out[1].message
        );
        assert!(
            out[1].message.contains("unknown_group"),
            "{}",
            out[1].message
        );
        assert_eq!(
            out[2].code,
            tonic::Code::InvalidArgument as i32,
            "{}",
            out[2].message
        );
        assert_eq!(
            out[3].code,
            tonic::Code::InvalidArgument as i32,
            "{}",
            out[3].message
        );
        let huge = RaftBatch {
            messages: vec![pre_vote(g); seatfence_raft::network::MAX_BATCH_MESSAGES + 1],
        };
        let err = raft.batch(huge).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
        assert!(err.message().contains("batch_too_large"), "{err}");
    }

    tracing::info!("--- a malformed command and an unknown group on the node API");
    let mut node = client.node(&addr).unwrap();
    let err = node
        .write(WriteRequest {
            group_id: g.0,
            command: vec![0xff; 7],
            expected_term: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    let cmd = encoded_cmd(&Command::Put {
        key: "x".into(),
        value: vec![],
    });
    let err = node
        .write(WriteRequest {
            group_id: 4_242,
            command: cmd,
            expected_term: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");

    let err = node
        .write_batch(WriteBatchRequest {
            group_id: g.0,
            commands: vec![
                encoded_cmd(&Command::Put {
                    key: "half".into(),
                    value: vec![1],
                }),
                vec![0xff; 3],
            ],
            expected_term: None,
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        tonic::Code::InvalidArgument,
        "a batch with one bad command is refused whole: {err}"
    );

    tracing::info!("--- nothing was written, and the node still serves");
    let after = log_index(&client.status_with_digests_at(&addr).await.unwrap());
    assert_eq!(before, after, "no group's log or state changed");
    put(&client, g, "still", b"ok").await;
    client
        .write(
            GroupId::DIRECTORY,
            &Command::Put {
                key: "x".into(),
                value: vec![],
            },
        )
        .await
        .map(|o| {
            assert_eq!(
                o.response,
                seatfence_core::Response::WrongGroup,
                "directory refuses kv commands"
            );
        })
        .unwrap();
}

fn encoded_cmd(c: &Command) -> Vec<u8> {
    seatfence_raft::codec::encode(c).unwrap()
}
