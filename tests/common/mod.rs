//! Helpers shared by the integration tests: a real cluster of node
//! processes on 127.0.0.1, and polling with generous bounds (to avoid hangs,
//! never to assert speed).

#![allow(dead_code)]

pub mod backup;
pub mod moves;
pub mod payments;
pub mod raw_http;

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use seatfence_core::{GroupId, Placement};
use seatfence_node::create_group;
use seatfence_raft::RaftTuning;
use seatfence_testkit::cluster::LocalCluster;

pub const PATIENCE: Duration = Duration::from_secs(60);

/// Held by a cluster test for its whole run, so the tests of one test
/// binary (each scenario its own `#[test]`, each starting its own
/// processes) run one at a time under `cargo test` as they do under
/// nextest (`.config/nextest.toml`): two clusters at once on two cores
/// starve each other's elections.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Raft timing for tests: the defaults (100 ms heartbeats). Faster
/// heartbeats make 100 idle groups cost more CPU than two cores have.
pub fn test_tuning() -> RaftTuning {
    RaftTuning::default()
}

pub async fn start(dir: &Path, tuning: RaftTuning) -> LocalCluster {
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let cluster = LocalCluster::builder(dir)
        .tuning(tuning)
        .start(bin)
        .expect("start cluster");
    if let Err(e) = cluster.wait_ready(PATIENCE).await {
        panic!("{e}\n{}", all_tails(&cluster));
    }
    cluster
}

/// The end of every node's log, each under its id.
pub fn all_tails(cluster: &LocalCluster) -> String {
    let tails: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("--- node {}:\n{}", n.id(), cluster.log_tail(n.id())))
        .collect();
    tails.join("\n")
}

pub async fn new_group(cluster: &LocalCluster) -> GroupId {
    let (g, members) = create_group(&cluster.client(), None, Placement::Spread { replicas: 3 })
        .await
        .expect("create group");
    assert_eq!(members.len(), 3);
    g
}

/// Poll `check` until it returns `Some`, or panic with `what` after PATIENCE.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("gave up waiting: {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Write `key` = `value` in `group` and wait for the commit.
pub async fn put(client: &seatfence_raft::ClusterClient, group: GroupId, key: &str, value: &[u8]) {
    let cmd = seatfence_core::Command::Put {
        key: key.to_string(),
        value: value.to_vec(),
    };
    client
        .write(group, &cmd)
        .await
        .unwrap_or_else(|e| panic!("put {key} in {group}: {e}"));
}

/// Every key must be readable with its value on the replica at `addr`.
pub async fn assert_keys_on(
    cluster: &LocalCluster,
    addr: &str,
    group: GroupId,
    keys: &[(String, Vec<u8>)],
) {
    let client = cluster.client();
    for (k, v) in keys {
        let found = eventually(&format!("{k} on {addr}"), || async {
            match client.read_at(addr, group, k).await {
                Ok(r) if r.found => Some(r.value),
                _ => None,
            }
        })
        .await;
        assert_eq!(&found, v, "key {k} on {addr}");
    }
}

/// A cluster of `regions × per_region` nodes, every node an HTTP edge.
pub async fn start_regions(dir: &Path, regions: usize, per_region: usize) -> LocalCluster {
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let cluster = LocalCluster::builder(dir)
        .regions(regions, per_region)
        .tuning(test_tuning())
        .start(bin)
        .expect("start cluster");
    if let Err(e) = cluster.wait_ready(PATIENCE).await {
        panic!("{e}\n{}", all_tails(&cluster));
    }
    cluster
}

/// A bearer token for `user`, signed with the cluster's secret.
pub fn token(cluster: &LocalCluster, user: &str, operator: bool) -> String {
    seatfence_api::auth::mint(&cluster.jwt_secret().expect("edges"), user, operator, 3600)
}

/// Create an event through `edge` as an operator; returns the 201 body.
pub async fn create_event(
    cluster: &LocalCluster,
    edge: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    // HTTPS edges carry certificates of the cluster's CA.
    let http = match cluster.edge_ca() {
        Some(ca) => seatfence_testkit::http_client::HttpClient::trusting(&ca).expect("the CA"),
        None => seatfence_testkit::http_client::HttpClient::default(),
    };
    let op = token(cluster, "ops", true);
    let a = http
        .post(&format!("{edge}/v1/events"), Some(&op), None, &body)
        .await
        .expect("create event");
    assert_eq!(a.status.as_u16(), 201, "create event: {}", a.body);
    a.body
}

/// `unix_ms` as RFC 3339 in UTC, to the second.
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Now, in ms since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
