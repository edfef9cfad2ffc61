//! Ownership that follows the buyers (issue 46): an event with
//! `follow_buyers` on stays put while its own region's buyers hold seats,
//! moves once (through the move path, audited as `follow-buyers`) when its
//! buyers shift to another region, and does not move again while they
//! stay there; one buyer cycling holds (hold, cancel, again) through
//! another region moves nothing, however many holds it is granted (issue
//! 59, item 9: the policy counts distinct buyers, not holds).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use seatfence_regions::config::MovesConfig;
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::LocalCluster;
use serde_json::{json, Value};

/// One window of the duty (ms): short, so the test sees several.
const WINDOW_MS: u64 = 1_500;

struct Buyers {
    stop: Arc<AtomicBool>,
    granted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// Buyers holding one seat at a time through `edge` until stopped.
fn buy_through(http: &HttpClient, edge: &str, secret: &str, who: &str) -> Buyers {
    let (stop, granted) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let task = tokio::spawn({
        let (http, edge, secret, who) = (
            http.clone(),
            edge.to_string(),
            secret.to_string(),
            who.to_string(),
        );
        let (stop, granted) = (stop.clone(), granted.clone());
        async move {
            for n in 0u64.. {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let token =
                    seatfence_api::auth::mint(&secret, &format!("{who}{}", n % 50), false, 3600);
                let a = http
                    .post(
                        &format!("{edge}/v1/holds"),
                        Some(&token),
                        Some(&format!("{who}-{n}")),
                        &json!({"event_id": "tour", "quantity": 1}),
                    )
                    .await;
                // A move pauses writes: a refused hold is tried again later.
                if a.is_ok_and(|a| a.status.as_u16() == 201) {
                    granted.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
        }
    });
    Buyers {
        stop,
        granted,
        task,
    }
}

impl Buyers {
    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        self.granted.load(Ordering::Relaxed)
    }
}

async fn moves_of(http: &HttpClient, edge: &str, op: &str) -> Vec<Value> {
    let a = http
        .get(&format!("{edge}/v1/admin/moves"), Some(op))
        .await
        .unwrap();
    a.body["moves"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["event_id"] == "tour")
        .cloned()
        .collect()
}

async fn owner(http: &HttpClient, edge: &str, op: &str) -> String {
    let a = http
        .get(&format!("{edge}/v1/events/tour?max_stale_ms=0"), Some(op))
        .await
        .unwrap();
    a.body["owner_region"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A cluster of three regions with the duty's window short, and the event
/// "tour" created in us-east with `follow_buyers` on.
struct Sale {
    _dir: tempfile::TempDir,
    _cluster: LocalCluster,
    secret: String,
    op: String,
    us: String,
    ap: String,
    http: HttpClient,
}

async fn sale() -> Sale {
    let dir = tempfile::tempdir().unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let moves = MovesConfig {
        balance_every_ms: 0,
        rebalance_parallel: 0,
        follow_window_ms: WINDOW_MS,
        follow_min_holds: 10,
        ..MovesConfig::default()
    };
    let cluster = LocalCluster::builder(dir.path())
        .regions(3, 3)
        .moves(moves)
        .start(bin)
        .unwrap();
    cluster.wait_ready(Duration::from_secs(90)).await.unwrap();
    let secret = cluster.jwt_secret().unwrap();
    let op = seatfence_api::auth::mint(&secret, "op", true, 3600);
    let edges = cluster.edges();
    let (us, ap) = (edges["us-east"].clone(), edges["ap-south"].clone());
    let http = HttpClient::default();
    let created = http
        .post(
            &format!("{us}/v1/events"),
            Some(&op),
            None,
            &json!({"event_id": "tour", "name": "Tour", "home_region": "us-east",
                    "follow_buyers": true, "hold_ttl_secs": 3600,
                    "sections": [{"name": "A", "rows": 50, "seats_per_row": 100}]}),
        )
        .await
        .unwrap();
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    assert_eq!(created.body["follow_buyers"], true);
    Sale {
        _dir: dir,
        _cluster: cluster,
        secret,
        op,
        us,
        ap,
        http,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_follows_its_buyers_once_and_stays() {
    let s = sale().await;
    let (secret, op, us, ap, http) = (
        s.secret.as_str(),
        s.op.as_str(),
        s.us.as_str(),
        s.ap.as_str(),
        &s.http,
    );

    // Its own region's buyers: four windows, no move.
    let home = buy_through(http, us, secret, "usb");
    tokio::time::sleep(Duration::from_millis(4 * WINDOW_MS)).await;
    let sold_home = home.stop().await;
    assert!(sold_home >= 20, "{sold_home} holds from us-east");
    assert!(
        moves_of(http, us, op).await.is_empty(),
        "no move while the owner's buyers buy"
    );

    // The buyers are in ap-south now: one move there.
    let far = buy_through(http, ap, secret, "apb");
    let started = Instant::now();
    while owner(http, us, op).await != "ap-south" {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "still owned by us-east; moves: {:?}",
            moves_of(http, us, op).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // They stay: four more windows, no second move.
    tokio::time::sleep(Duration::from_millis(4 * WINDOW_MS)).await;
    let sold_far = far.stop().await;
    assert!(sold_far >= 20, "{sold_far} holds from ap-south");
    let moves = moves_of(http, us, op).await;
    assert_eq!(moves.len(), 1, "{moves:#?}");
    assert_eq!(moves[0]["to_region"], "ap-south");
    assert_eq!(moves[0]["actor"], "follow-buyers");
    assert_eq!(moves[0]["state"], "done", "{:#}", moves[0]);
    assert_eq!(owner(http, us, op).await, "ap-south");
    // Audited like an operator's move.
    let audit = http
        .get(&format!("{us}/v1/admin/audit?limit=50"), Some(op))
        .await
        .unwrap();
    let entry = audit.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["actor"] == "follow-buyers")
        .cloned()
        .unwrap_or_default();
    assert_eq!(entry["action"], "move", "{:#}", audit.body);
    assert_eq!(entry["result"], "ok", "{entry:#}");
    assert!(
        entry["target"]
            .as_str()
            .unwrap()
            .contains("event tour to ap-south"),
        "{entry:#}"
    );

    // Turned off, then on again, by the operator (and audited).
    let off = http
        .post(
            &format!("{ap}/v1/admin/events/tour/follow-buyers"),
            Some(op),
            None,
            &json!({"enabled": false}),
        )
        .await
        .unwrap();
    assert_eq!(off.status.as_u16(), 200, "{}", off.body);
    assert_eq!(off.body["follow_buyers"], false);
    let bad = http
        .post(
            &format!("{ap}/v1/admin/events/tour/follow-buyers"),
            Some(op),
            None,
            &json!({"enabled": "yes"}),
        )
        .await
        .unwrap();
    assert_eq!(bad.status.as_u16(), 400, "{}", bad.body);
}

/// Send `req` again while the edge answers 429 (the buyer's rate limit),
/// after the `Retry-After` it names.
async fn unthrottled<F, Fut>(req: F) -> seatfence_testkit::http_client::HttpAnswer
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<seatfence_testkit::http_client::HttpAnswer>>,
{
    loop {
        let a = req().await.unwrap();
        if a.status.as_u16() != 429 {
            return a;
        }
        let secs: u64 = a.header("retry-after").parse().unwrap_or(1);
        tokio::time::sleep(Duration::from_millis(100).max(Duration::from_secs(secs) / 4)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_buyer_cycling_holds_moves_nothing() {
    let s = sale().await;
    let token = seatfence_api::auth::mint(&s.secret, "mallory", false, 3600);
    tracing::info!("--- one buyer: 600 holds granted and cancelled through ap-south");
    let started = Instant::now();
    let (holds, body) = (
        format!("{}/v1/holds", s.ap),
        json!({"event_id": "tour", "quantity": 1}),
    );
    for n in 0..600 {
        let key = format!("mallory-{n}");
        let held = unthrottled(|| s.http.post(&holds, Some(&token), Some(&key), &body)).await;
        assert_eq!(held.status.as_u16(), 201, "hold {n}: {}", held.body);
        let url = format!("{holds}/{}", held.body["hold_id"].as_str().unwrap());
        let cancelled = unthrottled(|| {
            s.http
                .send(hyper::Method::DELETE, &url, Some(&token), None, None)
        })
        .await;
        assert_eq!(
            cancelled.status.as_u16(),
            200,
            "cancel {n}: {}",
            cancelled.body
        );
    }
    let windows = started.elapsed().as_millis() as u64 / WINDOW_MS;
    // Enough granted holds a window, all from ap-south, to move the event
    // if holds were what counts (`follow_min_holds` is 10).
    assert!(
        600 / windows.max(1) >= 10,
        "600 holds over {windows} windows"
    );
    tracing::info!("--- two more windows for the duty to judge the last ones");
    tokio::time::sleep(Duration::from_millis(2 * WINDOW_MS + 500)).await;
    let moves = moves_of(&s.http, &s.us, &s.op).await;
    assert!(moves.is_empty(), "one buyer moved the event: {moves:#?}");
    assert_eq!(owner(&s.http, &s.us, &s.op).await, "us-east");
}
