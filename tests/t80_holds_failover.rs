//! kill -9 the leader of an event's group while holds are in flight through
//! edges of other regions: no acknowledged hold is lost, none is applied
//! twice (retries carry the same Idempotency-Key).
//!
//! The load is sized by count, not time: the leader is killed once 20
//! holds are acknowledged, and the buyers stop once 20 more were after the
//! kill. A buyer told the event is sold out (a fast machine) stops too:
//! that is an answer a user can see, and the accounting below still holds.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use seatfence_core::GroupId;
use seatfence_testkit::http_client::HttpClient;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t80_leader_killed_while_holds_are_in_flight() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_regions(dir.path(), 3, 3).await;
    let edges = cluster.edges();
    let created = create_event(
        &cluster,
        &edges["us-east"],
        json!({"event_id": "busy", "name": "Busy", "home_region": "us-east",
               "sections": [{"name": "A", "rows": 200, "seats_per_row": 100}]}),
    )
    .await;
    let group = GroupId(created["group_id"].as_u64().unwrap());
    let leader = cluster.wait_leader(group, PATIENCE).await.unwrap();

    tracing::info!("--- 16 buyers hold seats through the eu-west and ap-south edges");
    let far = [edges["eu-west"].clone(), edges["ap-south"].clone()];
    let acked = Arc::new(Mutex::new(Vec::<(String, String, String)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let http = HttpClient::default();
    let mut buyers = Vec::new();
    for w in 0..16 {
        let (http, acked, stop) = (http.clone(), acked.clone(), stop.clone());
        let edge = far[w % 2].clone();
        let secret = cluster.jwt_secret().unwrap();
        buyers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let user = format!("b{w}-{i}");
                let tok = seatfence_api::auth::mint(&secret, &user, false, 3600);
                let key = format!("k{w}-{i}");
                // Retry the same request with the same key until it is answered.
                loop {
                    match http
                        .post(
                            &format!("{edge}/v1/holds"),
                            Some(&tok),
                            Some(&key),
                            &json!({"event_id": "busy", "quantity": 1}),
                        )
                        .await
                    {
                        Ok(a) if a.status.as_u16() == 201 => {
                            let hold = a.body["hold_id"].as_str().unwrap().to_string();
                            let seat = a.body["seats"][0].as_str().unwrap().to_string();
                            acked.lock().unwrap().push((tok.clone(), hold, seat));
                            break;
                        }
                        Ok(a) if a.status.as_u16() == 503 => {}
                        Ok(a) if a.code() == Some("seats_unavailable") => return,
                        Ok(a) => panic!("unexpected answer {} {}", a.status, a.body),
                        Err(e) => tracing::info!("retrying {key}: {e:#}"),
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                i += 1;
            }
        }));
    }
    let count = || acked.lock().unwrap().len();
    eventually("20 holds acknowledged", || async {
        (count() >= 20).then_some(())
    })
    .await;
    let before = count();

    tracing::info!("--- kill -9 the group's leader, node {leader}");
    cluster.kill(leader).unwrap();
    eventually("20 more holds acknowledged after the kill", || async {
        (count() >= before + 20).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for b in buyers {
        tokio::time::timeout(PATIENCE, b)
            .await
            .expect("buyer finished")
            .unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > before, "holds continued after the kill");
    let new_leader = cluster.wait_leader(group, PATIENCE).await.unwrap();
    assert_ne!(new_leader, leader);

    tracing::info!("--- every acknowledged hold is there, once");
    let seats: BTreeSet<&String> = acked.iter().map(|(_, _, s)| s).collect();
    assert_eq!(seats.len(), acked.len(), "a seat was acknowledged twice");
    for (tok, hold, seat) in &acked {
        let a = http
            .get(&format!("{}/v1/holds/{hold}", edges["ap-south"]), Some(tok))
            .await
            .unwrap();
        assert_eq!(a.status.as_u16(), 200, "{hold}: {}", a.body);
        assert_eq!(a.body["seats"][0], seat.as_str());
        assert_eq!(a.body["status"], "held");
    }
    let op = token(&cluster, "ops", true);
    let av = http
        .get(
            &format!("{}/v1/events/busy/availability?limit=0", edges["eu-west"]),
            Some(&op),
        )
        .await
        .unwrap();
    assert_eq!(
        av.body["held"].as_u64().unwrap(),
        acked.len() as u64,
        "held seats equal acknowledged holds: none lost, none applied twice"
    );
    assert_eq!(
        av.body["available"].as_u64().unwrap() + acked.len() as u64,
        20_000
    );
}
