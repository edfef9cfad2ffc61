//! Payments end to end: a real mock gateway process and real nodes
//! (1 region × 3 nodes, one edge each). Every confirm path on its own,
//! forged and repeated signals, gateway failures, the reconciler as the
//! only release path, late success refunded, and a leader killed between
//! the execute intent and the confirm.

mod common;

use std::time::Duration;

use common::payments::{s, scenario, scenario_with, Env};
use common::*;
use hyper::Method;
use serde_json::{json, Value};

/// Long holds: the reconciler (margin 20 s) leaves them to the callback
/// and webhook.
const PAY_CB: (&str, &[&str], u64) = (
    "pay-cb",
    &["A1", "A2", "A3", "A4", "A5", "A6", "A7", "A8"],
    600,
);
/// Short holds: within the reconciler's margin from the start.
const PAY_RC: (&str, &[&str], u64) = ("pay-rc", &["R1", "R2", "R3"], 12);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_the_callback_confirms_once_and_forgeries_change_nothing() {
    callback_path(&scenario(&[PAY_CB]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_bad_booking_requests_get_stable_codes_and_create_nothing() {
    bad_booking_requests(&scenario(&[PAY_CB]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_callback_saying_cancel_releases_nothing() {
    callback_cancel_releases_nothing(&scenario(&[PAY_CB]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_the_webhook_alone_confirms_and_forged_ones_are_refused() {
    webhook_path(&scenario(&[PAY_CB]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_signed_webhook_for_another_amount_confirms_nothing() {
    webhook_amount(&scenario(&[PAY_CB]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_callback_whose_execute_reports_another_amount_or_none_confirms_nothing() {
    callback_amount(&scenario(&[PAY_CB]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_reconciler_query_reporting_another_amount_or_none_confirms_nothing() {
    reconciler_amount(&scenario(&[PAY_RC]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_refund_behind_a_hundred_failing_emails_is_delivered() {
    let seats: Vec<String> = (1..=MAIL_BOOKINGS).map(|i| format!("M{i}")).collect();
    let seats: Vec<&str> = seats.iter().map(String::as_str).collect();
    let s = scenario_with(&[("pay-mail", &seats, 600)], |dir, p| {
        // The mail dir's parent is a regular file: no email can be
        // written, whoever runs the test (root ignores permissions).
        let file = dir.join("not-a-dir");
        std::fs::write(&file, b"").expect("write a plain file");
        p.mail_dir = Some(file.join("mail"));
    })
    .await;
    refund_behind_failing_emails(&s.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_keyed_booking_answers_once_and_refuses_another_hold() {
    keyed_booking(&scenario(&[PAY_CB]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_gateway_error_on_create_books_nothing() {
    create_fails(&scenario(&[PAY_CB]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_payment_completed_before_it_was_recorded_confirms() {
    completed_before_recorded(&scenario(&[PAY_CB]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_the_reconciler_alone_confirms() {
    reconciler_path(&scenario(&[PAY_RC]).await.env).await;
}

/// Issue 40: payment duties ran only beside an HTTP edge, so a leader
/// without one never settled its groups' payments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_leader_without_an_http_edge_reconciles_its_payments() {
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let env = Env::start_nodes(dir.path(), |_| {}, |configs| configs[2].1.edge = None).await;
    let (id, seats, ttl) = PAY_RC;
    let created = create_event(
        &env.cluster,
        &env.edge(0),
        json!({"event_id": id, "name": id, "home_region": "us-east", "seats": seats,
               "hold_ttl_secs": ttl, "price_cents": 2500, "currency": "EUR"}),
    )
    .await;
    let gid = created["group_id"].as_u64().unwrap();
    tracing::info!("--- node 3, which serves no HTTP, leads the event's group");
    let op = token(&env.cluster, "ops", true);
    let url = format!("{}/v1/admin/groups/{gid}/transfer-leader", env.edge(0));
    let a = env
        .http
        .post(&url, Some(&op), None, &json!({"to": 3}))
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    reconciler_path(&env).await;
    let view = env
        .http
        .get(&format!("{}/v1/admin/cluster", env.edge(0)), Some(&op))
        .await
        .unwrap();
    let group = view.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group_id"] == gid)
        .cloned()
        .unwrap();
    assert_eq!(group["leader"], 3, "node 3 led it throughout: {group}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_cancelled_payment_is_released_and_the_buyer_books_again() {
    cancelled_then_rebooked(&scenario(&[PAY_RC]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_an_unknown_payment_at_its_deadline_is_extended_never_released() {
    unknown_at_deadline(&scenario(&[("pay-ext", &["X1"], 2)]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_leader_killed_between_intent_and_confirm_is_taken_over() {
    let mut s = scenario(&[("pay-kill", &["K1"], 25)]).await;
    leader_killed_between_intent_and_confirm(&mut s.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_gateway_that_forgets_the_token_gets_a_new_one() {
    let mut s = scenario(&[]).await;
    gateway_forgets_the_token(&mut s.env).await;
}

async fn gateway_forgets_the_token(env: &mut Env) {
    tracing::info!(
        "--- the gateway restarts and forgets the fleet's token: it is replaced, bookings resume"
    );
    env.gateway.restart().unwrap();
    let env = &*env;
    env.event("pay-after", &["Z1"], 600).await;
    let hold = env.hold("zoe", "pay-after", &["Z1"]).await;
    // 503 gateway_unavailable until the refresher has replaced the token.
    let b = env.book("zoe", s(&hold["hold_id"])).await;
    let redirect = env.browser(s(&b["approve_url"]), true).await;
    assert_eq!(env.get(&redirect).await.body["status"], "confirmed");
}

/// alice books A1 and A2 of `pay-cb`: one booking per hold, a stranger
/// sees nothing, and a hold with a payment is not cancelled by its owner.
/// Returns the hold and the booking.
async fn alice_books(env: &Env) -> (Value, Value) {
    tracing::info!("--- book to PAID through the callback");
    let hold = env.hold("alice", "pay-cb", &["A1", "A2"]).await;
    let b = env.book("alice", s(&hold["hold_id"])).await;
    assert_eq!(b["status"], "pending");
    assert_eq!(b["amount_cents"], 5000);
    assert!(s(&b["approve_url"]).starts_with(&env.gateway.url));
    let id = s(&b["booking_id"]).to_string();
    let pid = s(&b["payment_id"]).to_string();
    let again = env.book_raw("alice", s(&hold["hold_id"])).await;
    assert_eq!(
        (
            again.body["booking_id"].clone(),
            again.body["payment_id"].clone()
        ),
        (json!(id), json!(pid)),
        "one booking per hold"
    );
    assert_eq!(again.epoch, Some(1), "a repeated booking carries the fence");
    assert_eq!(
        env.booking("bob", &id).await.status.as_u16(),
        404,
        "a stranger sees nothing"
    );
    let del = env
        .http
        .send(
            Method::DELETE,
            &format!("{}/v1/holds/{}", env.edge(0), s(&hold["hold_id"])),
            Some(&env.token("alice")),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        del.code(),
        Some("hold_not_cancellable"),
        "a hold with a payment is not cancelled by its owner"
    );
    (hold, b)
}

async fn callback_path(env: &Env) {
    let (_, b) = alice_books(env).await;
    let (id, pid) = (
        s(&b["booking_id"]).to_string(),
        s(&b["payment_id"]).to_string(),
    );
    tracing::info!("--- forged callbacks change nothing");
    let redirect = env.browser(s(&b["approve_url"]), true).await;
    assert!(redirect.contains("status=success"));
    let forged = redirect.replace("signature=", "signature=00");
    let a = env.get(&forged).await;
    assert_eq!(
        (a.status.as_u16(), a.code()),
        (401, Some("invalid_signature")),
        "{}",
        a.body
    );
    let a = env
        .get(&redirect.replace(&pid, "PAY-000000-deadbeef"))
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code()),
        (404, Some("payment_not_found"))
    );
    let a = env
        .get(&format!(
            "{}/v1/payments/callback?paymentID={pid}",
            env.edge(0)
        ))
        .await;
    assert_eq!(a.code(), Some("invalid_callback"));
    assert_eq!(
        env.payment(&pid).await["execute_calls"],
        0,
        "no forged callback reached the gateway"
    );

    tracing::info!("--- the genuine callback confirms; a second one changes nothing");
    let a = env.get(&redirect).await;
    assert_eq!(
        (a.status.as_u16(), a.body["status"].clone()),
        (200, json!("confirmed")),
        "{}",
        a.body
    );
    let a = env.get(&redirect).await;
    assert_eq!(a.body["status"], "confirmed");
    assert_eq!(a.epoch, Some(1), "the callback's answer carries the fence");
    let p = env.payment(&pid).await;
    assert_eq!(
        (p["captures"].clone(), p["execute_calls"].clone()),
        (json!(1), json!(1)),
        "{p}"
    );
    let got = env.booking("alice", &id).await;
    assert_eq!(
        (
            got.body["status"].clone(),
            got.body["confirmed_via"].clone()
        ),
        (json!("confirmed"), json!("callback"))
    );
    assert_eq!(got.body["txn_id"], p["txn_id"]);
    assert_eq!(got.cache_control.as_deref(), Some("no-store"));
    assert_eq!(env.available("pay-cb").await["sold"], 2);
    eventually("confirmation email", || async {
        env.mail_mentions(&id).then_some(())
    })
    .await;
}

async fn bad_booking_requests(env: &Env) {
    let (hold, _) = alice_books(env).await;
    tracing::info!("--- bad booking requests: stable codes, nothing created");
    let url = format!("{}/v1/bookings", env.edge(0));
    let alice = env.token("alice");
    let bad = env
        .http
        .send_raw(Method::POST, &url, Some(&alice), None, "{not json".into())
        .await
        .unwrap();
    assert_eq!(
        (bad.status.as_u16(), bad.code()),
        (400, Some("malformed_json"))
    );
    let bad = env
        .http
        .post(
            &url,
            Some(&alice),
            None,
            &json!({"hold_id": "h1-1", "x": 1}),
        )
        .await
        .unwrap();
    assert_eq!(bad.code(), Some("unknown_field"));
    for hold_id in ["nope", "h999-1", "h1-999"] {
        let bad = env
            .http
            .post(&url, Some(&alice), None, &json!({"hold_id": hold_id}))
            .await
            .unwrap();
        assert_eq!(
            (bad.status.as_u16(), bad.code()),
            (404, Some("hold_not_found")),
            "{hold_id}"
        );
    }
    let bad = env.book_raw("bob", s(&hold["hold_id"])).await;
    assert_eq!(
        (bad.status.as_u16(), bad.code()),
        (404, Some("hold_not_found")),
        "another buyer's hold"
    );
    let bad = env
        .http
        .post(&url, None, None, &json!({"hold_id": "h1-1"}))
        .await
        .unwrap();
    assert_eq!(bad.status.as_u16(), 401);

    let cancelled = env.hold("alice", "pay-cb", &["A8"]).await;
    let del = env
        .http
        .send(
            Method::DELETE,
            &format!("{}/v1/holds/{}", env.edge(0), s(&cancelled["hold_id"])),
            Some(&alice),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(del.body["status"], "released");
    let bad = env.book_raw("alice", s(&cancelled["hold_id"])).await;
    assert_eq!(
        (bad.status.as_u16(), bad.code()),
        (409, Some("hold_not_bookable")),
        "{}",
        bad.body
    );
}

async fn callback_cancel_releases_nothing(env: &Env) {
    tracing::info!("--- a callback saying status=cancel is not believed and releases nothing");
    let hold = env.hold("bob", "pay-cb", &["A3"]).await;
    let b = env.book("bob", s(&hold["hold_id"])).await;
    let cancel_redirect = env.browser(s(&b["approve_url"]), false).await;
    assert!(cancel_redirect.contains("status=cancel"));
    let a = env.get(&cancel_redirect).await;
    assert_eq!(a.body["status"], "pending", "{}", a.body);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.booking("bob", s(&b["booking_id"])).await.body["status"],
        "pending"
    );
    let h = env.hold_of("bob", s(&hold["hold_id"])).await;
    assert_eq!(h.body["status"], "held", "only the reconciler releases");
}

async fn webhook_path(env: &Env) {
    tracing::info!("--- confirmed through the webhook alone: captured, callback never arrives");
    env.faults(json!({"webhook": "duplicate"})).await;
    let sent_before = env.gateway_stats().await["webhooks_sent"]
        .as_u64()
        .unwrap_or(0);
    let hold = env.hold("carol", "pay-cb", &["A5"]).await;
    let b = env.book("carol", s(&hold["hold_id"])).await;
    let pid = s(&b["payment_id"]).to_string();
    env.browser(s(&b["approve_url"]), true).await;
    let (status, _) = env.execute_at_gateway(&pid, "1.0").await;
    assert_eq!(status, 200);
    let got = env
        .wait_status("carol", s(&b["booking_id"]), "confirmed")
        .await;
    assert_eq!(got["confirmed_via"], "webhook");
    // The second copy is answered 200 too (the booking is decided, so it
    // changes nothing; a copy racing the first is caught by the inbox).
    eventually("both copies delivered", || async {
        let sent = env.gateway_stats().await["webhooks_sent"].as_u64()?;
        (sent >= sent_before + 2).then_some(())
    })
    .await;
    let again = env.booking("carol", s(&b["booking_id"])).await.body;
    assert_eq!(again["status"], "confirmed", "{again}");
    assert_eq!(again["confirmed_via"], "webhook", "{again}");
    env.faults(json!({"webhook": "deliver"})).await;

    tracing::info!("--- forged and unknown webhooks");
    let body = json!({"id": "EVT-forged", "type": "payment.completed", "payment_id": pid,
                      "invoice": b["booking_id"], "txn_id": "TXN-forged", "amount_cents": 1, "currency": "EUR"});
    let a = env.webhook(&body, "not-the-webhook-secret").await;
    assert_eq!(
        (a.status.as_u16(), a.code()),
        (401, Some("invalid_signature"))
    );
    let mut unknown = body.clone();
    unknown["invoice"] = json!("b999-1");
    let a = env.webhook(&unknown, &env.gateway.webhook_secret).await;
    assert_eq!(
        (a.status.as_u16(), a.body["result"].clone()),
        (200, json!("ignored"))
    );
    let a = env.webhook(&body, &env.gateway.webhook_secret).await;
    assert_eq!(
        a.status.as_u16(),
        200,
        "a correctly signed message is always answered 200"
    );
    assert_eq!(env.payment(&pid).await["captures"], 1);
}

async fn webhook_amount(env: &Env) {
    tracing::info!("--- captured, but the signed webhook names another amount or currency");
    env.faults(json!({"webhook": "drop"})).await;
    let hold = env.hold("gina", "pay-cb", &["A8"]).await;
    let b = env.book("gina", s(&hold["hold_id"])).await;
    let (id, pid) = (
        s(&b["booking_id"]).to_string(),
        s(&b["payment_id"]).to_string(),
    );
    env.browser(s(&b["approve_url"]), true).await;
    let (status, paid) = env.execute_at_gateway(&pid, "1.0").await;
    assert_eq!(status, 200, "{paid}");
    let mut body = json!({"id": "EVT-cheap", "type": "payment.completed", "payment_id": pid,
                          "invoice": id, "txn_id": paid["txn_id"], "amount_cents": 1,
                          "currency": b["currency"]});
    let a = env.webhook(&body, &env.gateway.webhook_secret).await;
    assert_eq!(a.body["result"], "amount_mismatch", "{}", a.body);
    body["id"] = json!("EVT-dollars");
    body["amount_cents"] = b["amount_cents"].clone();
    body["currency"] = json!("XXX");
    let a = env.webhook(&body, &env.gateway.webhook_secret).await;
    assert_eq!(a.body["result"], "amount_mismatch", "{}", a.body);
    let got = env.booking("gina", &id).await;
    assert_eq!(got.body["status"], "pending", "{}", got.body);

    tracing::info!("--- the same message with the booking's own amount and currency confirms");
    body["id"] = json!("EVT-right");
    body["currency"] = b["currency"].clone();
    let a = env.webhook(&body, &env.gateway.webhook_secret).await;
    assert_eq!(a.body["result"], "confirmed", "{}", a.body);
    env.faults(json!({"webhook": "deliver"})).await;
}

/// The amount alerts raised on every edge so far.
async fn amount_alerts(env: &Env) -> f64 {
    env.metric("seatfence_payment_alerts_total{kind=\"amount_mismatch\"}")
        .await
}

async fn callback_amount(env: &Env) {
    env.faults(json!({"webhook": "drop"})).await;
    for (mode, user, seat) in [("other", "ivan", "A3"), ("omit", "judy", "A4")] {
        tracing::info!(
            "--- the gateway's execute answer reports amount {mode}: the callback confirms nothing"
        );
        env.faults(json!({ "amount": mode })).await;
        let alerts = amount_alerts(env).await;
        let hold = env.hold(user, "pay-cb", &[seat]).await;
        let b = env.book(user, s(&hold["hold_id"])).await;
        let redirect = env.browser(s(&b["approve_url"]), true).await;
        let a = env.get(&redirect).await;
        assert_eq!(
            (a.status.as_u16(), a.code()),
            (409, Some("amount_mismatch")),
            "{}",
            a.body
        );
        assert_eq!(
            env.payment(s(&b["payment_id"])).await["captures"],
            1,
            "the gateway did take a payment"
        );
        let got = env.booking(user, s(&b["booking_id"])).await.body;
        assert_eq!(got["status"], "pending", "{got}");
        let h = env.hold_of(user, s(&hold["hold_id"])).await.body;
        assert_eq!(h["status"], "held", "the seat is not sold: {h}");
        assert!(amount_alerts(env).await > alerts, "an alert is raised");
    }
    env.faults(json!({"webhook": "deliver", "amount": "ok"}))
        .await;
}

async fn reconciler_amount(env: &Env) {
    env.faults(json!({"webhook": "drop"})).await;
    let mut kept = Vec::new();
    for (mode, user, seat) in [("other", "kim", "R1"), ("omit", "lee", "R2")] {
        tracing::info!("--- captured, callback lost; the reconciler's query reports amount {mode}: nothing confirmed");
        env.faults(json!({ "amount": mode })).await;
        let alerts = amount_alerts(env).await;
        let hold = env.hold(user, "pay-rc", &[seat]).await;
        let b = env.book(user, s(&hold["hold_id"])).await;
        env.browser(s(&b["approve_url"]), true).await;
        // Captured here with the highest fence there is: the reconciler
        // finds it completed when it asks.
        let (status, paid) = env
            .execute_at_gateway(s(&b["payment_id"]), &format!("1.{}", u64::MAX))
            .await;
        assert_eq!(status, 200, "{paid}");
        eventually("the reconciler's amount alert", || async {
            (amount_alerts(env).await > alerts).then_some(())
        })
        .await;
        let got = env.booking(user, s(&b["booking_id"])).await.body;
        assert_eq!(got["status"], "pending", "{got}");
        let h = env.hold_of(user, s(&hold["hold_id"])).await.body;
        assert_eq!(h["status"], "held", "the seat is not sold: {h}");
        kept.push((user, b));
    }
    tracing::info!(
        "--- the gateway reports the bookings' own amount again: the reconciler confirms them"
    );
    env.faults(json!({"amount": "ok"})).await;
    for (user, b) in &kept {
        let got = env
            .wait_status(user, s(&b["booking_id"]), "confirmed")
            .await;
        assert_eq!(got["confirmed_via"], "reconciler", "{got}");
    }
    env.faults(json!({"webhook": "deliver"})).await;
}

/// Bookings confirmed ahead of the refund in `t85_a_refund_behind_…`.
const MAIL_BOOKINGS: usize = 100;

async fn refund_behind_failing_emails(env: &Env) {
    tracing::info!("--- {MAIL_BOOKINGS} bookings confirmed; the mail sink fails every email");
    let mut bookings = Vec::new();
    for i in 1..=MAIL_BOOKINGS {
        let user = format!("m{i}");
        let hold = env.hold(&user, "pay-mail", &[&format!("M{i}")]).await;
        let b = env.book(&user, s(&hold["hold_id"])).await;
        let redirect = env.browser(s(&b["approve_url"]), true).await;
        let a = env.get(&redirect).await;
        assert_eq!(a.body["status"], "confirmed", "{}", a.body);
        bookings.push((user, b));
    }
    let (user, b) = &bookings[0];
    let id = s(&b["booking_id"]);
    tracing::info!("--- an operator refunds {id}: its refund waits behind {MAIL_BOOKINGS} emails");
    let r = env
        .http
        .post(
            &format!("{}/v1/admin/bookings/{id}/refund", env.edge(2)),
            Some(&token(&env.cluster, "ops", true)),
            Some("refund-behind-mail"),
            &json!({"reason": "show cancelled", "release_seats": false}),
        )
        .await
        .unwrap();
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    let got = env.wait_status(user, id, "refunded").await;
    assert!(got["refund_id"].is_string(), "{got}");
    let paid = env.payment(s(&b["payment_id"])).await;
    assert_eq!(
        (paid["refunds"].clone(), paid["refund_id"].clone()),
        (json!(1), got["refund_id"].clone()),
        "the gateway refunded it once"
    );
    let sent = env
        .metric("seatfence_outbox_delivered_total{kind=\"email\"}")
        .await;
    assert_eq!(
        sent, 0.0,
        "no email was delivered: the sink failed them all"
    );
    let waiting = env.metric("seatfence_outbox_backlog").await;
    assert!(
        waiting >= MAIL_BOOKINGS as f64,
        "every email still waits: {waiting}"
    );
}

async fn keyed_booking(env: &Env) {
    tracing::info!("--- the same booking twice under one key: the first answer; another hold: 422");
    let h1 = env.hold("kate", "pay-cb", &["A5"]).await;
    let h2 = env.hold("kate", "pay-cb", &["A6"]).await;
    // The first may meet the fleet's first token grant (503): retried.
    let first = eventually("the keyed booking", || async {
        let a = env
            .book_keyed("kate", s(&h1["hold_id"]), Some("book-1"))
            .await;
        (a.status.as_u16() == 201).then_some(a)
    })
    .await;
    let again = env
        .book_keyed("kate", s(&h1["hold_id"]), Some("book-1"))
        .await;
    assert_eq!((again.status, &again.body), (first.status, &first.body));
    let other = env
        .book_keyed("kate", s(&h2["hold_id"]), Some("book-1"))
        .await;
    assert_eq!(
        (other.status.as_u16(), other.body["error"]["code"].clone()),
        (422, json!("idempotency_key_reused")),
        "{}",
        other.body
    );
    let none = env.booking("kate", s(&h2["hold_id"])).await;
    assert_eq!(
        none.status.as_u16(),
        404,
        "no booking for the other hold: {}",
        none.body
    );
    let unkeyed = env.book("kate", s(&h2["hold_id"])).await;
    assert_eq!(unkeyed["status"], "pending");
}

async fn create_fails(env: &Env) {
    tracing::info!("--- gateway error on create: no booking, hold unchanged");
    env.faults(json!({"create": "error"})).await;
    let hold = env.hold("erin", "pay-cb", &["A6"]).await;
    let a = env.book_raw("erin", s(&hold["hold_id"])).await;
    assert_eq!(
        (a.status.as_u16(), a.code()),
        (503, Some("gateway_unavailable")),
        "{}",
        a.body
    );
    let bid = s(&hold["hold_id"]).replacen('h', "b", 1);
    assert_eq!(env.booking("erin", &bid).await.status.as_u16(), 404);
    let h = env.hold_of("erin", s(&hold["hold_id"])).await;
    assert_eq!(
        (h.body["status"].clone(), h.body["expires_at"].clone()),
        (json!("held"), hold["expires_at"].clone())
    );
    env.faults(json!({"create": "ok"})).await;
    let b = env.book("erin", s(&hold["hold_id"])).await;
    assert_eq!(b["status"], "pending", "the hold is still bookable");
}

async fn completed_before_recorded(env: &Env) {
    tracing::info!(
        "--- the capture completes but its answer is lost: the callback asks once and confirms"
    );
    env.faults(json!({"execute": "timeout", "timeout_ms": 3000, "webhook": "drop"}))
        .await;
    let hold = env.hold("frank", "pay-cb", &["A7"]).await;
    let b = env.book("frank", s(&hold["hold_id"])).await;
    let redirect = env.browser(s(&b["approve_url"]), true).await;
    let a = env.get(&redirect).await;
    assert_eq!(a.body["status"], "confirmed", "{}", a.body);
    assert_eq!(env.payment(s(&b["payment_id"])).await["captures"], 1);
    env.faults(json!({"execute": "ok", "webhook": "deliver"}))
        .await;
}

async fn reconciler_path(env: &Env) {
    tracing::info!("--- confirmed by the reconciler alone: callback and webhook both lost");
    env.faults(json!({"webhook": "drop"})).await;
    let hold = env.hold("dave", "pay-rc", &["R1"]).await;
    let b = env.book("dave", s(&hold["hold_id"])).await;
    env.browser(s(&b["approve_url"]), true).await;
    let got = env
        .wait_status("dave", s(&b["booking_id"]), "confirmed")
        .await;
    assert_eq!(got["confirmed_via"], "reconciler");
    assert_eq!(env.payment(s(&b["payment_id"])).await["captures"], 1);
    env.faults(json!({"webhook": "deliver"})).await;
}

async fn cancelled_then_rebooked(env: &Env) {
    tracing::info!("--- a cancelled payment is released by the reconciler; the buyer books again");
    let released_before = env.metric("seatfence_reconciler_releases_total").await;
    let hold = env.hold("gina", "pay-rc", &["R2"]).await;
    let b = env.book("gina", s(&hold["hold_id"])).await;
    env.browser(s(&b["approve_url"]), false).await;
    env.wait_status("gina", s(&b["booking_id"]), "expired")
        .await;
    assert!(env.metric("seatfence_reconciler_releases_total").await > released_before);
    let hold2 = env.hold("gina", "pay-rc", &["R2"]).await;
    assert_ne!(hold2["hold_id"], hold["hold_id"]);
    let b2 = env.book("gina", s(&hold2["hold_id"])).await;
    let redirect = env.browser(s(&b2["approve_url"]), true).await;
    assert_eq!(env.get(&redirect).await.body["status"], "confirmed");
    assert_eq!(
        env.booking("gina", s(&b["booking_id"])).await.body["status"],
        "expired"
    );
}

async fn unknown_at_deadline(env: &Env) {
    tracing::info!(
        "--- gateway unreachable at the deadline: extended 3 times, alert, never released"
    );
    env.faults(json!({"query": "error"})).await;
    let alerts_before = env.metric("seatfence_reconciler_alerts_total").await;
    let hold = env.hold("hank", "pay-ext", &["X1"]).await;
    let b = env.book("hank", s(&hold["hold_id"])).await;
    let id = s(&b["booking_id"]).to_string();
    eventually("three extensions and an alert", || async {
        let got = env.booking("hank", &id).await.body;
        let alerted = env.metric("seatfence_reconciler_alerts_total").await > alerts_before;
        (got["extensions"] == 3 && alerted).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = env.booking("hank", &id).await.body;
    assert_eq!(
        (got["status"].clone(), got["extensions"].clone()),
        (json!("pending"), json!(3))
    );
    assert_eq!(
        env.available("pay-ext").await["held"],
        1,
        "never released when unsure"
    );
    let pay = env.event_payments("ops", true, "pay-ext").await;
    assert_eq!(pay.status.as_u16(), 200, "{}", pay.body);
    assert_eq!(pay.body["pending_payments"], 1, "{}", pay.body);
    assert!(
        pay.body["oldest_pending_deadline"].is_string(),
        "{}",
        pay.body
    );
    let buyer = env.event_payments("hank", false, "pay-ext").await;
    assert_eq!(
        (buyer.status.as_u16(), buyer.code()),
        (403, Some("forbidden"))
    );
    let unknown = env.event_payments("ops", true, "no-such-event").await;
    assert_eq!(
        (unknown.status.as_u16(), unknown.code()),
        (404, Some("event_not_found"))
    );
    env.faults(json!({"query": "ok"})).await;
    env.wait_status("hank", &id, "expired").await;
    let pay = env.event_payments("ops", true, "pay-ext").await.body;
    assert_eq!(
        (
            pay["pending_payments"].clone(),
            pay["oldest_pending_deadline"].clone()
        ),
        (json!(0), Value::Null),
        "{pay}"
    );
}

async fn leader_killed_between_intent_and_confirm(env: &mut Env) {
    tracing::info!("--- leader killed between the execute intent and the confirm");
    env.faults(json!({"execute": "hold", "webhook": "drop"}))
        .await;
    let hold = env.hold("kim", "pay-kill", &["K1"]).await;
    let b = env.book("kim", s(&hold["hold_id"])).await;
    let pid = s(&b["payment_id"]).to_string();
    let redirect = env.browser(s(&b["approve_url"]), true).await;
    let http = env.http.clone();
    let cb = tokio::spawn(async move { http.get(&redirect, None).await });
    let old_term = {
        let env = &*env;
        eventually("the intent's execute at the gateway", || async {
            env.payment(&pid).await["highest_fence"][1].as_u64()
        })
        .await
    };
    let group = seatfence_core::HoldId::parse(s(&hold["hold_id"]))
        .unwrap()
        .group;
    let leader = env.cluster.wait_leader(group, PATIENCE).await.unwrap();
    env.cluster.kill(leader).unwrap();
    let _ = cb.await;
    let env = &*env;
    tracing::info!("--- the new leader's reconciler takes over with a higher fence");
    eventually("a newer fence at the gateway", || async {
        let t = env.payment(&pid).await["highest_fence"][1].as_u64()?;
        (t > old_term).then_some(())
    })
    .await;
    env.faults(json!({"execute": "ok"})).await;
    let got = env
        .wait_status("kim", s(&b["booking_id"]), "confirmed")
        .await;
    assert_eq!(got["confirmed_via"], "reconciler");
    let p = env.payment(&pid).await;
    assert_eq!(p["captures"], 1, "exactly one capture: {p}");
    tracing::info!("--- the deposed leader's fence is refused by the gateway");
    let (status, body) = env.execute_at_gateway(&pid, &format!("1.{old_term}")).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("stale_fencing_token"))
    );
    env.faults(json!({"webhook": "deliver"})).await;
}
