//! The client's retry rules against scripted edges (a raw HTTP/1.1
//! server on 127.0.0.1 answering from a list): a 429 waits its
//! `Retry-After` and the retry carries the same Idempotency-Key; a 409 is
//! never retried; `no_leader` moves the call to another region's edge.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seatfence_client::{Client, ClientError, ErrorCode, HoldRequest, RetryPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One scripted answer: status, extra headers, body.
type Scripted = (u16, Vec<(&'static str, String)>, String);

/// What a scripted edge saw: each request's first line and its
/// Idempotency-Key.
#[derive(Default)]
struct Seen {
    requests: Vec<(String, Option<String>)>,
}

/// An edge answering `script` in order (the last answer repeats).
async fn scripted_edge(script: Vec<Scripted>) -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let log = seen.clone();
    tokio::spawn(async move {
        let mut n = 0usize;
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Headers, then the body Content-Length says.
            let head_end = loop {
                let Ok(k) = sock.read(&mut chunk).await else {
                    break None;
                };
                if k == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..k]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(i + 4);
                }
            };
            let Some(head_end) = head_end else { continue };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let header = |name: &str| {
                head.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                })
            };
            let len: usize = header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while buf.len() < head_end + len {
                match sock.read(&mut chunk).await {
                    Ok(k) if k > 0 => buf.extend_from_slice(&chunk[..k]),
                    _ => break,
                }
            }
            let first = head.lines().next().unwrap_or_default().to_string();
            log.lock()
                .unwrap()
                .requests
                .push((first, header("idempotency-key")));
            let (status, headers, body) = script[n.min(script.len() - 1)].clone();
            n += 1;
            let mut out = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            out.push_str("\r\n");
            out.push_str(&body);
            let _ = sock.write_all(out.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
    });
    (url, seen)
}

fn error(code: &str) -> String {
    format!(r#"{{"error":{{"code":"{code}","message":"scripted"}}}}"#)
}

const HELD: &str = r#"{"hold_id":"h3-1","event_id":"e","seats":["A1"],"status":"held"}"#;

fn client(edges: &[(&str, &str)]) -> Client {
    let edges: BTreeMap<String, String> = edges
        .iter()
        .map(|(r, u)| (r.to_string(), u.to_string()))
        .collect();
    Client::new("us-east", edges, "token").with_policy(RetryPolicy {
        deadline: Duration::from_secs(30),
        ..RetryPolicy::default()
    })
}

#[tokio::test]
async fn a_429_waits_its_retry_after_and_the_retry_is_the_same_call() {
    let (url, seen) = scripted_edge(vec![
        (
            429,
            vec![("retry-after", "1".into())],
            error("rate_limited"),
        ),
        (201, vec![("x-seatfence-epoch", "1".into())], HELD.into()),
    ])
    .await;
    let c = client(&[("us-east", &url)]);
    let start = Instant::now();
    let a = c.hold(&HoldRequest::seats("e", &["A1"])).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "waited Retry-After"
    );
    assert_eq!((a.status, a.attempts), (201, 2));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.requests.len(), 2);
    let keys: Vec<_> = seen.requests.iter().map(|(_, k)| k.clone()).collect();
    assert!(keys[0].is_some());
    assert_eq!(keys[0], keys[1], "one key across the attempts");
}

#[tokio::test]
async fn a_409_is_answered_at_once() {
    let (url, seen) = scripted_edge(vec![(409, vec![], error("seats_unavailable"))]).await;
    let c = client(&[("us-east", &url)]);
    match c.hold(&HoldRequest::seats("e", &["A1"])).await {
        Err(ClientError::Api {
            status: 409,
            code: ErrorCode::SeatsUnavailable,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(seen.lock().unwrap().requests.len(), 1, "never retried");
}

#[tokio::test]
async fn no_leader_moves_the_call_to_the_next_region() {
    let (home, home_seen) = scripted_edge(vec![(503, vec![], error("no_leader"))]).await;
    let (other, _) = scripted_edge(vec![(201, vec![], HELD.into())]).await;
    let c = client(&[("us-east", &home), ("eu-west", &other)]);
    let a = c.hold(&HoldRequest::seats("e", &["A1"])).await.unwrap();
    assert_eq!((a.region.as_str(), a.attempts), ("eu-west", 2));
    // The home edge is passed over for a while: the next call starts elsewhere.
    let b = c.event("e").await.unwrap();
    assert_eq!((b.region.as_str(), b.attempts), ("eu-west", 1));
    assert_eq!(home_seen.lock().unwrap().requests.len(), 1);
}

#[tokio::test]
async fn a_leader_hint_to_an_edge_the_client_was_not_given_is_not_followed() {
    let (url, seen) = scripted_edge(vec![(
        200,
        vec![("x-seatfence-leader-edge", "http://attacker.example".into())],
        r#"{"event_id":"e"}"#.into(),
    )])
    .await;
    let c = client(&[("us-east", &url)]);
    c.event("e").await.unwrap();
    c.event("e").await.unwrap();
    assert_eq!(seen.lock().unwrap().requests.len(), 2, "both asked here");
    let refused = c
        .stats()
        .refused_hints
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(refused, 2);
}
