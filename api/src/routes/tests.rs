//! The route table's tests: matching, labels, and the OpenAPI document.

use super::*;

/// docs/openapi.json lists exactly the routes the router serves, each
/// under its `Route` name as operationId (the links use them).
#[test]
fn openapi_document_matches_the_table() {
    let text = include_str!("../../../docs/openapi.json");
    let doc: Value = serde_json::from_str(text).expect("openapi.json parses");
    let mut documented = Vec::new();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().expect("operations") {
            let id = op["operationId"].as_str().unwrap_or("?").to_string();
            documented.push((method.clone(), path.clone(), id));
        }
    }
    documented.sort();
    let mut served: Vec<(String, String, String)> = ROUTES
        .iter()
        .map(|d| {
            let id = format!("{:?}", d.route);
            (d.method.as_str().to_lowercase(), d.path.to_string(), id)
        })
        .collect();
    served.sort();
    assert_eq!(documented, served);
}

#[test]
fn every_label_is_a_metric_label() {
    for d in ROUTES {
        assert!(crate::metrics::LABELS.contains(&d.label), "{d:?}");
    }
}

#[test]
fn requests_match_by_path_then_method() {
    match find(&Method::DELETE, "/v1/holds/h1-2") {
        Matched::Route(d) => {
            assert_eq!(d.route, Route::CancelHold);
            assert_eq!(params(d, "/v1/holds/h1-2"), ["h1-2"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        find(&Method::PUT, "/v1/holds/h1"),
        Matched::WrongMethod
    ));
    assert_eq!(allowed("/v1/holds/h1"), "DELETE, GET");
    assert!(matches!(find(&Method::GET, "/v1/nope"), Matched::NoRoute));
    assert!(matches!(
        find(&Method::GET, "/v1/holds/a/b"),
        Matched::NoRoute
    ));
    assert_eq!(
        find(&Method::GET, "/v1/events/e/availability").label(),
        "availability"
    );
    assert_eq!(find(&Method::GET, "/elsewhere").label(), "other");
}

#[test]
fn audit_targets_read_params_and_body() {
    let path = "/v1/admin/groups/7/transfer-leader";
    let Matched::Route(d) = find(&Method::POST, path) else {
        panic!("transfer-leader is a route")
    };
    let p = params(d, path);
    let a = d.audit.expect("audited");
    assert_eq!(a.target(d, &p, br#"{"to": 3}"#), "group 7 to node 3");
    assert_eq!(a.target(d, &p, b"not json"), "group 7 to node ?");
    let Matched::Route(d) = find(&Method::POST, "/v1/events") else {
        panic!("create is a route")
    };
    let p = params(d, "/v1/events");
    let a = d.audit.expect("audited");
    assert_eq!(a.target(d, &p, br#"{"event_id":"gig"}"#), "event gig");
    let long = format!(r#"{{"event_id":"{}"}}"#, "x".repeat(5000));
    let target = a.target(d, &p, long.as_bytes());
    assert_eq!(target.len(), "event ".len() + MAX_TARGET_VALUE, "bounded");
    // A refund's reason is in its target, control characters blanked.
    let path = "/v1/admin/bookings/b1-2/refund";
    let Matched::Route(d) = find(&Method::POST, path) else {
        panic!("refund is a route")
    };
    let p = params(d, path);
    let a = d.audit.expect("audited");
    assert_eq!(
        a.target(d, &p, "{\"reason\":\"sold\\n\\u001b[2Kok\"}".as_bytes()),
        "booking b1-2, reason sold  [2Kok"
    );
    assert!(ROUTES
        .iter()
        .filter(|d| d.audit.is_some())
        .all(|d| d.method == Method::POST));
}

/// The gate: every audited action is an operator's, buyers' mutations need
/// a token, and only the probes, the console and the gateway's routes are
/// open to anyone; every body limit is the small one but an event's
/// creation (its seat map) and the gateway's webhook.
#[test]
fn the_gate_knows_every_route_from_its_head() {
    let anyone: Vec<Route> = ROUTES
        .iter()
        .filter(|d| d.who() == Who::Anyone)
        .map(|d| d.route)
        .collect();
    assert_eq!(
        anyone,
        [
            Route::Healthz,
            Route::Readyz,
            Route::Metrics,
            Route::Console,
            Route::ConsoleAsset,
            Route::PaymentCallback,
            Route::PaymentWebhook
        ]
    );
    for d in ROUTES {
        if d.audit.is_some() || d.path.starts_with("/v1/admin/") {
            assert_eq!(d.who(), Who::Operator, "{d:?}");
        }
        if d.admitted {
            assert_eq!(d.who(), Who::Token, "{d:?}");
        }
        assert!(d.body_limit() <= crate::message::MAX_BODY_BYTES, "{d:?}");
        if d.method == Method::GET || d.method == Method::DELETE {
            assert_eq!(d.body_limit(), BODY_LIMIT, "{d:?}");
        }
    }
    let limit = |m: Method, path: &str| match find(&m, path) {
        Matched::Route(d) => d.body_limit(),
        other => panic!("{other:?}"),
    };
    assert_eq!(limit(Method::POST, "/v1/holds"), BODY_LIMIT);
    assert_eq!(limit(Method::POST, "/v1/bookings"), BODY_LIMIT);
    assert_eq!(
        limit(Method::POST, "/v1/events"),
        crate::message::MAX_BODY_BYTES
    );
}
