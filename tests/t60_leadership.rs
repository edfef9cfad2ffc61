//! Leader transfer through the node API, and writes fenced to a leader term:
//! a write stamped with a deposed leader's term never commits.

mod common;

use std::time::Duration;

use common::*;
use seatfence_core::Command;
use seatfence_proto::v1::{write_reply, TransferLeaderRequest, WriteRequest};

fn put_cmd(key: &str) -> Vec<u8> {
    seatfence_raft::codec::encode(&Command::Put {
        key: key.into(),
        value: b"v".to_vec(),
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t60_transfer_leader_and_term_fenced_writes() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), test_tuning()).await;
    let g = new_group(&cluster).await;
    let client = cluster.client();
    put(&client, g, "warm", &[]).await;
    let old = cluster.wait_leader(g, PATIENCE).await.unwrap();
    let old_addr = cluster.addr(old).unwrap();
    let term_of = |s: &seatfence_proto::v1::StatusReply| {
        s.groups.iter().find(|s| s.group_id == g.0).unwrap().term
    };
    let old_term = term_of(&client.status_at(&old_addr).await.unwrap());

    tracing::info!("--- a write fenced to the current term commits");
    let mut node = client.node(&old_addr).unwrap();
    let r = node
        .write(WriteRequest {
            group_id: g.0,
            command: put_cmd("fenced-ok"),
            expected_term: Some(old_term),
        })
        .await
        .unwrap()
        .into_inner();
    match r.result {
        Some(write_reply::Result::Committed(c)) => assert_eq!(c.term, old_term),
        other => panic!("expected a commit, got {other:?}"),
    }

    tracing::info!("--- a transfer to a node that is not a voter is refused");
    let err = node
        .transfer_leader(TransferLeaderRequest {
            group_id: g.0,
            to: 99,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    assert!(err.message().contains("not_a_voter"), "{err}");

    let target = cluster
        .nodes
        .iter()
        .map(|n| n.id())
        .find(|&id| id != old)
        .unwrap();
    tracing::info!("--- transfer leadership {old} -> {target}");
    node.transfer_leader(TransferLeaderRequest {
        group_id: g.0,
        to: target,
    })
    .await
    .unwrap();
    let target_addr = cluster.addr(target).unwrap();
    let new_term = eventually("target leads", || async {
        let s = client.status_at(&target_addr).await.ok()?;
        let gs = s.groups.iter().find(|s| s.group_id == g.0)?;
        (gs.role == "leader").then_some(gs.term)
    })
    .await;
    assert!(
        new_term > old_term,
        "a new leader has a higher term: {new_term} vs {old_term}"
    );

    tracing::info!("--- writes stamped with the deposed term are refused everywhere");
    for addr in [&old_addr, &target_addr] {
        let mut n = client.node(addr).unwrap();
        let r = n
            .write(WriteRequest {
                group_id: g.0,
                command: put_cmd("fenced-stale"),
                expected_term: Some(old_term),
            })
            .await;
        if let Ok(reply) = r {
            assert!(
                !matches!(
                    reply.get_ref().result,
                    Some(write_reply::Result::Committed(_))
                ),
                "stale-term write committed via {addr}: {reply:?}"
            );
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in &cluster.nodes {
        let r = client.read_at(n.addr(), g, "fenced-stale").await.unwrap();
        assert!(!r.found, "stale-term write visible on node {}", n.id());
    }

    tracing::info!("--- the new term's writes commit");
    let mut n = client.node(&target_addr).unwrap();
    let r = n
        .write(WriteRequest {
            group_id: g.0,
            command: put_cmd("fenced-new"),
            expected_term: Some(new_term),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        matches!(r.result, Some(write_reply::Result::Committed(_))),
        "{r:?}"
    );
}
