//! `seatfence ctl` event and operator commands, through an HTTP edge with
//! the edges and tokens of `demo.json` (`--demo`) unless `--edge`/`--token`
//! are given.

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::json;

use super::admin::{
    abort_move, audit, drain, list_moves, move_event, node_lifecycle, show_cluster,
    transfer_leader, undrain,
};
use super::create::{create_event, NewEvent};
use super::edge::{Edge, Req};
use super::target::{bearer_token, edges, mint_token};
use crate::demo::DemoFile;

// The commands that talk to an edge over HTTP (and `token`, which needs
// only the secret). Not a doc comment: clap would make it the about text
// of `ctl`, which flattens them.
#[derive(Subcommand)]
// Parsed once per run: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum EventCmd {
    /// Print a bearer token for a user, signed with the demo's secret
    /// (or $SEATFENCE_JWT_SECRET).
    Token {
        /// The user (the token's subject): 1-128 printable ASCII characters.
        #[arg(long)]
        user: String,
        /// Give the token the operator role.
        #[arg(long)]
        operator: bool,
        /// How long the token is valid, in seconds.
        #[arg(long, default_value_t = 86_400)]
        ttl_secs: u64,
    },
    /// Print a sign-in link to the operator console of the edge (`--edge`,
    /// else demo.json's first that answers): `{edge}/console#token=JWT`, a
    /// fresh operator token for `--user`. The token rides in the link's
    /// fragment, which browsers never send; the page keeps it in the tab's
    /// session storage and erases it from the address bar. Signed with the
    /// demo's secret (or $SEATFENCE_JWT_SECRET), like `token`.
    Console {
        /// The operator (the token's subject, named in the audit trail).
        #[arg(long, default_value = "console")]
        user: String,
        /// How long the token is valid, in seconds.
        #[arg(long, default_value_t = 3_600)]
        ttl_secs: u64,
    },
    /// Create an event (operator).
    CreateEvent {
        /// The event id: [A-Za-z0-9_-], 1-64 characters.
        #[arg(long)]
        id: String,
        /// Its display name.
        #[arg(long)]
        name: String,
        /// Home (owner) region.
        #[arg(long)]
        region: String,
        /// Explicit seat ids, comma separated.
        #[arg(long, value_delimiter = ',')]
        seats: Vec<String>,
        /// A section as NAME:ROWSxSEATS (repeatable), e.g. A:10x20.
        #[arg(long)]
        section: Vec<String>,
        /// How long a hold lasts before it expires (default 600).
        #[arg(long)]
        hold_ttl_secs: Option<u64>,
        /// Most seats one hold may take (default 8).
        #[arg(long)]
        max_seats_per_hold: Option<u32>,
        /// Most seats one buyer may hold or buy in all (default: no limit).
        #[arg(long)]
        max_seats_per_buyer: Option<u32>,
        /// zone (3 voters in the home region) or region (one per region).
        #[arg(long)]
        survival: Option<String>,
        /// How long finished holds, bookings and idempotency keys are kept
        /// (60-604800; default 86400).
        #[arg(long)]
        retention_secs: Option<u64>,
        /// How long the changefeed keeps each change of the event
        /// (60-2592000; default 259200).
        #[arg(long)]
        changes_retention_secs: Option<u64>,
        /// When the sale opens (RFC 3339, e.g. 2030-06-01T18:00:00Z).
        /// Needed for a waiting room.
        #[arg(long)]
        opens_at: Option<String>,
        /// When the sale closes (RFC 3339, after --opens-at).
        #[arg(long)]
        closes_at: Option<String>,
        /// Price of one seat in minor units (default 5000).
        #[arg(long)]
        price_cents: Option<u64>,
        /// Currency, an ISO 4217 code (default EUR).
        #[arg(long)]
        currency: Option<String>,
        /// Put a waiting room in front of the sale, admitting this many
        /// buyers a second in queue order (needs --opens-at).
        #[arg(long, requires = "opens_at")]
        waiting_room_rate: Option<u32>,
        /// How long an admitted buyer may hold seats (10-3600; default
        /// 600; needs --waiting-room-rate).
        #[arg(long, requires = "waiting_room_rate")]
        ticket_ttl_secs: Option<u64>,
        /// Print the edge's JSON answer as is.
        #[arg(long)]
        json: bool,
    },
    /// Show an event and its availability.
    Event {
        /// The event id.
        id: String,
        /// Print the edge's JSON answers.
        #[arg(long)]
        json: bool,
    },
    /// Regions, nodes and groups: leader, term, epoch, members, lag (operator).
    Cluster {
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Hand a group's leadership to another (caught-up) voter (operator).
    TransferLeader {
        /// The group id.
        group: u64,
        /// The node to hand it to.
        #[arg(long)]
        to: u64,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Move every leader off a node before maintenance (operator).
    Drain {
        /// The node id.
        node: u64,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Put a drained node back in service (operator).
    Undrain {
        /// The node id.
        node: u64,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Retire a node (operator): its replicas move to other live nodes of
    /// its region, its leaderships elsewhere; then it is `decommissioned`
    /// and may be deleted. Refused (no_spare_node) when a group would have
    /// nowhere to go.
    Decommission {
        /// The node id.
        node: u64,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Undo a decommission that has not completed (operator).
    Recommission {
        /// The node id.
        node: u64,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Declare a suspect (unreachable) node dead now (operator): its
    /// replicas are replaced without waiting for dead_after_ms.
    DeclareDead {
        /// The node id.
        node: u64,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Move an event's ownership to another region (operator). With
    /// `--wait`, follow its steps until it is done, aborted or failed.
    Move {
        /// The event id.
        event: String,
        /// The region to move it to.
        #[arg(long)]
        to: String,
        /// Follow the move until it ends (exit 1 unless it is done).
        #[arg(long)]
        wait: bool,
        /// Print the edge's JSON answer (the final move with --wait).
        #[arg(long)]
        json: bool,
    },
    /// Ownership moves, newest first (operator).
    Moves {
        /// How many.
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Abort a move before its membership change (operator).
    AbortMove {
        /// The move id.
        move_id: u64,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Refund a confirmed booking (operator): `refund_pending` at once,
    /// `refunded` when the gateway has paid it back. Run it again (same
    /// booking and reason, or the same `--idempotency-key`; the key is
    /// printed) and the same answer comes back, never a second refund.
    Refund {
        /// The booking id (`b<group>-<seq>`).
        booking: String,
        /// Why (kept with the booking, in the audit trail and the
        /// changefeed).
        #[arg(long)]
        reason: String,
        /// Put the seats back on sale (default: they stay off sale).
        #[arg(long)]
        release_seats: bool,
        /// The Idempotency-Key (default: `ctl-refund-` and a hash of the
        /// booking and the reason, the same on every run).
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Create or change an event's waiting room (operator): admit
    /// `--rate` buyers a second in queue order.
    WaitingRoom {
        /// The event id.
        event: String,
        /// Buyers admitted a second.
        #[arg(long)]
        rate: u32,
        /// How long an admitted buyer may hold seats (default 600).
        #[arg(long)]
        ticket_ttl_secs: Option<u64>,
        /// Turn the room off (holds need no ticket; places are kept).
        #[arg(long)]
        disable: bool,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// This binary's release and data formats, the cluster's active
    /// format and the newest each node reads; `--activate N` raises the
    /// cluster's format once every live node reads it (operator; README
    /// "Upgrading").
    Version {
        /// Raise the cluster's data format to N (never lowered).
        #[arg(long, value_name = "N")]
        activate: Option<u64>,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// The operators' audit trail, newest first (operator).
    Audit {
        /// How many entries.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Print the edge's JSON answer.
        #[arg(long)]
        json: bool,
    },
}

impl EventCmd {
    /// Whether `--json` was given (`token` and `console` have none): an
    /// error answer is then printed as the edge's JSON on stdout too.
    pub fn json(&self) -> bool {
        match self {
            EventCmd::Token { .. } | EventCmd::Console { .. } => false,
            EventCmd::CreateEvent { json, .. }
            | EventCmd::Event { json, .. }
            | EventCmd::Cluster { json }
            | EventCmd::TransferLeader { json, .. }
            | EventCmd::Drain { json, .. }
            | EventCmd::Undrain { json, .. }
            | EventCmd::Decommission { json, .. }
            | EventCmd::Recommission { json, .. }
            | EventCmd::DeclareDead { json, .. }
            | EventCmd::Move { json, .. }
            | EventCmd::Moves { json, .. }
            | EventCmd::AbortMove { json, .. }
            | EventCmd::Refund { json, .. }
            | EventCmd::WaitingRoom { json, .. }
            | EventCmd::Version { json, .. }
            | EventCmd::Audit { json, .. } => *json,
        }
    }
}

/// Where event commands go and with which token.
pub struct EdgeTarget {
    pub demo: PathBuf,
    pub edge: Option<String>,
    pub token: Option<String>,
}

/// Run one event command: `token` needs only the secret; every other
/// command goes to an edge (`--edge`, else demo.json's, the next whenever
/// one refuses the connection) with the token (`--token`, else demo.json's
/// operator token).
pub async fn run(target: EdgeTarget, cmd: EventCmd) -> anyhow::Result<()> {
    let demo = DemoFile::load(&target.demo);
    if let EventCmd::Token {
        user,
        operator,
        ttl_secs,
    } = &cmd
    {
        println!("{}", mint_token(&demo, user, *operator, *ttl_secs)?);
        return Ok(());
    }
    let edges = edges(&target, &demo)?;
    if let EventCmd::Console { user, ttl_secs } = &cmd {
        let jwt = mint_token(&demo, user, true, *ttl_secs)?;
        return console_link(Edge::new(edges, jwt)).await;
    }
    let edge = Edge::new(edges, bearer_token(&target, &demo)?);
    event_command(&edge, cmd).await
}

/// `console`: the sign-in link to the edge's console, with the token
/// `edge` carries. Among demo.json's edges, the first that answers.
async fn console_link(edge: Edge) -> anyhow::Result<()> {
    if edge.uses_demo() {
        // Any answer will do: the edge is up.
        edge.send("/healthz", Req::Get).await?;
    }
    println!("{}/console#token={}", edge.url(), edge.token());
    Ok(())
}

/// `create-event`'s flags as what it asks for, and `--json`.
fn new_event(cmd: EventCmd) -> (NewEvent, bool) {
    let EventCmd::CreateEvent {
        id,
        name,
        region,
        seats,
        section,
        hold_ttl_secs,
        max_seats_per_hold,
        max_seats_per_buyer,
        survival,
        retention_secs,
        changes_retention_secs,
        opens_at,
        closes_at,
        price_cents,
        currency,
        waiting_room_rate,
        ticket_ttl_secs,
        json: as_json,
    } = cmd
    else {
        unreachable!("only create-event is read as a new event");
    };
    let options = vec![
        ("hold_ttl_secs", hold_ttl_secs.map(|v| json!(v))),
        ("max_seats_per_hold", max_seats_per_hold.map(|v| json!(v))),
        ("max_seats_per_buyer", max_seats_per_buyer.map(|v| json!(v))),
        ("survival", survival.map(|v| json!(v))),
        ("retention_secs", retention_secs.map(|v| json!(v))),
        (
            "changes_retention_secs",
            changes_retention_secs.map(|v| json!(v)),
        ),
        ("opens_at", opens_at.map(|v| json!(v))),
        ("closes_at", closes_at.map(|v| json!(v))),
        ("price_cents", price_cents.map(|v| json!(v))),
        ("currency", currency.map(|v| json!(v))),
    ];
    let event = NewEvent {
        id,
        name,
        region,
        seats,
        sections: section,
        options,
        room: waiting_room_rate.map(|rate| (rate, ticket_ttl_secs)),
    };
    (event, as_json)
}

/// The commands about events: create, show, move, waiting room, refund;
/// the cluster's go to [`cluster_command`].
async fn event_command(edge: &Edge, cmd: EventCmd) -> anyhow::Result<()> {
    match cmd {
        cmd @ EventCmd::CreateEvent { .. } => {
            let (event, as_json) = new_event(cmd);
            create_event(edge, event, as_json).await
        }
        EventCmd::Event { id, json: as_json } => show_event(edge, &id, as_json).await,
        EventCmd::Move {
            event,
            to,
            wait,
            json: as_json,
        } => move_event(edge, &event, &to, wait, as_json).await,
        EventCmd::Moves {
            limit,
            json: as_json,
        } => list_moves(edge, limit, as_json).await,
        EventCmd::AbortMove {
            move_id,
            json: as_json,
        } => abort_move(edge, move_id, as_json).await,
        EventCmd::WaitingRoom {
            event,
            rate,
            ticket_ttl_secs,
            disable,
            json: as_json,
        } => {
            let room = super::admin::Room {
                event,
                rate,
                ticket_ttl_secs,
                enabled: !disable,
            };
            super::admin::waiting_room(edge, room, as_json).await
        }
        EventCmd::Refund {
            booking,
            reason,
            release_seats,
            idempotency_key,
            json: as_json,
        } => {
            let refund = super::admin::Refund {
                booking,
                reason,
                release_seats,
                key: idempotency_key,
            };
            super::admin::refund(edge, refund, as_json).await
        }
        other => cluster_command(edge, other).await,
    }
}

/// The commands about the cluster: its view, leaders, nodes, the audit.
async fn cluster_command(edge: &Edge, cmd: EventCmd) -> anyhow::Result<()> {
    match cmd {
        EventCmd::Cluster { json: as_json } => show_cluster(edge, as_json).await,
        EventCmd::TransferLeader {
            group,
            to,
            json: as_json,
        } => transfer_leader(edge, group, to, as_json).await,
        EventCmd::Drain {
            node,
            json: as_json,
        } => drain(edge, node, as_json).await,
        EventCmd::Undrain {
            node,
            json: as_json,
        } => undrain(edge, node, as_json).await,
        EventCmd::Decommission {
            node,
            json: as_json,
        } => node_lifecycle(edge, node, "decommission", as_json).await,
        EventCmd::Recommission {
            node,
            json: as_json,
        } => node_lifecycle(edge, node, "recommission", as_json).await,
        EventCmd::DeclareDead {
            node,
            json: as_json,
        } => node_lifecycle(edge, node, "declare-dead", as_json).await,
        EventCmd::Audit {
            limit,
            json: as_json,
        } => audit(edge, limit, as_json).await,
        EventCmd::Version {
            activate,
            json: as_json,
        } => super::version::version(edge, activate, as_json).await,
        // `token` and `console` are answered before any edge is reached
        // (`run`); the event commands by `event_command`.
        _ => anyhow::bail!("not a cluster command"),
    }
}

/// `event`: an event and its availability (the first 10 free seats), the
/// availability read through the edge of the event's owner region when
/// demo.json lists one (its replicas there are the freshest).
async fn show_event(edge: &Edge, id: &str, as_json: bool) -> anyhow::Result<()> {
    let ev = edge.get(&format!("/v1/events/{id}")).await?;
    if let Some(owner) = ev.body["owner_region"].as_str() {
        edge.prefer(owner);
    }
    let av = edge
        .get(&format!("/v1/events/{id}/availability?limit=10"))
        .await?;
    if as_json {
        println!("{}", json!({"event": ev.body, "availability": av.body}));
        return Ok(());
    }
    let e = &ev.body;
    let a = &av.body;
    println!(
        "event {} ({})\n  owner {}  epoch {}  group {}  term {}  sale {}",
        e["event_id"].as_str().unwrap_or("?"),
        e["name"].as_str().unwrap_or("?"),
        e["owner_region"].as_str().unwrap_or("?"),
        e["epoch"],
        e["group_id"],
        e["term"],
        if e["sale_open"] == json!(true) {
            "open"
        } else {
            "closed"
        }
    );
    println!(
        "  capacity {}  available {}  held {}  sold {}  (stale {} ms)",
        a["capacity"], a["available"], a["held"], a["sold"], a["stale_ms"]
    );
    println!("  first free seats: {}", a["available_seats"]);
    let w = &e["waiting_room"];
    if w.is_object() {
        println!(
            "  waiting room {}: {} a second, tickets {} s; {} waiting, {} admitted, {} tickets used",
            if w["enabled"] == json!(true) { "on" } else { "off" },
            w["admit_per_sec"],
            w["ticket_ttl_secs"],
            w["queue_length"],
            w["admitted"],
            w["tickets_used"]
        );
    }
    Ok(())
}
