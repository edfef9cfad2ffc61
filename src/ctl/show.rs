//! How `seatfence ctl` shows the cluster and moves, and follows a move.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use seatfence_testkit::http_client::HttpClient;
use serde_json::{json, Value};

/// The cluster view as a readable table.
pub(super) fn print_cluster(v: &Value) {
    let arr = |x: &Value| x.as_array().cloned().unwrap_or_default();
    let ids = |x: &Value| {
        arr(x)
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    println!("REGION     NODES");
    for r in arr(&v["regions"]) {
        println!(
            "{:<10} {}",
            r["region"].as_str().unwrap_or("?"),
            ids(&r["nodes"])
        );
    }
    println!(
        "\nNODE  REGION     GRPC                  STATE           REPLICAS UP   DRAINED LEADS"
    );
    for n in arr(&v["nodes"]) {
        println!(
            "{:<5} {:<10} {:<21} {:<15} {:<8} {:<4} {:<7} {}",
            n["node_id"].to_string(),
            n["region"].as_str().unwrap_or("?"),
            n["grpc_addr"].as_str().unwrap_or("?"),
            n["state"].as_str().unwrap_or("?"),
            n["replicas"].to_string(),
            if n["reachable"] == json!(true) {
                "yes"
            } else {
                "NO"
            },
            if n["drained"] == json!(true) {
                "yes"
            } else {
                "no"
            },
            ids(&n["leader_of"])
        );
    }
    println!("\nGROUP EVENT                OWNER      EPOCH LEADER TERM  MEMBERS      LAG (node:entries)");
    for g in arr(&v["groups"]) {
        let lag = arr(&g["replicas"])
            .iter()
            .map(|r| format!("{}:{}", r["node_id"], r["lag"]))
            .collect::<Vec<_>>()
            .join(" ");
        let dash = |x: &Value| {
            if x.is_null() {
                "-".to_string()
            } else {
                x.to_string()
            }
        };
        println!(
            "{:<5} {:<20} {:<10} {:<5} {:<6} {:<5} {:<12} {}",
            g["group_id"].to_string(),
            g["event_id"].as_str().unwrap_or(if g["group_id"] == 0 {
                "(directory)"
            } else {
                "-"
            }),
            g["owner_region"].as_str().unwrap_or("-"),
            dash(&g["epoch"]),
            dash(&g["leader"]),
            dash(&g["term"]),
            ids(&g["members"]),
            lag
        );
    }
    let moves = arr(&v["moves"]);
    if !moves.is_empty() {
        println!("\nRUNNING MOVES");
        for m in moves {
            print_move_row(&m);
        }
    }
    let repairs = arr(&v["repairs"]);
    if !repairs.is_empty() {
        println!("\nRUNNING REPAIRS (group: node -> node, reason, step)");
        for r in repairs {
            println!(
                "{:<5} {} -> {}  {:<12} {}",
                r["group_id"].to_string(),
                r["remove"],
                r["add"],
                r["reason"].as_str().unwrap_or("?"),
                r["step"].as_str().unwrap_or("?")
            );
        }
    }
    let under = arr(&v["under_replicated"]);
    if !under.is_empty() {
        println!(
            "\nUNDER-REPLICATED (a voter on a dead or retiring node, no spare node in its region): {}",
            ids(&v["under_replicated"])
        );
    }
}

/// One line per move: id, event, regions, step, state, timings.
pub(super) fn print_move_row(m: &Value) {
    println!(
        "{:<5} {:<20} {:<10} -> {:<10} {:<18} {:<8} {:>8} {:>8}",
        m["move_id"].to_string(),
        m["event_id"].as_str().unwrap_or("?"),
        m["from_region"].as_str().unwrap_or("?"),
        m["to_region"].as_str().unwrap_or("?"),
        m["step"].as_str().unwrap_or("?"),
        m["state"].as_str().unwrap_or("?"),
        format!("{} ms", m["duration_ms"]),
        if m["pause_ms"].is_null() {
            "-".to_string()
        } else {
            format!("{} ms", m["pause_ms"])
        }
    );
}

/// A progress bar for a move at `m`'s step: `[###---] 3/6 transfer_leader`.
fn move_bar(m: &Value) -> String {
    let n = m["step_number"].as_u64().unwrap_or(0) as usize;
    let total = m["steps"].as_u64().unwrap_or(6) as usize;
    let done = if m["state"] == "done" {
        total
    } else {
        n.saturating_sub(1)
    };
    // The longest step name is 17 characters: pad so later columns line up.
    format!(
        "[{}{}] {}/{} {:<18}",
        "#".repeat(done * 4),
        "-".repeat((total - done.min(total)) * 4),
        n,
        total,
        m["step"].as_str().unwrap_or("?")
    )
}

/// Follow move `id` until it ends: one line per step reached, with the
/// time since the move started (the lines scripts read), and on a terminal
/// a live bar under them. Returns the final move.
pub(super) async fn follow_move(
    http: &HttpClient,
    edge: &str,
    token: &str,
    first: Value,
    quiet: bool,
) -> anyhow::Result<Value> {
    let id = first["move_id"].clone();
    let total = first["steps"].as_u64().unwrap_or(6);
    let live = !quiet && std::io::stdout().is_terminal();
    let bar = if live {
        let style = ProgressStyle::with_template("{bar:24} {pos}/{len} {msg} {elapsed}")
            .expect("a valid template");
        ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stdout()).with_style(style)
    } else {
        ProgressBar::hidden()
    };
    let mut last_step = String::new();
    let mut m = first;
    let start = std::time::Instant::now();
    loop {
        let step = format!("{}/{}", m["step"], m["state"]);
        if step != last_step && !quiet {
            let line = format!(
                "{} {:>7.2} s  {}",
                move_bar(&m),
                start.elapsed().as_secs_f64(),
                m["state"].as_str().unwrap_or("?")
            );
            if live {
                bar.println(line);
            } else {
                println!("{line}");
            }
            last_step = step;
        }
        bar.set_position(m["step_number"].as_u64().unwrap_or(0).saturating_sub(1));
        bar.set_message(m["step"].as_str().unwrap_or("?").to_string());
        if m["state"] != "running" {
            bar.finish_and_clear();
            return Ok(m);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let a = http
            .get(&format!("{edge}/v1/admin/moves/{id}"), Some(token))
            .await?;
        // The directory may be electing: keep watching.
        if a.status.is_success() {
            m = a.body;
        }
    }
}
