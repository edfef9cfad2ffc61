//! A voter restarted under its id on an empty data dir must not vote on a
//! log it forgot (issue: a replaced disk lost an acknowledged hold).
//!
//! Voters A, B, C of an event: C is paused, a hold commits on A and B; B's
//! data dir is wiped and B restarted with its own config; A dies; C comes
//! back. Had B voted, C (without the hold) would lead and the seat would
//! sell again. B refuses to start, naming the remedy; once A is back, the
//! hold is there and the seat stays taken.
//!
//! Then B comes back with `--rejoin-empty`: the directory records it, every
//! group takes it back (demoted, caught up, a voter again) and it votes
//! again. The same scenario once more, on another seat, proves it: C
//! paused, a hold commits on A and B, A dies, C comes back: B and C elect
//! a leader (B votes again) and the hold is there (B caught up).

mod common;

use std::time::Duration;

use common::*;
use seatfence_core::GroupId;
use seatfence_testkit::http_client::HttpClient;
use serde_json::json;

/// One buyer's hold of `seat` in the event, keyed `key`, through `edge`.
async fn hold(
    http: &HttpClient,
    edge: &str,
    buyer: &str,
    key: &str,
    seat: &str,
) -> Option<seatfence_testkit::http_client::HttpAnswer> {
    let body = json!({"event_id": "wipe", "seats": [seat]});
    let url = format!("{edge}/v1/holds");
    http.post(&url, Some(buyer), Some(key), &body).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t41_a_wiped_voter_refuses_to_start_and_the_hold_survives() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_regions(dir.path(), 3, 1).await;
    let http = HttpClient::default();
    let edge_of = |cluster: &seatfence_testkit::cluster::LocalCluster, id: u64| {
        cluster
            .nodes
            .iter()
            .find(|n| n.id() == id)
            .and_then(|n| n.edge_url())
            .unwrap()
    };
    let created = create_event(
        &cluster,
        &edge_of(&cluster, 1),
        json!({"event_id": "wipe", "name": "Wipe", "home_region": "us-east",
               "survival": "region", "seats": ["A-1-1", "A-1-2"], "hold_ttl_secs": 3600}),
    )
    .await;
    let group = GroupId(created["group_id"].as_u64().unwrap());
    let a = cluster.wait_leader(group, PATIENCE).await.unwrap();
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|n| *n != a).collect();
    let (b, c) = (others[0], others[1]);
    tracing::info!("--- voters: leader {a}, {b} (to be wiped), {c} (paused)");

    cluster.pause(c).unwrap();
    let buyer = token(&cluster, "bea", false);
    let first = eventually("the hold while one voter is paused", || {
        let (http, edge, buyer) = (http.clone(), edge_of(&cluster, a), buyer.clone());
        async move {
            let r = hold(&http, &edge, &buyer, "bea-1", "A-1-1").await?;
            (r.status.as_u16() == 201).then_some(r.body)
        }
    })
    .await;
    let hold_id = first["hold_id"].as_str().unwrap().to_string();
    tracing::info!("--- {hold_id} committed on {a} and {b}: wipe {b} and start it again");

    cluster.kill(b).unwrap();
    let data_dir = cluster
        .nodes
        .iter()
        .find(|n| n.id() == b)
        .unwrap()
        .config
        .data_dir
        .clone();
    std::fs::remove_dir_all(&data_dir).unwrap();
    std::fs::create_dir_all(&data_dir).unwrap();
    cluster.restart(b).unwrap();
    let status = eventually(&format!("node {b} exits on its empty data dir"), || {
        let status = cluster.exited(b).unwrap();
        async move { status }
    })
    .await;
    assert!(!status.success(), "node {b} exited with {status}");
    let log = cluster.log_tail(b);
    assert!(
        log.contains(&format!("node {b} refuses to start")) && log.contains("declare-dead"),
        "node {b}'s log names the refusal and the remedy:\n{log}"
    );

    tracing::info!("--- kill {a}, resume {c}: {c} alone must not lead");
    cluster.kill(a).unwrap();
    cluster.resume(c).unwrap();
    // With a wiped B voting, C (without the hold) would lead within an
    // election or two; alone, it never may.
    let rogue = cluster.wait_leader(group, Duration::from_secs(15)).await;
    assert!(
        rogue.is_err(),
        "node {c} led the group with only a wiped node beside it: {rogue:?}"
    );
    cluster.restart(a).unwrap();

    tracing::info!("--- {a} is back: the seat stays taken, and the hold is there");
    // The rival's hold is a write, ordered after the first hold in the log:
    // its refusal shows the hold survived. The read comes after it, so it
    // cannot be served from a state that has not applied the hold yet (a
    // leader that restored its leadership at restart may answer a read
    // before its term's first commit: seen once here as a 404).
    let edge = edge_of(&cluster, c);
    let rival = token(&cluster, "rex", false);
    let second = eventually("another buyer's hold of the same seat answered", || {
        let (http, edge, rival) = (http.clone(), edge.clone(), rival.clone());
        async move {
            let r = hold(&http, &edge, &rival, "rex-1", "A-1-1").await?;
            (r.status.as_u16() != 503).then_some(r)
        }
    })
    .await;
    assert_eq!(second.status.as_u16(), 409, "{}", second.body);
    assert_eq!(second.code(), Some("seats_unavailable"));
    let url = format!("{edge}/v1/holds/{hold_id}");
    let found = eventually("the hold read back", || {
        let (http, url, buyer) = (http.clone(), url.clone(), buyer.clone());
        async move {
            let r = http.get(&url, Some(&buyer)).await.ok()?;
            (r.status.as_u16() != 503).then_some(r)
        }
    })
    .await;
    assert_eq!(found.status.as_u16(), 200, "{}", found.body);
    assert_eq!(found.body["status"], "held");

    tracing::info!("--- {b} comes back on its empty data dir with --rejoin-empty");
    cluster.restart_with(b, &["--rejoin-empty"]).unwrap();
    let admin = token(&cluster, "ops", true);
    let cluster_url = format!("{edge}/v1/admin/cluster");
    eventually(&format!("node {b} rejoined every group"), || {
        let (http, url, admin) = (http.clone(), cluster_url.clone(), admin.clone());
        async move {
            let view = http.get(&url, Some(&admin)).await.ok()?.body;
            let node = view["nodes"]
                .as_array()?
                .iter()
                .find(|n| n["node_id"] == b)?;
            // Null until the directory recorded the rejoin.
            let pending = node["rejoin"]["pending"].as_array()?.is_empty();
            let g = view["groups"]
                .as_array()?
                .iter()
                .find(|x| x["group_id"] == group.0)?;
            let voter = g["voters"].as_array()?.iter().any(|v| v == b);
            (pending && voter).then_some(())
        }
    })
    .await;

    tracing::info!("--- pause {c}, hold A-1-2 (committed on {a} and {b}), kill {a}, resume {c}");
    cluster.pause(c).unwrap();
    let third = token(&cluster, "tia", false);
    let edge_a = edge_of(&cluster, a);
    eventually("the second hold while one voter is paused", || {
        let (http, edge, third) = (http.clone(), edge_a.clone(), third.clone());
        async move {
            let r = hold(&http, &edge, &third, "tia-1", "A-1-2").await?;
            (r.status.as_u16() == 201).then_some(())
        }
    })
    .await;
    cluster.kill(a).unwrap();
    cluster.resume(c).unwrap();
    // B votes again and holds what it acknowledged: B and C elect a leader
    // that has the hold, so the seat stays taken.
    let second = eventually("another buyer's hold of A-1-2 answered", || {
        let (http, edge, rival) = (http.clone(), edge.clone(), rival.clone());
        async move {
            let r = hold(&http, &edge, &rival, "rex-2", "A-1-2").await?;
            (r.status.as_u16() != 503).then_some(r)
        }
    })
    .await;
    assert_eq!(second.status.as_u16(), 409, "{}", second.body);
    assert_eq!(second.code(), Some("seats_unavailable"));
}
