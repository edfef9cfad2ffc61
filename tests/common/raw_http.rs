//! Raw HTTP against an edge, for the tests of slow, greedy and hostile
//! clients: a cluster with its edges set as the test needs, answers read
//! off a socket, and /metrics read by series.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use seatfence_api::config::EdgeConfig;
use seatfence_testkit::LocalCluster;

use super::*;

/// A three-node cluster (one per region) whose edges are set by `adjust`.
pub async fn edge_cluster(dir: &Path, adjust: impl Fn(&mut EdgeConfig)) -> LocalCluster {
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let mut configs = LocalCluster::builder(dir)
        .tuning(test_tuning())
        .layout()
        .unwrap();
    for (_, c) in &mut configs {
        adjust(c.edge.as_mut().unwrap());
    }
    let cluster = LocalCluster::launch(bin, configs, |_| None).unwrap();
    cluster.wait_ready(PATIENCE).await.unwrap();
    cluster
}

/// One whole answer read from `s`; `None` if the edge closed or reset it
/// first.
pub fn read_answer(s: &mut TcpStream) -> Option<String> {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&out).into_owned();
        if let Some(head) = text.find("\r\n\r\n") {
            let length = text[..head]
                .lines()
                .find_map(|l| {
                    let l = l.to_ascii_lowercase();
                    l.strip_prefix("content-length:")
                        .and_then(|v| v.trim().parse::<usize>().ok())
                })
                .unwrap_or(0);
            if out.len() >= head + 4 + length {
                return Some(text);
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return (!text.is_empty()).then_some(text),
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// `GET /healthz` on `s`, asking the edge to close afterwards: what it
/// sent before closing (nothing, if it refused the connection).
pub fn healthz_then_close(s: &mut TcpStream) -> String {
    // A refused connection may be closed before the request is written.
    let _ = write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n"
    );
    read_to_close(s)
}

pub async fn scrape(url: &str) -> Option<String> {
    reqwest::get(format!("{url}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()
}

/// Read until the server closes the connection (or a generous bound, so a
/// broken server fails the test instead of hanging it): what it sent.
pub fn read_to_close(s: &mut TcpStream) -> String {
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

pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.strip_prefix(series).is_some_and(|r| r.starts_with(' ')))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
