//! `seatfence ctl`'s operator commands over an HTTP edge: the cluster
//! view, leader transfer, drain and undrain, ownership moves, the audit
//! trail.

use anyhow::bail;
use serde_json::json;

use super::edge::{Edge, HttpError, Req};
use super::show::{duration, follow_move, moves_table, print_cluster, Align, Table};

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
        follow_move(edge, a.body, as_json).await?
    } else {
        a.body
    };
    if as_json {
        println!("{end}");
    } else if wait {
        println!(
            "move {}: {} in {}, write pause {}",
            end["move_id"],
            end["state"].as_str().unwrap_or("?"),
            duration(&end["duration_ms"]),
            duration(&end["pause_ms"])
        );
    }
    if wait && end["state"] != "done" {
        bail!(
            "move {} ended {}: {}",
            end["move_id"],
            end["state"].as_str().unwrap_or("?"),
            end["reason"].as_str().unwrap_or("no reason given")
        );
    }
    Ok(())
}

/// `moves`: the newest `limit` ownership moves, one row each (`no moves
/// yet` when there is none).
pub(super) async fn list_moves(edge: &Edge, limit: u32, as_json: bool) -> anyhow::Result<()> {
    let a = edge.get(&format!("/v1/admin/moves?limit={limit}")).await?;
    let moves = a.body["moves"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if as_json {
        println!("{}", a.body);
    } else if moves.is_empty() {
        println!("no moves yet");
    } else {
        moves_table(moves).print();
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
        return Ok(());
    }
    let mut t = Table::new(&[
        ("SEQ", Align::Right),
        ("AT", Align::Left),
        ("ACTOR", Align::Left),
        ("ACTION", Align::Left),
        ("TARGET", Align::Left),
        ("RESULT", Align::Left),
    ]);
    for e in a.body["entries"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let text = |k: &str| e[k].as_str().unwrap_or("?").to_string();
        let row = vec![
            e["seq"].to_string(),
            text("at"),
            text("actor"),
            text("action"),
            text("target"),
            text("result"),
        ];
        t.row(row);
    }
    if t.is_empty() {
        println!("no audit entries yet");
    } else {
        t.print();
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

/// FNV-1a with 128 bits (the FNV specification's offset basis and prime):
/// a stable hash, the same in every build and Rust release (std's
/// `DefaultHasher` is not), for keys that must not change between runs.
fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET_BASIS: u128 = 0x6c62272e_07bb0142_62b82175_6295c58d;
    const PRIME: u128 = 0x00000000_01000000_00000000_0000013b;
    bytes.iter().fold(OFFSET_BASIS, |h, &b| {
        (h ^ u128::from(b)).wrapping_mul(PRIME)
    })
}

/// The Idempotency-Key of a refund given none: `ctl-refund-` and the 32
/// hex digits of [`fnv1a_128`] of `BOOKING\nREASON\nrelease-seats` (or
/// `keep-seats`). The same command gives the same key, so running it
/// again is a replay of the first refund (its answer), never a second one;
/// the whole body is in the key, so another `--release-seats` is another
/// request, not a 422.
pub(super) fn refund_key(booking: &str, reason: &str, release_seats: bool) -> String {
    let seats = if release_seats {
        "release-seats"
    } else {
        "keep-seats"
    };
    let hash = fnv1a_128(format!("{booking}\n{reason}\n{seats}").as_bytes());
    format!("ctl-refund-{hash:032x}")
}

/// `refund`: refund a confirmed booking under an Idempotency-Key
/// (`--idempotency-key`, else [`refund_key`]).
pub(super) async fn refund(edge: &Edge, r: Refund, as_json: bool) -> anyhow::Result<()> {
    let derived = r.key.is_none();
    let key = r
        .key
        .unwrap_or_else(|| refund_key(&r.booking, &r.reason, r.release_seats));
    let path = format!("/v1/admin/bookings/{}/refund", r.booking);
    let body = json!({"reason": r.reason, "release_seats": r.release_seats});
    let post = Req::Post {
        key: Some(&key),
        body: &body,
    };
    let a = edge.send(&path, post).await?;
    if !a.status.is_success() {
        let mut note = format!("Idempotency-Key {key}");
        if derived && a.status.is_client_error() {
            // The group keeps a refusal under its key like an answer: the
            // same command answers the same until the key is forgotten.
            note.push_str(
                "; this key's answer is kept with the event (24 h unless it keeps records \
                 longer): to try again once the booking can be refunded, pass a new \
                 --idempotency-key",
            );
        }
        return Err(HttpError {
            answer: a,
            note: Some(note),
        }
        .into());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a 128's published test vectors, and a refund's key: stable,
    /// and apart for another reason.
    #[test]
    fn refund_keys_are_stable() {
        assert_eq!(fnv1a_128(b""), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(fnv1a_128(b"a"), 0xd228cb696f1a8caf78912b704e4a8964);
        assert_eq!(
            refund_key("b1-1", "show cancelled", true),
            "ctl-refund-ef1038fa4f7be0881426a10affbe0682"
        );
        assert_ne!(
            refund_key("b1-1", "show cancelled", true),
            refund_key("b1-1", "goodwill", true)
        );
        assert_ne!(
            refund_key("b1-1", "show cancelled", true),
            refund_key("b1-1", "show cancelled", false)
        );
    }
}
