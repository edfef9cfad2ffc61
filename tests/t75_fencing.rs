//! The epoch fence: a command stamped with another epoch is refused before
//! proposing (older) or inside `apply` on every replica (any other), and
//! changes nothing anywhere.

mod common;

use common::*;
use seatfence_core::inventory::{EventAction, EventCommand, Outcome, SeatPick};
use seatfence_core::{Command, Epoch, EventId, GroupId, RegionId, Response, UserId};
use seatfence_testkit::http_client::HttpClient;
use serde_json::json;

fn hold(epoch: u64, key: &str) -> Command {
    Command::event(EventCommand {
        event_id: EventId("fenced".into()),
        epoch: Epoch(epoch),
        now_ms: 0,
        idempotency: Some((UserId("zombie".into()), key.into())),
        action: EventAction::Hold {
            owner: UserId("zombie".into()),
            pick: SeatPick::Quantity {
                section: None,
                quantity: 1,
            },
        },
    })
}

async fn metric(http: &HttpClient, edge: &str, layer: &str) -> u64 {
    let m = http.get(&format!("{edge}/metrics"), None).await.unwrap();
    let text = m.body.as_str().unwrap().to_string();
    let prefix = format!("seatfence_stale_epoch_rejections_total{{layer=\"{layer}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t75_stale_epochs_are_refused_on_every_replica() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let cluster = start_regions(dir.path(), 1, 3).await;
    let edges: Vec<String> = cluster.nodes.iter().filter_map(|n| n.edge_url()).collect();
    let created = create_event(
        &cluster,
        &edges[0],
        json!({"event_id": "fenced", "name": "F", "home_region": "us-east",
               "sections": [{"name": "A", "rows": 2, "seats_per_row": 5}]}),
    )
    .await;
    let group = GroupId(created["group_id"].as_u64().unwrap());
    cluster.wait_leader(group, PATIENCE).await.unwrap();
    let client = cluster.client();
    let http = HttpClient::default();

    tracing::info!("--- a current-epoch hold is applied");
    let ok = client.write(group, &hold(1, "k1")).await.unwrap();
    assert!(matches!(&ok.response, Response::Event(r) if matches!(r.outcome, Outcome::Held(_))));

    tracing::info!("--- epoch 2 (not the event's) passes the leader and is refused by apply");
    let stale = client.write(group, &hold(2, "k2")).await.unwrap();
    let Response::Event(r) = stale.response else {
        panic!("{:?}", stale.response)
    };
    assert_eq!(
        r.outcome,
        Outcome::StaleEpoch {
            current: Epoch(1),
            owner: RegionId("us-east".into())
        }
    );
    assert!(stale.log_index > 0, "it went through the log");

    tracing::info!("--- epoch 0 (older) is refused by the leader before proposing");
    let older = client.write(group, &hold(0, "k3")).await.unwrap();
    let Response::Event(r) = older.response else {
        panic!()
    };
    assert!(matches!(r.outcome, Outcome::StaleEpoch { .. }));
    assert_eq!(older.log_index, 0, "never proposed");

    tracing::info!("--- every replica applied the same: one seat held, equal digests");
    let digests = eventually("replicas converge", || async {
        let mut d = Vec::new();
        for n in &cluster.nodes {
            let s = client.status_with_digests_at(n.addr()).await.ok()?;
            let g = s.groups.iter().find(|g| g.group_id == group.0)?;
            if g.applied_index < stale.log_index {
                return None;
            }
            d.push(g.state_digest);
        }
        Some(d)
    })
    .await;
    assert_eq!(digests.len(), 3);
    assert!(digests.windows(2).all(|w| w[0] == w[1]), "{digests:?}");
    for edge in &edges {
        assert!(
            metric(&http, edge, "apply").await >= 1,
            "{edge} counted its apply rejection"
        );
    }
    let propose: u64 = {
        let mut sum = 0;
        for edge in &edges {
            sum += metric(&http, edge, "propose").await;
        }
        sum
    };
    assert_eq!(propose, 1, "the leader refused the older epoch once");
    let op = token(&cluster, "ops", true);
    let av = http
        .get(
            &format!("{}/v1/events/fenced/availability", edges[1]),
            Some(&op),
        )
        .await
        .unwrap();
    assert_eq!(av.body["held"], 1, "{}", av.body);
    assert_eq!(av.body["available"], 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t75_an_event_the_directory_routes_is_never_not_found() {
    init_logs();
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = start_regions(dir.path(), 1, 3).await;
    let edges: Vec<String> = cluster.nodes.iter().filter_map(|n| n.edge_url()).collect();

    tracing::info!("--- the directory routes an event whose group does not hold it yet");
    // What an edge sees between a create's two steps, or while a replica
    // that does not hold the event yet answers: "not now", never "no such event".
    let registered = cluster
        .client()
        .write(
            GroupId::DIRECTORY,
            &Command::RegisterEvent {
                event_id: EventId("half".into()),
                home_region: RegionId("us-east".into()),
                survival: Default::default(),
            },
        )
        .await
        .unwrap();
    let Response::EventRegistered(route) = registered.response else {
        panic!("{:?}", registered.response)
    };
    cluster.wait_leader(route.group, PATIENCE).await.unwrap();
    let http = HttpClient::default();
    let buyer = token(&cluster, "bea", false);
    let a = http
        .post(
            &format!("{}/v1/holds", edges[0]),
            Some(&buyer),
            None,
            &json!({"event_id": "half", "quantity": 1}),
        )
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 503, "{}", a.body);
    assert_eq!(a.code(), Some("no_leader"), "{}", a.body);

    tracing::info!("--- an event nobody created is still 404");
    let a = http
        .post(
            &format!("{}/v1/holds", edges[0]),
            Some(&buyer),
            None,
            &json!({"event_id": "never", "quantity": 1}),
        )
        .await
        .unwrap();
    assert_eq!(a.status.as_u16(), 404, "{}", a.body);
    assert_eq!(a.code(), Some("event_not_found"), "{}", a.body);
}
