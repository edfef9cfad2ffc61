//! Three nodes of one region started in this test's process (no child
//! processes): the node crate assembles everything a `seatfence node`
//! runs, so a test can drive a real cluster over HTTP and stop it.

use std::time::Duration;

use seatfence_node::{Node, NodeConfig};
use serde_json::{json, Value};

const SECRET: &str = "in-process-test-secret";

/// `n` free ports (probed, then released).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind :0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

fn config(id: u64, ports: &[u16], dir: &std::path::Path) -> NodeConfig {
    let grpc = |i: u64| format!("127.0.0.1:{}", ports[(i as usize - 1) * 2]);
    let http = format!("127.0.0.1:{}", ports[(id as usize - 1) * 2 + 1]);
    // One directory voter (the region's first node); the others join.
    NodeConfig::from_toml(&format!(
        r#"
node_id = {id}
region = "us-east"
grpc_addr = "{me}"
data_dir = {data:?}
[tls]
insecure = true
[raft]
heartbeat_ms = 50
election_timeout_min_ms = 200
election_timeout_max_ms = 400
[[initial_members]]
id = 1
region = "us-east"
grpc_addr = "{first}"
[edge]
http_addr = "{http}"
jwt_secret = "{SECRET}"
"#,
        me = grpc(id),
        first = grpc(1),
        data = dir.join(format!("n{id}")),
    ))
    .expect("valid config")
}

async fn call(
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut req = client
        .request(method, url)
        .bearer_auth(token)
        .timeout(Duration::from_secs(10));
    if let Some(b) = body {
        req = req.json(&b);
    }
    match req.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or(Value::Null))
        }
        Err(e) => (0, json!({"transport": e.to_string()})),
    }
}

async fn hold(edge: &str, token: &str) -> (u16, Value) {
    let body = json!({"event_id": "gig", "seats": ["A1"]});
    call(
        reqwest::Method::POST,
        format!("{edge}/v1/holds"),
        token,
        Some(body),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_in_one_process_sell_a_seat_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ports = free_ports(6);
    // Together: a node on a new data dir returns from `start` once it is
    // admitted, which in a new cluster takes a majority of its initial
    // members answering.
    let nodes: Vec<Node> =
        futures::future::join_all((1..=3).map(|id| Node::start(config(id, &ports, dir.path()))))
            .await
            .into_iter()
            .map(|n| n.expect("node starts"))
            .collect();
    let edge = format!("http://{}", nodes[0].http_addr.expect("edge configured"));
    let operator = seatfence_api::auth::mint(SECRET, "op", true, 600);
    let alice = seatfence_api::auth::mint(SECRET, "alice", false, 600);
    let bob = seatfence_api::auth::mint(SECRET, "bob", false, 600);

    // The event needs three registered nodes for its voters: retry until
    // the joiners are in the directory.
    let create = json!({"event_id": "gig", "name": "Gig", "home_region": "us-east",
                        "seats": ["A1", "A2"]});
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = call(
            reqwest::Method::POST,
            format!("{edge}/v1/events"),
            &operator,
            Some(create.clone()),
        )
        .await;
        if status == 201 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "event not created within 60 s: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let (status, body) = hold(&edge, &alice).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = hold(&edge, &bob).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "seats_unavailable", "{body}");

    for n in nodes {
        n.stop().await;
    }
}
