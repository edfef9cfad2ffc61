//! The replicated state of one group and its pure `apply`.
//!
//! The state is stored record by record (one sled key per record), so `apply`
//! also reports which records it changed: the storage layer writes exactly
//! those, atomically with the applied log id. The record encoding lives in
//! `records.rs` ([`RecordKey`], [`State::records`], [`State::load_record`]).

mod records;

pub use records::{DecodeError, RecordKey};

use serde::{Deserialize, Serialize};

use crate::audit::{AuditEntry, AUDIT_KEEP};
use crate::command::{Command, Response};
use crate::directory::{Directory, EventRoute, GroupInfo, NodeInfo, Placement, RouteState};
use crate::ids::{Epoch, EventId, GroupId, NodeId, RegionId};
use crate::inventory::{Inventory, Survival};

/// Everything a group replicates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Plain groups: a key→value table. A persistent map: cloning it (for a
    /// snapshot) is O(1) and shares structure, so a snapshot build never
    /// holds applies up for a full copy.
    pub kv: imbl::OrdMap<String, Vec<u8>>,
    /// Group 0 only: the directory.
    pub directory: Directory,
    /// Event groups: the event's seat inventory.
    pub inventory: Inventory,
    /// Group 0 only: the operators' audit trail, by `seq`.
    pub audit: imbl::OrdMap<u64, crate::audit::AuditEntry>,
    /// Group 0 only: first answers to keyed requests, by `(owner, key)`.
    pub answers: imbl::OrdMap<(String, String), crate::answers::KeyedAnswer>,
}

/// The result of one `apply`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub response: Response,
    pub changed: Vec<RecordKey>,
}

/// Whether `cmd` is one group 0 (the directory) takes; every other command
/// is for the other groups. (`apply_one` does not check a `Batch` itself:
/// it checks the batch's commands one by one.)
fn is_directory_command(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::RegisterNode(_)
            | Command::CreateGroup { .. }
            | Command::RegisterEvent { .. }
            | Command::PutShared { .. }
            | Command::PutSharedIf { .. }
            | Command::RememberAnswer { .. }
            | Command::ForgetAnswer { .. }
            | Command::Audit(_)
            | Command::SetDrained { .. }
            | Command::Move { .. }
    )
}

impl State {
    /// Apply one command to the state of group `group`.
    pub fn apply(&mut self, group: GroupId, cmd: &Command) -> Applied {
        let mut changed = Vec::new();
        let response = self.apply_one(group, cmd, &mut changed);
        Applied { response, changed }
    }

    /// Apply one command (a batch: each of its commands, in order), adding
    /// the records it changes to `changed`. A command for the other kind of
    /// group is `WrongGroup` and changes nothing.
    fn apply_one(
        &mut self,
        group: GroupId,
        cmd: &Command,
        changed: &mut Vec<RecordKey>,
    ) -> Response {
        // A batch is checked command by command.
        if !matches!(cmd, Command::Batch(_)) && is_directory_command(cmd) != group.is_directory() {
            return Response::WrongGroup;
        }
        match cmd {
            // The key→value table (`PutShared`: the directory's).
            Command::Put { key, value } | Command::PutShared { key, value } => {
                self.put(key, value, changed)
            }
            Command::PutSharedIf {
                key,
                expected,
                value,
            } => {
                let now = self.kv.get(key);
                if now == Some(value) {
                    // Already written (a re-sent command): it took effect.
                    return Response::Written { existed: true };
                }
                if now != expected.as_ref() {
                    return Response::Changed;
                }
                self.put(key, value, changed)
            }
            Command::Delete { key } => self.delete(key, changed),
            Command::Batch(cmds) => Response::Batch(
                cmds.iter()
                    .map(|c| self.apply_one(group, c, changed))
                    .collect(),
            ),
            // The directory.
            Command::RegisterNode(node) => self.register_node(node, changed),
            Command::CreateGroup {
                group_id,
                placement,
            } => self.create_group(*group_id, placement, changed),
            Command::RegisterEvent {
                event_id,
                home_region,
                survival,
            } => self.register_event(event_id, home_region, *survival, changed),
            Command::SetDrained { node, drained } => self.set_drained(*node, *drained, changed),
            Command::Move { op, at_ms } => {
                Response::Move(self.directory.apply_move(op, *at_ms, changed).map(Box::new))
            }
            // The directory's audit trail.
            Command::Audit(entry) => self.append_audit(entry, changed),
            Command::RememberAnswer { owner, key, answer } => {
                self.remember_answer(owner, key, answer, changed)
            }
            Command::ForgetAnswer {
                owner,
                key,
                request,
            } => {
                let k = (owner.clone(), key.clone());
                if self
                    .answers
                    .get(&k)
                    .is_some_and(|a| a.pending() && &a.request == request)
                {
                    self.answers.remove(&k);
                    changed.push(RecordKey::Answer(k.0, k.1));
                }
                Response::None
            }
            // An event group's inventory.
            Command::Event(c) => Response::Event(self.inventory.apply(c, changed)),
        }
    }

    /// `Put`, `PutShared`: set `key`.
    fn put(&mut self, key: &str, value: &[u8], changed: &mut Vec<RecordKey>) -> Response {
        changed.push(RecordKey::Kv(key.to_owned()));
        let existed = self.kv.insert(key.to_owned(), value.to_vec()).is_some();
        Response::Written { existed }
    }

    /// `Delete`: remove `key`.
    fn delete(&mut self, key: &str, changed: &mut Vec<RecordKey>) -> Response {
        changed.push(RecordKey::Kv(key.to_owned()));
        Response::Written {
            existed: self.kv.remove(key).is_some(),
        }
    }

    /// `RegisterNode`: add or update a node of the directory.
    fn register_node(&mut self, node: &NodeInfo, changed: &mut Vec<RecordKey>) -> Response {
        changed.push(RecordKey::Node(node.id));
        self.directory.nodes.insert(node.id, node.clone());
        Response::NodeRegistered { node_id: node.id }
    }

    /// `CreateGroup`: place a group and record it. An id that exists answers
    /// the existing group; `None` allocates the next free id (never 0, the
    /// directory's).
    fn create_group(
        &mut self,
        group_id: Option<GroupId>,
        placement: &Placement,
        changed: &mut Vec<RecordKey>,
    ) -> Response {
        let dir = &mut self.directory;
        if let Some(existing) = group_id.and_then(|id| dir.groups.get(&id)) {
            return Response::GroupCreated {
                group_id: existing.id,
                members: existing.members.clone(),
            };
        }
        let members = match dir.place(placement) {
            Ok(m) => m,
            Err(reason) => return Response::PlacementFailed { reason },
        };
        let id = match group_id {
            Some(id) if !id.is_directory() => id,
            Some(_) => {
                return Response::PlacementFailed {
                    reason: "group 0 is the directory".into(),
                }
            }
            None => GroupId(dir.next_group_id.max(1)),
        };
        dir.next_group_id = dir.next_group_id.max(id.0 + 1).max(1);
        changed.push(RecordKey::NextGroupId);
        changed.push(RecordKey::Group(id));
        dir.groups.insert(
            id,
            GroupInfo {
                id,
                members: members.clone(),
            },
        );
        Response::GroupCreated {
            group_id: id,
            members,
        }
    }

    /// `RegisterEvent`: create the event's group (placed by `survival` in
    /// its home region) and record its route, owned by the home region at
    /// epoch 1. An event that exists answers its route.
    fn register_event(
        &mut self,
        event_id: &EventId,
        home_region: &RegionId,
        survival: Survival,
        changed: &mut Vec<RecordKey>,
    ) -> Response {
        if let Some(route) = self.directory.events.get(event_id) {
            return Response::EventRegistered(route.clone());
        }
        let placement = EventRoute::placement(home_region, survival);
        // Exactly a `CreateGroup { group_id: None }` on the directory (this
        // command already passed the directory check).
        let group = match self.create_group(None, &placement, changed) {
            Response::GroupCreated { group_id, .. } => group_id,
            other => return other,
        };
        let route = EventRoute {
            event_id: event_id.clone(),
            group,
            home_region: home_region.clone(),
            owner_region: home_region.clone(),
            epoch: Epoch(1),
            survival,
            state: RouteState::Active,
        };
        changed.push(RecordKey::Route(event_id.clone()));
        self.directory
            .events
            .insert(event_id.clone(), route.clone());
        Response::EventRegistered(route)
    }

    /// `SetDrained`: mark a node drained or back in service. Only an actual
    /// change is a changed record.
    fn set_drained(
        &mut self,
        node: NodeId,
        drained: bool,
        changed: &mut Vec<RecordKey>,
    ) -> Response {
        let was = self.directory.drained.contains(&node);
        if drained {
            self.directory.drained.insert(node);
        } else {
            self.directory.drained.remove(&node);
        }
        if was != drained {
            changed.push(RecordKey::Drained(node));
        }
        Response::DrainedSet { was }
    }

    /// `RememberAnswer`: forget answers a day old, then keep the first
    /// answer under `(owner, key)`: another request's record stays unless
    /// it lapsed; the same request's is completed.
    fn remember_answer(
        &mut self,
        owner: &str,
        key: &str,
        answer: &crate::answers::KeyedAnswer,
        changed: &mut Vec<RecordKey>,
    ) -> Response {
        let lapsed: Vec<(String, String)> = self
            .answers
            .iter()
            .filter(|(_, a)| a.at_ms.saturating_add(crate::answers::ANSWER_TTL_MS) <= answer.at_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for k in lapsed {
            self.answers.remove(&k);
            changed.push(RecordKey::Answer(k.0, k.1));
        }
        let k = (owner.to_string(), key.to_string());
        if let Some(first) = self.answers.get(&k).filter(|a| !a.replaced_by(answer)) {
            return Response::Answer(Box::new(first.clone()));
        }
        self.answers.insert(k, answer.clone());
        changed.push(RecordKey::Answer(owner.to_string(), key.to_string()));
        Response::Answer(Box::new(answer.clone()))
    }

    /// `Audit`: append an entry with the next `seq` (the one given is
    /// ignored), then drop the oldest beyond [`AUDIT_KEEP`].
    fn append_audit(&mut self, entry: &AuditEntry, changed: &mut Vec<RecordKey>) -> Response {
        if !entry.id.is_empty() {
            let seen = self
                .audit
                .values()
                .rev()
                .take(crate::audit::AUDIT_DEDUP_WINDOW)
                .find(|a| a.id == entry.id);
            if let Some(a) = seen {
                return Response::Audited { seq: a.seq };
            }
        }
        let seq = self.audit.keys().next_back().map_or(1, |s| s + 1);
        self.audit.insert(
            seq,
            AuditEntry {
                seq,
                ..entry.clone()
            },
        );
        changed.push(RecordKey::Audit(seq));
        while self.audit.len() > AUDIT_KEEP {
            let oldest = *self.audit.keys().next().expect("not empty");
            self.audit.remove(&oldest);
            changed.push(RecordKey::Audit(oldest));
        }
        Response::Audited { seq }
    }

    /// Recompute derived indexes after the records were loaded.
    pub fn rebuild_indexes(&mut self) {
        self.inventory.rebuild_indexes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::{NodeInfo, Placement};

    #[test]
    fn drained_nodes_are_recorded_and_reload() {
        let mut s = State::default();
        let set = |drained| Command::SetDrained {
            node: NodeId(2),
            drained,
        };
        assert_eq!(
            s.apply(GroupId(4), &set(true)).response,
            Response::WrongGroup
        );
        let a = s.apply(GroupId::DIRECTORY, &set(true));
        assert_eq!(a.response, Response::DrainedSet { was: false });
        assert_eq!(a.changed, vec![RecordKey::Drained(NodeId(2))]);
        let mut loaded = State::default();
        for (k, v) in s.records() {
            loaded.load_record(&k, &v).unwrap();
        }
        assert!(loaded.directory.drained.contains(&NodeId(2)));
        let a = s.apply(GroupId::DIRECTORY, &set(false));
        assert_eq!(a.response, Response::DrainedSet { was: true });
        assert!(s.directory.drained.is_empty());
        assert!(s.encode_record(&RecordKey::Drained(NodeId(2))).is_none());
    }

    #[test]
    fn the_audit_trail_numbers_entries_keeps_the_newest_and_reloads() {
        use crate::audit::{AuditEntry, AUDIT_KEEP};
        let entry = |n: u64| {
            Command::Audit(AuditEntry {
                seq: 0,
                at_ms: n,
                actor: "ops".into(),
                action: "drain".into(),
                target: format!("node {n}"),
                result: "ok".into(),
                id: format!("a{n}"),
            })
        };
        let mut s = State::default();
        assert_eq!(
            s.apply(GroupId(5), &entry(1)).response,
            Response::WrongGroup
        );
        let extra = 5;
        for n in 1..=(AUDIT_KEEP as u64 + extra) {
            let a = s.apply(GroupId::DIRECTORY, &entry(n));
            assert_eq!(a.response, Response::Audited { seq: n });
        }
        assert_eq!(s.audit.len(), AUDIT_KEEP);
        // A re-sent entry (a transport error after the commit) counts once.
        let last = AUDIT_KEEP as u64 + extra;
        let again = s.apply(GroupId::DIRECTORY, &entry(last));
        assert_eq!(again.response, Response::Audited { seq: last });
        assert_eq!(s.audit.keys().next_back(), Some(&last));
        assert_eq!(
            s.audit.keys().next(),
            Some(&(extra + 1)),
            "the oldest went first"
        );
        let newest = s.query(&crate::Query::Audit { limit: 2 });
        let crate::QueryResult::Audit(list) = newest else {
            panic!("{newest:?}")
        };
        assert_eq!(
            list.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![AUDIT_KEEP as u64 + extra, AUDIT_KEEP as u64 + extra - 1]
        );
        let mut loaded = State::default();
        for (k, v) in s.records() {
            loaded.load_record(&k, &v).unwrap();
        }
        assert_eq!(loaded.audit, s.audit);
    }

    #[test]
    fn records_round_trip_through_storage_encoding() {
        let mut s = State::default();
        let g0 = GroupId::DIRECTORY;
        for id in 1..=3 {
            s.apply(
                g0,
                &Command::RegisterNode(NodeInfo {
                    id: NodeId(id),
                    region: format!("r{id}").as_str().into(),
                    grpc_addr: "127.0.0.1:1".into(),
                }),
            );
        }
        let a = s.apply(
            g0,
            &Command::CreateGroup {
                group_id: None,
                placement: Placement::Spread { replicas: 3 },
            },
        );
        assert!(matches!(
            a.response,
            Response::GroupCreated {
                group_id: GroupId(1),
                ..
            }
        ));
        let mut loaded = State::default();
        for (k, v) in s.records() {
            loaded.load_record(&k, &v).unwrap();
        }
        assert_eq!(loaded, s);
    }

    #[test]
    fn commands_for_the_other_kind_of_group_change_nothing() {
        let mut s = State::default();
        let a = s.apply(
            GroupId::DIRECTORY,
            &Command::Put {
                key: "k".into(),
                value: vec![1],
            },
        );
        assert_eq!(a.response, Response::WrongGroup);
        assert!(a.changed.is_empty());
        assert_eq!(s, State::default());
    }

    #[test]
    fn a_batch_answers_each_command_as_if_applied_alone() {
        let mut s = State::default();
        let g = GroupId(3);
        let put = |k: &str| Command::Put {
            key: k.into(),
            value: k.as_bytes().to_vec(),
        };
        let a = s.apply(
            g,
            &Command::Batch(vec![
                put("a"),
                put("a"),
                Command::RegisterNode(NodeInfo {
                    id: NodeId(1),
                    region: "r".into(),
                    grpc_addr: "x".into(),
                }),
                Command::Delete { key: "a".into() },
            ]),
        );
        assert_eq!(
            a.response,
            Response::Batch(vec![
                Response::Written { existed: false },
                Response::Written { existed: true },
                Response::WrongGroup,
                Response::Written { existed: true },
            ])
        );
        assert!(s.kv.is_empty());
        assert!(s.directory.nodes.is_empty());
    }

    #[test]
    fn create_group_is_idempotent_by_id() {
        let mut s = State::default();
        let g0 = GroupId::DIRECTORY;
        s.apply(
            g0,
            &Command::RegisterNode(NodeInfo {
                id: NodeId(1),
                region: "a".into(),
                grpc_addr: "x".into(),
            }),
        );
        let create = Command::CreateGroup {
            group_id: Some(GroupId(7)),
            placement: Placement::Spread { replicas: 1 },
        };
        let first = s.apply(g0, &create).response;
        let second = s.apply(g0, &create).response;
        assert_eq!(first, second);
        assert_eq!(s.directory.next_group_id, 8);
    }

    #[test]
    fn a_keyed_answer_is_kept_first_for_a_day_and_reloads() {
        use crate::answers::{KeyedAnswer, ANSWER_TTL_MS};
        let answer = |at_ms: u64, status: u16| KeyedAnswer {
            request_hash: 7,
            at_ms,
            status,
            body: format!("{{\"n\":{status}}}"),
            headers: vec![("location".into(), "/v1/x".into())],
            request: format!("r{at_ms}"),
        };
        let remember = |key: &str, a: KeyedAnswer| Command::RememberAnswer {
            owner: "ops".into(),
            key: key.into(),
            answer: a,
        };
        let mut s = State::default();
        let g0 = GroupId::DIRECTORY;
        let first = s.apply(g0, &remember("k1", answer(10, 201))).response;
        assert_eq!(first, Response::Answer(Box::new(answer(10, 201))));
        let again = s.apply(g0, &remember("k1", answer(20, 409))).response;
        assert_eq!(
            again,
            Response::Answer(Box::new(answer(10, 201))),
            "the first stays"
        );
        let mut loaded = State::default();
        for (k, v) in s.records() {
            loaded.load_record(&k, &v).unwrap();
        }
        assert_eq!(loaded.answers, s.answers);
        // A day later, k1 is forgotten when the next answer is recorded.
        let later = answer(10 + ANSWER_TTL_MS, 202);
        let applied = s.apply(g0, &remember("k2", later));
        assert!(applied
            .changed
            .contains(&RecordKey::Answer("ops".into(), "k1".into())));
        assert_eq!(
            s.query(&crate::Query::Answer {
                owner: "ops".into(),
                key: "k1".into()
            }),
            crate::QueryResult::Answer(None)
        );
    }

    #[test]
    fn one_request_at_a_time_holds_a_key_until_it_answers() {
        use crate::answers::{KeyedAnswer, PENDING_TTL_MS};
        let g0 = GroupId::DIRECTORY;
        let mk = |request: &str, at_ms: u64, status: u16| KeyedAnswer {
            request_hash: 1,
            at_ms,
            status,
            body: "{}".into(),
            headers: vec![],
            request: request.into(),
        };
        let remember = |a: KeyedAnswer| Command::RememberAnswer {
            owner: "ops".into(),
            key: "k".into(),
            answer: a,
        };
        let forget = |request: &str| Command::ForgetAnswer {
            owner: "ops".into(),
            key: "k".into(),
            request: request.into(),
        };
        let mut s = State::default();
        let r1 = mk("r1", 0, 0);
        assert_eq!(
            s.apply(g0, &remember(r1.clone())).response,
            Response::Answer(Box::new(r1.clone()))
        );
        // r2 meets r1's reservation, and cannot drop it.
        assert_eq!(
            s.apply(g0, &remember(mk("r2", 5, 0))).response,
            Response::Answer(Box::new(r1.clone()))
        );
        s.apply(g0, &forget("r2"));
        assert_eq!(s.answers.len(), 1);
        // r1 answers 5xx: it forgets; r2 may run now.
        s.apply(g0, &forget("r1"));
        assert!(s.answers.is_empty());
        let r2 = mk("r2", 10, 0);
        assert_eq!(
            s.apply(g0, &remember(r2.clone())).response,
            Response::Answer(Box::new(r2))
        );
        let done = mk("r2", 20, 201);
        assert_eq!(
            s.apply(g0, &remember(done.clone())).response,
            Response::Answer(Box::new(done.clone()))
        );
        assert_eq!(
            s.apply(g0, &remember(mk("r3", 30, 0))).response,
            Response::Answer(Box::new(done))
        );
        // A reservation whose edge died lapses.
        let mut t = State::default();
        t.apply(g0, &remember(mk("dead", 0, 0)));
        let late = mk("r4", PENDING_TTL_MS, 0);
        assert_eq!(
            t.apply(g0, &remember(late.clone())).response,
            Response::Answer(Box::new(late))
        );
    }
}
