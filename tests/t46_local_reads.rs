//! Reads where the buyer is (issue 46): with the regions far apart, an
//! availability read in a region that does not own the event is answered
//! by the replica there (`served_by: replica`) within its bound, and never
//! shows as free a seat the owner's buyers held before `stale_ms` ago;
//! `max_stale_ms=0` still asks the leader.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::{Geo, LocalCluster};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn far_region_reads_answer_locally_within_their_bound() {
    let dir = tempfile::tempdir().unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let cluster = LocalCluster::builder(dir.path())
        .regions(3, 1)
        .geo(Some(Geo::default()))
        .start(bin)
        .unwrap();
    cluster.wait_ready(Duration::from_secs(90)).await.unwrap();
    let secret = cluster.jwt_secret().unwrap();
    let op = seatfence_api::auth::mint(&secret, "op", true, 3600);
    let edges = cluster.edges();
    let (us, ap) = (edges["us-east"].clone(), edges["ap-south"].clone());
    let http = HttpClient::default();
    // A voter in every region: ap-south has a replica of its own.
    let created = http
        .post(
            &format!("{us}/v1/events"),
            Some(&op),
            None,
            &json!({"event_id": "far", "name": "far", "home_region": "us-east",
                    "survival": "region", "hold_ttl_secs": 3600, "max_seats_per_buyer": 1000,
                    "sections": [{"name": "A", "rows": 1, "seats_per_row": 200}]}),
        )
        .await
        .unwrap();
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    // Its leader in us-east (node 1), far from the reader in ap-south.
    let group = created.body["group_id"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let moved = http
            .post(
                &format!("{us}/v1/admin/groups/{group}/transfer-leader"),
                Some(&op),
                None,
                &json!({"to": 1}),
            )
            .await
            .unwrap();
        if moved.status.is_success() {
            break;
        }
        assert!(Instant::now() < deadline, "transfer: {}", moved.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A buyer in us-east holds seats one at a time (their acknowledgement
    // times kept) while a reader in ap-south reads the free seats.
    let held: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let buyer = {
        let (http, us, held) = (http.clone(), us.clone(), held.clone());
        let token = seatfence_api::auth::mint(&secret, "buyer", false, 3600);
        tokio::spawn(async move {
            for n in 0..60 {
                let a = http
                    .post(
                        &format!("{us}/v1/holds"),
                        Some(&token),
                        Some(&format!("k{n}")),
                        &json!({"event_id": "far", "quantity": 1}),
                    )
                    .await
                    .unwrap();
                assert_eq!(a.status.as_u16(), 201, "{}", a.body);
                let seat = a.body["seats"][0].as_str().unwrap().to_string();
                held.lock().unwrap().push((Instant::now(), seat));
            }
        })
    };
    let reader = seatfence_api::auth::mint(&secret, "reader", false, 3600);
    let (mut local, mut reads) = (0, 0);
    while !buyer.is_finished() || reads < 20 {
        let t0 = Instant::now();
        let a = http
            .get(
                &format!("{ap}/v1/events/far/availability?limit=1000"),
                Some(&reader),
            )
            .await
            .unwrap();
        assert_eq!(a.status.as_u16(), 200, "{}", a.body);
        reads += 1;
        let stale = a.body["stale_ms"].as_u64().unwrap();
        assert!(stale <= 1000, "within the default bound: {}", a.body);
        if a.body["served_by"] == "replica" {
            local += 1;
        }
        let free: BTreeSet<&str> = a.body["available_seats"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        // Every hold acknowledged before (the read's start - stale_ms) is
        // in the answer: its seat is not free.
        let must_see = t0.checked_sub(Duration::from_millis(stale));
        for (at, seat) in held.lock().unwrap().iter() {
            if must_see.is_some_and(|m| *at < m) {
                assert!(
                    !free.contains(seat.as_str()),
                    "{seat} held {:?} before the read, shown free with stale_ms {stale}",
                    t0 - *at
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    buyer.await.unwrap();
    assert!(local > 0, "no read of {reads} was answered in ap-south");

    // The leader, when asked for.
    let a = http
        .get(
            &format!("{ap}/v1/events/far/availability?limit=0&max_stale_ms=0"),
            Some(&reader),
        )
        .await
        .unwrap();
    assert_eq!(a.body["served_by"], "leader", "{}", a.body);
    assert_eq!(a.body["held"], 60, "{}", a.body);
    let bad = http
        .get(
            &format!("{ap}/v1/events/far/availability?max_stale_ms=soon"),
            Some(&reader),
        )
        .await
        .unwrap();
    assert_eq!(bad.status.as_u16(), 400);
    assert_eq!(
        bad.body["error"]["code"], "invalid_max_stale",
        "{}",
        bad.body
    );
}
