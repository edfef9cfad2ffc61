//! An edge keeps its memory (issue 59): a stranger is refused on the
//! request's head, before any byte of its body is read, so a thousand
//! connections declaring 1 MiB and sending all but the last byte cost the
//! node next to nothing while buyers hold seats; each route reads at most
//! its own limit; and the bodies every connection together holds are
//! bounded by `max_body_buffer_mb` (beyond it: 503 `edge_overloaded` with
//! `Retry-After`, never a wait with the bytes in memory).

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::raw_http::*;
use common::*;
use seatfence_testkit::http_client::HttpClient;
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// The node's resident memory now, in bytes (`VmRSS`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib << 10
}

/// `n` buyers' holds, one after another, each on its own seat from
/// `A-{from}` on: their latencies (every one must be granted).
async fn buyers_hold(
    cluster: &seatfence_testkit::LocalCluster,
    url: &str,
    from: usize,
    n: usize,
) -> Vec<Duration> {
    let http = HttpClient::default();
    let mut took = Vec::new();
    for i in from..from + n {
        let started = Instant::now();
        let a = http
            .post(
                &format!("{url}/v1/holds"),
                Some(&token(cluster, &format!("buyer-{i}"), false)),
                None,
                &json!({"event_id": "mem", "seats": [format!("A-{i}")]}),
            )
            .await
            .unwrap();
        assert_eq!(a.status.as_u16(), 201, "{}", a.body);
        took.push(started.elapsed());
    }
    took.sort();
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t72_strangers_declaring_big_bodies_cost_the_edge_no_memory() {
    const STRANGERS: usize = 1_000;
    const BODY: usize = 1 << 20;
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = edge_cluster(dir.path(), |e| {
        // Every stranger from 127.0.0.1 is let in: what is measured is what
        // their bodies cost, not the per-address cap (tested in t72_slow_clients).
        e.max_connections = 4 * STRANGERS;
        e.max_connections_per_ip = Some(4 * STRANGERS);
        // A body waited for would be waited for long.
        e.body_timeout_ms = 120_000;
    })
    .await;
    let url = cluster.nodes[0].edge_url().unwrap();
    let addr = url.trim_start_matches("http://").to_string();
    let pid = cluster.nodes[0].pid().unwrap();
    let seats: Vec<String> = (0..44).map(|i| format!("A-{i}")).collect();
    create_event(
        &cluster,
        &url,
        json!({"event_id": "mem", "name": "Memory", "home_region": "us-east",
               "survival": "region", "seats": seats}),
    )
    .await;
    buyers_hold(&cluster, &url, 0, 4).await;
    let before = rss(pid);

    tracing::info!(
        "--- {STRANGERS} connections with no token declare 1 MiB on POST /v1/holds and send all but its last byte"
    );
    static PAYLOAD: [u8; BODY] = [b' '; BODY];
    let head = format!(
        "POST /v1/holds HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n\
         Content-Length: {BODY}\r\n\r\n"
    );
    let mut attack = tokio::task::JoinSet::new();
    for _ in 0..STRANGERS {
        let (addr, head) = (addr.clone(), head.clone());
        attack.spawn(async move {
            let mut s = tokio::net::TcpStream::connect(&addr).await.ok()?;
            s.write_all(head.as_bytes()).await.ok()?;
            // The edge may answer and close at any point of the body.
            let _ =
                tokio::time::timeout(Duration::from_secs(20), s.write_all(&PAYLOAD[..BODY - 1]))
                    .await;
            Some(s)
        });
    }
    // The node's RSS sampled while it lasts: its peak is what counts.
    let peak = Arc::new(AtomicU64::new(before));
    let sampling = tokio::spawn({
        let peak = peak.clone();
        async move {
            loop {
                peak.fetch_max(rss(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });

    tracing::info!("--- meanwhile buyers hold seats");
    let took = buyers_hold(&cluster, &url, 4, 40).await;
    // Every stranger's connection is kept open on this side while measured.
    let mut held = Vec::new();
    while let Some(s) = attack.join_next().await {
        held.extend(s.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss(pid);
    sampling.abort();
    let peak = peak.load(Ordering::Relaxed).max(after);
    let grew = peak.saturating_sub(before) as f64 / f64::from(1 << 20);
    tracing::info!(
        "node RSS {} MiB before, {} MiB at its peak, {} MiB after {} connections \
         ({grew:.1} MiB more at the peak); \
         buyers' holds p50 {:?} p99 {:?}",
        before >> 20,
        peak >> 20,
        after >> 20,
        held.len(),
        took[took.len() / 2],
        took[took.len() * 99 / 100]
    );
    assert!(
        grew < 64.0,
        "the node's RSS grew {grew:.1} MiB for {STRANGERS} strangers' bodies"
    );
    drop(held);

    tracing::info!("--- a stranger declaring a body is answered 401 at once, not after the body");
    let (stranger, big) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        let buyer = token(&cluster, "big-buyer", false);
        move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            write!(s, "{head}").unwrap();
            let stranger = read_to_close(&mut s);
            // A buyer's hold over the route's limit: 413 whatever the token.
            let body = vec![b' '; seatfence_api::routes::BODY_LIMIT + 1];
            let mut s = TcpStream::connect(&addr).unwrap();
            write!(
                s,
                "POST /v1/holds HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer {buyer}\r\n\
                 Content-Length: {}\r\n\r\n",
                body.len()
            )
            .unwrap();
            s.write_all(&body).unwrap();
            (stranger, read_to_close(&mut s))
        }
    })
    .await
    .unwrap();
    assert!(stranger.starts_with("HTTP/1.1 401"), "{stranger}");
    assert!(stranger.contains("unauthorized"), "{stranger}");
    assert!(big.starts_with("HTTP/1.1 413"), "{big}");
    assert!(big.contains("payload_too_large"), "{big}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t72_bodies_beyond_the_edge_budget_are_503_until_room_is_back() {
    // A 1 MiB budget holds 64 chunked holds (each takes its route's 16 KiB
    // limit, declaring no length); more stall than that.
    const STALLED: usize = 80;
    let _serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = edge_cluster(dir.path(), |e| {
        e.max_body_buffer_mb = 1;
        e.body_timeout_ms = 20_000;
    })
    .await;
    let url = cluster.nodes[0].edge_url().unwrap();
    let addr = url.trim_start_matches("http://").to_string();
    let seats: Vec<String> = (0..8).map(|i| format!("A-{i}")).collect();
    create_event(
        &cluster,
        &url,
        json!({"event_id": "mem", "name": "Memory", "home_region": "us-east",
               "survival": "region", "seats": seats}),
    )
    .await;

    tracing::info!("--- {STALLED} buyers start chunked holds and send nothing of them");
    let tokens: Vec<String> = (0..STALLED)
        .map(|i| token(&cluster, &format!("stall-{i}"), false))
        .collect();
    let stalled = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || {
            tokens
                .iter()
                .map(|t| {
                    let mut s = TcpStream::connect(&addr).unwrap();
                    write!(
                        s,
                        "POST /v1/holds HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer {t}\r\n\
                         Transfer-Encoding: chunked\r\n\r\n"
                    )
                    .unwrap();
                    s
                })
                .collect::<Vec<_>>()
        }
    })
    .await
    .unwrap();

    eventually("the stalled bodies fill the budget", || async {
        let text = scrape(&url).await?;
        let held = metric(&text, "seatfence_http_body_bytes_held");
        (held > ((1 << 20) - seatfence_api::routes::BODY_LIMIT) as f64).then_some(())
    })
    .await;

    tracing::info!("--- one more buyer's hold: 503 edge_overloaded with Retry-After");
    let probe = token(&cluster, "probe", false);
    let body = json!({"event_id": "mem", "seats": ["A-0"]}).to_string();
    let refused = eventually("a hold refused for the body budget", || {
        let (addr, probe, body) = (addr.clone(), probe.clone(), body.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                write!(
                    s,
                    "POST /v1/holds HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer {probe}\r\n\
                     Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                    body.len()
                )
                .unwrap();
                let a = read_to_close(&mut s);
                a.starts_with("HTTP/1.1 503").then_some(a)
            })
            .await
            .unwrap()
        }
    })
    .await;
    assert!(refused.contains("edge_overloaded"), "{refused}");
    assert!(
        refused.to_ascii_lowercase().contains("retry-after: 1"),
        "{refused}"
    );
    let text = scrape(&url).await.unwrap();
    assert!(
        metric(
            &text,
            "seatfence_admission_rejections_total{reason=\"body_budget\"}"
        ) >= 1.0
    );

    tracing::info!("--- the stalled bodies run out of time (408 or 503): room is back");
    let answers = tokio::task::spawn_blocking(move || {
        stalled
            .into_iter()
            .map(|mut s| read_to_close(&mut s))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for a in &answers {
        assert!(
            a.starts_with("HTTP/1.1 408") || a.starts_with("HTTP/1.1 503"),
            "{a}"
        );
    }
    let timed_out = answers
        .iter()
        .filter(|a| a.contains("request_timeout"))
        .count();
    assert!(timed_out <= 64, "{timed_out} held room in a 1 MiB budget");
    let http = HttpClient::default();
    let hold = http
        .post(
            &format!("{url}/v1/holds"),
            Some(&token(&cluster, "after", false)),
            None,
            &json!({"event_id": "mem", "seats": ["A-1"]}),
        )
        .await
        .unwrap();
    assert_eq!(hold.status.as_u16(), 201, "{}", hold.body);
}
