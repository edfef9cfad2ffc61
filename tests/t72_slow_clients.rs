//! Slow and greedy HTTP clients cannot hold an edge's connections: a body
//! that stops arriving gets 408 `request_timeout`, headers that stop
//! arriving and idle keep-alive connections are closed, and connections
//! beyond `max_connections` are closed on accept. Each shows in /metrics.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use seatfence_testkit::LocalCluster;

const MAX_CONNECTIONS: usize = 8;

/// Read until the server closes the connection (or a generous bound, so a
/// broken server fails the test instead of hanging it): what it sent.
fn read_to_close(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return String::from_utf8_lossy(&out).into_owned(),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return String::from_utf8_lossy(&out).into_owned()
            }
            Err(e) => panic!("the edge kept the connection open: {e}"),
        }
    }
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.strip_prefix(series).is_some_and(|r| r.starts_with(' ')))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t72_slow_clients_are_cut_off_and_connections_are_bounded() {
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let mut configs = LocalCluster::builder(dir.path())
        .tuning(test_tuning())
        .layout()
        .unwrap();
    for (_, c) in &mut configs {
        let e = c.edge.as_mut().unwrap();
        e.header_timeout_ms = 1_000;
        e.body_timeout_ms = 1_000;
        e.idle_timeout_ms = 1_500;
        e.max_connections = MAX_CONNECTIONS;
    }
    let cluster = LocalCluster::launch(bin, configs, |_| None).unwrap();
    cluster.wait_ready(PATIENCE).await.unwrap();
    let url = cluster.nodes[0].edge_url().unwrap();
    let addr = url.trim_start_matches("http://").to_string();
    let addr2 = addr.clone();
    let op = token(&cluster, "ops", true);

    let (body, header, idle) = tokio::task::spawn_blocking(move || {
        tracing::info!("--- a body that stops after 10 of its 100 bytes: 408, closed");
        let mut slow_body = TcpStream::connect(&addr).unwrap();
        write!(
            slow_body,
            "POST /v1/holds HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer {op}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"event_i"
        )
        .unwrap();
        let body = read_to_close(&mut slow_body);

        tracing::info!("--- headers that stop arriving: closed");
        let mut slow_header = TcpStream::connect(&addr).unwrap();
        write!(slow_header, "GET /healthz HTTP/1.1\r\nHost: ed").unwrap();
        let header = read_to_close(&mut slow_header);

        tracing::info!("--- an idle keep-alive connection: closed after its request");
        let mut idle = TcpStream::connect(&addr).unwrap();
        write!(idle, "GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n").unwrap();
        let idle = read_to_close(&mut idle);
        (body, header, idle)
    })
    .await
    .unwrap();
    assert!(body.starts_with("HTTP/1.1 408"), "{body}");
    assert!(body.contains("request_timeout"), "{body}");
    assert!(header.is_empty(), "no answer to half a request: {header}");
    assert!(
        idle.starts_with("HTTP/1.1 200"),
        "the request itself is served: {idle}"
    );

    tracing::info!("--- more connections than max_connections: the extra ones are closed");
    tokio::task::spawn_blocking(move || {
        let held: Vec<TcpStream> = (0..MAX_CONNECTIONS + 4)
            .map(|_| TcpStream::connect(&addr2).unwrap())
            .collect();
        // Every one is closed by the edge: the extra ones on accept, the
        // rest by the header timeout.
        for mut s in held {
            read_to_close(&mut s);
        }
    })
    .await
    .unwrap();

    let http = reqwest::Client::new();
    let text = eventually("the metrics of every cut-off", || async {
        let text = http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let ok = metric(&text, "seatfence_http_timeouts_total{kind=\"body\"}") >= 1.0
            && metric(&text, "seatfence_http_timeouts_total{kind=\"header\"}") >= 1.0
            && metric(&text, "seatfence_http_timeouts_total{kind=\"idle\"}") >= 1.0
            && metric(&text, "seatfence_http_connections_refused_total") >= 4.0;
        ok.then_some(text)
    })
    .await;
    assert!(
        metric(&text, "seatfence_http_connections") >= 1.0,
        "this scrape's own"
    );
}
