//! `seatfence demo`: a local cluster of real node processes (3 regions × 3
//! nodes), a sample event, `demo.json`, and a walk-through to paste.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::{GatewayProc, LocalCluster};

/// What `demo.json` holds; `seatfence ctl` reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DemoFile {
    /// Region → HTTP edge URL.
    pub edges: std::collections::BTreeMap<String, String>,
    /// The mock payment gateway.
    pub gateway: Option<String>,
    /// `operator`, `alice`, `bob` → bearer token.
    pub tokens: std::collections::BTreeMap<String, String>,
    pub events: Vec<String>,
    /// The HS256 secret the edges verify tokens with (demo only).
    pub jwt_secret: String,
    /// gRPC address of every node.
    pub nodes: Vec<String>,
}

/// The sample event's id.
pub const DEMO_EVENT: &str = "demo-concert";

/// Where the demo keeps its data unless told otherwise.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join("seatfence-demo")
}

impl DemoFile {
    pub fn load(path: &Path) -> anyhow::Result<DemoFile> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "read {} (start `seatfence demo` first, or pass --demo PATH)",
                path.display()
            )
        })?;
        serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))
    }
}

/// `seatfence demo`: start the mock gateway and a 3 × 3 cluster in
/// `data_dir` (default: a fresh [`default_dir`]), create the sample event,
/// write `demo.json`, print a walk-through, and serve until `shutdown`.
pub async fn run(
    data_dir: Option<PathBuf>,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let dir = prepare_dir(data_dir)?;
    let bin = std::env::current_exe().context("find own binary")?;
    let (gateway, cluster) = start_cluster(&bin, &dir).await?;
    let secret = cluster.jwt_secret().context("cluster has no edges")?;
    let tokens = mint_tokens(&secret);
    let edges = cluster.edges();
    let us = edges.get("us-east").context("no us-east edge")?.clone();
    let group = create_sample_event(&us, &tokens["operator"]).await?;
    let demo = DemoFile {
        edges,
        gateway: Some(gateway.url.clone()),
        tokens,
        events: vec![DEMO_EVENT.into()],
        jwt_secret: secret,
        nodes: cluster.addrs(),
    };
    let demo_path = dir.join("demo.json");
    std::fs::write(&demo_path, serde_json::to_string_pretty(&demo)?)?;

    print_nodes(&cluster, &gateway, &demo_path);
    print_walkthrough(&demo, &gateway, &group, &dir);
    print_cli_hints(&bin, &demo_path);
    println!("\nCtrl-C (or SIGTERM) stops the cluster.");
    shutdown.await;
    // SIGTERM every node and wait: each flushes and stops its replicas (a
    // drop would SIGKILL them).
    let mut cluster = cluster;
    if let Err(e) = cluster.stop_all() {
        eprintln!("stopping the nodes: {e:#}");
    }
    drop(gateway);
    Ok(())
}

/// The demo's data directory, created: `data_dir`, or [`default_dir`]
/// cleared of the previous demo.
fn prepare_dir(data_dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = match data_dir {
        Some(d) => d,
        None => {
            let d = default_dir();
            if d.exists() {
                std::fs::remove_dir_all(&d)
                    .with_context(|| format!("clear the previous demo in {}", d.display()))?;
            }
            d
        }
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}

/// Start the mock gateway and 9 nodes (3 regions × 3) of `bin` in `dir`,
/// and wait until the cluster is ready.
async fn start_cluster(bin: &Path, dir: &Path) -> anyhow::Result<(GatewayProc, LocalCluster)> {
    println!(
        "seatfence demo: starting the mock gateway and 9 nodes (3 regions × 3) in {} ...",
        dir.display()
    );
    let gateway = GatewayProc::start(bin, &dir.join("gateway"), 5)?;
    let cluster = LocalCluster::builder(dir)
        .regions(3, 3)
        .payments(gateway.payments_config())
        .start(bin)?;
    cluster.wait_ready(Duration::from_secs(60)).await?;
    Ok((gateway, cluster))
}

/// 30-day bearer tokens signed with `secret`: `operator` (with the
/// operator role), `alice` and `bob`.
fn mint_tokens(secret: &str) -> BTreeMap<String, String> {
    let day = 24 * 3600;
    [
        (
            "operator",
            seatfence_api::auth::mint(secret, "operator", true, 30 * day),
        ),
        (
            "alice",
            seatfence_api::auth::mint(secret, "alice", false, 30 * day),
        ),
        (
            "bob",
            seatfence_api::auth::mint(secret, "bob", false, 30 * day),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Create the sample event (250 seats in sections A and B, owned by
/// us-east) through the edge `us` as `operator`: its group id.
async fn create_sample_event(us: &str, operator: &str) -> anyhow::Result<Value> {
    let http = HttpClient::default();
    let created = http
        .post(
            &format!("{us}/v1/events"),
            Some(operator),
            None,
            &json!({
                "event_id": DEMO_EVENT,
                "name": "Demo concert",
                "home_region": "us-east",
                "sections": [{"name": "A", "rows": 10, "seats_per_row": 20},
                             {"name": "B", "rows": 5, "seats_per_row": 10}],
                "hold_ttl_secs": 600,
                "max_seats_per_hold": 8,
            }),
        )
        .await?;
    anyhow::ensure!(
        created.status.as_u16() == 201,
        "creating the sample event failed: {} {}",
        created.status,
        created.body
    );
    Ok(created.body["group_id"].clone())
}

/// The nodes, the gateway, where `demo.json` is and the sample event.
fn print_nodes(cluster: &LocalCluster, gateway: &GatewayProc, demo_path: &Path) {
    println!("\nNodes:");
    for n in &cluster.nodes {
        println!(
            "  node {} {:<9} gRPC {}  edge {}",
            n.id(),
            n.config.region,
            n.addr(),
            n.edge_url().unwrap_or_default()
        );
    }
    println!("  mock gateway {}", gateway.url);
    println!(
        "\nWrote {} (edges, gateway, tokens, events).",
        demo_path.display()
    );
    println!(
        "Sample event {DEMO_EVENT}: 250 seats (A-1-1 .. A-10-20, B-1-1 .. B-5-10), owned by us-east.\n"
    );
}

/// The walk-through to paste into a shell: holds from several regions, a
/// conflict, a booking paid at the gateway, availability and metrics.
/// `group` is the sample event's group (it names the holds and booking).
fn print_walkthrough(demo: &DemoFile, gateway: &GatewayProc, group: &Value, dir: &Path) {
    let (edges, tokens) = (&demo.edges, &demo.tokens);
    println!("Try it (paste into another shell):\n");
    println!("  US={}", edges["us-east"]);
    println!("  EU={}", edges["eu-west"]);
    println!("  AP={}", edges["ap-south"]);
    println!("  ALICE={}", tokens["alice"]);
    println!("  BOB={}", tokens["bob"]);
    println!("  OP={}", tokens["operator"]);
    println!("  GW={}", gateway.url);
    println!();
    println!("  # the event, from an edge in another region (routed to us-east)");
    println!("  curl -s $EU/v1/events/{DEMO_EVENT} -H \"Authorization: Bearer $ALICE\"; echo");
    println!("  # alice holds two seats through the Europe edge; retrying with the same key returns the same hold");
    println!("  curl -s -X POST $EU/v1/holds -H \"Authorization: Bearer $ALICE\" -H 'Idempotency-Key: alice-1' \\\n       -d '{{\"event_id\":\"{DEMO_EVENT}\",\"seats\":[\"A-1-1\",\"A-1-2\"]}}'; echo");
    println!("  # bob wants one of them from Asia: 409 seats_unavailable");
    println!("  curl -s -X POST $AP/v1/holds -H \"Authorization: Bearer $BOB\" \\\n       -d '{{\"event_id\":\"{DEMO_EVENT}\",\"seats\":[\"A-1-2\"]}}'; echo");
    println!("  # bob takes any 3 seats in section B instead");
    println!("  curl -s -X POST $AP/v1/holds -H \"Authorization: Bearer $BOB\" \\\n       -d '{{\"event_id\":\"{DEMO_EVENT}\",\"section\":\"B\",\"quantity\":3}}'; echo");
    println!("  # counts and the first free seats (may be up to 250 ms stale; says how stale)");
    println!("  curl -s \"$US/v1/events/{DEMO_EVENT}/availability?limit=5\" -H \"Authorization: Bearer $BOB\"; echo");
    // On a fresh demo alice's hold is the group's first, bob's the second.
    let (hold, bob_hold) = (format!("h{group}-1"), format!("h{group}-2"));
    let booking = format!("b{group}-1");
    println!("  # read alice's hold (its hold_id above: {hold}); bob gets 404 for it");
    println!("  curl -s $US/v1/holds/{hold} -H \"Authorization: Bearer $ALICE\"; echo");
    println!("  curl -s $US/v1/holds/{hold} -H \"Authorization: Bearer $BOB\"; echo");
    println!("  # bob changes his mind: he cancels his hold (allowed before a payment exists)");
    println!("  curl -s -X DELETE $US/v1/holds/{bob_hold} -H \"Authorization: Bearer $BOB\"; echo");
    println!("  # alice books her hold: the payment is created at the mock gateway; the booking is pending");
    println!("  curl -s -X POST $US/v1/bookings -H \"Authorization: Bearer $ALICE\" -d '{{\"hold_id\":\"{hold}\"}}' | tee /tmp/booking.json; echo");
    println!("  # she approves on the gateway's page, which redirects her browser to the callback");
    println!("  APPROVE=$(sed 's/.*\"approve_url\":\"\\([^\"]*\\)\".*/\\1/' /tmp/booking.json)");
    println!("  REDIRECT=$(curl -s -X POST \"$APPROVE\" | sed 's/.*\"redirect\":\"\\([^\"]*\\)\".*/\\1/'); echo \"$REDIRECT\"");
    println!("  curl -s \"$REDIRECT\"; echo");
    println!("  # the callback executed the payment once and confirmed: the seats are sold");
    println!("  curl -s $US/v1/bookings/{booking} -H \"Authorization: Bearer $ALICE\"; echo");
    println!("  curl -s \"$US/v1/events/{DEMO_EVENT}/availability?limit=0\" -H \"Authorization: Bearer $BOB\"; echo");
    println!("  # the gateway's side: one capture; the outbox writes the confirmation email within a second");
    println!("  curl -s $GW/_stats; echo");
    println!("  sleep 1; cat {}/n*/data/mail/*.eml", dir.display());
    println!("  # this edge's metrics (alice's hold went through the Europe edge)");
    println!("  curl -s $EU/metrics | grep -E 'seatfence_(holds|hold_conflicts|stale_epoch)'");
    println!("  curl -s $US/metrics | grep -E 'seatfence_(bookings|payments_confirmed|outbox)'");
    println!();
}

/// The same with `seatfence ctl` (`bin`), which reads `demo_path`.
fn print_cli_hints(bin: &Path, demo_path: &Path) {
    println!("Or with the CLI (reads {}):", demo_path.display());
    let exe = bin.display();
    println!("  {exe} ctl event {DEMO_EVENT}");
    println!("  {exe} ctl token --user carol");
    println!(
        "  {exe} ctl create-event --id gig-2 --name 'Second gig' --region eu-west --section A:5x10"
    );
}
