//! Node lifecycle on a 3×3 cluster with a fourth node in us-east (nodes 1,
//! 4, 7, 10; eu-west 2, 5, 8; ap-south 3, 6, 9), buyers holding seats
//! throughout:
//! - a node that was only suspect comes back without any repair; the same
//!   node killed with its data deleted is declared dead and every group it
//!   was a voter of has three live voters again, with no hold lost;
//! - the directory's leader killed in the middle of a repair: the next one
//!   finishes it, and the dead directory voter is replaced;
//! - decommission refused where the region has no spare node; a live node
//!   decommissioned under load ends with no replica and no leadership, no
//!   write failed, and can then be deleted;
//! - a node that joins a region (here: comes back empty-handed) receives
//!   replicas until the region's counts differ by at most one.

mod common;

use std::path::Path;

use common::moves::{all_edges, create, verify_holds, Traffic};
use common::*;
use seatfence_core::GroupId;
use seatfence_regions::config::MovesConfig;
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::LocalCluster;
use serde_json::{json, Value};

fn moves(dead_after_ms: u64, step_delay_ms: u64) -> MovesConfig {
    MovesConfig {
        lifecycle_every_ms: 200,
        suspect_after_ms: 1_500,
        dead_after_ms,
        step_delay_ms,
        balance_every_ms: 0,
        rebalance_parallel: 0,
        retired_grace_ms: 2_000,
        ..MovesConfig::default()
    }
}

async fn start(dir: &Path, moves: MovesConfig) -> LocalCluster {
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let cluster = LocalCluster::builder(dir)
        .voters(3, 7)
        .tuning(test_tuning())
        .moves(moves)
        .start(bin)
        .expect("start cluster");
    cluster
        .wait_ready(PATIENCE)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.log_tail(1)));
    cluster
}

/// `GET /v1/admin/cluster` from the first running node's edge.
async fn view(cluster: &LocalCluster) -> Option<Value> {
    let http = HttpClient::default();
    let op = token(cluster, "ops", true);
    for n in cluster.nodes.iter().filter(|n| n.is_running()) {
        let url = format!("{}/v1/admin/cluster", n.edge_url()?);
        if let Ok(a) = http.get(&url, Some(&op)).await {
            if a.status.as_u16() == 200 {
                return Some(a.body);
            }
        }
    }
    None
}

fn node_state(v: &Value, node: u64) -> String {
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == json!(node))
        .and_then(|n| n["state"].as_str())
        .unwrap_or("?")
        .to_string()
}

fn group(v: &Value, gid: u64) -> &Value {
    v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group_id"] == json!(gid))
        .expect("group in the cluster view")
}

fn sorted(x: &Value) -> Vec<u64> {
    let mut v: Vec<u64> = x
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// `gid` has three voters, none of them `gone`, as the directory records
/// them and as its leader reports them, and no repair runs.
fn whole_without(v: &Value, gid: u64, gone: u64) -> bool {
    let g = group(v, gid);
    let members = sorted(&g["members"]);
    members.len() == 3
        && !members.contains(&gone)
        && sorted(&g["voters"]) == members
        && g["repair"].is_null()
        && !g["under_replicated"].as_bool().unwrap_or(true)
}

/// A member of `gid` in us-east other than node 1 (the region's directory
/// voter).
async fn victim(cluster: &LocalCluster, gid: u64) -> u64 {
    let v = view(cluster).await.expect("cluster view");
    sorted(&group(&v, gid)["members"])
        .into_iter()
        .find(|n| [4, 7, 10].contains(n))
        .expect("a us-east member besides node 1")
}

fn delete_data(cluster: &LocalCluster, node: u64) {
    let n = cluster.nodes.iter().find(|n| n.id() == node).unwrap();
    std::fs::remove_dir_all(&n.config.data_dir).expect("delete the node's data");
}

async fn post(cluster: &LocalCluster, path: &str) -> (u16, Value) {
    let http = HttpClient::default();
    let op = token(cluster, "ops", true);
    let edge = all_edges(cluster)[0].clone();
    let a = http
        .post(&format!("{edge}{path}"), Some(&op), None, &json!({}))
        .await
        .expect("edge answers");
    (a.status.as_u16(), a.body)
}

/// Let the buyers hold `more` seats more, then stop them: every hold
/// acknowledged is there, none was given up on.
async fn finish_traffic(cluster: &LocalCluster, traffic: Traffic, event: &str, capacity: u64) {
    let target = traffic.acked_count() + 20;
    eventually("buyers keep holding seats", || async {
        (traffic.acked_count() >= target).then_some(())
    })
    .await;
    let (acked, unknown) = traffic.finish().await;
    assert_eq!(unknown, 0, "every hold was answered");
    verify_holds(&all_edges(cluster)[0], event, &acked, unknown, capacity).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t64_a_suspect_node_rejoins_and_a_dead_one_is_replaced() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path(), moves(10_000, 0)).await;
    let (gid, capacity) = create(&cluster, "lc-a", "us-east", 50).await;
    let mut others = Vec::new();
    for e in ["lc-a2", "lc-a3"] {
        others.push(create(&cluster, e, "us-east", 1).await.0);
    }
    let traffic = Traffic::start(&cluster, "lc-a", 1);
    let gone = victim(&cluster, gid).await;
    let v = view(&cluster).await.unwrap();
    let before = sorted(&group(&v, gid)["members"]);
    // Every group with a voter on the victim.
    let hit: Vec<u64> = std::iter::once(gid)
        .chain(others)
        .filter(|g| sorted(&group(&v, *g)["members"]).contains(&gone))
        .collect();

    tracing::info!("--- node {gone} stops long enough to be suspect, then comes back");
    cluster.kill(gone).unwrap();
    eventually("suspect", || async {
        (node_state(&view(&cluster).await?, gone) == "suspect").then_some(())
    })
    .await;
    cluster.restart(gone).unwrap();
    let v = eventually("live again", || async {
        let v = view(&cluster).await?;
        (node_state(&v, gone) == "live").then_some(v)
    })
    .await;
    assert_eq!(sorted(&group(&v, gid)["members"]), before, "no repair");
    assert!(
        v["repairs"].as_array().unwrap().is_empty(),
        "{}",
        v["repairs"]
    );

    tracing::info!("--- node {gone} dies for good: killed, its data deleted");
    cluster.kill(gone).unwrap();
    delete_data(&cluster, gone);
    let v = eventually(
        "every group it was in has three live voters again",
        || async {
            let v = view(&cluster).await?;
            let whole = hit.iter().all(|g| whole_without(&v, *g, gone));
            (node_state(&v, gone) == "dead" && whole).then_some(v)
        },
    )
    .await;
    for g in &hit {
        let members = sorted(&group(&v, *g)["members"]);
        assert!(
            members.iter().all(|m| [1, 4, 7, 10].contains(m)),
            "group {g} replaced within us-east: {members:?}"
        );
    }
    assert!(v["under_replicated"].as_array().unwrap().is_empty());
    finish_traffic(&cluster, traffic, "lc-a", capacity).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t64_b_a_repair_resumes_after_the_directory_leader_dies() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path(), moves(6_000, 3_000)).await;
    let (gid, capacity) = create(&cluster, "lc-b", "us-east", 50).await;
    let client = cluster.client();
    eventually("node 2 leads the directory", || async {
        let _ = client.transfer_leader(GroupId::DIRECTORY, 2).await;
        (cluster
            .wait_leader(GroupId::DIRECTORY, PATIENCE)
            .await
            .ok()?
            == 2)
            .then_some(())
    })
    .await;
    let traffic = Traffic::start(&cluster, "lc-b", 1);
    let gone = victim(&cluster, gid).await;
    cluster.kill(gone).unwrap();
    delete_data(&cluster, gone);
    eventually("a repair of the group starts", || async {
        let v = view(&cluster).await?;
        group(&v, gid)["repair"].is_object().then_some(())
    })
    .await;

    tracing::info!("--- the directory's leader (node 2) dies in the middle of the repair");
    cluster.kill(2).unwrap();
    let v = eventually("the next leader finishes the repair", || async {
        let v = view(&cluster).await?;
        whole_without(&v, gid, gone).then_some(v)
    })
    .await;
    assert_eq!(node_state(&v, gone), "dead");
    let v = eventually(
        "node 2 is dead and no longer votes in the directory",
        || async {
            let v = view(&cluster).await?;
            let voters = sorted(&group(&v, 0)["voters"]);
            (node_state(&v, 2) == "dead" && voters.len() == 3 && !voters.contains(&2)).then_some(v)
        },
    )
    .await;
    tracing::info!("directory voters now {:?}", group(&v, 0)["voters"]);
    finish_traffic(&cluster, traffic, "lc-b", capacity).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t64_c_decommission_refused_without_a_spare_and_done_under_load() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path(), moves(300_000, 0)).await;
    let (gid, capacity) = create(&cluster, "lc-c", "us-east", 50).await;
    create(&cluster, "lc-d", "eu-west", 1).await;

    tracing::info!("--- eu-west has three nodes, all voters of lc-d: no spare");
    let (status, body) = post(&cluster, "/v1/admin/nodes/5/decommission").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "no_spare_node", "{body}");
    assert_eq!(node_state(&view(&cluster).await.unwrap(), 5), "live");

    tracing::info!("--- a us-east voter of lc-c is decommissioned while buyers hold seats");
    let traffic = Traffic::start(&cluster, "lc-c", 1);
    let gone = victim(&cluster, gid).await;
    let (status, body) = post(&cluster, &format!("/v1/admin/nodes/{gone}/decommission")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "decommissioning");
    let v = eventually("decommissioned", || async {
        let v = view(&cluster).await?;
        (node_state(&v, gone) == "decommissioned").then_some(v)
    })
    .await;
    assert!(whole_without(&v, gid, gone), "{}", group(&v, gid));
    let node = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == json!(gone))
        .unwrap();
    assert_eq!(node["replicas"], json!(0), "{node}");
    assert_eq!(sorted(&node["leader_of"]), Vec::<u64>::new(), "{node}");
    let (status, body) = post(&cluster, &format!("/v1/admin/nodes/{gone}/recommission")).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("not_decommissioning"))
    );

    tracing::info!("--- node {gone} is stopped and its data deleted: nothing notices");
    cluster.kill(gone).unwrap();
    delete_data(&cluster, gone);
    finish_traffic(&cluster, traffic, "lc-c", capacity).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t64_d_a_node_added_to_a_region_takes_its_share_of_replicas() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(
        dir.path(),
        MovesConfig {
            rebalance_parallel: 1,
            ..moves(300_000, 0)
        },
    )
    .await;
    tracing::info!("--- node 10 is away while three us-east events are created");
    cluster.kill(10).unwrap();
    eventually("node 10 suspect", || async {
        (node_state(&view(&cluster).await?, 10) == "suspect").then_some(())
    })
    .await;
    let (_, capacity) = create(&cluster, "lc-e", "us-east", 50).await;
    create(&cluster, "lc-e2", "us-east", 1).await;
    create(&cluster, "lc-e3", "us-east", 1).await;
    let replicas = |v: &Value, n: u64| {
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["node_id"] == json!(n))
            .and_then(|x| x["replicas"].as_u64())
            .unwrap()
    };
    assert_eq!(replicas(&view(&cluster).await.unwrap(), 10), 0);

    tracing::info!("--- node 10 comes back: replicas move to it, one at a time");
    let traffic = Traffic::start(&cluster, "lc-e", 1);
    cluster.restart(10).unwrap();
    let v = eventually("us-east balanced", || async {
        let v = view(&cluster).await?;
        let counts: Vec<u64> = [1, 4, 7, 10].iter().map(|n| replicas(&v, *n)).collect();
        let (max, min) = (*counts.iter().max()?, *counts.iter().min()?);
        let idle = v["repairs"].as_array()?.is_empty();
        (idle && max <= min + 1 && replicas(&v, 10) >= 2).then_some(v)
    })
    .await;
    for g in v["groups"].as_array().unwrap() {
        if g["group_id"] != json!(0) {
            assert_eq!(sorted(&g["voters"]), sorted(&g["members"]), "{g}");
        }
    }
    finish_traffic(&cluster, traffic, "lc-e", capacity).await;
}
