//! Slow and greedy HTTP clients cannot hold an edge's connections: a body
//! that stops arriving gets 408 `request_timeout`, a declared oversize one
//! 413 within the same timeout, headers that stop arriving and idle
//! keep-alive connections are closed, and connections beyond
//! `max_connections`, or beyond `max_connections_per_ip` from one address,
//! are closed on accept. Each shows in /metrics.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::raw_http::*;
use common::*;
use seatfence_testkit::http_client::HttpClient;
use serde_json::json;

const MAX_CONNECTIONS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t72_slow_clients_are_cut_off_and_connections_are_bounded() {
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = edge_cluster(dir.path(), |e| {
        e.header_timeout_ms = 1_000;
        e.body_timeout_ms = 1_000;
        e.idle_timeout_ms = 1_500;
        e.max_connections = MAX_CONNECTIONS;
        // The edge's own bound is tested here, not the per-address one.
        e.max_connections_per_ip = Some(MAX_CONNECTIONS);
    })
    .await;
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

/// Issue 39: a request declaring a body between the 1 MiB limit and the
/// drain limit that then sent nothing was drained with no deadline, before
/// auth and admission: such connections stayed open for good, and
/// `max_connections` of them shut every buyer out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t72_declared_oversize_bodies_that_never_come_are_closed_within_the_body_timeout() {
    const STUCK: usize = 500;
    const BODY_TIMEOUT: Duration = Duration::from_secs(3);
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = edge_cluster(dir.path(), |e| {
        e.body_timeout_ms = BODY_TIMEOUT.as_millis() as u64;
        // Room for them all and the buyer from one address.
        e.max_connections = 4 * STUCK;
        e.max_connections_per_ip = Some(4 * STUCK);
    })
    .await;
    let url = cluster.nodes[0].edge_url().unwrap();
    let addr = url.trim_start_matches("http://").to_string();
    create_event(
        &cluster,
        &url,
        json!({"event_id": "slow", "name": "Slow", "home_region": "us-east",
               "survival": "region", "seats": ["A-1-1", "A-1-2"]}),
    )
    .await;

    tracing::info!("--- {STUCK} buyers declare a 2 MiB body, then send nothing");
    // Buyers with tokens (a stranger's is refused before its body, below),
    // each their own, so no one's rate refuses them first.
    let tokens: Vec<String> = (0..STUCK)
        .map(|i| token(&cluster, &format!("stuck-{i}"), false))
        .collect();
    let started = Instant::now();
    let stuck = tokio::task::spawn_blocking(move || {
        tokens
            .iter()
            .map(|t| {
                let mut s = TcpStream::connect(&addr).unwrap();
                write!(
                    s,
                    "POST /v1/holds HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer {t}\r\n\
                     Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    2 << 20
                )
                .unwrap();
                s
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();

    tracing::info!("--- meanwhile a buyer holds a seat");
    let http = HttpClient::default();
    let hold = http
        .post(
            &format!("{url}/v1/holds"),
            Some(&token(&cluster, "buyer", false)),
            None,
            &json!({"event_id": "slow", "seats": ["A-1-1"]}),
        )
        .await
        .unwrap();
    assert_eq!(hold.status.as_u16(), 201, "{}", hold.body);

    tracing::info!("--- every one of them is answered 413 and closed");
    let answers = tokio::task::spawn_blocking(move || {
        stuck
            .into_iter()
            .map(|mut s| read_to_close(&mut s))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let took = started.elapsed();
    for a in &answers {
        assert!(a.starts_with("HTTP/1.1 413"), "{a}");
        assert!(a.contains("payload_too_large"), "{a}");
    }
    // Generous: the bound is that they close at all, not how fast.
    assert!(
        took < BODY_TIMEOUT + Duration::from_secs(40),
        "closed after {took:?}"
    );
    eventually("the body timeouts in /metrics", || async {
        let text = scrape(&url).await?;
        (metric(&text, "seatfence_http_timeouts_total{kind=\"body\"}") >= STUCK as f64)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t72_connections_beyond_the_per_address_limit_are_refused_on_accept() {
    const PER_IP: usize = 4;
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = edge_cluster(dir.path(), |e| {
        e.max_connections_per_ip = Some(PER_IP);
        // No timer closes a held connection during the test.
        e.header_timeout_ms = 120_000;
        e.idle_timeout_ms = 120_000;
    })
    .await;
    let url = cluster.nodes[0].edge_url().unwrap();
    let addr = url.trim_start_matches("http://").to_string();

    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let (addr2, addr3) = (addr.clone(), addr.clone());
    tracing::info!("--- {PER_IP} connections from 127.0.0.1, the last one served");
    // The harness's own readiness polls came from 127.0.0.1 too: until the
    // edge has seen them close, they count, so try again until they have.
    let held = eventually("the last of the address's connections served", || {
        let addr = addr.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let mut held: Vec<TcpStream> = (0..PER_IP - 1)
                    .map(|_| TcpStream::connect(&addr).unwrap())
                    .collect();
                let mut last = TcpStream::connect(&addr).unwrap();
                write!(last, "GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n").ok()?;
                let served = read_answer(&mut last)?;
                assert!(served.starts_with("HTTP/1.1 200"), "{served}");
                held.push(last);
                Some(held)
            })
            .await
            .unwrap()
        }
    })
    .await;

    tracing::info!("--- more from 127.0.0.1: closed unanswered");
    let refused = tokio::task::spawn_blocking(move || {
        (0..3)
            .map(|_| healthz_then_close(&mut TcpStream::connect(&addr2).unwrap()))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for r in &refused {
        assert!(r.is_empty(), "a connection over the limit was served: {r}");
    }

    tracing::info!("--- another address is served meanwhile");
    let other = other
        .connect(addr3.parse().unwrap())
        .await
        .unwrap()
        .into_std()
        .unwrap();
    let from_other = tokio::task::spawn_blocking(move || {
        let mut other = other;
        other.set_nonblocking(false).unwrap();
        healthz_then_close(&mut other)
    })
    .await
    .unwrap();
    assert!(from_other.starts_with("HTTP/1.1 200"), "{from_other}");

    tracing::info!("--- the held ones close: 127.0.0.1 is served again, refusals counted");
    drop(held);
    eventually("the per-address refusals in /metrics", || async {
        let text = scrape(&url).await?;
        (metric(&text, "seatfence_http_connections_refused_per_ip_total") >= 3.0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t72_anonymous_routes_from_one_address_beyond_its_rate_are_429() {
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = edge_cluster(dir.path(), |e| e.anonymous_rate_per_ip = 2).await;
    let url = cluster.nodes[0].edge_url().unwrap();
    let addr = url.trim_start_matches("http://").to_string();

    tracing::info!("--- 100 probes from 127.0.0.1 at a rate of 2/s (burst 4): most are 429");
    let addr2 = addr.clone();
    let answers = tokio::task::spawn_blocking(move || {
        (0..100)
            .map(|_| healthz_then_close(&mut TcpStream::connect(&addr2).unwrap()))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let limited = answers
        .iter()
        .filter(|a| a.starts_with("HTTP/1.1 429") && a.contains("rate_limited"))
        .count();
    // However slow this machine, 100 probes outrun 2 a second plus 4.
    assert!(
        limited >= 50,
        "{limited} of 100 refused: {:?}",
        answers.last()
    );

    tracing::info!("--- another address is served meanwhile");
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let other = other
        .connect(addr.parse().unwrap())
        .await
        .unwrap()
        .into_std()
        .unwrap();
    let from_other = tokio::task::spawn_blocking(move || {
        let mut other = other;
        other.set_nonblocking(false).unwrap();
        healthz_then_close(&mut other)
    })
    .await
    .unwrap();
    assert!(from_other.starts_with("HTTP/1.1 200"), "{from_other}");
    eventually("the refusals in /metrics", || async {
        let text = scrape(&url).await?;
        (metric(
            &text,
            "seatfence_admission_rejections_total{reason=\"anonymous_rate\"}",
        ) >= 50.0)
            .then_some(())
    })
    .await;
}
