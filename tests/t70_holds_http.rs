//! The HTTP API against a real 3 regions × 3 nodes cluster, one scenario
//! per test: a race for the last seats, idempotent retries, owner-only reads
//! and cancels, bad input, every documented route served, hold expiry.
//! Each scenario creates its event through an edge of a region that does
//! not own it, so every request is routed across regions.

mod common;

use std::collections::BTreeSet;

use common::*;
use hyper::Method;
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::LocalCluster;
use serde_json::{json, Value};

/// A cluster with the event `race` (50 seats `S1`..`S50`, owned by us-east,
/// created through the Asia edge).
struct Race {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    _dir: tempfile::TempDir,
    cluster: LocalCluster,
    us: String,
    eu: String,
    ap: String,
    http: HttpClient,
    seats: Vec<String>,
}

impl Race {
    async fn start() -> Race {
        let serial = serial().await;
        init_logs();
        let dir = tempfile::tempdir().unwrap();
        let cluster = start_regions(dir.path(), 3, 3).await;
        let edges = cluster.edges();
        let seats: Vec<String> = (1..=50).map(|i| format!("S{i}")).collect();
        tracing::info!("--- create an event of 50 seats owned by us-east, through the Asia edge");
        let created = create_event(
            &cluster,
            &edges["ap-south"],
            json!({"event_id": "race", "name": "Race", "home_region": "us-east", "seats": seats,
                   "max_seats_per_hold": 8}),
        )
        .await;
        assert_eq!(created["owner_region"], "us-east");
        assert_eq!(created["epoch"], 1);
        Race {
            _serial: serial,
            _dir: dir,
            us: edges["us-east"].clone(),
            eu: edges["eu-west"].clone(),
            ap: edges["ap-south"].clone(),
            cluster,
            http: HttpClient::default(),
            seats,
        }
    }

    fn token(&self, user: &str) -> String {
        token(&self.cluster, user, false)
    }

    /// `user` holds `body` through `edge`; the 201 body.
    async fn hold(&self, edge: &str, user: &str, key: Option<&str>, body: Value) -> Value {
        let tok = self.token(user);
        let a = self
            .http
            .post(&format!("{edge}/v1/holds"), Some(&tok), key, &body)
            .await
            .unwrap();
        assert_eq!(a.status.as_u16(), 201, "via {edge}: {}", a.body);
        a.body
    }

    /// `(available, held, sold)` of `event`, read through `edge` after the
    /// availability cache has expired.
    async fn counts(&self, edge: &str, event: &str) -> (u64, u64, u64) {
        tokio::time::sleep(seatfence_api::AVAILABILITY_CACHE).await;
        let a = self
            .http
            .get(
                &format!("{edge}/v1/events/{event}/availability"),
                Some(&self.token("reader")),
            )
            .await
            .unwrap();
        assert_eq!(a.status.as_u16(), 200, "{}", a.body);
        assert!(a.body["stale_ms"].as_u64().unwrap() < 1000);
        let n = |k: &str| a.body[k].as_u64().unwrap();
        (n("available"), n("held"), n("sold"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t70_two_hundred_buyers_race_for_the_last_ten_seats() {
    let r = Race::start().await;
    tracing::info!("--- an early buyer takes 40 seats through every region's edge, leaving 10");
    let edge_list = [r.us.clone(), r.eu.clone(), r.ap.clone()];
    for (i, chunk) in r.seats[..40].chunks(8).enumerate() {
        let body = r
            .hold(
                &edge_list[i % 3],
                "early",
                None,
                json!({"event_id": "race", "seats": chunk}),
            )
            .await;
        assert_eq!(body["seats"], json!(chunk));
    }

    tracing::info!("--- 200 concurrent buyers race for the last 10 seats from all regions");
    let mut racers = Vec::new();
    for b in 0..200 {
        let http = r.http.clone();
        let edge = edge_list[b % 3].clone();
        let tok = r.token(&format!("buyer{b}"));
        racers.push(tokio::spawn(async move {
            let body = json!({"event_id": "race", "quantity": 1});
            let key = format!("race-{b}");
            let a = http
                .post(&format!("{edge}/v1/holds"), Some(&tok), Some(&key), &body)
                .await
                .unwrap();
            (b, a)
        }));
    }
    let mut won = BTreeSet::new();
    let mut losers = 0;
    for racer in racers {
        let (b, a) = racer.await.unwrap();
        match a.status.as_u16() {
            201 => {
                let seat = a.body["seats"][0].as_str().unwrap().to_string();
                assert!(won.insert(seat), "a seat granted twice: {}", a.body);
            }
            409 => {
                assert_eq!(a.code(), Some("seats_unavailable"), "{}", a.body);
                assert_eq!(a.epoch, Some(1), "a refusal carries the event's fence");
                losers += 1;
            }
            other => panic!("buyer {b}: unexpected {other} {}", a.body),
        }
    }
    assert_eq!(won.len(), 10, "exactly the last 10 seats are sold");
    assert_eq!(losers, 190);
    assert!(won.iter().all(|s| !r.seats[..40].contains(s)));
    assert_eq!(r.counts(&r.eu, "race").await, (0, 50, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t70_a_retry_with_its_idempotency_key_returns_the_same_hold() {
    let r = Race::start().await;
    let body = json!({"event_id": "race", "quantity": 1});
    let first = r.hold(&r.us, "ann", Some("ann-1"), body.clone()).await;
    tracing::info!("--- the same request with its Idempotency-Key, through another region");
    let tok = r.token("ann");
    let again = r
        .http
        .post(
            &format!("{}/v1/holds", r.eu),
            Some(&tok),
            Some("ann-1"),
            &body,
        )
        .await
        .unwrap();
    assert_eq!(again.status.as_u16(), 201, "{}", again.body);
    assert_eq!(again.body, first, "replay returns the recorded hold");
    assert_eq!(again.epoch, Some(1), "X-Seatfence-Epoch on a mutation");
    let header = |a: &seatfence_testkit::http_client::HttpAnswer, h: &str| {
        a.headers.get(h).map(|v| v.to_str().unwrap().to_string())
    };
    assert_eq!(
        header(&again, "idempotent-replayed").as_deref(),
        Some("true"),
        "a replay says it is one"
    );
    assert!(
        header(&again, "x-request-id").is_some_and(|id| id.len() == 16),
        "every answer names its request"
    );
    tracing::info!("--- another request under the same key is refused");
    let other = r
        .http
        .post(
            &format!("{}/v1/holds", r.eu),
            Some(&tok),
            Some("ann-1"),
            &json!({"event_id": "race", "quantity": 2}),
        )
        .await
        .unwrap();
    assert_eq!(other.status.as_u16(), 422, "{}", other.body);
    assert_eq!(other.code(), Some("idempotency_key_reused"));
    assert_eq!(r.counts(&r.ap, "race").await, (49, 1, 0), "one hold, once");
    // The replay is not counted as a new hold by either edge.
    let mut created = 0.0;
    for edge in [&r.us, &r.eu] {
        let text = reqwest::get(format!("{edge}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        created += text
            .lines()
            .find(|l| l.starts_with("seatfence_holds_created_total"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
    }
    assert_eq!(created, 1.0, "holds_created counts the hold once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t70_only_the_owner_reads_and_cancels_a_hold() {
    let r = Race::start().await;
    let hold = r
        .hold(
            &r.us,
            "owen",
            None,
            json!({"event_id": "race", "quantity": 1}),
        )
        .await;
    let hold_id = hold["hold_id"].as_str().unwrap();
    let (owner, stranger) = (r.token("owen"), r.token("mallory"));
    let url = format!("{}/v1/holds/{hold_id}", r.ap);
    tracing::info!("--- owner-only reads");
    let mine = r.http.get(&url, Some(&owner)).await.unwrap();
    assert_eq!(mine.status.as_u16(), 200, "{}", mine.body);
    assert_eq!(mine.body["status"], "held");
    assert_eq!(mine.cache_control.as_deref(), Some("no-store"));
    let theirs = r.http.get(&url, Some(&stranger)).await.unwrap();
    assert_eq!(theirs.status.as_u16(), 404);
    assert_eq!(theirs.code(), Some("hold_not_found"));
    let gone = r
        .http
        .get(&format!("{}/v1/holds/h999-1", r.ap), Some(&owner))
        .await
        .unwrap();
    assert_eq!(gone.status.as_u16(), 404, "{}", gone.body);
    tracing::info!("--- a stranger cannot cancel; the owner can, and the seat is free again");
    let del = |tok: String| {
        let (http, url) = (r.http.clone(), format!("{}/v1/holds/{hold_id}", r.us));
        async move {
            http.send(Method::DELETE, &url, Some(&tok), None, None)
                .await
                .unwrap()
        }
    };
    assert_eq!(del(stranger).await.status.as_u16(), 404);
    assert_eq!(r.counts(&r.eu, "race").await, (49, 1, 0));
    let cancelled = del(owner).await;
    assert_eq!(cancelled.status.as_u16(), 200, "{}", cancelled.body);
    assert_eq!(cancelled.body["status"], "released");
    assert_eq!(r.counts(&r.us, "race").await, (50, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t70_bad_input_gets_a_stable_code_and_changes_nothing() {
    let r = Race::start().await;
    let hold = r
        .hold(
            &r.us,
            "bea",
            None,
            json!({"event_id": "race", "quantity": 1}),
        )
        .await;
    let stranger = r.token("mallory");
    let bad_cases: Vec<(&str, bytes::Bytes, u16, &str)> = vec![
        (
            "malformed",
            bytes::Bytes::from_static(b"{\"event_id\": "),
            400,
            "malformed_json",
        ),
        (
            "unknown field",
            json!({"event_id":"race","quantity":1,"x":1})
                .to_string()
                .into(),
            400,
            "unknown_field",
        ),
        (
            "too many",
            json!({"event_id":"race","quantity":9}).to_string().into(),
            400,
            "too_many_seats",
        ),
        (
            "unknown event",
            json!({"event_id":"nope","quantity":1}).to_string().into(),
            404,
            "event_not_found",
        ),
        (
            "both",
            json!({"event_id":"race","quantity":1,"seats":["S1"]})
                .to_string()
                .into(),
            400,
            "invalid_request",
        ),
        (
            "a seat id no event has",
            json!({"event_id":"race","seats":["S1", "x".repeat(65)]})
                .to_string()
                .into(),
            400,
            "invalid_field",
        ),
        (
            "a section name no event has",
            json!({"event_id":"race","quantity":1,"section":"x".repeat(10_000)})
                .to_string()
                .into(),
            400,
            "invalid_field",
        ),
        (
            "oversized",
            bytes::Bytes::from(vec![b' '; 2 << 20]),
            413,
            "payload_too_large",
        ),
    ];
    let holds = format!("{}/v1/holds", r.eu);
    for (what, body, status, code) in bad_cases {
        let a = r
            .http
            .send_raw(Method::POST, &holds, Some(&stranger), None, body)
            .await
            .unwrap();
        assert_eq!(a.status.as_u16(), status, "{what}: {}", a.body);
        assert_eq!(a.code(), Some(code), "{what}");
    }
    // The message names the field and says what it wants, in JSON's words.
    for (what, body, code, says) in [
        (
            "missing",
            json!({"quantity": 1}),
            "invalid_field",
            "missing field event_id",
        ),
        (
            "negative",
            json!({"event_id": "race", "quantity": -1}),
            "invalid_field",
            "field quantity: invalid value: integer -1, expected a non-negative whole number",
        ),
        (
            "both",
            json!({"event_id": "race", "quantity": 1, "seats": ["S1"]}),
            "invalid_request",
            "give seats or quantity, not both",
        ),
    ] {
        let a = r
            .http
            .post(&holds, Some(&stranger), None, &body)
            .await
            .unwrap();
        assert_eq!(a.code(), Some(code), "{what}: {}", a.body);
        let message = a.body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(says), "{what}: {message}");
        assert!(!message.contains("line 1"), "{what}: {message}");
    }
    let one = json!({"event_id":"race","quantity":1});
    let reserved = r
        .http
        .post(&holds, Some(&stranger), Some("~auto-1"), &one)
        .await
        .unwrap();
    assert_eq!(reserved.status.as_u16(), 400, "{}", reserved.body);
    assert_eq!(reserved.code(), Some("invalid_idempotency_key"));
    // A key with non-ASCII bytes is refused too, not read as "no key".
    let non_ascii = reqwest::Client::new()
        .post(&holds)
        .bearer_auth(&stranger)
        .header(
            "idempotency-key",
            reqwest::header::HeaderValue::from_bytes("clé-1".as_bytes()).unwrap(),
        )
        .json(&one)
        .send()
        .await
        .unwrap();
    assert_eq!(non_ascii.status().as_u16(), 400);
    let body: serde_json::Value = non_ascii.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_idempotency_key", "{body}");
    // HTTP manners: 405 says what is allowed, 401 which scheme, the scheme
    // is case-insensitive, and a huge id is not echoed back whole.
    let raw = reqwest::Client::new();
    let put = raw
        .put(format!("{}/v1/holds/h1-1", r.eu))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 405);
    assert_eq!(put.headers()["allow"], "DELETE, GET");
    let anonymous = raw.post(&holds).json(&one).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");
    let lower = raw
        .get(format!("{}/v1/events/race", r.eu))
        .header("authorization", format!("bearer {stranger}"))
        .send()
        .await
        .unwrap();
    assert_eq!(lower.status().as_u16(), 200);
    let long_id = "x".repeat(10_000);
    let missing = raw
        .get(format!("{}/v1/events/{long_id}", r.eu))
        .header("authorization", format!("Bearer {stranger}"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    let text = missing.text().await.unwrap();
    assert!(text.len() < 2_000, "{} bytes echoed", text.len());
    let no_token = r.http.post(&holds, None, None, &one).await.unwrap();
    assert_eq!(no_token.status.as_u16(), 401);
    let not_operator = r
        .http
        .post(
            &format!("{}/v1/events", r.eu),
            Some(&stranger),
            None,
            &json!({"event_id":"x","name":"x","home_region":"us-east","seats":["A"]}),
        )
        .await
        .unwrap();
    assert_eq!(not_operator.status.as_u16(), 403);
    let bookings = r
        .http
        .post(
            &format!("{}/v1/bookings", r.eu),
            Some(&r.token("bea")),
            None,
            &json!({"hold_id": hold["hold_id"]}),
        )
        .await
        .unwrap();
    assert_eq!(
        (bookings.status.as_u16(), bookings.code()),
        (503, Some("payments_disabled")),
        "no gateway configured on this cluster: never a fake success"
    );
    assert_eq!(
        r.counts(&r.eu, "race").await,
        (49, 1, 0),
        "bad input changed nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t70_every_documented_route_is_served() {
    let r = Race::start().await;
    let hold = r
        .hold(
            &r.us,
            "rita",
            None,
            json!({"event_id": "race", "quantity": 1}),
        )
        .await;
    let hold_id = hold["hold_id"].as_str().unwrap();
    let tok = r.token("rita");
    for route in seatfence_api::routes::ROUTES {
        let (method, path) = (route.method.as_str(), route.path);
        let url = format!(
            "{}{}",
            r.us,
            path.replace("{event_id}", "race")
                .replace("{hold_id}", hold_id)
                .replace("{booking_id}", "b1")
                .replace("{asset}", "console.js")
        );
        let a = r
            .http
            .send(route.method.clone(), &url, Some(&tok), None, None)
            .await
            .unwrap();
        assert_ne!(a.status.as_u16(), 405, "{method} {path}");
        assert_ne!(a.code(), Some("not_found"), "{method} {path}: {}", a.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t70_a_hold_past_its_ttl_expires_on_its_own() {
    let r = Race::start().await;
    create_event(
        &r.cluster,
        &r.eu,
        json!({"event_id": "brief", "name": "Brief", "home_region": "eu-west",
               "seats": ["X1", "X2", "X3"], "hold_ttl_secs": 1}),
    )
    .await;
    let h = r
        .hold(
            &r.ap,
            "tia",
            None,
            json!({"event_id": "brief", "seats": ["X1", "X2"]}),
        )
        .await;
    let id = h["hold_id"].as_str().unwrap().to_string();
    let tok = r.token("tia");
    eventually("the hold expires without other traffic", || async {
        let a = r
            .http
            .get(&format!("{}/v1/holds/{id}", r.us), Some(&tok))
            .await
            .ok()?;
        (a.body["status"] == "expired").then_some(())
    })
    .await;
    assert_eq!(r.counts(&r.us, "brief").await, (3, 0, 0));
    // The ended hold is kept for the event's retention: a day by default.
    let ev = r
        .http
        .get(&format!("{}/v1/events/brief", r.us), Some(&tok))
        .await
        .unwrap();
    assert_eq!(ev.body["retention_secs"], 86_400, "{}", ev.body);
    // An operator may choose it, within a minute and a week.
    let op = token(&r.cluster, "ops", true);
    let body = |id: &str, secs: u64| {
        json!({"event_id": id, "name": "Kept", "home_region": "eu-west",
               "seats": ["K1"], "retention_secs": secs})
    };
    let short = r
        .http
        .post(
            &format!("{}/v1/events", r.eu),
            Some(&op),
            None,
            &body("k", 59),
        )
        .await
        .unwrap();
    assert_eq!(
        (short.status.as_u16(), short.code()),
        (400, Some("invalid_event"))
    );
    create_event(&r.cluster, &r.eu, body("kept", 3_600)).await;
    let ev = r
        .http
        .get(&format!("{}/v1/events/kept", r.us), Some(&tok))
        .await
        .unwrap();
    assert_eq!(ev.body["retention_secs"], 3_600, "{}", ev.body);
}
