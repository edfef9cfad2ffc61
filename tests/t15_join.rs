//! Nodes beyond the directory's voters join: they register, the directory's
//! leader adds them to group 0 as learners, and groups placed on them
//! replicate to them.

mod common;

use std::path::Path;

use common::*;
use seatfence_core::{GroupId, NodeId, Placement};
use seatfence_node::create_group;
use seatfence_testkit::cluster::LocalCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t15_extra_nodes_join_as_directory_learners_and_host_groups() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_seatfence"));
    tracing::info!("--- 3 directory voters and 2 joining nodes");
    let cluster = LocalCluster::builder(dir.path())
        .voters(3, 2)
        .tuning(test_tuning())
        .start(bin)
        .unwrap();
    cluster
        .wait_ready(PATIENCE)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.log_tail(4)));
    let client = cluster.client();

    for id in [4u64, 5] {
        let addr = cluster.addr(id).unwrap();
        let s = eventually(&format!("node {id} follows the directory"), || async {
            let s = client.status_at(&addr).await.ok()?;
            let g0 = s.groups.iter().find(|g| g.group_id == 0)?;
            (g0.role == "learner" && s.directory_nodes == 5).then_some(s)
        })
        .await;
        assert_eq!(s.node_id, id);
    }

    tracing::info!("--- a group placed in us-east lands on voter 1 and joiner 4");
    let placement = Placement::InRegion {
        region: "us-east".into(),
        replicas: 2,
    };
    let (g, mut members) = create_group(&client, None, placement).await.unwrap();
    members.sort();
    assert_eq!(members, vec![NodeId(1), NodeId(4)]);
    put(&client, g, "k", b"v").await;
    let addr4 = cluster.addr(4).unwrap();
    assert_keys_on(&cluster, &addr4, g, &[("k".to_string(), b"v".to_vec())]).await;
    assert!(
        cluster
            .wait_leader(GroupId::DIRECTORY, PATIENCE)
            .await
            .unwrap()
            <= 3,
        "joiners never lead the directory"
    );
}
