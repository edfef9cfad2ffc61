//! The first versioned release's data, read by this build
//! (`tests/fixtures/v1/`, README "Upgrading").
//!
//! `cluster.tar.xz` holds the data dirs, configs and certificates of a
//! 3-node cluster (one node per region) as that release left them after a
//! graceful stop: an event that moved from us-east to eu-west (epoch 2), a
//! confirmed booking, holds, the changefeed, the audit trail.
//! `messages/*.bin` are node-to-node payloads it encoded. The test starts
//! the three nodes on their data dirs (on new ports: the old addresses the
//! directory holds are dialled through the `[chaos] via` rewrite until each
//! node registers its new one), reads every record of every group back
//! through `Dump`, checks what buyers and operators see over HTTP, and
//! sells a seat. The messages decode to what they were.
//!
//! `t44_make_fixtures` (ignored) wrote them:
//! `cargo test --test t44_fixtures -- --ignored t44_make_fixtures`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command as Proc;

use common::moves::{get_move, post_move};
use common::*;
use openraft::entry::RaftEntry;
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use seatfence_core::inventory::{EventAction, EventCommand, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, Query, State, UserId};
use seatfence_node::config::ChaosHooks;
use seatfence_node::NodeConfig;
use seatfence_payments::gateway::token::{REJECTED_KEY, TOKEN_KEY};
use seatfence_proto::v1::dump_chunk;
use seatfence_raft::network::tls::TlsConfig;
use seatfence_raft::types::{Entry, LogId, TypeConfig, Vote};
use seatfence_testkit::http_client::HttpClient;
use seatfence_testkit::{GatewayProc, LocalCluster};
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1")
}

/// The node-to-node payloads the fixtures hold, as this build builds them.
fn hold_command() -> Command {
    Command::event(EventCommand {
        event_id: EventId("fx".into()),
        epoch: Epoch(2),
        now_ms: 1_764_000_000_000,
        idempotency: Some((UserId("dave".into()), "k-1".into())),
        action: EventAction::Hold {
            owner: UserId("dave".into()),
            pick: SeatPick::Seats(vec!["A-5".into(), "A-6".into()]),
        },
    })
}

fn vote_request() -> VoteRequest<TypeConfig> {
    VoteRequest {
        vote: Vote::new(7, 2),
        last_log_id: Some(LogId::new_term_index(6, 41)),
        leadership_transfer: false,
    }
}

fn append_request() -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: Vote::new_committed(7, 2),
        prev_log_id: Some(LogId::new_term_index(6, 41)),
        entries: vec![
            Entry::new_normal(LogId::new_term_index(7, 42), hold_command()),
            Entry::new_blank(LogId::new_term_index(7, 43)),
        ],
        leader_commit: Some(LogId::new_term_index(6, 41)),
    }
}

fn changes_query() -> Query {
    Query::Changes {
        after: 3,
        limit: 100,
    }
}

/// Every group's records through `Dump`, loaded into its state (each
/// value decoded by this build): record count per group.
async fn read_back(cluster: &LocalCluster) -> BTreeMap<u64, u64> {
    let client = cluster.client().with_deadline(PATIENCE);
    let mut groups = vec![0u64];
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < groups.len() {
        let g = GroupId(groups[i]);
        let (_, mut stream) = client.dump(g).await.expect("dump");
        let mut state = State::new(g);
        let mut n = 0;
        while let Some(chunk) = stream.message().await.expect("dump chunk") {
            match chunk.part {
                Some(dump_chunk::Part::Records(r)) => {
                    for (k, v) in r.keys.iter().zip(&r.values) {
                        state
                            .load_record(k, v)
                            .unwrap_or_else(|e| panic!("group {g}: {e:?}"));
                        n += 1;
                    }
                }
                Some(dump_chunk::Part::Trailer(t)) => {
                    assert_eq!(t.records, n);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        if g.is_directory() {
            groups.extend(state.directory().events.values().map(|r| r.group.0));
        }
        out.insert(g.0, n);
        i += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes tests/fixtures/v1: run by hand for a new format's fixtures"]
async fn t44_make_fixtures() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let gateway = GatewayProc::start(bin, &dir.path().join("gateway"), 5).unwrap();
    let mut cluster = LocalCluster::builder(dir.path())
        .regions(3, 1)
        .tuning(test_tuning())
        .payments(gateway.payments_config())
        .start(bin)
        .unwrap();
    cluster.wait_ready(PATIENCE).await.unwrap();
    let edge = cluster.nodes[0].edge_url().unwrap();
    let http = HttpClient::default();
    let op = token(&cluster, "ops", true);
    create_event(
        &cluster,
        &edge,
        json!({"event_id": "fx", "name": "Fixture", "home_region": "us-east", "survival": "region",
               "seats": ["A-1", "A-2", "A-3", "A-4", "A-5", "A-6"], "hold_ttl_secs": 86_400,
               "price_cents": 4200, "currency": "EUR"}),
    )
    .await;
    let hold = |user: &'static str, seat: &'static str| {
        let (http, edge, tok) = (http.clone(), edge.clone(), token(&cluster, user, false));
        async move {
            let body = json!({"event_id": "fx", "seats": [seat]});
            eventually(&format!("{user}'s hold"), || async {
                let a = http
                    .post(&format!("{edge}/v1/holds"), Some(&tok), None, &body)
                    .await
                    .ok()?;
                (a.status.as_u16() == 201).then(|| a.body["hold_id"].as_str().unwrap().to_string())
            })
            .await
        }
    };
    let alice = hold("alice", "A-1").await;
    let bob_hold = hold("bob", "A-2").await;
    let bob = token(&cluster, "bob", false);
    let booking = eventually("bob's booking", || async {
        let a = http
            .post(
                &format!("{edge}/v1/bookings"),
                Some(&bob),
                None,
                &json!({"hold_id": bob_hold}),
            )
            .await
            .ok()?;
        (a.status.as_u16() == 201).then_some(a.body)
    })
    .await;
    let approve = booking["approve_url"].as_str().unwrap();
    let redirect: Value = reqwest::Client::new()
        .post(approve)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let confirmed = http
        .get(redirect["redirect"].as_str().unwrap(), None)
        .await
        .unwrap();
    assert_eq!(confirmed.body["status"], "confirmed", "{}", confirmed.body);
    let moved = post_move(&edge, &op, "fx", "eu-west").await;
    eventually("the move done", || async {
        let m = get_move(&edge, &op, &moved["move_id"]).await?;
        (m["state"] == "done").then_some(())
    })
    .await;
    let carol = hold("carol", "A-3").await;
    let counts = read_back(&cluster).await;
    cluster.stop_all().unwrap();
    drop(gateway);

    let out = fixtures();
    std::fs::create_dir_all(out.join("messages")).unwrap();
    let put = |name: &str, bytes: Vec<u8>| {
        std::fs::write(out.join("messages").join(name), bytes).unwrap()
    };
    put(
        "command-hold.bin",
        seatfence_raft::codec::encode(&hold_command()).unwrap(),
    );
    put(
        "vote-request.bin",
        seatfence_raft::codec::encode(&vote_request()).unwrap(),
    );
    put(
        "append-entries.bin",
        seatfence_raft::codec::encode(&append_request()).unwrap(),
    );
    put(
        "query-changes.bin",
        seatfence_raft::codec::encode(&changes_query()).unwrap(),
    );
    let nodes: Vec<Value> = cluster
        .nodes
        .iter()
        .map(|n| json!({"id": n.id(), "grpc_addr": n.addr()}))
        .collect();
    let expect = json!({
        "format": seatfence_core::format::active(), "nodes": nodes, "event": "fx", "alice_hold": alice,
        "bob_booking": booking["booking_id"], "carol_hold": carol,
        "records": counts.iter().map(|(g, n)| (g.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
    });
    std::fs::write(
        out.join("expect.json"),
        serde_json::to_string_pretty(&expect).unwrap(),
    )
    .unwrap();
    let mut tar = Proc::new("tar");
    tar.arg("-C")
        .arg(dir.path())
        .arg("-cJf")
        .arg(out.join("cluster.tar.xz"));
    tar.args([
        "certs",
        "n1/node.toml",
        "n2/node.toml",
        "n3/node.toml",
        "n1/data",
        "n2/data",
        "n3/data",
    ]);
    assert!(tar.status().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t44_the_first_formats_data_dirs_and_messages_read_back_and_serve() {
    init_logs();
    let _serial = serial().await;
    let src = fixtures();
    let expect: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("expect.json")).unwrap()).unwrap();

    tracing::info!("--- the recorded messages decode to what they were");
    let read = |name: &str| std::fs::read(src.join("messages").join(name)).unwrap();
    let cmd: Command = seatfence_raft::codec::decode(&read("command-hold.bin")).unwrap();
    assert_eq!(cmd, hold_command());
    let vote: VoteRequest<TypeConfig> =
        seatfence_raft::codec::decode(&read("vote-request.bin")).unwrap();
    assert_eq!(vote, vote_request());
    let append: AppendEntriesRequest<TypeConfig> =
        seatfence_raft::codec::decode(&read("append-entries.bin")).unwrap();
    let want = append_request();
    assert_eq!(
        (append.vote, append.prev_log_id, append.leader_commit),
        (want.vote, want.prev_log_id, want.leader_commit)
    );
    assert_eq!(append.entries, want.entries);
    let q: Query = seatfence_raft::codec::decode(&read("query-changes.bin")).unwrap();
    assert_eq!(q, changes_query());

    tracing::info!("--- the three nodes start on the recorded data dirs");
    let dir = tempfile::tempdir().unwrap();
    let untar = Proc::new("tar")
        .arg("-C")
        .arg(dir.path())
        .arg("-xJf")
        .arg(src.join("cluster.tar.xz"))
        .status()
        .unwrap();
    assert!(untar.success());
    let old: Vec<String> = expect["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["grpc_addr"].as_str().unwrap().to_string())
        .collect();
    let ports: Vec<u16> = (0..2 * old.len())
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        })
        .collect();
    let via: BTreeMap<String, String> = old
        .iter()
        .enumerate()
        .map(|(i, a)| (a.clone(), format!("127.0.0.1:{}", ports[i])))
        .collect();
    let certs = dir.path().join("certs");
    let mut configs = Vec::new();
    for (i, _) in old.iter().enumerate() {
        let node_dir = dir.path().join(format!("n{}", i + 1));
        let text = std::fs::read_to_string(node_dir.join("node.toml")).unwrap();
        let mut c = NodeConfig::from_toml(&text).unwrap();
        c.data_dir = node_dir.join("data");
        c.tls = Some(TlsConfig::in_dir(&certs, &format!("node-{}", c.node_id)));
        c.grpc_addr = format!("127.0.0.1:{}", ports[i]);
        for m in &mut c.initial_members {
            m.grpc_addr = via[&m.grpc_addr].clone();
        }
        if let Some(e) = &mut c.edge {
            e.http_addr = format!("127.0.0.1:{}", ports[old.len() + i]);
            e.public_url = None;
        }
        c.payments = None;
        c.chaos = Some(ChaosHooks {
            via: via.clone(),
            ..ChaosHooks::default()
        });
        configs.push((node_dir, c));
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    let cluster = LocalCluster::launch(bin, configs, |_| None).unwrap();
    if let Err(e) = cluster.wait_ready(PATIENCE).await {
        panic!("{e}\n{}", all_tails(&cluster));
    }

    tracing::info!("--- every record of every group reads back");
    let counts = read_back(&cluster).await;
    // A dump leaves the directory's secrets home (the gateway's token):
    // they still read back where they are, just not through a dump.
    let addr = cluster.addrs()[0].clone();
    let mut secrets = 0;
    for key in [TOKEN_KEY, REJECTED_KEY] {
        let r = cluster
            .client()
            .read_at(&addr, GroupId::DIRECTORY, key)
            .await;
        if r.expect("read a secret where it lives").found {
            secrets += 1;
        }
    }
    for (g, n) in expect["records"].as_object().unwrap() {
        let g: u64 = g.parse().unwrap();
        let now = counts.get(&g).copied().unwrap_or(0);
        let home = if g == 0 { secrets } else { 0 };
        assert!(
            now + home >= n.as_u64().unwrap(),
            "group {g}: {now} records dumped and {home} secrets at home, {n} recorded"
        );
    }

    tracing::info!("--- buyers and operators see what the old release left");
    let edge = cluster.nodes[0].edge_url().unwrap();
    let http = HttpClient::default();
    let get = |path: String, tok: String| {
        let (http, edge) = (http.clone(), edge.clone());
        async move {
            eventually(&path, || async {
                let a = http.get(&format!("{edge}{path}"), Some(&tok)).await.ok()?;
                (a.status.as_u16() == 200).then_some(a.body)
            })
            .await
        }
    };
    let op = token(&cluster, "ops", true);
    let ev = get("/v1/events/fx".into(), op.clone()).await;
    assert_eq!(
        (ev["owner_region"].clone(), ev["epoch"].clone()),
        (json!("eu-west"), json!(2)),
        "{ev}"
    );
    let b = get(
        format!("/v1/bookings/{}", expect["bob_booking"].as_str().unwrap()),
        token(&cluster, "bob", false),
    )
    .await;
    assert_eq!(b["status"], "confirmed", "{b}");
    for (user, key) in [("alice", "alice_hold"), ("carol", "carol_hold")] {
        let h = get(
            format!("/v1/holds/{}", expect[key].as_str().unwrap()),
            token(&cluster, user, false),
        )
        .await;
        assert!(h["status"] == "held" || h["status"] == "expired", "{h}");
    }
    let moves = get("/v1/admin/moves".into(), op.clone()).await;
    assert_eq!(moves["moves"][0]["state"], "done", "{moves}");
    let av = get(
        "/v1/events/fx/availability?max_stale_ms=0".into(),
        op.clone(),
    )
    .await;
    let n = |k: &str| av[k].as_u64().unwrap();
    assert_eq!((n("capacity"), n("sold")), (6, 1), "{av}");

    tracing::info!("--- and it sells");
    let dave = token(&cluster, "dave", false);
    let sold = eventually("a new hold", || async {
        let a = http
            .post(
                &format!("{edge}/v1/holds"),
                Some(&dave),
                None,
                &json!({"event_id": "fx", "seats": ["A-4"]}),
            )
            .await
            .ok()?;
        (a.status.as_u16() != 503).then_some(a)
    })
    .await;
    assert_eq!(sold.status.as_u16(), 201, "{}", sold.body);
}
