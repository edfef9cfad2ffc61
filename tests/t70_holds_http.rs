//! The HTTP API against a real 3 regions × 3 nodes cluster: a race for the
//! last seats, idempotent retries, owner-only reads, routing from regions
//! that do not own the event, bad input, and the epoch fence in `apply`.

mod common;

use std::collections::BTreeSet;

use common::*;
use hyper::Method;
use seatfence_testkit::http_client::HttpClient;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t70_holds_over_http() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = start_regions(dir.path(), 3, 3).await;
    let edges = cluster.edges();
    let (us, eu, ap) = (&edges["us-east"], &edges["eu-west"], &edges["ap-south"]);
    let http = HttpClient::default();

    tracing::info!("--- create an event of 50 seats owned by us-east, through the Asia edge");
    let seats: Vec<String> = (1..=50).map(|i| format!("S{i}")).collect();
    let created = create_event(
        &cluster,
        ap,
        json!({"event_id": "race", "name": "Race", "home_region": "us-east", "seats": seats,
               "max_seats_per_hold": 8}),
    )
    .await;
    assert_eq!(created["owner_region"], "us-east");
    assert_eq!(created["epoch"], 1);

    tracing::info!("--- an early buyer takes 40 seats through every region's edge, leaving 10");
    let early = token(&cluster, "early", false);
    let edge_list = [us.clone(), eu.clone(), ap.clone()];
    for (i, chunk) in seats[..40].chunks(8).enumerate() {
        let edge = &edge_list[i % 3];
        let a = http
            .post(
                &format!("{edge}/v1/holds"),
                Some(&early),
                None,
                &json!({"event_id": "race", "seats": chunk}),
            )
            .await
            .unwrap();
        assert_eq!(a.status.as_u16(), 201, "via {edge}: {}", a.body);
        assert_eq!(a.body["seats"], json!(chunk));
    }

    tracing::info!("--- 200 concurrent buyers race for the last 10 seats from all regions");
    let mut racers = Vec::new();
    for b in 0..200 {
        let http = http.clone();
        let edge = edge_list[b % 3].clone();
        let tok = token(&cluster, &format!("buyer{b}"), false);
        racers.push(tokio::spawn(async move {
            let key = format!("race-{b}");
            let body = json!({"event_id": "race", "quantity": 1});
            let a = http
                .post(&format!("{edge}/v1/holds"), Some(&tok), Some(&key), &body)
                .await
                .unwrap();
            (b, tok, key, a)
        }));
    }
    let mut winners = Vec::new();
    let mut losers = 0;
    for r in racers {
        let (b, tok, key, a) = r.await.unwrap();
        match a.status.as_u16() {
            201 => winners.push((b, tok, key, a.body)),
            409 => {
                assert_eq!(a.code(), Some("seats_unavailable"), "{}", a.body);
                assert_eq!(a.epoch, Some(1), "a refusal carries the event's fence");
                losers += 1;
            }
            other => panic!("buyer {b}: unexpected {other} {}", a.body),
        }
    }
    assert_eq!(winners.len(), 10, "exactly the last 10 seats are sold");
    assert_eq!(losers, 190);
    let won: BTreeSet<String> = winners
        .iter()
        .map(|w| w.3["seats"][0].as_str().unwrap().to_string())
        .collect();
    assert_eq!(won.len(), 10, "no seat granted twice: {won:?}");
    assert!(won.iter().all(|s| !seats[..40].contains(s)));

    tracing::info!("--- the same request with its Idempotency-Key returns the same hold");
    let (_, tok, key, first) = &winners[0];
    let again = http
        .post(
            &format!("{eu}/v1/holds"),
            Some(tok),
            Some(key),
            &json!({"event_id": "race", "quantity": 1}),
        )
        .await
        .unwrap();
    assert_eq!(again.status.as_u16(), 201, "{}", again.body);
    assert_eq!(&again.body, first, "replay returns the recorded hold");
    assert_eq!(again.epoch, Some(1), "X-Seatfence-Epoch on a mutation");
    let other = http
        .post(
            &format!("{eu}/v1/holds"),
            Some(tok),
            Some(key),
            &json!({"event_id": "race", "quantity": 2}),
        )
        .await
        .unwrap();
    assert_eq!(other.status.as_u16(), 422, "{}", other.body);
    assert_eq!(other.code(), Some("idempotency_key_reused"));

    tracing::info!("--- owner-only reads");
    let hold_id = first["hold_id"].as_str().unwrap();
    let mine = http
        .get(&format!("{ap}/v1/holds/{hold_id}"), Some(tok))
        .await
        .unwrap();
    assert_eq!(mine.status.as_u16(), 200, "{}", mine.body);
    assert_eq!(mine.body["status"], "held");
    assert_eq!(mine.cache_control.as_deref(), Some("no-store"));
    let stranger = token(&cluster, "mallory", false);
    let theirs = http
        .get(&format!("{ap}/v1/holds/{hold_id}"), Some(&stranger))
        .await
        .unwrap();
    assert_eq!(theirs.status.as_u16(), 404);
    assert_eq!(theirs.code(), Some("hold_not_found"));
    let gone = http
        .get(&format!("{ap}/v1/holds/h999-1"), Some(tok))
        .await
        .unwrap();
    assert_eq!(gone.status.as_u16(), 404, "{}", gone.body);
    let del = http
        .send(
            Method::DELETE,
            &format!("{us}/v1/holds/{hold_id}"),
            Some(&stranger),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(del.status.as_u16(), 404, "a stranger cannot cancel");

    let counts = |a: &serde_json::Value| {
        (
            a["available"].as_u64().unwrap(),
            a["held"].as_u64().unwrap(),
            a["sold"].as_u64().unwrap(),
        )
    };
    let av = http
        .get(&format!("{eu}/v1/events/race/availability"), Some(tok))
        .await
        .unwrap();
    assert_eq!(av.status.as_u16(), 200, "{}", av.body);
    assert_eq!(counts(&av.body), (0, 50, 0));

    tracing::info!("--- bad input: clear codes, nothing changes");
    let bad_cases: Vec<(&str, bytes::Bytes, u16, &str)> = vec![
        (
            "malformed",
            bytes::Bytes::from_static(b"{\"event_id\": "),
            400,
            "malformed_json",
        ),
        (
            "unknown field",
            bytes::Bytes::from(json!({"event_id":"race","quantity":1,"x":1}).to_string()),
            400,
            "unknown_field",
        ),
        (
            "too many",
            bytes::Bytes::from(json!({"event_id":"race","quantity":9}).to_string()),
            400,
            "too_many_seats",
        ),
        (
            "unknown event",
            bytes::Bytes::from(json!({"event_id":"nope","quantity":1}).to_string()),
            404,
            "event_not_found",
        ),
        (
            "both",
            bytes::Bytes::from(json!({"event_id":"race","quantity":1,"seats":["S1"]}).to_string()),
            400,
            "invalid_request",
        ),
        (
            "oversized",
            bytes::Bytes::from(vec![b' '; 2 << 20]),
            413,
            "payload_too_large",
        ),
    ];
    for (what, body, status, code) in bad_cases {
        let a = http
            .send_raw(
                Method::POST,
                &format!("{eu}/v1/holds"),
                Some(&stranger),
                None,
                body,
            )
            .await
            .unwrap();
        assert_eq!(a.status.as_u16(), status, "{what}: {}", a.body);
        assert_eq!(a.code(), Some(code), "{what}");
    }
    let reserved = http
        .post(
            &format!("{eu}/v1/holds"),
            Some(&stranger),
            Some("~auto-1"),
            &json!({"event_id":"race","quantity":1}),
        )
        .await
        .unwrap();
    assert_eq!(reserved.status.as_u16(), 400, "{}", reserved.body);
    assert_eq!(reserved.code(), Some("invalid_idempotency_key"));
    let no_token = http
        .post(
            &format!("{eu}/v1/holds"),
            None,
            None,
            &json!({"event_id":"race","quantity":1}),
        )
        .await
        .unwrap();
    assert_eq!(no_token.status.as_u16(), 401);
    let not_operator = http
        .post(
            &format!("{eu}/v1/events"),
            Some(&stranger),
            None,
            &json!({"event_id":"x","name":"x","home_region":"us-east","seats":["A"]}),
        )
        .await
        .unwrap();
    assert_eq!(not_operator.status.as_u16(), 403);
    let bookings = http
        .post(
            &format!("{eu}/v1/bookings"),
            Some(tok),
            None,
            &json!({"hold_id": hold_id}),
        )
        .await
        .unwrap();
    assert_eq!(
        (bookings.status.as_u16(), bookings.code()),
        (503, Some("payments_disabled")),
        "no gateway configured on this cluster: never a fake success"
    );
    tokio::time::sleep(seatfence_api::AVAILABILITY_CACHE).await;
    let av = http
        .get(&format!("{eu}/v1/events/race/availability"), Some(tok))
        .await
        .unwrap();
    assert_eq!(counts(&av.body), (0, 50, 0), "bad input changed nothing");

    tracing::info!("--- the owner cancels: its seat is free again");
    let del = http
        .send(
            Method::DELETE,
            &format!("{ap}/v1/holds/{hold_id}"),
            Some(tok),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(del.status.as_u16(), 200, "{}", del.body);
    assert_eq!(del.body["status"], "released");
    tokio::time::sleep(seatfence_api::AVAILABILITY_CACHE).await;
    let av = http
        .get(&format!("{us}/v1/events/race/availability"), Some(tok))
        .await
        .unwrap();
    assert_eq!(counts(&av.body), (1, 49, 0));
    assert!(av.body["stale_ms"].as_u64().unwrap() < 1000);

    tracing::info!("--- every documented route is served (not `not_found`, not 405)");
    for route in seatfence_api::routes::ROUTES {
        let (method, path) = (route.method.as_str(), route.path);
        let url = format!(
            "{us}{}",
            path.replace("{event_id}", "race")
                .replace("{hold_id}", hold_id)
                .replace("{booking_id}", "b1")
        );
        let a = http
            .send(route.method.clone(), &url, Some(tok), None, None)
            .await
            .unwrap();
        assert_ne!(a.status.as_u16(), 405, "{method} {path}");
        assert_ne!(a.code(), Some("not_found"), "{method} {path}: {}", a.body);
    }

    tracing::info!("--- a hold past its TTL expires on its own, seats free again");
    create_event(
        &cluster,
        eu,
        json!({"event_id": "brief", "name": "Brief", "home_region": "eu-west",
               "seats": ["X1", "X2", "X3"], "hold_ttl_secs": 1}),
    )
    .await;
    let h = http
        .post(
            &format!("{ap}/v1/holds"),
            Some(tok),
            None,
            &json!({"event_id": "brief", "seats": ["X1", "X2"]}),
        )
        .await
        .unwrap();
    assert_eq!(h.status.as_u16(), 201, "{}", h.body);
    let brief_id = h.body["hold_id"].as_str().unwrap().to_string();
    eventually("the hold expires without other traffic", || async {
        let a = http
            .get(&format!("{us}/v1/holds/{brief_id}"), Some(tok))
            .await
            .ok()?;
        (a.body["status"] == "expired").then_some(())
    })
    .await;
    tokio::time::sleep(seatfence_api::AVAILABILITY_CACHE).await;
    let av = http
        .get(&format!("{us}/v1/events/brief/availability"), Some(tok))
        .await
        .unwrap();
    assert_eq!(counts(&av.body), (3, 0, 0), "{}", av.body);
}
