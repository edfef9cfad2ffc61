//! Payments that may still be captured are never released: an execute held
//! past the deadline with every webhook lost is voided before its seat goes
//! back on sale, a capture that beats the void confirms the held seat, and a
//! capture after a release (the gateway's void lied) is refunded exactly
//! once. A real mock gateway process and real nodes (1 region × 3 nodes).

mod common;

use common::payments::{s, scenario, Env};
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t86_an_execute_held_past_the_deadline_is_voided_before_any_release() {
    held_execute_voided(&scenario(&[("pay-void", &["V1"], 4)]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t86_a_capture_that_beats_the_void_confirms_the_held_seat() {
    capture_beats_void(&scenario(&[("pay-race", &["C1"], 4)]).await.env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t86_a_capture_after_the_release_is_refunded_with_every_webhook_lost() {
    late_success_refunded(&scenario(&[("pay-late", &["L1"], 4)]).await.env).await;
}

/// ivy books and approves; the gateway's execute hangs and every webhook
/// is lost; the callback answers `pending`. Returns (booking id, payment id).
async fn approved_with_a_hanging_capture(
    env: &Env,
    user: &str,
    event: &str,
    seat: &str,
) -> (String, String) {
    env.faults(json!({"execute": "hold", "webhook": "drop"}))
        .await;
    let hold = env.hold(user, event, &[seat]).await;
    let b = env.book(user, s(&hold["hold_id"])).await;
    let redirect = env.browser(s(&b["approve_url"]), true).await;
    let a = env.get(&redirect).await;
    assert_eq!(
        a.body["status"], "pending",
        "capture still hanging: {}",
        a.body
    );
    (
        s(&b["booking_id"]).to_string(),
        s(&b["payment_id"]).to_string(),
    )
}

async fn held_execute_voided(env: &Env) {
    tracing::info!("--- execute held past the deadline, webhooks lost, void failing: seats kept");
    env.faults(json!({"void": "error"})).await;
    let (id, pid) = approved_with_a_hanging_capture(env, "ivy", "pay-void", "V1").await;
    eventually("an extension while the void fails", || async {
        let got = env.booking("ivy", &id).await.body;
        (got["extensions"].as_u64()? >= 1).then_some(())
    })
    .await;
    let got = env.booking("ivy", &id).await.body;
    assert_eq!(got["status"], "pending", "never released unsure: {got}");
    assert_eq!(env.available("pay-void").await["held"], 1);
    tracing::info!("--- the void answers: voided, then released; the held capture never lands");
    env.faults(json!({"void": "ok"})).await;
    env.wait_status("ivy", &id, "expired").await;
    let p = env.payment(&pid).await;
    assert_eq!(p["status"], "voided", "{p}");
    env.faults(json!({"execute": "ok"})).await;
    let resold = env.hold("jack", "pay-void", &["V1"]).await;
    eventually("the held capture has run", || async {
        (env.gateway_stats().await["captures_held"] == 0).then_some(())
    })
    .await;
    let p = env.payment(&pid).await;
    assert_eq!(
        (
            p["captures"].clone(),
            p["refunds"].clone(),
            p["status"].clone()
        ),
        (json!(0), json!(0), json!("voided")),
        "no money taken: {p}"
    );
    assert_eq!(
        env.hold_of("jack", s(&resold["hold_id"])).await.body["status"],
        "held"
    );
    env.faults(json!({"webhook": "deliver"})).await;
}

async fn capture_beats_void(env: &Env) {
    tracing::info!("--- the held capture lands as the void arrives: already_captured, confirmed");
    env.faults(json!({"void": "lose"})).await;
    let (id, pid) = approved_with_a_hanging_capture(env, "ivy", "pay-race", "C1").await;
    let got = env.wait_status("ivy", &id, "confirmed").await;
    assert_eq!(got["confirmed_via"], "reconciler");
    env.faults(json!({"execute": "ok", "webhook": "deliver", "void": "ok"}))
        .await;
    let p = env.payment(&pid).await;
    assert_eq!(
        (p["captures"].clone(), p["refunds"].clone()),
        (json!(1), json!(0)),
        "{p}"
    );
    assert_eq!(env.available("pay-race").await["sold"], 1);
}

async fn late_success_refunded(env: &Env) {
    tracing::info!("--- the gateway says voided but captures later: the watch refunds it");
    env.faults(json!({"void": "ignore"})).await;
    let (id, pid) = approved_with_a_hanging_capture(env, "ivy", "pay-late", "L1").await;
    env.wait_status("ivy", &id, "expired").await;
    let resold = env.hold("jack", "pay-late", &["L1"]).await;
    env.faults(json!({"execute": "ok"})).await;
    let got = env.wait_status("ivy", &id, "refunded").await;
    assert!(got["refund_id"].is_string());
    let p = env.payment(&pid).await;
    assert_eq!(
        (p["captures"].clone(), p["refunds"].clone()),
        (json!(1), json!(1)),
        "exactly one refund: {p}"
    );
    let h = env.hold_of("jack", s(&resold["hold_id"])).await;
    assert_eq!(
        h.body["status"], "held",
        "the resold seat stays with its new buyer"
    );
    env.faults(json!({"void": "ok", "webhook": "deliver"}))
        .await;
}
