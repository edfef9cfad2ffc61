//! The mock gateway's contract, in process: idempotent create, approve,
//! execute at most once, fencing tokens, refunds, token grants, signatures.

use std::sync::Arc;
use std::time::Duration;

use seatfence_core::{Epoch, Fence};
use seatfence_payments::gateway::client::HttpGateway;
use seatfence_payments::gateway::conformance;
use seatfence_payments::gateway::token::{self, StaticToken};
use seatfence_payments::gateway::{
    CreatePayment, CreatedPayment, Gateway, GatewayError, PaymentStatus,
};
use seatfence_testkit::mock_gateway::{self as mock, Mock, MockConfig};
use serde_json::{json, Value};

async fn start(grants_per_hour: u32) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let m = Mock::new(MockConfig {
        public_url: url.clone(),
        signing_secret: "signing-secret-0123".into(),
        webhook_secret: "webhook-secret-0123".into(),
        client_id: "sf".into(),
        client_secret: "client-secret".into(),
        token_ttl: Duration::from_secs(60),
        grants_per_hour,
    });
    tokio::spawn(mock::serve(m, listener));
    url
}

fn fence(term: u64) -> Fence {
    Fence {
        epoch: Epoch(1),
        term,
    }
}

fn payment(key: &str) -> CreatePayment {
    CreatePayment {
        amount_cents: 500,
        currency: "EUR".into(),
        invoice: "b1-1".into(),
        idempotency_key: key.into(),
        return_url: "http://edge/v1/payments/callback?booking=b1-1".into(),
        // Nobody listens here: webhook delivery just fails and is retried.
        webhook_url: "http://127.0.0.1:9/hook".into(),
    }
}

/// The promises every gateway keeps (`seatfence_payments::gateway::conformance`),
/// against the mock through the HTTP client: both sides at once.
#[tokio::test]
async fn the_mock_and_the_client_pass_the_gateway_conformance_suite() {
    let url = start(5).await;
    let http = reqwest::Client::new();
    let (tok, _) = token::grant(&http, &url, "sf", "client-secret")
        .await
        .unwrap();
    let gw = HttpGateway::new(&url, Duration::from_secs(2), Arc::new(StaticToken(tok)));
    let approve = move |p: CreatedPayment| -> conformance::Approval {
        let http = http.clone();
        Box::pin(async move {
            let r = http
                .post(&p.approve_url)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            r.error_for_status().map(|_| ()).map_err(|e| e.to_string())
        })
    };
    conformance::run(&gw, approve, "mock").await.unwrap();
}

/// What the mock adds to the suite: the buyer's redirect, its counters, a
/// raw request without a fencing token, bearer tokens and grant limits.
#[tokio::test]
async fn the_mock_keeps_the_providers_promises() {
    let url = start(2).await;
    let http = reqwest::Client::new();
    let (tok, ttl) = token::grant(&http, &url, "sf", "client-secret")
        .await
        .unwrap();
    assert_eq!(ttl, Duration::from_secs(60));
    let gw = HttpGateway::new(
        &url,
        Duration::from_secs(2),
        Arc::new(StaticToken(tok.clone())),
    );

    // Same idempotency key, same payment.
    let a = gw.create(payment("k1")).await.unwrap();
    let b = gw.create(payment("k1")).await.unwrap();
    assert_eq!(a, b);
    assert!(a
        .approve_url
        .ends_with(&format!("/v1/payments/{}/approve", a.payment_id)));

    // Not approved yet: nothing to capture.
    let e = gw.execute(&a.payment_id, fence(5)).await.unwrap_err();
    assert!(
        matches!(e, GatewayError::Rejected { ref code, .. } if code == "not_approved"),
        "{e:?}"
    );

    // The buyer approves: the redirect carries the id, status and signature.
    let r: Value = http
        .post(&a.approve_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let redirect = r["redirect"].as_str().unwrap();
    assert!(redirect.starts_with("http://edge/v1/payments/callback?booking=b1-1&paymentID="));
    assert!(redirect.ends_with(&format!("status=success&signature={}", a.signature)));

    // Captured once; a repeat answers the same; an older fence is refused.
    let first = gw.execute(&a.payment_id, fence(5)).await.unwrap();
    assert_eq!(first.status, PaymentStatus::Completed);
    assert_eq!(gw.execute(&a.payment_id, fence(5)).await.unwrap(), first);
    assert_eq!(
        gw.execute(&a.payment_id, fence(4)).await.unwrap_err(),
        GatewayError::StaleFence
    );
    assert_eq!(gw.query(&a.payment_id).await.unwrap().txn_id, first.txn_id);

    // Refunds: fenced, idempotent by key.
    assert_eq!(
        gw.refund(&a.payment_id, "r1", fence(4)).await.unwrap_err(),
        GatewayError::StaleFence
    );
    let r1 = gw.refund(&a.payment_id, "r1", fence(6)).await.unwrap();
    assert_eq!(gw.refund(&a.payment_id, "r1", fence(6)).await.unwrap(), r1);
    let stats: Value = http
        .get(format!("{url}/_stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (stats["captures"].clone(), stats["refunds"].clone()),
        (json!(1), json!(1))
    );

    // A missing fencing token is refused; so is a bad bearer token.
    let no_fence: Value = http
        .post(format!("{url}/v1/payments/{}/execute", a.payment_id))
        .bearer_auth(&tok)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(no_fence["error"]["code"], "fencing_token_required");
    let stranger = HttpGateway::new(
        &url,
        Duration::from_secs(2),
        Arc::new(StaticToken("forged".into())),
    );
    assert!(matches!(
        stranger.query(&a.payment_id).await,
        Err(GatewayError::Unavailable(_))
    ));

    // Grants are limited per hour (2 here: one used above).
    assert!(token::grant(&http, &url, "sf", "client-secret")
        .await
        .is_ok());
    assert!(token::grant(&http, &url, "sf", "client-secret")
        .await
        .is_err());
    assert!(token::grant(&http, &url, "sf", "wrong").await.is_err());
}

#[tokio::test]
async fn faults_switch_create_and_query() {
    let url = start(5).await;
    let http = reqwest::Client::new();
    let (tok, _) = token::grant(&http, &url, "sf", "client-secret")
        .await
        .unwrap();
    let gw = HttpGateway::new(&url, Duration::from_millis(300), Arc::new(StaticToken(tok)));
    let put = |f: Value| http.put(format!("{url}/_faults")).json(&f).send();
    assert!(put(json!({"create": "error"}))
        .await
        .unwrap()
        .status()
        .is_success());
    assert!(matches!(
        gw.create(payment("k2")).await,
        Err(GatewayError::Unavailable(_))
    ));
    assert!(put(json!({"create": "ok", "query": "error"}))
        .await
        .unwrap()
        .status()
        .is_success());
    let p = gw.create(payment("k2")).await.unwrap();
    assert!(gw.query(&p.payment_id).await.is_err());
    assert_eq!(
        put(json!({"nonsense": 1})).await.unwrap().status().as_u16(),
        400
    );
    assert!(put(json!({"query": "ok", "latency_ms": 1000}))
        .await
        .unwrap()
        .status()
        .is_success());
    assert_eq!(
        gw.query(&p.payment_id).await.unwrap_err(),
        GatewayError::Timeout
    );
}
