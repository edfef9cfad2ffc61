//! The payments tests' world (`t85`): a real mock gateway process and real
//! nodes (1 region × 3 nodes, one edge each), and what a buyer, a browser,
//! the gateway and an operator do to them.

use std::path::Path;

use seatfence_api::config::PaymentsConfig;
use seatfence_testkit::http_client::{HttpAnswer, HttpClient};
use seatfence_testkit::{GatewayProc, LocalCluster};
use serde_json::{json, Value};

use super::*;

pub struct Env {
    pub cluster: LocalCluster,
    pub gateway: GatewayProc,
    pub http: HttpClient,
    pub raw: reqwest::Client,
}

impl Env {
    pub async fn start(dir: &Path) -> Env {
        Env::start_with(dir, |_| {}).await
    }

    /// Start with the payments config changed by `tweak` (after the
    /// tests' own timings).
    pub async fn start_with(dir: &Path, tweak: impl FnOnce(&mut PaymentsConfig)) -> Env {
        Env::start_nodes(dir, tweak, |_| {}).await
    }

    /// [`Env::start_with`], with the nodes' configs adjusted by `nodes`
    /// before they start (node `i + 1` is `configs[i]`).
    pub async fn start_nodes(
        dir: &Path,
        tweak: impl FnOnce(&mut PaymentsConfig),
        nodes: impl FnOnce(&mut Vec<(std::path::PathBuf, seatfence_node::NodeConfig)>),
    ) -> Env {
        let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
        // A CA made before the cluster (HTTPS edges) is the gateway's to trust.
        let ca = dir.join("certs/ca.pem");
        let trust = ca.exists().then(|| ca.clone());
        let gateway =
            GatewayProc::start_trusting(bin, &dir.join("gateway"), 50, "127.0.0.1", trust)
                .expect("start gateway");
        let mut p = gateway.payments_config();
        p.call_timeout_ms = 1_000;
        p.reconcile_interval_ms = 300;
        p.reconcile_margin_ms = 20_000;
        p.reconcile_budget_ms = 5_000;
        p.extension_ms = 1_000;
        p.outbox_interval_ms = 200;
        tweak(&mut p);
        let mut configs = LocalCluster::builder(dir)
            .regions(1, 3)
            .tuning(test_tuning())
            .payments(p)
            .layout()
            .expect("lay out the cluster");
        nodes(&mut configs);
        let cluster = LocalCluster::launch(bin, configs, |_| None).expect("start cluster");
        cluster.wait_ready(PATIENCE).await.expect("cluster ready");
        Env {
            cluster,
            gateway,
            http: HttpClient::trusting(&ca).expect("trust the cluster CA"),
            raw: trusting(&ca),
        }
    }

    /// The edge of the `i`th running node (wrapping around).
    pub fn edge(&self, i: usize) -> String {
        let live: Vec<String> = self
            .cluster
            .nodes
            .iter()
            .filter(|n| n.is_running())
            .filter_map(|n| n.edge_url())
            .collect();
        live[i % live.len()].clone()
    }

    pub fn token(&self, user: &str) -> String {
        token(&self.cluster, user, false)
    }

    pub async fn event(&self, id: &str, seats: &[&str], ttl_secs: u64) {
        create_event(
            &self.cluster,
            &self.edge(0),
            json!({"event_id": id, "name": id, "home_region": "us-east", "seats": seats,
                   "hold_ttl_secs": ttl_secs, "price_cents": 2500, "currency": "EUR"}),
        )
        .await;
    }

    pub async fn faults(&self, f: Value) {
        let r = self
            .raw
            .put(format!("{}/_faults", self.gateway.url))
            .json(&f)
            .send()
            .await
            .expect("set faults");
        assert!(r.status().is_success(), "faults {f}");
    }

    /// The gateway's counters (`GET /_stats`).
    pub async fn gateway_stats(&self) -> Value {
        self.raw
            .get(format!("{}/_stats", self.gateway.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn payment(&self, id: &str) -> Value {
        let all: Vec<Value> = self
            .raw
            .get(format!("{}/_payments", self.gateway.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        all.into_iter()
            .find(|p| p["payment_id"] == id)
            .unwrap_or_else(|| panic!("gateway has no payment {id}"))
    }

    pub async fn hold(&self, user: &str, event: &str, seats: &[&str]) -> Value {
        let a = self
            .http
            .post(
                &format!("{}/v1/holds", self.edge(1)),
                Some(&self.token(user)),
                None,
                &json!({"event_id": event, "seats": seats}),
            )
            .await
            .unwrap();
        assert_eq!(a.status.as_u16(), 201, "hold {seats:?}: {}", a.body);
        a.body
    }

    pub async fn hold_of(&self, user: &str, hold_id: &str) -> HttpAnswer {
        self.http
            .get(
                &format!("{}/v1/holds/{hold_id}", self.edge(0)),
                Some(&self.token(user)),
            )
            .await
            .unwrap()
    }

    pub async fn book_raw(&self, user: &str, hold_id: &str) -> HttpAnswer {
        self.book_keyed(user, hold_id, None).await
    }

    /// `POST /v1/bookings` with an optional Idempotency-Key.
    pub async fn book_keyed(&self, user: &str, hold_id: &str, key: Option<&str>) -> HttpAnswer {
        self.http
            .post(
                &format!("{}/v1/bookings", self.edge(2)),
                Some(&self.token(user)),
                key,
                &json!({"hold_id": hold_id}),
            )
            .await
            .unwrap()
    }

    /// Book a hold; waits out a 503 while the fleet's first gateway token
    /// is granted.
    pub async fn book(&self, user: &str, hold_id: &str) -> Value {
        eventually(&format!("booking of {hold_id}"), || async {
            let a = self.book_raw(user, hold_id).await;
            match a.status.as_u16() {
                201 => Some(a.body),
                503 => {
                    tracing::info!("booking {hold_id}: 503 {}", a.body);
                    None
                }
                s => panic!("booking {hold_id}: {s} {}", a.body),
            }
        })
        .await
    }

    pub async fn booking(&self, user: &str, id: &str) -> HttpAnswer {
        self.http
            .get(
                &format!("{}/v1/bookings/{id}", self.edge(0)),
                Some(&self.token(user)),
            )
            .await
            .unwrap()
    }

    pub async fn wait_status(&self, user: &str, id: &str, status: &str) -> Value {
        eventually(&format!("booking {id} {status}"), || async {
            let a = self.booking(user, id).await;
            (a.body["status"] == status).then_some(a.body)
        })
        .await
    }

    /// The buyer approves (or cancels) on the gateway page; returns the redirect.
    pub async fn browser(&self, approve_url: &str, approve: bool) -> String {
        let url = if approve {
            approve_url.to_string()
        } else {
            approve_url.replace("/approve", "/cancel")
        };
        let v: Value = self
            .raw
            .post(url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["redirect"].as_str().expect("redirect").to_string()
    }

    pub async fn get(&self, url: &str) -> HttpAnswer {
        self.http.get(url, None).await.unwrap()
    }

    /// Sum of a metric over every edge.
    pub async fn metric(&self, name: &str) -> f64 {
        let mut sum = 0.0;
        for e in self
            .cluster
            .nodes
            .iter()
            .filter(|n| n.is_running())
            .filter_map(|n| n.edge_url())
        {
            let Ok(r) = self.raw.get(format!("{e}/metrics")).send().await else {
                continue;
            };
            let text = r.text().await.unwrap_or_default();
            for line in text.lines().filter(|l| l.starts_with(name)) {
                let rest = &line[name.len()..];
                if rest.starts_with(' ') || rest.starts_with('{') {
                    sum += line
                        .rsplit(' ')
                        .next()
                        .unwrap()
                        .parse::<f64>()
                        .unwrap_or(0.0);
                }
            }
        }
        sum
    }

    pub async fn available(&self, event: &str) -> Value {
        let a = self
            .http
            .get(
                &format!("{}/v1/events/{event}/availability", self.edge(0)),
                Some(&self.token("x")),
            )
            .await
            .unwrap();
        a.body
    }

    /// `GET /v1/admin/events/{event}/payments` with `user`'s token
    /// (an operator's when `operator`).
    pub async fn event_payments(&self, user: &str, operator: bool, event: &str) -> HttpAnswer {
        self.http
            .get(
                &format!("{}/v1/admin/events/{event}/payments", self.edge(1)),
                Some(&token(&self.cluster, user, operator)),
            )
            .await
            .unwrap()
    }

    pub async fn gateway_token(&self) -> String {
        let v: Value = self
            .raw
            .post(format!("{}/v1/token", self.gateway.url))
            .json(&json!({"client_id": self.gateway.client_id, "client_secret": self.gateway.client_secret}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["access_token"].as_str().unwrap().to_string()
    }

    pub async fn execute_at_gateway(&self, payment_id: &str, fence: &str) -> (u16, Value) {
        let r = self
            .raw
            .post(format!(
                "{}/v1/payments/{payment_id}/execute",
                self.gateway.url
            ))
            .bearer_auth(self.gateway_token().await)
            .header("x-fencing-token", fence)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    pub async fn webhook(&self, body: &Value, secret: &str) -> HttpAnswer {
        let bytes = body.to_string();
        let r = self
            .raw
            .post(format!("{}/v1/payments/webhook", self.edge(0)))
            .header("content-type", "application/json")
            .header(
                "x-gateway-signature",
                seatfence_payments::gateway::sign::webhook_header(secret, bytes.as_bytes()),
            )
            .body(bytes)
            .send()
            .await
            .unwrap();
        HttpAnswer {
            status: hyper::StatusCode::from_u16(r.status().as_u16()).unwrap(),
            body: r.json().await.unwrap_or(Value::Null),
            retry_after: None,
            epoch: None,
            cache_control: None,
            headers: Default::default(),
        }
    }

    pub fn mail_mentions(&self, booking: &str) -> bool {
        self.cluster.nodes.iter().any(|n| {
            std::fs::read_dir(n.config.data_dir.join("mail"))
                .map(|d| {
                    d.flatten().any(|f| {
                        f.file_name().to_string_lossy().ends_with(".eml")
                            && std::fs::read_to_string(f.path()).is_ok_and(|t| t.contains(booking))
                    })
                })
                .unwrap_or(false)
        })
    }
}

/// The string in `v`.
/// A reqwest client trusting the cluster CA `ca` (HTTPS edges).
fn trusting(ca: &Path) -> reqwest::Client {
    let pem = std::fs::read(ca).expect("the cluster CA");
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("a PEM CA"))
        .build()
        .expect("a client")
}

pub fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// One scenario's world: its own gateway and cluster with `events` created
/// (`(id, seats, hold ttl secs)`). Fields drop in order: the processes
/// stop before the next scenario may start.
pub struct Scenario {
    pub env: Env,
    _dir: tempfile::TempDir,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

pub async fn scenario(events: &[(&str, &[&str], u64)]) -> Scenario {
    scenario_with(events, |_, _| {}).await
}

/// A scenario whose payments config `tweak` changes; it gets the
/// scenario's own directory.
pub async fn scenario_with(
    events: &[(&str, &[&str], u64)],
    tweak: impl FnOnce(&Path, &mut PaymentsConfig),
) -> Scenario {
    let serial = serial().await;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let env = Env::start_with(dir.path(), |p| tweak(&path, p)).await;
    for (id, seats, ttl) in events {
        env.event(id, seats, *ttl).await;
    }
    Scenario {
        env,
        _dir: dir,
        _serial: serial,
    }
}
