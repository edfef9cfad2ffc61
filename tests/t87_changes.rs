//! The changefeed and operator refunds over HTTP, with a real mock gateway
//! and real nodes (1 region × 3 nodes, one edge each): a reader resumes
//! from its cursor on any edge, across a leader killed with SIGKILL, and
//! sees every change once in order; a cursor older than the retention is
//! 410 with the oldest cursor, one naming an event at `o` (its oldest)
//! is not; an operator refunds a confirmed booking
//! exactly once at the gateway, and the refund is in the audit trail and
//! the feed.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::moves::leader_of;
use common::payments::{s, scenario, Env};
use common::*;
use serde_json::{json, Value};

/// The shortest changes retention an event may ask for.
const KEEP_SECS: u64 = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t87_operator_refunds_once_and_the_feed_has_every_change() {
    let mut sc = scenario(&[]).await;
    let env = &mut sc.env;
    // "brief" keeps its changes a minute; "feed" the default three days.
    let created = Instant::now();
    for (id, keep) in [("brief", KEEP_SECS), ("feed", 3 * 24 * 3600)] {
        create_event(
            &env.cluster,
            &env.edge(0),
            json!({"event_id": id, "name": id, "home_region": "us-east",
                   "seats": ["A1", "A2", "A3", "A4"], "hold_ttl_secs": 600,
                   "price_cents": 2500, "currency": "EUR",
                   "changes_retention_secs": keep}),
        )
        .await;
    }
    env.hold("erin", "brief", &["A1"]).await;
    refunds(env).await;
    let cursor = resume_anywhere(env).await;
    long_poll(env, &cursor).await;
    expired_cursor(env, created).await;
}

/// A hold under an Idempotency-Key, retried while the group has no leader.
async fn hold_keyed(env: &Env, user: &str, event: &str, seat: &str) {
    let key = format!("{user}-{event}-{seat}");
    eventually(&format!("{user} holds {seat}"), || async {
        let a = env
            .http
            .post(
                &format!("{}/v1/holds", env.edge(0)),
                Some(&env.token(user)),
                Some(&key),
                &json!({"event_id": event, "seats": [seat]}),
            )
            .await
            .ok()?;
        match a.status.as_u16() {
            201 => Some(()),
            503 => None,
            other => panic!("hold {seat}: {other} {}", a.body),
        }
    })
    .await
}

async fn op_get(
    env: &Env,
    edge: usize,
    path_and_query: &str,
) -> seatfence_testkit::http_client::HttpAnswer {
    let op = token(&env.cluster, "ops", true);
    env.http
        .get(&format!("{}{path_and_query}", env.edge(edge)), Some(&op))
        .await
        .unwrap()
}

async fn refund(
    env: &Env,
    user: &str,
    operator: bool,
    booking: &str,
    key: Option<&str>,
    release: bool,
) -> seatfence_testkit::http_client::HttpAnswer {
    env.http
        .post(
            &format!("{}/v1/admin/bookings/{booking}/refund", env.edge(2)),
            Some(&token(&env.cluster, user, operator)),
            key,
            &json!({"reason": "show cancelled", "release_seats": release}),
        )
        .await
        .unwrap()
}

/// Alice's booking confirmed through the callback; Bob's left pending.
async fn bookings(env: &Env) -> (Value, Value) {
    let hold = env.hold("alice", "feed", &["A1", "A2"]).await;
    let alice = env.book("alice", s(&hold["hold_id"])).await;
    let redirect = env.browser(s(&alice["approve_url"]), true).await;
    let a = env.get(&redirect).await;
    assert_eq!(a.body["status"], "confirmed", "{}", a.body);
    let hold = env.hold("bob", "feed", &["A3"]).await;
    let bob = env.book("bob", s(&hold["hold_id"])).await;
    (alice, bob)
}

async fn refunds(env: &Env) {
    let (alice, bob) = bookings(env).await;
    let (id, pid) = (s(&alice["booking_id"]), s(&alice["payment_id"]));
    tracing::info!("--- refusals change nothing");
    let a = refund(env, "alice", false, id, Some("r1"), true).await;
    assert_eq!(a.status.as_u16(), 403, "a buyer may not refund: {}", a.body);
    let a = refund(env, "ops", true, id, None, true).await;
    assert_eq!(a.code(), Some("idempotency_key_required"), "{}", a.body);
    let a = refund(env, "ops", true, s(&bob["booking_id"]), Some("r0"), true).await;
    assert_eq!(
        (
            a.status.as_u16(),
            a.code(),
            a.body["error"]["status"].clone()
        ),
        (409, Some("booking_not_refundable"), json!("pending")),
        "{}",
        a.body
    );
    let a = refund(env, "ops", true, "b999-1", Some("r9"), true).await;
    assert_eq!(a.code(), Some("booking_not_found"), "{}", a.body);

    tracing::info!("--- the refund, then the same key again: one refund");
    let first = refund(env, "ops", true, id, Some("r1"), true).await;
    assert_eq!(first.status.as_u16(), 200, "{}", first.body);
    assert_eq!(first.body["status"], "refund_pending");
    assert_eq!(first.body["refund"]["reason"], "show cancelled");
    assert_eq!(first.body["refund"]["by"], "ops");
    let again = refund(env, "ops", true, id, Some("r1"), true).await;
    assert_eq!(
        (again.status.as_u16(), again.body["status"].clone()),
        (200, json!("refund_pending")),
        "the same key answers the same refund: {}",
        again.body
    );
    assert_eq!(
        again
            .headers
            .get("idempotent-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true"),
        "a replay says so"
    );
    let got = env.wait_status("alice", id, "refunded").await;
    assert!(got["refund_id"].is_string(), "{got}");
    let a = refund(env, "ops", true, id, Some("r2"), true).await;
    assert_eq!(
        (a.code(), a.body["error"]["status"].clone()),
        (Some("booking_not_refundable"), json!("refunded")),
        "another key refunds nothing more: {}",
        a.body
    );
    let p = env.payment(pid).await;
    assert_eq!(
        (p["captures"].clone(), p["refunds"].clone()),
        (json!(1), json!(1)),
        "exactly one refund at the gateway: {p}"
    );
    let seats = env.available("feed").await;
    let free: BTreeSet<&str> = seats["available_seats"]
        .as_array()
        .unwrap()
        .iter()
        .map(s)
        .collect();
    assert!(free.contains("A1") && free.contains("A2"), "{seats}");

    tracing::info!("--- the audit trail names it");
    let audit = op_get(env, 0, "/v1/admin/audit?limit=50").await;
    let entries = audit.body["entries"].as_array().unwrap();
    let target = format!("booking {id}, reason show cancelled");
    let ok = entries
        .iter()
        .filter(|e| e["action"] == "refund" && e["target"] == target)
        .count();
    assert!(
        ok >= 3,
        "refund attempts audited with their reason: {}",
        audit.body
    );
    let replays = entries
        .iter()
        .filter(|e| e["target"] == target && s(&e["result"]).starts_with("ok (replay"))
        .count();
    assert_eq!(
        replays, 1,
        "the keyed retry is audited as a replay: {}",
        audit.body
    );
}

/// Every change of the event from the start, in pages of 2 read from each
/// edge in turn, with the leader SIGKILLed half-way: the same as one read.
async fn resume_anywhere(env: &mut Env) -> String {
    let all = op_get(env, 0, "/v1/admin/changes?event=feed&limit=5000").await;
    assert_eq!(all.status.as_u16(), 200, "{}", all.body);
    let want = seqs(&all.body);
    assert_eq!(want, (1..=want.len() as u64).collect::<Vec<_>>());
    let types: Vec<&str> = all.body["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| s(&c["type"]))
        .collect();
    for t in [
        "event.created",
        "hold.created",
        "booking.created",
        "booking.confirmed",
        "hold.released",
        "booking.refund_pending",
        "booking.refunded",
    ] {
        assert!(types.contains(&t), "{t} missing from {types:?}");
    }

    let group = op_get(env, 0, "/v1/events/feed").await.body["group_id"]
        .as_u64()
        .expect("the event's group");
    let mut cursor = "c".to_string();
    let mut got = Vec::new();
    for i in 0.. {
        if i == 3 {
            let leader = eventually("a leader", || leader_of(&env.cluster, group)).await;
            tracing::info!("--- SIGKILL node {leader}, the event's leader");
            env.cluster.kill(leader).unwrap();
            // A change made after the kill is read in order too.
            hold_keyed(env, "carol", "feed", "A4").await;
        }
        let a = eventually("a page", || async {
            let url = format!("/v1/admin/changes?event=feed&after={cursor}&limit=2");
            let a = op_get(env, i, &url).await;
            (a.status.as_u16() == 200 && a.body["unavailable"] == json!([])).then_some(a)
        })
        .await;
        let page = seqs(&a.body);
        cursor = s(&a.body["next_cursor"]).to_string();
        if page.is_empty() && i > 3 {
            break;
        }
        got.extend(page);
    }
    let n = want.len() as u64;
    assert_eq!(
        got,
        (1..=n + 1).collect::<Vec<_>>(),
        "every change once, in order, and the one after the kill"
    );
    cursor
}

/// A request waiting for news answers as soon as a change commits.
async fn long_poll(env: &Env, cursor: &str) {
    let url = format!("/v1/admin/changes?event=feed&after={cursor}&wait_secs=20");
    let waiting = op_get(env, 1, &url);
    let hold = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        hold_keyed(env, "dave", "feed", "A1").await
    };
    let (a, _) = tokio::join!(waiting, hold);
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    let changes = a.body["changes"].as_array().unwrap();
    assert!(
        changes.iter().any(|c| c["type"] == "hold.created"),
        "the waiting reader got the new hold: {}",
        a.body
    );
}

/// Past the retention, a reader who never read the first changes is
/// refused with 410 and the cursor that resumes from the oldest kept.
async fn expired_cursor(env: &Env, created: Instant) {
    let past = created + Duration::from_secs(KEEP_SECS + 2);
    tokio::time::sleep_until(past.into()).await;
    // Any command prunes what is due.
    hold_keyed(env, "erin", "brief", "A2").await;
    let a = op_get(env, 0, "/v1/admin/changes?event=brief&after=c").await;
    assert_eq!(
        (a.status.as_u16(), a.code()),
        (410, Some("cursor_expired")),
        "{}",
        a.body
    );
    let oldest = s(&a.body["error"]["oldest_cursor"]).to_string();
    let b = op_get(
        env,
        0,
        &format!("/v1/admin/changes?event=brief&after={oldest}"),
    )
    .await;
    assert_eq!(b.status.as_u16(), 200, "{}", b.body);
    let kept = seqs(&b.body);
    assert!(!kept.is_empty() && kept[0] > 1, "the oldest kept: {kept:?}");
    // `G-o` (where a first read puts an event whose group did not answer)
    // reads from the oldest kept change, not from 0: no 410.
    let group = op_get(env, 0, "/v1/events/brief").await.body["group_id"]
        .as_u64()
        .expect("the event's group");
    let o = op_get(
        env,
        0,
        &format!("/v1/admin/changes?event=brief&after=c.{group}-o"),
    )
    .await;
    assert_eq!(o.status.as_u16(), 200, "{}", o.body);
    let from_o = seqs(&o.body);
    assert!(
        !from_o.is_empty() && kept.ends_with(&from_o),
        "from the oldest kept (a tick may prune more): {from_o:?} of {kept:?}"
    );
    let bad = op_get(env, 0, "/v1/admin/changes?after=nonsense").await;
    assert_eq!(bad.code(), Some("invalid_cursor"));
    let buyer = env
        .http
        .get(
            &format!("{}/v1/admin/changes", env.edge(0)),
            Some(&token(&env.cluster, "alice", false)),
        )
        .await
        .unwrap();
    assert_eq!(buyer.status.as_u16(), 403);
}

fn seqs(body: &Value) -> Vec<u64> {
    body["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes: {body}"))
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect()
}
