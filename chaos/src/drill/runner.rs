//! One drill, start to verdict: set up the run directory, the partition
//! mechanism, the gateway and the cluster; create the events; run the
//! clients, the observer and the nemesis for `--duration`; heal, settle,
//! read every replica; check; write the summary and the report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::faults::{check_fault_names, fault_kinds, plan_faults, say_mechanism};
use crate::check::Status;
use crate::history::Recorder;
use crate::net::{NetnsNet, Partitioner};
use crate::run::{write_json, NodeInfo, RunInfo, SoakInfo};
use crate::schedule::{Fault, ScheduledFault, MAX_SKEW_MS};
use anyhow::{bail, Context};
use seatfence_node::ChaosHooks;
use seatfence_node::NodeConfig;
use seatfence_raft::propose::PlantedBug;
use seatfence_raft::ClusterClient;
use seatfence_regions::config::MovesConfig;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::nemesis::Nemesis;
use super::net_setup::{choose_mechanism, start_partitioner};
use super::teardown::stop_cluster;
use super::{settle, workload, DrillArgs, NetChoice, World};
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::progress::Progress;
use seatfence_testkit::{GatewayProc, LocalCluster};

/// Hold TTL of the drill's events: short, so seats churn.
pub(super) const HOLD_TTL_SECS: u64 = 4;
/// How long the drill's events keep finished records (idempotency keys,
/// ended holds, settled bookings): five minutes, so a soak's second half
/// runs at the retention's steady state and pruning runs under faults.
pub(super) const RETENTION_SECS: u64 = 300;
/// Quiet time before the first fault and after the last.
pub(super) const WARMUP_MS: u64 = 8_000;
pub(super) const COOLDOWN_MS: u64 = 10_000;

/// Run one drill: its verdict, or an error when the harness itself could
/// not run.
pub async fn run(bin: &Path, args: DrillArgs, soak: Option<SoakInfo>) -> anyhow::Result<Status> {
    // A random seed stays short enough to type back in.
    let seed = args
        .seed
        .unwrap_or_else(|| u64::from(rand::random::<u32>()));
    let planted = check_args(&args)?;
    let out = args.out.clone();
    create_out_dir(&out, seed, args.duration)?;
    let geo = args.geo.geo()?;
    let (mech, unavailable) = choose_mechanism(args.net, geo.is_some())?;
    // Namespaces first: the gateway listens on the host's end of their
    // bridge. The layout numbers nodes 1..=n.
    let planned: Vec<u64> = (1..=3 * args.nodes_per_region as u64).collect();
    let netns = start_netns(mech, &planned)?;
    let gateway = start_gateway(bin, &out, netns.is_some())?;
    let mut configs = lay_out_cluster(
        &out,
        args.nodes_per_region,
        &gateway,
        &planned,
        geo.as_ref(),
    )?;
    let skew_files = add_chaos_hooks(&mut configs, planted)?;
    if soak.is_some() {
        bound_soak_caches(&mut configs);
    }
    let net = start_partitioner(&mut configs, mech, netns, &planned, geo.as_ref()).await?;
    if let Some(g) = &geo {
        eprintln!("chaos drill: regions far apart: {g}");
    }
    say_mechanism(&*net, &unavailable);
    let cover = fault_kinds(&args, soak.as_ref(), &*net, planned.len())?;
    let schedule = plan_faults(seed, &args, soak.as_ref(), &cover);
    let nodes = node_infos(&configs);
    let cluster = launch_cluster(bin, configs, mech).await?;
    let secret = cluster.jwt_secret().context("nodes have no edge")?;
    let mut run_info = new_run_info(
        seed,
        &args,
        &schedule,
        &*net,
        unavailable,
        &nodes,
        soak.as_ref(),
    );
    run_info.fault_kinds = cover.claimed.iter().map(Fault::kind).collect();
    run_info.geo = geo.as_ref().map(|g| g.to_json());
    run_info.cannot_inject = cover.cannot.clone();
    write_json(&out.join("schedule.json"), &schedule)?;

    let (tx_stop, world) = new_world(&out, &nodes, &gateway, secret, cluster.dialer())?;
    record_first_events(&world, &cluster, &args, &out, &mut run_info).await?;

    let nemesis = Nemesis::new(
        world.clone(),
        cluster,
        net.clone(),
        skew_files,
        seed,
        args.clients,
    );
    run_load(
        &world,
        &nemesis,
        &tx_stop,
        schedule,
        &args,
        seed,
        soak.as_ref(),
    )
    .await?;

    settle_and_record(&world, &out, &mut run_info).await?;
    stop_cluster(nemesis, &world, &out, &planned, args.keep_data).await;
    drop(gateway);
    drop(net);
    super::check_dir(&out)
}

/// Check the flags; the bug to plant, if any.
fn check_args(args: &DrillArgs) -> anyhow::Result<Option<PlantedBug>> {
    anyhow::ensure!(args.duration >= 20, "--duration must be at least 20 s");
    check_fault_names(&args.faults)?;
    anyhow::ensure!(
        args.nodes_per_region >= 3,
        "--nodes-per-region must be at least 3 (an event's group has 3 voters in its region)"
    );
    anyhow::ensure!(
        args.clients >= 1 && args.hot_seats >= 1,
        "--clients and --hot-seats must be at least 1"
    );
    let bug = match args.plant_bug.as_deref() {
        None => None,
        Some("accept-stale-epoch") => Some(PlantedBug::AcceptStaleEpoch),
        Some(other) => bail!("unknown planted bug {other:?} (known: accept-stale-epoch)"),
    };
    anyhow::ensure!(
        bug.is_none() || seatfence_raft::propose::PLANTED_BUGS,
        "--plant-bug needs a build that can plant bugs: the test build's binary, or \
         `cargo build --release --features planted-bugs`"
    );
    Ok(bug)
}

/// Create the run directory `out` (refusing one that already holds a
/// drill) and say where the run goes and how to replay it.
fn create_out_dir(out: &Path, seed: u64, duration: u64) -> anyhow::Result<()> {
    if out.join("run.json").exists() || out.join("history.jsonl").exists() {
        bail!(
            "{} already holds a drill; choose an empty --out",
            out.display()
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    eprintln!(
        "chaos drill: seed {seed}, {duration} s, out {} (replay: the same flags with --seed {seed})",
        out.display(),
    );
    Ok(())
}

/// With `netns`, a network namespace for each node of `planned`; else none.
fn start_netns(mech: NetChoice, planned: &[u64]) -> anyhow::Result<Option<Arc<NetnsNet>>> {
    Ok(match mech {
        NetChoice::Netns => Some(Arc::new(NetnsNet::start(planned)?)),
        _ => None,
    })
}

/// The mock payment gateway, listening where the nodes reach it: on the
/// host's end of the namespaces' bridge (`netns`), else on loopback.
fn start_gateway(bin: &Path, out: &Path, netns: bool) -> anyhow::Result<GatewayProc> {
    let gateway_host = if netns {
        NetnsNet::HOST_IP
    } else {
        "127.0.0.1"
    };
    GatewayProc::start_on(bin, &out.join("gateway"), 60, gateway_host)
}

/// The nodes' configs: 3 regions of `nodes_per_region` nodes, paying
/// through `gateway` with short timeouts and intervals (so payments resolve
/// within a drill), retiring a moved event's old group after 10 s; with
/// `geo`, Raft timings stretched for its slowest link. The layout must
/// number the nodes as `planned`.
fn lay_out_cluster(
    out: &Path,
    nodes_per_region: usize,
    gateway: &GatewayProc,
    planned: &[u64],
    geo: Option<&seatfence_testkit::Geo>,
) -> anyhow::Result<Vec<(PathBuf, NodeConfig)>> {
    let mut payments = gateway.payments_config();
    payments.call_timeout_ms = 1_000;
    payments.reconcile_interval_ms = 1_000;
    payments.reconcile_margin_ms = 3_000;
    payments.extension_ms = 2_000;
    payments.outbox_interval_ms = 500;
    let moves = MovesConfig {
        retired_grace_ms: 10_000,
        // The leader balancer runs, faster than its default, so its
        // hand-offs meet the faults, moves and kills.
        balance_every_ms: 3_000,
        // A lost node (`lose-node`) is dead after 8 s, so its repair
        // happens inside the drill; a node killed and restarted by
        // `kill-minority` is back well before.
        suspect_after_ms: 2_000,
        dead_after_ms: 8_000,
        ..MovesConfig::default()
    };
    let configs = LocalCluster::builder(&out.join("cluster"))
        .regions(3, nodes_per_region)
        .payments(payments)
        .moves(moves)
        .geo(geo.cloned())
        .layout()?;
    let ids: Vec<u64> = configs.iter().map(|(_, c)| c.node_id).collect();
    anyhow::ensure!(ids == planned, "node ids {ids:?}, expected {planned:?}");
    Ok(configs)
}

/// sled's page cache of a soak's nodes (MiB).
const SOAK_CACHE_MB: u64 = 32;

/// Give a soak's nodes a bounded cache that fills in minutes, so what
/// grows in the second half is not sled's page cache warming up.
fn bound_soak_caches(configs: &mut [(PathBuf, NodeConfig)]) {
    for (_, c) in configs.iter_mut() {
        c.raft.cache_mb = SOAK_CACHE_MB;
        // RSS counts what is allocated from the start, not as
        // openraft's reserved rings are first written (raft/src/heap.rs).
        c.raft.pretouch = true;
    }
}

/// Give every node the drill's hooks: a clock-skew file in its directory
/// (0 to start with; the nemesis writes it) and the planted bug, if any.
/// The skew files, by node.
fn add_chaos_hooks(
    configs: &mut [(PathBuf, NodeConfig)],
    planted: Option<PlantedBug>,
) -> anyhow::Result<BTreeMap<u64, PathBuf>> {
    let mut skew_files = BTreeMap::new();
    for (dir, c) in configs.iter_mut() {
        let skew = dir.join("skew_ms");
        std::fs::write(&skew, "0")?;
        skew_files.insert(c.node_id, skew.clone());
        c.chaos = Some(ChaosHooks {
            skew_file: Some(skew),
            plant_bug: planted,
            ..ChaosHooks::default()
        });
    }
    Ok(skew_files)
}

/// What the run records of each node: id, region, gRPC address, edge URL.
fn node_infos(configs: &[(PathBuf, NodeConfig)]) -> Vec<NodeInfo> {
    configs
        .iter()
        .map(|(_, c)| NodeInfo {
            id: c.node_id,
            region: c.region.clone(),
            grpc_addr: c.grpc_addr.clone(),
            edge: c
                .edge
                .as_ref()
                .map(|e| format!("http://{}", e.http_addr))
                .unwrap_or_default(),
        })
        .collect()
}

/// Start the node processes (each in its own namespace with `netns`) and
/// wait up to a minute for the cluster to come up.
async fn launch_cluster(
    bin: &Path,
    configs: Vec<(PathBuf, NodeConfig)>,
    mech: NetChoice,
) -> anyhow::Result<LocalCluster> {
    let cluster = LocalCluster::launch(bin, configs, |id| {
        (mech == NetChoice::Netns).then(|| NetnsNet::ns_of(id))
    })?;
    cluster
        .wait_ready(Duration::from_secs(60))
        .await
        .context("cluster did not come up")?;
    Ok(cluster)
}

/// `run.json` as known once the cluster is up: the events and the wall-clock
/// time of the history's start are filled in later.
fn new_run_info(
    seed: u64,
    args: &DrillArgs,
    schedule: &[ScheduledFault],
    net: &dyn Partitioner,
    unavailable: Vec<(String, String)>,
    nodes: &[NodeInfo],
    soak: Option<&SoakInfo>,
) -> RunInfo {
    RunInfo {
        seed,
        duration_s: args.duration,
        hold_ttl_ms: HOLD_TTL_SECS * 1_000,
        max_skew_ms: MAX_SKEW_MS,
        events: Vec::new(),
        schedule: schedule.to_vec(),
        fault_kinds: Vec::new(),
        cannot_inject: Vec::new(),
        partition_mechanism: net.name().to_string(),
        unavailable_mechanisms: unavailable,
        planted_bug: args.plant_bug.clone(),
        nodes: nodes.to_vec(),
        soak: soak.cloned(),
        started_unix_ms: 0,
        retention_ms: RETENTION_SECS * 1_000,
        geo: None,
    }
}

/// What the drill's tasks share, recording into `out/history.jsonl`; no
/// events yet. With it, the sender that tells the tasks to stop.
fn new_world(
    out: &Path,
    nodes: &[NodeInfo],
    gateway: &GatewayProc,
    jwt_secret: String,
    dialer: seatfence_raft::network::Dialer,
) -> anyhow::Result<(watch::Sender<bool>, Arc<World>)> {
    let (tx_stop, rx_stop) = watch::channel(false);
    let http = HttpClient::default().with_timeout(Duration::from_secs(8));
    let world = World {
        rec: Recorder::create(&out.join("history.jsonl"))?,
        http,
        edges: nodes.iter().map(|n| (n.id, n.edge.clone())).collect(),
        regions: nodes.iter().map(|n| (n.id, n.region.clone())).collect(),
        grpc: nodes.iter().map(|n| (n.id, n.grpc_addr.clone())).collect(),
        gateway: gateway.url.clone(),
        jwt_secret,
        events: Mutex::new(Vec::new()),
        epochs: Mutex::new(BTreeMap::new()),
        leaders: Mutex::new(BTreeMap::new()),
        voters: Mutex::new(BTreeMap::new()),
        asleep: Default::default(),
        asleep_max: Default::default(),
        client: ClusterClient::new(nodes.iter().map(|n| n.grpc_addr.clone()).collect(), dialer)
            .with_deadline(Duration::from_secs(10)),
        rx_stop,
    };
    Ok((tx_stop, Arc::new(world)))
}

/// Note when the history started, create the first events, and write
/// `run.json` with both.
async fn record_first_events(
    world: &World,
    cluster: &LocalCluster,
    args: &DrillArgs,
    out: &Path,
    run_info: &mut RunInfo,
) -> anyhow::Result<()> {
    run_info.started_unix_ms = history_start_unix_ms(&world.rec);
    create_first_events(world, cluster, args.hot_seats, args.sleeping_events).await?;
    run_info.events = world.all_events();
    write_json(&out.join("run.json"), &*run_info)?;
    Ok(())
}

/// The wall-clock time (Unix ms) at the history's time 0, so the checkers
/// can place each hold's own `expires_at` on the history's clock.
fn history_start_unix_ms(rec: &Recorder) -> u64 {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    unix_ms.saturating_sub(rec.now() / 1_000)
}

/// Create the first generation of events and wait until each one's group
/// has a leader, then the sleeping events; then the world knows them.
async fn create_first_events(
    world: &World,
    cluster: &LocalCluster,
    hot_seats: usize,
    sleeping_events: usize,
) -> anyhow::Result<()> {
    let first = workload::create_generation(world, 0, hot_seats)
        .await
        .context("create the first events")?;
    for e in &first {
        cluster
            .wait_leader(seatfence_core::GroupId(e.group), Duration::from_secs(30))
            .await?;
    }
    world
        .events
        .lock()
        .expect("events lock poisoned")
        .extend(first);
    if sleeping_events > 0 {
        let sleepers = workload::create_sleepers(world, sleeping_events)
            .await
            .context("create the sleeping events")?;
        world
            .events
            .lock()
            .expect("events lock poisoned")
            .extend(sleepers);
    }
    Ok(())
}

/// Run the load, the nemesis (playing `schedule`), the progress line and a
/// soak's sampler for `--duration`; then stop the load, heal every fault
/// and wait for the sampler's last sample.
async fn run_load(
    world: &Arc<World>,
    nemesis: &Arc<Nemesis>,
    tx_stop: &watch::Sender<bool>,
    schedule: Vec<ScheduledFault>,
    args: &DrillArgs,
    seed: u64,
    soak: Option<&SoakInfo>,
) -> anyhow::Result<()> {
    let tasks = spawn_load(world, args, seed, soak.is_some());
    let sampler = match soak {
        Some(s) => Some(tokio::spawn(super::soak::sample(
            world.clone(),
            nemesis.clone(),
            args.out.clone(),
            super::soak::create_samples(&args.out)?,
            Duration::from_millis(s.sample_every_ms),
        ))),
        None => None,
    };
    let faults = schedule.len();
    let nem = tokio::spawn(nemesis.clone().run(schedule));
    let progress = tokio::spawn(progress(world.clone(), args.duration, faults));
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop_load(tx_stop, nem, nemesis, tasks).await?;
    progress.abort();
    if let Some(sampler) = sampler {
        if let Err(e) = sampler.await {
            eprintln!("chaos soak: the sampler stopped: {e}");
        }
    }
    Ok(())
}

/// Start the load: the observer, a buyer per `--clients`, the operator
/// (`move_on_fault`: it also moves as each fault starts), the zombie and
/// the event generations.
fn spawn_load(
    world: &Arc<World>,
    args: &DrillArgs,
    seed: u64,
    move_on_fault: bool,
) -> Vec<JoinHandle<()>> {
    let mut tasks = vec![tokio::spawn(workload::observer(world.clone()))];
    for i in 0..args.clients {
        tasks.push(tokio::spawn(workload::buyer(world.clone(), i, seed)));
    }
    tasks.push(tokio::spawn(workload::operator(
        world.clone(),
        seed,
        args.move_every_ms,
        move_on_fault,
    )));
    tasks.push(tokio::spawn(workload::zombie(world.clone(), seed)));
    tasks.push(tokio::spawn(workload::generations(
        world.clone(),
        args.hot_seats,
        args.generation_secs * 1_000,
    )));
    tasks
}

/// The load's time is up: stop the nemesis and the clients, heal every
/// fault, and give the clients up to 75 s to finish.
async fn stop_load(
    tx_stop: &watch::Sender<bool>,
    nem: JoinHandle<()>,
    nemesis: &Nemesis,
    tasks: Vec<JoinHandle<()>>,
) -> anyhow::Result<()> {
    let _ = tx_stop.send(true);
    let _ = nem.await;
    eprintln!("\nchaos drill: load stopped; healing every fault");
    nemesis.heal_all().await.context("heal the cluster")?;
    // Clients finish the operation in hand (their calls time out); whatever
    // is still open after that is recorded as unknown by the history.
    let stop_by = Instant::now() + Duration::from_secs(75);
    for t in tasks {
        let left = stop_by.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, t).await.is_err() {
            tracing::warn!("a drill client did not stop in time");
        }
    }
    Ok(())
}

/// Wait (up to 90 s) for the cluster to settle, then write what the
/// checkers read: `final.json`, `run.json` with every event created, and
/// the end of the history.
async fn settle_and_record(
    world: &World,
    out: &Path,
    run_info: &mut RunInfo,
) -> anyhow::Result<()> {
    eprintln!(
        "chaos drill: up to {} groups asleep at once ({} sleeping events)",
        world.asleep_max.load(std::sync::atomic::Ordering::Relaxed),
        world.sleepers().len()
    );
    eprintln!("chaos drill: settling (replicas equal, moves finished, payments resolved)");
    let finals = settle::settle(world, Duration::from_secs(90)).await;
    if !finals.converged {
        eprintln!(
            "chaos drill: the cluster did not settle: {:?}",
            finals.notes
        );
    }
    write_json(&out.join("final.json"), &finals)?;
    run_info.events = world.all_events();
    write_json(&out.join("run.json"), &*run_info)?;
    world.rec.finish()?;
    Ok(())
}

/// The drill's progress on stderr (`Progress`): a bar on a terminal, one
/// line every 10 s otherwise.
async fn progress(w: Arc<World>, duration: u64, faults: usize) {
    let mut p = Progress::new("drill", duration, "s", Duration::from_secs(10));
    let start = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let t = w.rec.tally();
        p.update(
            start.elapsed().as_secs(),
            format!(
                "ops {} (ok {}, refused {}, failed {}, unknown {})  faults {}/{faults}  leaders seen {}  asleep {} (max {})",
                t.invoked, t.ok, t.refused, t.fail, t.info, t.faults, t.leader_changes,
                w.asleep.load(std::sync::atomic::Ordering::Relaxed),
                w.asleep_max.load(std::sync::atomic::Ordering::Relaxed),
            ),
        );
    }
}
