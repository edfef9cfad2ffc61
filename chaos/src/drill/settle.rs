//! The end of a drill: with every fault healed and the clients stopped,
//! wait until the system has settled (no move running, every replica of
//! every event at the same applied index with the same records, no
//! captured payment still waiting for its confirmation, no refund still
//! pending, no released booking whose payment is unsettled), then read every
//! replica and the gateway for the checkers. A system that never settles
//! is reported (`converged: false`), not waited on forever.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::run::{EventFinal, FinalState, GatewayPayment, ReplicaFinal};
use seatfence_core::inventory::BookingStatus;
use seatfence_core::moves::MoveState;
use seatfence_core::{GroupId, Query, QueryResult, ReplicaDump};
use seatfence_proto::v1::{query_reply, QueryRequest};
use seatfence_raft::codec;

use super::World;

pub async fn settle(w: &World, timeout: Duration) -> FinalState {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let (mut finals, waiting) = collect(w).await;
        if waiting.is_empty() || tokio::time::Instant::now() >= deadline {
            finals.converged = waiting.is_empty();
            finals.notes = waiting;
            return finals;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One reading of everything, and what is still unsettled.
async fn collect(w: &World) -> (FinalState, Vec<String>) {
    let mut waiting = Vec::new();
    let directory = match w
        .client
        .query(GroupId::DIRECTORY, &Query::Directory, true)
        .await
    {
        Ok((QueryResult::Directory(d), _)) => d,
        Ok(_) => {
            return (
                FinalState::default(),
                vec!["directory answered something else".into()],
            );
        }
        Err(e) => {
            return (
                FinalState::default(),
                vec![format!("directory unreadable: {e}")],
            )
        }
    };
    for m in directory.moves.values() {
        if m.state == MoveState::Running {
            waiting.push(format!(
                "move {} of {} still running",
                m.move_id, m.event_id
            ));
        }
    }
    let gateway = gateway_payments(w).await.unwrap_or_else(|e| {
        waiting.push(format!("gateway unreadable: {e:#}"));
        Vec::new()
    });
    let captured: BTreeMap<&str, u32> = gateway
        .iter()
        .map(|p| (p.payment_id.as_str(), p.captures))
        .collect();
    let mut events = Vec::new();
    for info in &w.all_events() {
        let Some(route) = directory
            .events
            .get(&seatfence_core::EventId(info.event_id.clone()))
        else {
            waiting.push(format!("{} has no route", info.event_id));
            continue;
        };
        let members: Vec<u64> = directory
            .groups
            .get(&route.group)
            .map(|g| g.members.iter().map(|n| n.0).collect())
            .unwrap_or_default();
        let mut replicas = Vec::new();
        for node in &members {
            replicas.push(read_replica(w, *node, route.group.0).await);
        }
        let first = replicas.first().and_then(|r| r.dump.clone());
        for r in &replicas {
            if let Some(e) = &r.error {
                waiting.push(format!("{} on node {}: {e}", info.event_id, r.node));
            } else if r.dump != first || r.applied_index != replicas[0].applied_index {
                waiting.push(format!(
                    "{} on node {} differs from node {}",
                    info.event_id, r.node, replicas[0].node
                ));
            }
        }
        if let Some(d) = &first {
            for b in &d.bookings {
                if b.status == BookingStatus::RefundPending || b.unsettled() {
                    waiting.push(format!(
                        "{} booking {} {}",
                        info.event_id,
                        b.seq,
                        if b.unsettled() {
                            "released, its payment not yet settled"
                        } else {
                            "refund not yet delivered"
                        }
                    ));
                }
            }
            for b in d
                .bookings
                .iter()
                .filter(|b| b.status == BookingStatus::Pending)
            {
                if captured
                    .get(b.payment.payment_id.as_str())
                    .copied()
                    .unwrap_or(0)
                    > 0
                {
                    waiting.push(format!(
                        "{} booking {} captured, not yet confirmed",
                        info.event_id, b.seq
                    ));
                }
            }
        }
        events.push(EventFinal {
            event_id: info.event_id.clone(),
            group: route.group.0,
            epoch: route.epoch.0,
            owner: route.owner_region.0.clone(),
            members,
            replicas,
        });
    }
    (
        FinalState {
            events,
            gateway,
            converged: false,
            notes: Vec::new(),
        },
        waiting,
    )
}

/// Node `node`'s own replica of `group` (not a leader read: what that
/// replica has applied).
async fn read_replica(w: &World, node: u64, group: u64) -> ReplicaFinal {
    let fail = |e: String| ReplicaFinal {
        node,
        applied_index: 0,
        dump: None,
        error: Some(e),
    };
    let Some(addr) = w.grpc.get(&node) else {
        return fail("unknown node".into());
    };
    let mut client = match w.client.node(addr) {
        Ok(c) => c,
        Err(e) => return fail(e.to_string()),
    };
    let query = match codec::encode(&Query::Replica) {
        Ok(q) => q,
        Err(e) => return fail(e.to_string()),
    };
    let mut req = tonic::Request::new(QueryRequest {
        group_id: group,
        query,
        linearizable: false,
        lease: false,
    });
    req.set_timeout(Duration::from_secs(3));
    match client.query(req).await.map(|r| r.into_inner().result) {
        Ok(Some(query_reply::Result::Answer(a))) => match codec::decode::<QueryResult>(&a.result) {
            Ok(QueryResult::Replica(d)) => ReplicaFinal {
                node,
                applied_index: a.applied_index,
                dump: Some(ReplicaDump::clone(&d)),
                error: None,
            },
            Ok(_) => fail("answered something else".into()),
            Err(e) => fail(format!("undecodable answer: {e}")),
        },
        Ok(_) => fail("no answer".into()),
        Err(s) => fail(format!("{}: {}", s.code(), s.message())),
    }
}

async fn gateway_payments(w: &World) -> anyhow::Result<Vec<GatewayPayment>> {
    let a = w
        .http
        .get(&format!("{}/_payments", w.gateway), None)
        .await?;
    anyhow::ensure!(a.status.is_success(), "GET /_payments: {}", a.status);
    let list = a.body.as_array().cloned().unwrap_or_default();
    Ok(list
        .iter()
        .map(|p| GatewayPayment {
            payment_id: p["payment_id"].as_str().unwrap_or_default().into(),
            invoice: p["invoice"].as_str().unwrap_or_default().into(),
            status: p["status"].as_str().unwrap_or_default().into(),
            captures: p["captures"].as_u64().unwrap_or(0) as u32,
            refunds: p["refunds"].as_u64().unwrap_or(0) as u32,
        })
        .collect())
}
