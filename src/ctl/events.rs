//! `seatfence ctl` event and operator commands, through an HTTP edge with
//! the edges and tokens of `demo.json` (`--demo`) unless `--edge`/`--token`
//! are given.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Subcommand;
use seatfence_testkit::http_client::{HttpAnswer, HttpClient};
use serde_json::{json, Value};

use super::show::{follow_move, print_cluster, print_move_row};
use crate::demo::DemoFile;

#[derive(Subcommand)]
pub enum EventCmd {
    /// Print a bearer token for a user, signed with the demo's secret.
    Token {
        #[arg(long)]
        user: String,
        /// Give the token the operator role.
        #[arg(long)]
        operator: bool,
        #[arg(long, default_value_t = 86_400)]
        ttl_secs: u64,
    },
    /// Create an event (operator).
    CreateEvent {
        #[arg(long)]
        id: String,
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
        #[arg(long)]
        hold_ttl_secs: Option<u64>,
        #[arg(long)]
        max_seats_per_hold: Option<u32>,
        #[arg(long)]
        max_seats_per_buyer: Option<u32>,
        /// zone (3 voters in the home region) or region (one per region).
        #[arg(long)]
        survival: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show an event and its availability.
    Event {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Regions, nodes and groups: leader, term, epoch, members, lag (operator).
    Cluster {
        #[arg(long)]
        json: bool,
    },
    /// Hand a group's leadership to another (caught-up) voter (operator).
    TransferLeader {
        group: u64,
        #[arg(long)]
        to: u64,
        #[arg(long)]
        json: bool,
    },
    /// Move every leader off a node before maintenance (operator).
    Drain {
        node: u64,
        #[arg(long)]
        json: bool,
    },
    /// Put a drained node back in service (operator).
    Undrain { node: u64 },
    /// Move an event's ownership to another region (operator). With
    /// `--wait`, follow its steps until it is done, aborted or failed.
    Move {
        event: String,
        #[arg(long)]
        to: String,
        #[arg(long)]
        wait: bool,
        #[arg(long)]
        json: bool,
    },
    /// Ownership moves, newest first (operator).
    Moves {
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// Abort a move before its membership change (operator).
    AbortMove { move_id: u64 },
    /// The operators' audit trail, newest first (operator).
    Audit {
        #[arg(long, default_value_t = 50)]
        limit: u32,
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

pub async fn run(target: EdgeTarget, cmd: EventCmd) -> anyhow::Result<()> {
    let demo = DemoFile::load(&target.demo);
    if let EventCmd::Token {
        user,
        operator,
        ttl_secs,
    } = &cmd
    {
        let secret = match (std::env::var("SEATFENCE_JWT_SECRET"), &demo) {
            (Ok(s), _) => s,
            (_, Ok(d)) => d.jwt_secret.clone(),
            (_, Err(e)) => bail!("no secret: set SEATFENCE_JWT_SECRET or start the demo ({e:#})"),
        };
        println!(
            "{}",
            seatfence_api::auth::mint(&secret, user, *operator, *ttl_secs)
        );
        return Ok(());
    }
    let edge = match (&target.edge, &demo) {
        (Some(e), _) => e.clone(),
        (None, Ok(d)) => d
            .edges
            .values()
            .next()
            .cloned()
            .context("demo.json lists no edge")?,
        (None, Err(e)) => bail!("no edge: pass --edge URL or start the demo ({e:#})"),
    };
    let token = match (&target.token, &demo) {
        (Some(t), _) => t.clone(),
        (None, Ok(d)) => d
            .tokens
            .get("operator")
            .cloned()
            .context("demo.json has no operator token")?,
        (None, Err(e)) => bail!("no token: pass --token or start the demo ({e:#})"),
    };
    let http = HttpClient::default();
    match cmd {
        EventCmd::Token { .. } => unreachable!("handled above"),
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
            json: as_json,
        } => {
            let mut body = json!({"event_id": id, "name": name, "home_region": region});
            if !seats.is_empty() {
                body["seats"] = json!(seats);
            }
            if !section.is_empty() {
                body["sections"] = Value::Array(
                    section
                        .iter()
                        .map(|s| parse_section(s))
                        .collect::<Result<_, _>>()?,
                );
            }
            for (k, v) in [
                ("hold_ttl_secs", hold_ttl_secs.map(|v| json!(v))),
                ("max_seats_per_hold", max_seats_per_hold.map(|v| json!(v))),
                ("max_seats_per_buyer", max_seats_per_buyer.map(|v| json!(v))),
                ("survival", survival.map(|v| json!(v))),
            ] {
                if let Some(v) = v {
                    body[k] = v;
                }
            }
            let a = http
                .post(&format!("{edge}/v1/events"), Some(&token), None, &body)
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
            check(&a)?;
        }
        EventCmd::Event { id, json: as_json } => {
            let ev = get_ok(&http, &format!("{edge}/v1/events/{id}"), &token).await?;
            let av = get_ok(
                &http,
                &format!("{edge}/v1/events/{id}/availability?limit=10"),
                &token,
            )
            .await?;
            if as_json {
                println!("{}", json!({"event": ev.body, "availability": av.body}));
            } else {
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
            }
        }
        EventCmd::Cluster { json: as_json } => {
            let a = get_ok(&http, &format!("{edge}/v1/admin/cluster"), &token).await?;
            if as_json {
                println!("{}", a.body);
            } else {
                print_cluster(&a.body);
            }
        }
        EventCmd::TransferLeader {
            group,
            to,
            json: as_json,
        } => {
            let a = post_ok(
                &http,
                &format!("{edge}/v1/admin/groups/{group}/transfer-leader"),
                &token,
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
        }
        EventCmd::Drain {
            node,
            json: as_json,
        } => {
            let a = post_ok(
                &http,
                &format!("{edge}/v1/admin/nodes/{node}/drain"),
                &token,
                &json!({}),
            )
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
        }
        EventCmd::Undrain { node } => {
            post_ok(
                &http,
                &format!("{edge}/v1/admin/nodes/{node}/undrain"),
                &token,
                &json!({}),
            )
            .await?;
            println!("node {node}: back in service");
        }
        EventCmd::Move {
            event,
            to,
            wait,
            json: as_json,
        } => {
            let a = post_ok(
                &http,
                &format!("{edge}/v1/admin/events/{event}/move"),
                &token,
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
                follow_move(&http, &edge, &token, a.body, as_json).await?
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
        }
        EventCmd::Moves {
            limit,
            json: as_json,
        } => {
            let a = get_ok(
                &http,
                &format!("{edge}/v1/admin/moves?limit={limit}"),
                &token,
            )
            .await?;
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
        }
        EventCmd::AbortMove { move_id } => {
            let a = post_ok(
                &http,
                &format!("{edge}/v1/admin/moves/{move_id}/abort"),
                &token,
                &json!({}),
            )
            .await?;
            println!("move {move_id}: aborted at {}", a.body["step"]);
        }
        EventCmd::Audit {
            limit,
            json: as_json,
        } => {
            let a = get_ok(
                &http,
                &format!("{edge}/v1/admin/audit?limit={limit}"),
                &token,
            )
            .await?;
            if as_json {
                println!("{}", a.body);
            } else {
                for e in a.body["entries"].as_array().cloned().unwrap_or_default() {
                    println!(
                        "{:>5} {} {:<10} {:<16} {:<28} {}",
                        e["seq"],
                        e["at"].as_str().unwrap_or("?"),
                        e["actor"].as_str().unwrap_or("?"),
                        e["action"].as_str().unwrap_or("?"),
                        e["target"].as_str().unwrap_or("?"),
                        e["result"].as_str().unwrap_or("?")
                    );
                }
            }
        }
    }
    Ok(())
}
