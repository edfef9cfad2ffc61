//! `seatfence ctl`'s operator commands over an HTTP edge: the cluster
//! view, leader transfer, drain and undrain, ownership moves, the audit
//! trail.

use anyhow::bail;
use serde_json::json;

use super::events::Edge;
use super::show::{follow_move, print_cluster, print_move_row};

/// `cluster`: regions, nodes and groups.
pub(super) async fn show_cluster(edge: &Edge, as_json: bool) -> anyhow::Result<()> {
    let a = edge.get("/v1/admin/cluster").await?;
    if as_json {
        println!("{}", a.body);
    } else {
        print_cluster(&a.body);
    }
    Ok(())
}

/// `transfer-leader`: hand `group`'s leadership to node `to`.
pub(super) async fn transfer_leader(
    edge: &Edge,
    group: u64,
    to: u64,
    as_json: bool,
) -> anyhow::Result<()> {
    let a = edge
        .post(
            &format!("/v1/admin/groups/{group}/transfer-leader"),
            &json!({"to": to}),
        )
        .await?;
    if as_json {
        println!("{}", a.body);
    } else {
        println!(
            "group {group}: leader {} -> {} (term {})",
            a.body["previous_leader"], a.body["leader"], a.body["term"]
        );
    }
    Ok(())
}

/// `drain`: move every leader off `node`; an error unless it is drained.
pub(super) async fn drain(edge: &Edge, node: u64, as_json: bool) -> anyhow::Result<()> {
    let a = edge
        .post(&format!("/v1/admin/nodes/{node}/drain"), &json!({}))
        .await?;
    if as_json {
        println!("{}", a.body);
    } else {
        for m in a.body["moved"].as_array().cloned().unwrap_or_default() {
            println!("group {}: leader moved to node {}", m["group_id"], m["to"]);
        }
        println!(
            "node {node}: {} (still leading: {})",
            if a.body["done"] == json!(true) {
                "drained"
            } else {
                "NOT drained"
            },
            a.body["remaining"]
        );
    }
    if a.body["done"] != json!(true) {
        bail!("drain incomplete: {}", a.body);
    }
    Ok(())
}

/// `undrain`: put `node` back in service.
pub(super) async fn undrain(edge: &Edge, node: u64, as_json: bool) -> anyhow::Result<()> {
    let a = edge
        .post(&format!("/v1/admin/nodes/{node}/undrain"), &json!({}))
        .await?;
    if as_json {
        println!("{}", a.body);
    } else {
        println!("node {node}: back in service");
    }
    Ok(())
}

/// `decommission`, `recommission`, `declare-dead`: one lifecycle action on
/// `node` (`action` is the path's last segment); prints its state after.
pub(super) async fn node_lifecycle(
    edge: &Edge,
    node: u64,
    action: &str,
    as_json: bool,
) -> anyhow::Result<()> {
    let a = edge
        .post(&format!("/v1/admin/nodes/{node}/{action}"), &json!({}))
        .await?;
    if as_json {
        println!("{}", a.body);
    } else {
        println!(
            "node {node}: {} (progress: seatfence ctl cluster)",
            a.body["state"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

/// `move`: start moving `event` to region `to`; with `wait`, follow it
/// until it ends (an error unless it is done).
pub(super) async fn move_event(
    edge: &Edge,
    event: &str,
    to: &str,
    wait: bool,
    as_json: bool,
) -> anyhow::Result<()> {
    let a = edge
        .post(
            &format!("/v1/admin/events/{event}/move"),
            &json!({"to_region": to}),
        )
        .await?;
    if !as_json {
        println!(
            "move {}: event {} {} -> {} (epoch {} -> {}), target voters {}",
            a.body["move_id"],
            event,
            a.body["from_region"].as_str().unwrap_or("?"),
            a.body["to_region"].as_str().unwrap_or("?"),
            a.body["from_epoch"],
            a.body["from_epoch"].as_u64().unwrap_or(0) + 1,
            a.body["to_members"]
        );
    }
    let end = if wait {
        follow_move(&edge.http, &edge.url, &edge.token, a.body, as_json).await?
    } else {
        a.body
    };
    if as_json {
        println!("{end}");
    } else if wait {
        println!(
            "move {}: {} in {} ms, write pause {} ms",
            end["move_id"],
            end["state"].as_str().unwrap_or("?"),
            end["duration_ms"],
            end["pause_ms"]
        );
    }
    if wait && end["state"] != "done" {
        bail!("move ended {}: {}", end["state"], end["reason"]);
    }
    Ok(())
}

/// `moves`: the newest `limit` ownership moves, one row each.
pub(super) async fn list_moves(edge: &Edge, limit: u32, as_json: bool) -> anyhow::Result<()> {
    let a = edge.get(&format!("/v1/admin/moves?limit={limit}")).await?;
    if as_json {
        println!("{}", a.body);
    } else {
        println!(
            "{:<5} {:<20} {:<10}    {:<10} {:<18} {:<8} {:>8} {:>8}",
            "MOVE", "EVENT", "FROM", "TO", "STEP", "STATE", "TOOK", "PAUSE"
        );
        for m in a.body["moves"].as_array().cloned().unwrap_or_default() {
            print_move_row(&m);
        }
    }
    Ok(())
}

/// `abort-move`: abort move `move_id`.
pub(super) async fn abort_move(edge: &Edge, move_id: u64, as_json: bool) -> anyhow::Result<()> {
    let a = edge
        .post(&format!("/v1/admin/moves/{move_id}/abort"), &json!({}))
        .await?;
    if as_json {
        println!("{}", a.body);
    } else {
        println!("move {move_id}: aborted at {}", a.body["step"]);
    }
    Ok(())
}

/// `audit`: the newest `limit` entries of the operators' audit trail.
pub(super) async fn audit(edge: &Edge, limit: u32, as_json: bool) -> anyhow::Result<()> {
    let a = edge.get(&format!("/v1/admin/audit?limit={limit}")).await?;
    if as_json {
        println!("{}", a.body);
    } else {
        println!(
            "{:>5} {:<24} {:<10} {:<16} {:<28} RESULT",
            "SEQ", "AT", "ACTOR", "ACTION", "TARGET"
        );
        for e in a.body["entries"].as_array().cloned().unwrap_or_default() {
            println!(
                "{:>5} {:<24} {:<10} {:<16} {:<28} {}",
                e["seq"],
                e["at"].as_str().unwrap_or("?"),
                e["actor"].as_str().unwrap_or("?"),
                e["action"].as_str().unwrap_or("?"),
                e["target"].as_str().unwrap_or("?"),
                e["result"].as_str().unwrap_or("?")
            );
        }
    }
    Ok(())
}

/// What `refund` asks for.
pub(super) struct Refund {
    pub booking: String,
    pub reason: String,
    pub release_seats: bool,
    pub key: Option<String>,
}

/// `refund`: refund a confirmed booking under an Idempotency-Key.
pub(super) async fn refund(edge: &Edge, r: Refund, as_json: bool) -> anyhow::Result<()> {
    let key = r
        .key
        .unwrap_or_else(|| format!("ctl-refund-{:016x}", rand::random::<u64>()));
    let url = format!("{}/v1/admin/bookings/{}/refund", edge.url, r.booking);
    let body = json!({"reason": r.reason, "release_seats": r.release_seats});
    let a = edge
        .http
        .post(&url, Some(&edge.token), Some(&key), &body)
        .await?;
    if !a.status.is_success() {
        bail!("{}: {} (Idempotency-Key {key})", a.status, a.body);
    }
    if as_json {
        println!("{}", a.body);
    } else {
        println!(
            "booking {}: {} (seats {}; Idempotency-Key {key})",
            r.booking,
            a.body["status"].as_str().unwrap_or("?"),
            if r.release_seats {
                "back on sale"
            } else {
                "kept off sale"
            },
        );
    }
    Ok(())
}

/// `waiting-room`: an event's room as the operator sets it.
pub(super) struct Room {
    pub event: String,
    pub rate: u32,
    pub ticket_ttl_secs: Option<u64>,
    pub enabled: bool,
}

/// Create or change an event's waiting room; print what the edge answered.
pub(super) async fn waiting_room(edge: &Edge, r: Room, as_json: bool) -> anyhow::Result<()> {
    let mut body = json!({"admit_per_sec": r.rate, "enabled": r.enabled});
    if let Some(ttl) = r.ticket_ttl_secs {
        body["ticket_ttl_secs"] = json!(ttl);
    }
    let a = edge
        .post(&format!("/v1/admin/events/{}/waiting-room", r.event), &body)
        .await?;
    if as_json {
        println!("{}", a.body);
    } else {
        let room = &a.body["waiting_room"];
        println!(
            "event {}: waiting room {}, {} a second, tickets good for {} s",
            r.event,
            if room["enabled"] == true { "on" } else { "off" },
            room["admit_per_sec"],
            room["ticket_ttl_secs"]
        );
    }
    Ok(())
}
