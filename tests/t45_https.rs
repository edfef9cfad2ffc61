//! HTTPS at the edge (`[edge.tls]`, issue 45): three nodes whose edges
//! serve only HTTPS with certificates of the cluster's CA, and the mock
//! gateway trusting that CA. A client that trusts the CA walks through an
//! event, a hold and a booking confirmed by the browser's callback and by
//! the gateway's webhook, both over HTTPS; every answer carries
//! Strict-Transport-Security. Plain HTTP to the edge gets no answer, and a
//! client refuses the edge's certificate when it does not trust the CA or
//! dials a name the certificate is not for.

mod common;

use common::payments::{s, Env};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t45_https_edges_serve_the_walk_through_and_refuse_plain_http_and_wrong_names() {
    init_logs();
    let _serial = serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("certs");
    seatfence_node::certs::make_ca(&certs).expect("the cluster CA");
    let env = Env::start_nodes(
        tmp.path(),
        |_| {},
        |configs| {
            for (_, c) in configs.iter_mut() {
                let name = format!("n{}", c.node_id);
                let edge =
                    seatfence_node::certs::make_edge(&certs, &name, &["127.0.0.1".into()], 30)
                        .expect("an edge certificate");
                c.edge.as_mut().expect("an edge").tls = Some(seatfence_api::config::EdgeTls {
                    cert: edge.cert.expect("cert"),
                    key: edge.key.expect("key"),
                });
            }
        },
    )
    .await;
    let edge = env.edge(0);
    assert!(edge.starts_with("https://127.0.0.1:"), "{edge}");

    // The walk-through, trusting the CA.
    env.event("tls-show", &["A1", "A2"], 600).await;
    let alice = env.token("alice");
    let a = env
        .http
        .get(&format!("{edge}/v1/events/tls-show"), Some(&alice))
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    let hsts = a
        .headers
        .get("strict-transport-security")
        .map(|v| v.to_str().unwrap().to_string());
    assert_eq!(hsts.as_deref(), Some("max-age=31536000"));
    let hold = env.hold("alice", "tls-show", &["A1"]).await;
    let booking = env.book("alice", s(&hold["hold_id"])).await;
    let redirect = env.browser(s(&booking["approve_url"]), true).await;
    assert!(
        redirect.starts_with("https://127.0.0.1:"),
        "the callback is HTTPS: {redirect}"
    );
    assert_eq!(env.get(&redirect).await.body["status"], "confirmed");
    // The second booking is confirmed by the gateway's webhook alone (the
    // browser never comes back; the capture happens at the gateway), which
    // the gateway sends to the edge's HTTPS public URL.
    let hold = env.hold("bob", "tls-show", &["A2"]).await;
    let booking = env.book("bob", s(&hold["hold_id"])).await;
    env.browser(s(&booking["approve_url"]), true).await;
    let (status, _) = env
        .execute_at_gateway(s(&booking["payment_id"]), "1.0")
        .await;
    assert_eq!(status, 200);
    let got = env
        .wait_status("bob", s(&booking["booking_id"]), "confirmed")
        .await;
    assert_eq!(got["confirmed_via"], "webhook", "{got}");

    // Plain HTTP to the HTTPS port: no answer, the connection is closed.
    let plain = edge.replacen("https://", "http://", 1);
    let refused = env.http.get(&format!("{plain}/readyz"), None).await;
    assert!(
        refused.is_err(),
        "plain HTTP answered: {:?}",
        refused.map(|a| a.status)
    );
    assert!(
        env.metric("seatfence_http_tls_handshake_failures_total")
            .await
            >= 1.0
    );

    // A client that does not trust the cluster CA refuses the certificate.
    let stranger = seatfence_testkit::http_client::HttpClient::default();
    let e = stranger
        .get(&format!("{edge}/readyz"), None)
        .await
        .expect_err("untrusted CA");
    assert!(
        format!("{e:#}").to_lowercase().contains("certificate"),
        "{e:#}"
    );
    // The certificate is for 127.0.0.1: dialled as `localhost`, a client
    // trusting the CA refuses it too.
    let by_name = edge.replacen("127.0.0.1", "localhost", 1);
    let e = env
        .http
        .get(&format!("{by_name}/readyz"), None)
        .await
        .expect_err("another name");
    assert!(
        format!("{e:#}").to_lowercase().contains("certificate"),
        "{e:#}"
    );
}
