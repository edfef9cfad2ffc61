//! Property tests for `State::apply`: random command sequences on plain
//! groups and on the directory.

use std::collections::BTreeMap;

use proptest::prelude::*;
use seatfence_core::{Command, GroupId, NodeId, NodeInfo, Placement, RegionId, Response, State};

fn command() -> impl Strategy<Value = Command> {
    let key = "[a-c]{1,2}";
    let simple = prop_oneof![
        (key, prop::collection::vec(any::<u8>(), 0..4))
            .prop_map(|(key, value)| Command::Put { key, value }),
        key.prop_map(|key| Command::Delete { key }),
        (1u64..6, 0usize..3).prop_map(|(id, r)| Command::RegisterNode(NodeInfo {
            id: NodeId(id),
            region: RegionId(["us-east", "eu-west", "ap-south"][r].into()),
            grpc_addr: format!("127.0.0.1:{}", 7000 + id),
            incarnation: 0,
            format_max: seatfence_core::format::newest(),
        })),
        (prop::option::of(0u64..8), 1u8..4).prop_map(|(g, replicas)| Command::CreateGroup {
            group_id: g.map(GroupId),
            placement: Placement::Spread { replicas },
        }),
    ];
    simple.prop_recursive(3, 16, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(Command::Batch)
    })
}

/// How deep batches nest in `cmd` (0: not a batch).
fn depth(cmd: &Command) -> usize {
    match cmd {
        Command::Batch(cs) => 1 + cs.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A model of the key→value part: what a plain group must hold.
fn model_apply(model: &mut BTreeMap<String, Vec<u8>>, cmd: &Command) {
    match cmd {
        Command::Put { key, value } => {
            model.insert(key.clone(), value.clone());
        }
        Command::Delete { key } => {
            model.remove(key);
        }
        Command::Batch(cmds) => cmds.iter().for_each(|c| model_apply(model, c)),
        _ => {}
    }
}

proptest! {
    #[test]
    fn replicas_agree_and_written_records_reload_to_the_same_state(
        cmds in prop::collection::vec(command(), 0..40),
        directory in any::<bool>(),
    ) {
        let group = if directory { GroupId::DIRECTORY } else { GroupId(5) };
        let (mut a, mut b) = (State::new(group), State::new(group));
        let mut model = BTreeMap::new();
        // What the storage layer holds: only the records `apply` reports
        // as changed are written, as StateMachineStore does.
        let mut stored: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for cmd in &cmds {
            let before = a.clone();
            let ra = a.apply(group, cmd);
            let rb = b.apply(group, cmd);
            // Deterministic: two replicas answer and change identically.
            prop_assert_eq!(&ra, &rb);
            prop_assert_eq!(&a, &b);
            if matches!(ra.response, Response::WrongGroup | Response::Invalid { .. }) {
                prop_assert_eq!(&a, &before, "a refused command changed nothing");
            }
            // Batches three deep are refused whole, on every replica.
            let nested = depth(cmd) > 2;
            prop_assert_eq!(nested, matches!(ra.response, Response::Invalid { .. }));
            for key in &ra.changed {
                match a.encode_record(key) {
                    Some(v) => stored.insert(key.encode(), v),
                    None => stored.remove(&key.encode()),
                };
            }
            let mut loaded = State::new(group);
            for (k, v) in &stored {
                loaded.load_record(k, v).unwrap();
            }
            prop_assert_eq!(&loaded, &a, "records written so far reload to the state");
            if !directory {
                if !nested {
                    model_apply(&mut model, cmd);
                }
                let kv: BTreeMap<_, _> = a.kv().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                prop_assert_eq!(&kv, &model);
                prop_assert!(a.directory().nodes.is_empty() && a.directory().groups.is_empty());
            } else {
                prop_assert!(a.kv().is_empty(), "the directory never holds plain keys");
                for g in a.directory().groups.values() {
                    let mut m = g.members.clone();
                    m.sort();
                    m.dedup();
                    prop_assert_eq!(m.len(), g.members.len(), "members are distinct");
                    prop_assert!(g.members.iter().all(|n| a.directory().nodes.contains_key(n)));
                    prop_assert!(!g.id.is_directory());
                }
            }
        }
    }
}
