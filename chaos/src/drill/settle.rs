//! The end of a drill: with every fault healed and the clients stopped,
//! wait until the system has settled (no move running, every replica of
//! every event at the same applied index with the same records, no
//! captured payment still waiting for its confirmation, no refund still
//! pending, no released booking whose payment is unsettled), then read every
//! replica and the gateway for the checkers. A system that never settles
//! is reported (`converged: false`), not waited on forever.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::run::{EventFinal, EventInfo, FinalState, GatewayPayment, ReplicaFinal};
use seatfence_core::inventory::BookingStatus;
use seatfence_core::moves::MoveState;
use seatfence_core::{Directory, GroupId, Query, QueryResult, ReplicaDump};
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
    let directory = match read_directory(w).await {
        Ok(d) => d,
        Err(note) => return (FinalState::default(), vec![note]),
    };
    let mut waiting = Vec::new();
    note_running_moves(&directory, &mut waiting);
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
        if let Some(event) = collect_event(w, &directory, info, &captured, &mut waiting).await {
            events.push(event);
        }
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

/// The directory, read linearizably at its leader; else why not, as a note.
async fn read_directory(w: &World) -> Result<Directory, String> {
    match w
        .client
        .query(GroupId::DIRECTORY, &Query::Directory, true)
        .await
    {
        Ok((QueryResult::Directory(d), _)) => Ok(d),
        Ok(_) => Err("directory answered something else".into()),
        Err(e) => Err(format!("directory unreadable: {e}")),
    }
}

/// Note each move still running.
fn note_running_moves(directory: &Directory, waiting: &mut Vec<String>) {
    for m in directory.moves.values() {
        if m.state == MoveState::Running {
            waiting.push(format!(
                "move {} of {} still running",
                m.move_id, m.event_id
            ));
        }
    }
}

/// Read every replica of `info`'s event (one per member of its group) and
/// note what about them is unsettled; `captured`: the gateway's captures,
/// by payment id. `None`, noted, when the directory has no route for it.
async fn collect_event(
    w: &World,
    directory: &Directory,
    info: &EventInfo,
    captured: &BTreeMap<&str, u32>,
    waiting: &mut Vec<String>,
) -> Option<EventFinal> {
    let Some(route) = directory
        .events
        .get(&seatfence_core::EventId(info.event_id.clone()))
    else {
        waiting.push(format!("{} has no route", info.event_id));
        return None;
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
    note_unequal_replicas(&info.event_id, &replicas, first.as_ref(), waiting);
    if let Some(d) = &first {
        note_unsettled_bookings(&info.event_id, d, captured, waiting);
    }
    Some(EventFinal {
        event_id: info.event_id.clone(),
        group: route.group.0,
        epoch: route.epoch.0,
        owner: route.owner_region.0.clone(),
        members,
        replicas,
    })
}

/// Note each replica that could not be read, or that differs from the
/// first one (`first`: its records) in records or applied index.
fn note_unequal_replicas(
    event_id: &str,
    replicas: &[ReplicaFinal],
    first: Option<&ReplicaDump>,
    waiting: &mut Vec<String>,
) {
    for r in replicas {
        if let Some(e) = &r.error {
            waiting.push(format!("{event_id} on node {}: {e}", r.node));
        } else if r.dump.as_ref() != first || r.applied_index != replicas[0].applied_index {
            waiting.push(format!(
                "{event_id} on node {} differs from node {}",
                r.node, replicas[0].node
            ));
        }
    }
}

/// Note each booking of `d` whose payment is not resolved yet: a refund
/// not delivered, a released booking's payment not settled, or a capture
/// (`captured`, by payment id) the booking has not been confirmed for.
fn note_unsettled_bookings(
    event_id: &str,
    d: &ReplicaDump,
    captured: &BTreeMap<&str, u32>,
    waiting: &mut Vec<String>,
) {
    for b in &d.bookings {
        if b.status == BookingStatus::RefundPending || b.unsettled() {
            waiting.push(format!(
                "{} booking {} {}",
                event_id,
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
                event_id, b.seq
            ));
        }
    }
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
