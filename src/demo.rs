//! `seatfence demo`: a local cluster of real node processes (3 regions × 3
//! nodes), a sample event, `demo.json`, and a walk-through to paste.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::{GatewayProc, Geo, LocalCluster};

/// What `demo.json` holds; `seatfence ctl` reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DemoFile {
    /// Region → HTTP edge URL.
    pub edges: std::collections::BTreeMap<String, String>,
    /// Every node's edge (the client library follows leader hints to
    /// these: `seatfence_client::Client::from_demo`).
    #[serde(default)]
    pub node_edges: Vec<NodeEdge>,
    /// The mock payment gateway.
    pub gateway: Option<String>,
    /// `operator`, `alice`, `bob` → bearer token.
    pub tokens: std::collections::BTreeMap<String, String>,
    pub events: Vec<String>,
    /// The HS256 secret the edges verify tokens with (demo only).
    pub jwt_secret: String,
    /// gRPC address of every node.
    pub nodes: Vec<String>,
    /// The operator's certificate for the nodes' gRPC ports (`seatfence ctl
    /// status`): the cluster CA, certificate and key.
    #[serde(default)]
    pub tls: Option<seatfence_raft::network::tls::TlsConfig>,
}

/// One node's HTTP edge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeEdge {
    pub node: u64,
    pub region: String,
    pub url: String,
}

/// The sample event's id.
pub const DEMO_EVENT: &str = "demo-concert";

/// Where the demo keeps its data unless told otherwise.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join("seatfence-demo")
}

/// The demo.json a client command reads: `--demo PATH` if given, else
/// `$SEATFENCE_DEMO`, else the default demo's.
pub fn file_path(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os("SEATFENCE_DEMO").map(PathBuf::from))
        .unwrap_or_else(|| default_dir().join("demo.json"))
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
    empty: bool,
    geo: Option<Geo>,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let dir = prepare_dir(data_dir)?;
    let bin = std::env::current_exe().context("find own binary")?;
    let (gateway, cluster) = start_cluster(&bin, &dir, geo.as_ref()).await?;
    let secret = cluster.jwt_secret().context("cluster has no edges")?;
    let tokens = mint_tokens(&secret);
    let edges = cluster.edges();
    let us = edges.get("us-east").context("no us-east edge")?.clone();
    let group = match empty {
        true => Value::Null,
        false => create_sample_event(&us, &tokens["operator"]).await?,
    };
    if geo.is_some() && !empty {
        create_world_event(&us, &tokens["operator"]).await?;
    }
    let node_edges = cluster
        .all_edges()
        .into_iter()
        .map(|(node, region, url)| NodeEdge { node, region, url })
        .collect();
    let demo = DemoFile {
        edges,
        node_edges,
        gateway: Some(gateway.url.clone()),
        tokens,
        events: match empty {
            true => Vec::new(),
            false => vec![DEMO_EVENT.into()],
        },
        jwt_secret: secret,
        nodes: cluster.addrs(),
        tls: cluster.certs_dir().map(|d| {
            seatfence_raft::network::tls::TlsConfig::in_dir(
                &d,
                &format!("operator-{}", seatfence_testkit::cluster::OPERATOR_CERT),
            )
        }),
    };
    let demo_path = dir.join("demo.json");
    std::fs::write(&demo_path, serde_json::to_string_pretty(&demo)?)?;
    if empty {
        print_nodes(&cluster, &gateway, &demo_path, None);
        println!(
            "An empty cluster (no sample event), to restore a backup into:\n  \
             {} restore --from DIR --demo {}\n",
            bin.display(),
            demo_path.display()
        );
        println!("Ctrl-C (or SIGTERM) stops the cluster.");
        shutdown.await;
        return stop(cluster, gateway, &dir);
    }

    // A restarted demo's event may have moved since it was created.
    let owner = match owner_region(&us, &demo.tokens["operator"]).await {
        Ok(owner) => owner,
        Err(e) => {
            eprintln!(
                "seatfence demo: could not read the sample event's owner ({e:#}); assuming us-east"
            );
            "us-east".to_string()
        }
    };
    print_nodes(&cluster, &gateway, &demo_path, Some(&owner));
    let group = group
        .as_u64()
        .context("the sample event's answer has no group_id")?;
    let walk = walk_for(&cluster, &demo, &gateway, (group, &owner), &dir).await?;
    println!("Try it (paste into another shell):\n");
    print!("{}", walkthrough(&walk));
    println!();
    if let Some(g) = &geo {
        println!("The regions are far apart: {g}. From the far side:\n");
        print!("{}", global_walkthrough(&walk));
        println!();
    }
    print_cli_hints(&bin, &demo_path);
    println!("\nCtrl-C (or SIGTERM) stops the cluster.");
    shutdown.await;
    stop(cluster, gateway, &dir)
}

/// Stop the demo's nodes (SIGTERM, waiting for each) and its gateway.
fn stop(cluster: LocalCluster, gateway: GatewayProc, dir: &Path) -> anyhow::Result<()> {
    println!("\nseatfence demo: stopping the 9 nodes and the gateway ...");
    // SIGTERM every node and wait: each flushes and stops its replicas (a
    // drop would SIGKILL them).
    let mut cluster = cluster;
    if let Err(e) = cluster.stop_all() {
        eprintln!("stopping the nodes: {e:#}");
    }
    drop(gateway);
    println!(
        "seatfence demo: stopped. `seatfence demo --data-dir {}` starts this cluster again \
         with its data; a plain `seatfence demo` starts afresh in {}.",
        dir.display(),
        default_dir().display()
    );
    Ok(())
}

/// The region that owns the sample event now, asked of the edge `us`.
async fn owner_region(us: &str, operator: &str) -> anyhow::Result<String> {
    let got = HttpClient::default()
        .get(&format!("{us}/v1/events/{DEMO_EVENT}"), Some(operator))
        .await?;
    got.body["owner_region"]
        .as_str()
        .map(str::to_string)
        .with_context(|| format!("the sample event's answer names no owner: {}", got.body))
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
async fn start_cluster(
    bin: &Path,
    dir: &Path,
    geo: Option<&Geo>,
) -> anyhow::Result<(GatewayProc, LocalCluster)> {
    println!(
        "seatfence demo: starting the mock gateway and 9 nodes (3 regions × 3) in {} ...",
        dir.display()
    );
    if let Some(g) = geo {
        println!("  regions far apart: {g}");
    }
    let gateway = GatewayProc::start(bin, &dir.join("gateway"), 5)?;
    let cluster = LocalCluster::builder(dir)
        .regions(3, 3)
        .payments(gateway.payments_config())
        .geo(geo.cloned())
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

/// The event `demo --global` adds: 100 seats owned by us-east with a
/// voter in every region (`survival: region`), so each region has a
/// replica to read from.
pub const WORLD_EVENT: &str = "demo-world-tour";

/// Create [`WORLD_EVENT`] through the edge `us` as `operator`.
async fn create_world_event(us: &str, operator: &str) -> anyhow::Result<()> {
    let created = HttpClient::default()
        .post(
            &format!("{us}/v1/events"),
            Some(operator),
            None,
            &json!({
                "event_id": WORLD_EVENT,
                "name": "World tour",
                "home_region": "us-east",
                "survival": "region",
                "sections": [{"name": "A", "rows": 5, "seats_per_row": 20}],
                "hold_ttl_secs": 600,
            }),
        )
        .await?;
    anyhow::ensure!(
        created.status.as_u16() == 201 || created.status.as_u16() == 409,
        "creating {WORLD_EVENT} failed: {} {}",
        created.status,
        created.body
    );
    Ok(())
}

/// The nodes, the gateway, where `demo.json` is and the sample event.
fn print_nodes(
    cluster: &LocalCluster,
    gateway: &GatewayProc,
    demo_path: &Path,
    owner: Option<&str>,
) {
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
    if let Some(owner) = owner {
        println!(
            "Sample event {DEMO_EVENT}: 250 seats (A-1-1 .. A-10-20, B-1-1 .. B-5-10), owned by {owner}.\n"
        );
    }
}

/// What the walk-through names: the edges, tokens and gateway, the sample
/// event's group, the next hold number in it and two free seats (so a
/// restarted demo prints ids that do not exist yet), where mail goes.
pub struct Walk {
    pub us: String,
    pub eu: String,
    pub ap: String,
    pub alice: String,
    pub bob: String,
    pub gateway: String,
    pub group: u64,
    pub next_hold: u64,
    pub seats: [String; 2],
    pub dir: String,
    /// The region that owns the sample event now (a restarted demo's
    /// event may have moved).
    pub owner: String,
}

/// The walk-through to paste into a shell: holds from several regions, a
/// conflict, a booking paid at the gateway, availability and metrics.
/// README.md shows it verbatim (rendered with placeholders; tested).
pub fn walkthrough(w: &Walk) -> String {
    let e = DEMO_EVENT;
    let (a1, a2) = (&w.seats[0], &w.seats[1]);
    let hold = format!("h{}-{}", w.group, w.next_hold);
    let bob_hold = format!("h{}-{}", w.group, w.next_hold + 1);
    let booking = format!("b{}-{}", w.group, w.next_hold);
    let key = format!("alice-{}", w.next_hold);
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    line(format!("US={}; EU={}; AP={}", w.us, w.eu, w.ap));
    line(format!(
        "ALICE={}; BOB={}; GW={}",
        w.alice, w.bob, w.gateway
    ));
    line(format!(
        "# the event, asked of the Europe edge (routed to its group in {})",
        w.owner
    ));
    line(format!(
        "curl -s $EU/v1/events/{e} -H \"Authorization: Bearer $ALICE\"; echo"
    ));
    line(
        "# alice holds two seats; the same request with the same key returns the same hold".into(),
    );
    line(format!("curl -s -X POST $EU/v1/holds -H \"Authorization: Bearer $ALICE\" -H 'Idempotency-Key: {key}' \\"));
    line(format!(
        "     -d '{{\"event_id\":\"{e}\",\"seats\":[\"{a1}\",\"{a2}\"]}}'; echo"
    ));
    line("# bob wants one of them: 409 seats_unavailable, listing the taken seat".into());
    line(format!("curl -s -X POST $AP/v1/holds -H \"Authorization: Bearer $BOB\" -d '{{\"event_id\":\"{e}\",\"seats\":[\"{a2}\"]}}'; echo"));
    line("# any 3 seats of section B".into());
    line(format!("curl -s -X POST $AP/v1/holds -H \"Authorization: Bearer $BOB\" -d '{{\"event_id\":\"{e}\",\"section\":\"B\",\"quantity\":3}}'; echo"));
    line(
        "# counts and the first free seats (at most 1 s stale by default: stale_ms says how stale)"
            .into(),
    );
    line(format!("curl -s \"$US/v1/events/{e}/availability?limit=5\" -H \"Authorization: Bearer $BOB\"; echo"));
    line(format!(
        "# alice's hold is {hold}: owner only, bob gets 404 for it"
    ));
    line(format!(
        "curl -s $US/v1/holds/{hold} -H \"Authorization: Bearer $ALICE\"; echo"
    ));
    line(format!(
        "curl -s $US/v1/holds/{hold} -H \"Authorization: Bearer $BOB\"; echo"
    ));
    line(format!("# bob cancels his ({bob_hold}; no payment yet)"));
    line(format!(
        "curl -s -X DELETE $US/v1/holds/{bob_hold} -H \"Authorization: Bearer $BOB\"; echo"
    ));
    line(
        "# alice books her hold: the payment is created at the gateway, the booking is pending"
            .into(),
    );
    line(format!("curl -s -X POST $US/v1/bookings -H \"Authorization: Bearer $ALICE\" -d '{{\"hold_id\":\"{hold}\"}}' | tee {}/booking.json; echo", w.dir));
    line("# she approves on the gateway's page; its redirect takes her browser to the callback, which".into());
    line("# executes the payment once and confirms: HELD -> PAID, seats sold".into());
    line(format!(
        "APPROVE=$(sed 's/.*\"approve_url\":\"\\([^\"]*\\)\".*/\\1/' {}/booking.json)",
        w.dir
    ));
    line(
        "REDIRECT=$(curl -s -X POST \"$APPROVE\" | sed 's/.*\"redirect\":\"\\([^\"]*\\)\".*/\\1/')"
            .into(),
    );
    line(format!("curl -s \"$REDIRECT\"; echo    # {{\"booking_id\":\"{booking}\",\"status\":\"confirmed\"}}"));
    line(format!(
        "curl -s $US/v1/bookings/{booking} -H \"Authorization: Bearer $ALICE\"; echo"
    ));
    line("# the gateway's side: one capture; the outbox writes the confirmation email within a second".into());
    line("curl -s $GW/_stats; echo".into());
    line(format!("sleep 1; cat {}/n*/data/mail/*.eml", w.dir));
    line("# the edges' metrics (alice's hold went through the Europe edge)".into());
    line("curl -s $EU/metrics | grep -E 'seatfence_(holds|hold_conflicts|stale_epoch)'".into());
    line("curl -s $US/metrics | grep -E 'seatfence_(bookings|payments_confirmed|outbox)'".into());
    out
}

/// What `demo --global` adds to the walk-through: the same requests timed
/// from the far side of the world, and reads answered where the buyer is.
/// README.md "Regions far apart" shows it verbatim (tested).
pub fn global_walkthrough(w: &Walk) -> String {
    let (e, world) = (DEMO_EVENT, WORLD_EVENT);
    let t = "-o /dev/null -w '%{http_code} in %{time_total} s\\n'";
    [
        format!("# a hold from ap-south crosses the world to the leader in {}", w.owner),
        format!("curl -s {t} -X POST $AP/v1/holds -H \"Authorization: Bearer $BOB\" -d '{{\"event_id\":\"{e}\",\"quantity\":1}}'"),
        "# the same from the owner's region".into(),
        format!("curl -s {t} -X POST $US/v1/holds -H \"Authorization: Bearer $BOB\" -d '{{\"event_id\":\"{e}\",\"quantity\":1}}'"),
        format!("# {world} has a replica in every region: ap-south reads its own (served_by, stale_ms)"),
        format!("curl -s \"$AP/v1/events/{world}/availability?limit=0\" -H \"Authorization: Bearer $BOB\"; echo"),
        format!("curl -s {t} \"$AP/v1/events/{world}/availability?limit=0\" -H \"Authorization: Bearer $BOB\""),
        "# max_stale_ms=0 asks the leader instead".into(),
        format!("curl -s {t} \"$AP/v1/events/{world}/availability?limit=0&max_stale_ms=0\" -H \"Authorization: Bearer $BOB\""),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect()
}

/// The values of the walk-through for this demo: the next hold number and
/// two free seats are read from the event's group (a restarted demo has
/// holds already).
async fn walk_for(
    cluster: &LocalCluster,
    demo: &DemoFile,
    gateway: &GatewayProc,
    (group, owner): (u64, &str),
    dir: &Path,
) -> anyhow::Result<Walk> {
    let client = cluster.client();
    let g = seatfence_core::GroupId(group);
    let next_hold = match client
        .query(g, &seatfence_core::Query::Event, true)
        .await?
        .0
    {
        seatfence_core::QueryResult::Event(Some(e)) => e.next_hold_seq.max(1),
        other => anyhow::bail!("the sample event's group answered {other:?}"),
    };
    let available = seatfence_core::Query::Availability { max_seats: 2 };
    let free = match client.query(g, &available, true).await?.0 {
        seatfence_core::QueryResult::Availability { free_seats, .. } => free_seats,
        other => anyhow::bail!("the sample event's group answered {other:?}"),
    };
    let seat = |i: usize| {
        free.get(i)
            .cloned()
            .unwrap_or_else(|| format!("A-1-{}", i + 1))
    };
    Ok(Walk {
        us: demo.edges["us-east"].clone(),
        eu: demo.edges["eu-west"].clone(),
        ap: demo.edges["ap-south"].clone(),
        alice: demo.tokens["alice"].clone(),
        bob: demo.tokens["bob"].clone(),
        gateway: gateway.url.clone(),
        group,
        next_hold,
        seats: [seat(0), seat(1)],
        dir: dir.display().to_string(),
        owner: owner.to_string(),
    })
}

/// The same with `seatfence ctl` (`bin`), pointed at `demo_path`.
fn print_cli_hints(bin: &Path, demo_path: &Path) {
    println!("Or with the CLI:");
    let exe = bin.display();
    println!("  export SEATFENCE_DEMO={}", demo_path.display());
    println!("  {exe} ctl event {DEMO_EVENT}");
    println!("  {exe} ctl cluster");
    println!("  {exe} ctl status");
    println!("  {exe} ctl token --user carol");
    println!(
        "  {exe} ctl create-event --id gig-2 --name 'Second gig' --region eu-west --section A:5x10"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// README.md shows the walk-through the demo prints (placeholders for
    /// what each run fills in).
    #[test]
    fn readme_shows_the_walkthrough_the_demo_prints() {
        let port = "http://127.0.0.1:PORT".to_string();
        let walk = Walk {
            us: port.clone(),
            eu: port.clone(),
            ap: port.clone(),
            alice: "<jwt>".into(),
            bob: "<jwt>".into(),
            gateway: port,
            group: 1,
            next_hold: 1,
            seats: ["A-1-1".into(), "A-1-2".into()],
            dir: "/tmp/seatfence-demo".into(),
            owner: "us-east".into(),
        };
        let shown = walkthrough(&walk);
        let readme = include_str!("../README.md");
        assert!(
            readme.contains(&shown),
            "README.md's walk-through differs from the demo's; it should read:\n{shown}"
        );
        let far = global_walkthrough(&walk);
        assert!(
            readme.contains(&far),
            "README.md's global walk-through differs from the demo's; it should read:\n{far}"
        );
    }
}
