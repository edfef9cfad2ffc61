//! Operator endpoints against real processes (3 regions × 1 node, an event
//! with one voter per region), one scenario per test: the cluster view,
//! leader transfer (caught-up voters only), and draining the event
//! leader's node while buyers keep holding seats.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use seatfence_testkit::http_client::HttpClient;
use serde_json::{json, Value};

fn ctl(edge: &str, token: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_seatfence"))
        .args(["ctl", "--edge", edge, "--token", token])
        .args(args)
        .output()
        .expect("run seatfence ctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn group(view: &Value, id: u64) -> &Value {
    view["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group_id"] == id)
        .unwrap_or_else(|| panic!("group {id} in {view}"))
}

fn leads(view: &Value, node: u64) -> Vec<u64> {
    view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == node)
        .unwrap()["leader_of"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect()
}

/// A 3 regions × 1 node cluster with the event `adm` (one voter per
/// region), and how an operator sees it.
struct Admin {
    cluster: seatfence_testkit::LocalCluster,
    edges: Vec<String>,
    edge: String,
    http: HttpClient,
    op: String,
    gid: u64,
    _dir: tempfile::TempDir,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Admin {
    async fn start() -> Admin {
        let serial = serial().await;
        init_logs();
        let dir = tempfile::tempdir().unwrap();
        let cluster = start_regions(dir.path(), 3, 1).await;
        let edges: Vec<String> = cluster.edges().into_values().collect();
        let edge = edges[0].clone();
        let op = token(&cluster, "ops", true);
        let created = create_event(
            &cluster,
            &edge,
            json!({"event_id": "adm", "name": "Admin", "home_region": "us-east", "survival": "region",
                   "sections": [{"name": "A", "rows": 100, "seats_per_row": 50}]}),
        )
        .await;
        let gid = created["group_id"].as_u64().unwrap();
        Admin {
            cluster,
            edges,
            edge,
            http: HttpClient::default(),
            op,
            gid,
            _dir: dir,
            _serial: serial,
        }
    }

    /// `GET /v1/admin/cluster` as the operator.
    async fn view(&self) -> Value {
        let a = self
            .http
            .get(&format!("{}/v1/admin/cluster", self.edge), Some(&self.op))
            .await
            .unwrap();
        assert_eq!(a.status.as_u16(), 200, "{}", a.body);
        a.body
    }

    /// The view once every replica of the event's group reports, with a
    /// leader.
    async fn settled_view(&self) -> Value {
        eventually("every replica reported with a leader", || async {
            let v = self.view().await;
            let g = group(&v, self.gid).clone();
            (!g["leader"].is_null() && g["replicas"].as_array().unwrap().len() == 3).then_some(v)
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t90_the_cluster_view_shows_regions_nodes_and_groups() {
    let w = Admin::start().await;
    let (cluster, edge, http, op, gid) = (&w.cluster, &w.edge, &w.http, &w.op, w.gid);
    tracing::info!(
        "--- the cluster view: regions, nodes, groups with leader, term, epoch, members, lag"
    );
    let view = w.settled_view().await;
    assert_eq!(view["regions"].as_array().unwrap().len(), 3);
    assert!(view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["reachable"] == true));
    let g = group(&view, gid);
    assert_eq!(
        (
            g["event_id"].clone(),
            g["epoch"].clone(),
            g["owner_region"].clone()
        ),
        (json!("adm"), json!(1), json!("us-east"))
    );
    assert_eq!(g["members"].as_array().unwrap().len(), 3);
    assert!(g["term"].as_u64().unwrap() >= 1);
    assert!(g["committed_index"].as_u64() >= Some(1), "{g}");
    assert!(
        g["holds_applied"].is_u64() && g["conflicts_applied"].is_u64(),
        "{g}"
    );
    let leader = g["leader"].as_u64().unwrap();
    let at_leader = g["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node_id"] == leader)
        .unwrap();
    assert_eq!(at_leader["committed_index"], g["committed_index"], "{g}");
    assert!(
        !group(&view, 0)["leader"].is_null(),
        "the directory has a leader"
    );
    let stranger = http
        .get(
            &format!("{edge}/v1/admin/cluster"),
            Some(&token(cluster, "eve", false)),
        )
        .await
        .unwrap();
    assert_eq!(stranger.status.as_u16(), 403);

    tracing::info!("--- the fleet's metrics: every node's, each sample naming its node");
    let fleet = http
        .get(&format!("{edge}/v1/admin/fleet/metrics"), Some(op))
        .await
        .unwrap();
    assert_eq!(fleet.status.as_u16(), 200, "{}", fleet.body);
    let text = fleet.body.as_str().expect("Prometheus text");
    for n in view["nodes"].as_array().unwrap() {
        let up = format!(
            "seatfence_fleet_node_up{{node=\"{}\",region=\"{}\"}} 1\n",
            n["node_id"],
            n["region"].as_str().unwrap()
        );
        assert!(text.contains(&up), "{up} missing");
        let series = format!(
            "seatfence_stale_epoch_rejections_total{{node=\"{}\",",
            n["node_id"]
        );
        assert!(text.contains(&series), "{series} missing");
    }
    assert_eq!(
        text.matches("# TYPE seatfence_stale_epoch_rejections_total ")
            .count(),
        1,
        "one family, described once"
    );
    let (ok, out) = ctl(edge, op, &["cluster"]);
    assert!(
        ok && out.contains("adm") && out.contains("(directory)"),
        "{out}"
    );

    tracing::info!("--- the console: page and modules under a strict CSP; ctl's sign-in link");
    let page = http.get(&format!("{edge}/console"), None).await.unwrap();
    assert_eq!(page.status.as_u16(), 200);
    assert!(page.header("content-type").starts_with("text/html"));
    let csp = page.header("content-security-policy");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert!(page.body.as_str().unwrap().contains("/console/console.js"));
    let js = http
        .get(&format!("{edge}/console/console.js"), None)
        .await
        .unwrap();
    assert_eq!(js.status.as_u16(), 200);
    assert!(js.header("content-type").starts_with("text/javascript"));
    assert_eq!(js.header("content-security-policy"), csp);
    let other = http
        .get(&format!("{edge}/console/README-console.md"), None)
        .await
        .unwrap();
    assert_eq!(
        (other.status.as_u16(), other.body["error"]["code"].clone()),
        (404, json!("not_found"))
    );
    let out = Command::new(env!("CARGO_BIN_EXE_seatfence"))
        .args(["ctl", "--edge", edge, "console", "--user", "alice"])
        .env("SEATFENCE_JWT_SECRET", cluster.jwt_secret().unwrap())
        .output()
        .expect("run seatfence ctl console");
    let link = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let jwt = link
        .strip_prefix(&format!("{edge}/console#token="))
        .unwrap_or_else(|| panic!("not a console link: {link:?}"));
    let signed_in = http
        .get(&format!("{edge}/v1/admin/cluster"), Some(jwt))
        .await
        .unwrap();
    assert_eq!(signed_in.status.as_u16(), 200, "{}", signed_in.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t90_leadership_goes_only_to_a_caught_up_voter() {
    let w = Admin::start().await;
    let (cluster, edge, http, op, gid) = (&w.cluster, &w.edge, &w.http, &w.op, w.gid);
    let view = w.settled_view().await;
    let g = group(&view, gid);
    tracing::info!("--- leader transfer: to a caught-up voter; refused for others");
    let leader = g["leader"].as_u64().unwrap();
    let to = (1..=3).find(|n| *n != leader).unwrap();
    let url = format!("{edge}/v1/admin/groups/{gid}/transfer-leader");
    let a = http
        .post(&url, Some(op), None, &json!({"to": to}))
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 200, "{}", a.body);
    assert_eq!(
        (a.body["leader"].clone(), a.body["previous_leader"].clone()),
        (json!(to), json!(leader))
    );
    assert_eq!(group(&w.view().await, gid)["leader"], to);
    let to_edge = cluster
        .nodes
        .iter()
        .find(|n| n.id() == to)
        .unwrap()
        .edge_url()
        .unwrap();
    let metrics = http
        .get(&format!("{to_edge}/metrics"), None)
        .await
        .unwrap()
        .body;
    let line = format!("seatfence_group_leader_changes_total{{group=\"{gid}\"}} ");
    assert!(
        metrics
            .as_str()
            .unwrap()
            .lines()
            .any(|l| l.starts_with(&line) && !l.ends_with(" 0")),
        "node {to} counts its leadership of group {gid}"
    );
    let a = http
        .post(&url, Some(op), None, &json!({"to": 99}))
        .await
        .unwrap();
    assert_eq!((a.status.as_u16(), a.code()), (409, Some("not_a_voter")));
    let a = http
        .post(&url, Some(op), None, &json!({"too": 1}))
        .await
        .unwrap();
    assert_eq!(a.code(), Some("unknown_field"));
    let a = http
        .post(
            &format!("{edge}/v1/admin/groups/999/transfer-leader"),
            Some(op),
            None,
            &json!({"to": 1}),
        )
        .await
        .unwrap();
    assert_eq!(
        (a.status.as_u16(), a.code()),
        (404, Some("group_not_found"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t90_a_drain_moves_every_leader_off_while_buyers_hold_seats() {
    let w = Admin::start().await;
    let (cluster, edges, edge, http, op, gid) =
        (&w.cluster, &w.edges, &w.edge, &w.http, &w.op, w.gid);
    let to = group(&w.settled_view().await, gid)["leader"]
        .as_u64()
        .unwrap();
    tracing::info!(
        "--- drain the event leader's node while buyers keep holding seats through every edge"
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (granted, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut buyers = Vec::new();
    for b in 0..6 {
        let (http, stop, granted, failed) =
            (http.clone(), stop.clone(), granted.clone(), failed.clone());
        let e = edges[b % edges.len()].clone();
        let tok = token(cluster, &format!("buyer{b}"), false);
        buyers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let a = http
                    .post(
                        &format!("{e}/v1/holds"),
                        Some(&tok),
                        None,
                        &json!({"event_id": "adm", "quantity": 1}),
                    )
                    .await;
                match a {
                    Ok(a) if a.status.as_u16() == 201 => granted.fetch_add(1, Ordering::Relaxed),
                    Ok(a) if a.status.as_u16() == 429 => 0,
                    other => {
                        tracing::warn!("hold during drain: {:?}", other.map(|a| a.body));
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
                tokio::time::sleep(std::time::Duration::from_millis(60)).await;
            }
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let before = granted.load(Ordering::Relaxed);
    let (ok, out) = ctl(edge, op, &["drain", &to.to_string(), "--json"]);
    assert!(ok, "{out}");
    let report: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(report["done"], true, "{report}");
    assert!(
        report["moved"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["group_id"] == gid),
        "{report}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for b in buyers {
        b.await.unwrap();
    }
    let after = granted.load(Ordering::Relaxed);
    assert!(
        after > before,
        "holds kept being granted through the drain ({before} → {after})"
    );
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "no hold failed during the drain"
    );
    let view = w.view().await;
    assert!(
        leads(&view, to).is_empty(),
        "node {to} still leads {:?}",
        leads(&view, to)
    );
    assert_ne!(group(&view, gid)["leader"], to);
    tokio::time::sleep(seatfence_api::AVAILABILITY_CACHE).await;
    let av = http
        .get(
            &format!("{edge}/v1/events/adm/availability?limit=0&max_stale_ms=0"),
            Some(op),
        )
        .await
        .unwrap();
    assert_eq!(
        av.body["held"].as_u64().unwrap(),
        after,
        "every granted hold is held, none twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t90_keyed_event_creates_and_moves_answer_once() {
    let a = Admin::start().await;
    let url = |path: &str| format!("{}{path}", a.edge);
    let spec = |id: &str| {
        json!({"event_id": id, "name": id, "home_region": "us-east", "survival": "region",
               "seats": ["S1", "S2"]})
    };
    tracing::info!("--- the same create twice under one key: one event, the first answer");
    let first = a
        .http
        .post(
            &url("/v1/events"),
            Some(&a.op),
            Some("create-k1"),
            &spec("kev"),
        )
        .await
        .unwrap();
    assert_eq!(first.status.as_u16(), 201, "{}", first.body);
    let again = a
        .http
        .post(
            &url("/v1/events"),
            Some(&a.op),
            Some("create-k1"),
            &spec("kev"),
        )
        .await
        .unwrap();
    assert_eq!((again.status, &again.body), (first.status, &first.body));
    tracing::info!("--- another body under the key: 422, nothing created");
    let other = a
        .http
        .post(
            &url("/v1/events"),
            Some(&a.op),
            Some("create-k1"),
            &spec("kev2"),
        )
        .await
        .unwrap();
    assert_eq!(
        (other.status.as_u16(), other.body["error"]["code"].clone()),
        (422, json!("idempotency_key_reused"))
    );
    let missing = a
        .http
        .get(&url("/v1/events/kev2"), Some(&a.op))
        .await
        .unwrap();
    assert_eq!(missing.status.as_u16(), 404, "{}", missing.body);

    tracing::info!("--- a move requested twice under one key: one move");
    let to = |region: &str| json!({"to_region": region});
    let m1 = a
        .http
        .post(
            &url("/v1/admin/events/kev/move"),
            Some(&a.op),
            Some("move-k1"),
            &to("eu-west"),
        )
        .await
        .unwrap();
    assert_eq!(m1.status.as_u16(), 202, "{}", m1.body);
    let m2 = a
        .http
        .post(
            &url("/v1/admin/events/kev/move"),
            Some(&a.op),
            Some("move-k1"),
            &to("eu-west"),
        )
        .await
        .unwrap();
    assert_eq!(
        (m2.status, &m2.body["move_id"]),
        (m1.status, &m1.body["move_id"])
    );
    let m3 = a
        .http
        .post(
            &url("/v1/admin/events/kev/move"),
            Some(&a.op),
            Some("move-k1"),
            &to("ap-south"),
        )
        .await
        .unwrap();
    assert_eq!(m3.status.as_u16(), 422, "{}", m3.body);
    let moves = a
        .http
        .get(&url("/v1/admin/moves"), Some(&a.op))
        .await
        .unwrap();
    let for_kev = moves.body["moves"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["event_id"] == "kev").count());
    assert_eq!(for_kev, Some(1), "{}", moves.body);
}
