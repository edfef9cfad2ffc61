//! `seatfence ctl` event and operator commands, through an HTTP edge with
//! the edges and tokens of `demo.json` (`--demo`) unless `--edge`/`--token`
//! are given.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Subcommand;
use seatfence_testkit::http_client::{HttpAnswer, HttpClient};
use serde_json::{json, Value};

use super::admin::{
    abort_move, audit, drain, list_moves, move_event, node_lifecycle, show_cluster,
    transfer_leader, undrain,
};
use super::target::{bearer_token, edge_url, mint_token};
use crate::demo::DemoFile;

#[derive(Subcommand)]
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
    /// Print a sign-in link to the operator console of the edge
    /// (`--edge`, else demo.json's first): `{edge}/console#token=JWT`, a
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
    /// `refunded` when the gateway has paid it back. Retry with the same
    /// `--idempotency-key` (printed) and the same answer comes back, never a second
    /// refund.
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
        /// The Idempotency-Key (default: a fresh one).
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

/// An error answer as an error (status and body).
pub(super) fn check(a: &HttpAnswer) -> anyhow::Result<()> {
    if !a.status.is_success() {
        bail!("{}: {}", a.status, a.body);
    }
    Ok(())
}

/// GET `url` with the token; an error answer is an error.
pub(super) async fn get_ok(
    http: &HttpClient,
    url: &str,
    token: &str,
) -> anyhow::Result<HttpAnswer> {
    let a = http.get(url, Some(token)).await?;
    check(&a)?;
    Ok(a)
}

/// POST `body` to `url` with the token; an error answer is an error.
async fn post_ok(
    http: &HttpClient,
    url: &str,
    token: &str,
    body: &Value,
) -> anyhow::Result<HttpAnswer> {
    let a = http.post(url, Some(token), None, body).await?;
    check(&a)?;
    Ok(a)
}

/// Where event commands go and with which token.
pub struct EdgeTarget {
    pub demo: PathBuf,
    pub edge: Option<String>,
    pub token: Option<String>,
}

fn parse_section(s: &str) -> anyhow::Result<Value> {
    let (name, dims) = s
        .split_once(':')
        .with_context(|| format!("section {s:?} is not NAME:ROWSxSEATS"))?;
    let (rows, seats) = dims
        .split_once('x')
        .with_context(|| format!("section {s:?} is not NAME:ROWSxSEATS"))?;
    Ok(json!({"name": name, "rows": rows.parse::<u32>()?, "seats_per_row": seats.parse::<u32>()?}))
}

/// The edge an event command talks to, and the bearer token it sends.
pub(super) struct Edge {
    pub(super) http: HttpClient,
    pub(super) url: String,
    pub(super) token: String,
}

impl Edge {
    /// GET `path` (`/v1/...`) at the edge; an error answer is an error.
    pub(super) async fn get(&self, path: &str) -> anyhow::Result<HttpAnswer> {
        let url = format!("{}{path}", self.url);
        get_ok(&self.http, &url, &self.token).await
    }

    /// POST `body` to `path` (`/v1/...`) at the edge; an error answer is an
    /// error.
    pub(super) async fn post(&self, path: &str, body: &Value) -> anyhow::Result<HttpAnswer> {
        let url = format!("{}{path}", self.url);
        post_ok(&self.http, &url, &self.token, body).await
    }
}

/// Run one event command: `token` needs only the secret; every other
/// command goes to the edge (`--edge`, else demo.json's first) with the
/// token (`--token`, else demo.json's operator token).
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
    if let EventCmd::Console { user, ttl_secs } = &cmd {
        let url = edge_url(&target, &demo)?;
        let jwt = mint_token(&demo, user, true, *ttl_secs)?;
        println!("{}/console#token={jwt}", url.trim_end_matches('/'));
        return Ok(());
    }
    let url = edge_url(&target, &demo)?;
    let token = bearer_token(&target, &demo)?;
    let edge = Edge {
        http: HttpClient::default(),
        url,
        token,
    };
    event_command(&edge, cmd).await
}

/// The commands about events: create, show, move, waiting room, refund;
/// the cluster's go to [`cluster_command`].
async fn event_command(edge: &Edge, cmd: EventCmd) -> anyhow::Result<()> {
    match cmd {
        EventCmd::CreateEvent {
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
            json: as_json,
        } => {
            let options = [
                ("hold_ttl_secs", hold_ttl_secs.map(|v| json!(v))),
                ("max_seats_per_hold", max_seats_per_hold.map(|v| json!(v))),
                ("max_seats_per_buyer", max_seats_per_buyer.map(|v| json!(v))),
                ("survival", survival.map(|v| json!(v))),
                ("retention_secs", retention_secs.map(|v| json!(v))),
                (
                    "changes_retention_secs",
                    changes_retention_secs.map(|v| json!(v)),
                ),
            ];
            let body = event_body(id, name, region, seats, &section, options)?;
            create_event(edge, &body, as_json).await
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
        // `token` and `console` are answered before any edge is reached
        // (`run`); the event commands by `event_command`.
        _ => anyhow::bail!("not a cluster command"),
    }
}

/// The body of `POST /v1/events`: the event, its explicit seats and
/// sections (`NAME:ROWSxSEATS`) when given, and each of `options` that is
/// set.
fn event_body(
    id: String,
    name: String,
    region: String,
    seats: Vec<String>,
    sections: &[String],
    options: [(&str, Option<Value>); 6],
) -> anyhow::Result<Value> {
    let mut body = json!({"event_id": id, "name": name, "home_region": region});
    if !seats.is_empty() {
        body["seats"] = json!(seats);
    }
    if !sections.is_empty() {
        body["sections"] = Value::Array(
            sections
                .iter()
                .map(|s| parse_section(s))
                .collect::<Result<_, _>>()?,
        );
    }
    for (k, v) in options {
        if let Some(v) = v {
            body[k] = v;
        }
    }
    Ok(body)
}

/// `create-event`: create the event; prints the edge's answer as is with
/// `--json` (even an error answer), else a summary when it succeeded.
async fn create_event(edge: &Edge, body: &Value, as_json: bool) -> anyhow::Result<()> {
    let a = edge
        .http
        .post(
            &format!("{}/v1/events", edge.url),
            Some(&edge.token),
            None,
            body,
        )
        .await?;
    if as_json {
        println!("{}", a.body);
    } else if a.status.is_success() {
        println!(
            "created event {} in group {}, owner {}, epoch {}, {} seats",
            a.body["event_id"].as_str().unwrap_or("?"),
            a.body["group_id"],
            a.body["owner_region"].as_str().unwrap_or("?"),
            a.body["epoch"],
            a.body["capacity"]
        );
    }
    check(&a)
}

/// `event`: an event and its availability (the first 10 free seats).
async fn show_event(edge: &Edge, id: &str, as_json: bool) -> anyhow::Result<()> {
    let ev = edge.get(&format!("/v1/events/{id}")).await?;
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
