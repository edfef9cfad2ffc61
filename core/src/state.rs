//! The replicated state of one group and its pure `apply`.
//!
//! The state is stored record by record (one sled key per record), so `apply`
//! also reports which records it changed: the storage layer writes exactly
//! those, atomically with the applied log id.

use serde::{Deserialize, Serialize};

use crate::command::{Command, Response};
use crate::directory::{Directory, EventRoute, GroupInfo};
use crate::ids::{Epoch, EventId, GroupId, NodeId, UserId};
use crate::inventory::{Inventory, OpKey};

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
}

/// One stored record of a [`State`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecordKey {
    Kv(String),
    Node(NodeId),
    Group(GroupId),
    NextGroupId,
    /// Directory: one event's route.
    Route(EventId),
    /// Event group: the event record (settings, epoch, counters).
    Event,
    Seat(String),
    Hold(u64),
    /// An idempotency record: `(owner, key)`.
    Op(UserId, String),
    /// Event group: a booking, by hold seq.
    Booking(u64),
    Outbox(u64),
    /// A webhook's provider event id.
    Inbox(String),
    /// Directory: one audit entry.
    Audit(u64),
    /// Directory: a drained node.
    Drained(NodeId),
    /// Directory: an ownership move.
    Move(u64),
    NextMoveId,
}

/// The result of one `apply`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub response: Response,
    pub changed: Vec<RecordKey>,
}

/// A stored record that cannot be decoded: the storage is corrupt.
#[derive(Debug, thiserror::Error)]
#[error("undecodable record {key:?}: {reason}")]
pub struct DecodeError {
    pub key: Vec<u8>,
    pub reason: String,
}

impl DecodeError {
    pub fn code(&self) -> &'static str {
        "record_corrupt"
    }
}

impl RecordKey {
    /// The record's storage key. Prefixes keep kinds apart; numbers are
    /// big-endian so they sort.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            RecordKey::Kv(k) => [b"k/".as_slice(), k.as_bytes()].concat(),
            RecordKey::Node(n) => [b"n/".as_slice(), &n.0.to_be_bytes()].concat(),
            RecordKey::Group(g) => [b"g/".as_slice(), &g.0.to_be_bytes()].concat(),
            RecordKey::NextGroupId => b"m/next_group_id".to_vec(),
            RecordKey::Route(e) => [b"r/".as_slice(), e.0.as_bytes()].concat(),
            RecordKey::Event => b"m/event".to_vec(),
            RecordKey::Seat(s) => [b"s/".as_slice(), s.as_bytes()].concat(),
            RecordKey::Hold(h) => [b"h/".as_slice(), &h.to_be_bytes()].concat(),
            RecordKey::Booking(b) => [b"b/".as_slice(), &b.to_be_bytes()].concat(),
            RecordKey::Outbox(x) => [b"x/".as_slice(), &x.to_be_bytes()].concat(),
            RecordKey::Inbox(i) => [b"i/".as_slice(), i.as_bytes()].concat(),
            RecordKey::Audit(a) => [b"a/".as_slice(), &a.to_be_bytes()].concat(),
            RecordKey::Drained(n) => [b"d/".as_slice(), &n.0.to_be_bytes()].concat(),
            RecordKey::Move(m) => [b"v/".as_slice(), &m.to_be_bytes()].concat(),
            RecordKey::NextMoveId => b"m/next_move_id".to_vec(),
            RecordKey::Op(owner, key) => {
                // The owner's length first, so owner and key cannot run together.
                let len = u16::try_from(owner.0.len()).expect("user ids are short");
                [
                    b"o/".as_slice(),
                    &len.to_be_bytes(),
                    owner.0.as_bytes(),
                    key.as_bytes(),
                ]
                .concat()
            }
        }
    }

    pub fn decode(key: &[u8]) -> Option<RecordKey> {
        let num = |b: &[u8]| b.try_into().ok().map(u64::from_be_bytes);
        match key.split_at_checked(2)? {
            (b"k/", k) => String::from_utf8(k.to_vec()).ok().map(RecordKey::Kv),
            (b"n/", n) => num(n).map(|n| RecordKey::Node(NodeId(n))),
            (b"g/", g) => num(g).map(|g| RecordKey::Group(GroupId(g))),
            (b"m/", b"next_group_id") => Some(RecordKey::NextGroupId),
            (b"m/", b"event") => Some(RecordKey::Event),
            (b"m/", b"next_move_id") => Some(RecordKey::NextMoveId),
            (b"v/", m) => num(m).map(RecordKey::Move),
            (b"r/", e) => String::from_utf8(e.to_vec())
                .ok()
                .map(|e| RecordKey::Route(EventId(e))),
            (b"s/", s) => String::from_utf8(s.to_vec()).ok().map(RecordKey::Seat),
            (b"h/", h) => num(h).map(RecordKey::Hold),
            (b"b/", b) => num(b).map(RecordKey::Booking),
            (b"x/", x) => num(x).map(RecordKey::Outbox),
            (b"i/", i) => String::from_utf8(i.to_vec()).ok().map(RecordKey::Inbox),
            (b"a/", a) => num(a).map(RecordKey::Audit),
            (b"d/", n) => num(n).map(|n| RecordKey::Drained(NodeId(n))),
            (b"o/", rest) => {
                let (len, rest) = rest.split_at_checked(2)?;
                let len = usize::from(u16::from_be_bytes(len.try_into().ok()?));
                let (owner, key) = rest.split_at_checked(len)?;
                Some(RecordKey::Op(
                    UserId(String::from_utf8(owner.to_vec()).ok()?),
                    String::from_utf8(key.to_vec()).ok()?,
                ))
            }
            _ => None,
        }
    }
}

impl State {
    /// Apply one command to the state of group `group`.
    pub fn apply(&mut self, group: GroupId, cmd: &Command) -> Applied {
        let mut changed = Vec::new();
        let response = self.apply_one(group, cmd, &mut changed);
        Applied { response, changed }
    }

    fn apply_one(
        &mut self,
        group: GroupId,
        cmd: &Command,
        changed: &mut Vec<RecordKey>,
    ) -> Response {
        let directory_cmd = matches!(
            cmd,
            Command::RegisterNode(_)
                | Command::CreateGroup { .. }
                | Command::RegisterEvent { .. }
                | Command::PutShared { .. }
                | Command::Audit(_)
                | Command::SetDrained { .. }
                | Command::Move { .. }
        );
        // A batch is checked command by command.
        if !matches!(cmd, Command::Batch(_)) && directory_cmd != group.is_directory() {
            return Response::WrongGroup;
        }
        match cmd {
            Command::Put { key, value } | Command::PutShared { key, value } => {
                changed.push(RecordKey::Kv(key.clone()));
                let existed = self.kv.insert(key.clone(), value.clone()).is_some();
                Response::Written { existed }
            }
            Command::Delete { key } => {
                changed.push(RecordKey::Kv(key.clone()));
                Response::Written {
                    existed: self.kv.remove(key).is_some(),
                }
            }
            Command::Batch(cmds) => Response::Batch(
                cmds.iter()
                    .map(|c| self.apply_one(group, c, changed))
                    .collect(),
            ),
            Command::RegisterNode(node) => {
                changed.push(RecordKey::Node(node.id));
                self.directory.nodes.insert(node.id, node.clone());
                Response::NodeRegistered { node_id: node.id }
            }
            Command::CreateGroup {
                group_id,
                placement,
            } => {
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
                    Some(id) if !id.is_directory() => *id,
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
            Command::RegisterEvent {
                event_id,
                home_region,
                survival,
            } => {
                if let Some(route) = self.directory.events.get(event_id) {
                    return Response::EventRegistered(route.clone());
                }
                let placement = EventRoute::placement(home_region, *survival);
                let group = match self.apply_one(
                    group,
                    &Command::CreateGroup {
                        group_id: None,
                        placement,
                    },
                    changed,
                ) {
                    Response::GroupCreated { group_id, .. } => group_id,
                    other => return other,
                };
                let route = EventRoute {
                    event_id: event_id.clone(),
                    group,
                    home_region: home_region.clone(),
                    owner_region: home_region.clone(),
                    epoch: Epoch(1),
                    survival: *survival,
                    state: crate::directory::RouteState::Active,
                };
                changed.push(RecordKey::Route(event_id.clone()));
                self.directory
                    .events
                    .insert(event_id.clone(), route.clone());
                Response::EventRegistered(route)
            }
            Command::Audit(entry) => {
                let seq = self.audit.keys().next_back().map_or(1, |s| s + 1);
                self.audit.insert(
                    seq,
                    crate::audit::AuditEntry {
                        seq,
                        ..entry.clone()
                    },
                );
                changed.push(RecordKey::Audit(seq));
                while self.audit.len() > crate::audit::AUDIT_KEEP {
                    let oldest = *self.audit.keys().next().expect("not empty");
                    self.audit.remove(&oldest);
                    changed.push(RecordKey::Audit(oldest));
                }
                Response::Audited { seq }
            }
            Command::SetDrained { node, drained } => {
                let was = self.directory.drained.contains(node);
                if *drained {
                    self.directory.drained.insert(*node);
                } else {
                    self.directory.drained.remove(node);
                }
                if was != *drained {
                    changed.push(RecordKey::Drained(*node));
                }
                Response::DrainedSet { was }
            }
            Command::Move { op, at_ms } => {
                Response::Move(self.directory.apply_move(op, *at_ms, changed).map(Box::new))
            }
            Command::Event(c) => Response::Event(self.inventory.apply(c, changed)),
        }
    }

    /// Recompute derived indexes after the records were loaded.
    pub fn rebuild_indexes(&mut self) {
        self.inventory.rebuild_indexes();
    }

    /// The stored bytes of one record, `None` if it does not exist.
    pub fn encode_record(&self, key: &RecordKey) -> Option<Vec<u8>> {
        fn enc<T: Serialize>(v: &T) -> Vec<u8> {
            bincode::serialize(v).expect("in-memory records always serialize")
        }
        match key {
            RecordKey::Kv(k) => self.kv.get(k).cloned(),
            RecordKey::Node(n) => self.directory.nodes.get(n).map(enc),
            RecordKey::Group(g) => self.directory.groups.get(g).map(enc),
            RecordKey::NextGroupId => Some(enc(&self.directory.next_group_id)),
            RecordKey::Route(e) => self.directory.events.get(e).map(enc),
            RecordKey::Event => self.inventory.event.as_ref().map(enc),
            RecordKey::Seat(s) => self.inventory.seats.get(s).map(enc),
            RecordKey::Hold(h) => self.inventory.holds.get(h).map(enc),
            RecordKey::Op(o, k) => self
                .inventory
                .ops
                .get(&OpKey::new(o.clone(), k.clone()))
                .map(enc),
            RecordKey::Booking(b) => self.inventory.bookings.get(b).map(enc),
            RecordKey::Outbox(x) => self.inventory.outbox.get(x).map(enc),
            RecordKey::Inbox(i) => self.inventory.inbox.get(i).map(enc),
            RecordKey::Audit(a) => self.audit.get(a).map(enc),
            RecordKey::Drained(n) => self.directory.drained.contains(n).then(|| enc(&true)),
            RecordKey::Move(m) => self.directory.moves.get(m).map(enc),
            RecordKey::NextMoveId => Some(enc(&self.directory.next_move_id)),
        }
    }

    /// Load one stored record back into the state (used when opening a group).
    pub fn load_record(&mut self, key: &[u8], value: &[u8]) -> Result<(), DecodeError> {
        let err = |reason: String| DecodeError {
            key: key.to_vec(),
            reason,
        };
        fn dec<T: for<'de> Deserialize<'de>>(v: &[u8]) -> Result<T, String> {
            bincode::deserialize(v).map_err(|e| e.to_string())
        }
        match RecordKey::decode(key).ok_or_else(|| err("unknown key".into()))? {
            RecordKey::Kv(k) => {
                self.kv.insert(k, value.to_vec());
            }
            RecordKey::Node(n) => {
                self.directory.nodes.insert(n, dec(value).map_err(err)?);
            }
            RecordKey::Group(g) => {
                self.directory.groups.insert(g, dec(value).map_err(err)?);
            }
            RecordKey::NextGroupId => self.directory.next_group_id = dec(value).map_err(err)?,
            RecordKey::Route(e) => {
                self.directory.events.insert(e, dec(value).map_err(err)?);
            }
            RecordKey::Event => self.inventory.event = Some(dec(value).map_err(err)?),
            RecordKey::Seat(s) => {
                self.inventory.seats.insert(s, dec(value).map_err(err)?);
            }
            RecordKey::Hold(h) => {
                self.inventory.holds.insert(h, dec(value).map_err(err)?);
            }
            RecordKey::Op(o, k) => {
                self.inventory
                    .ops
                    .insert(OpKey::new(o, k), dec(value).map_err(err)?);
            }
            RecordKey::Booking(b) => {
                self.inventory.bookings.insert(b, dec(value).map_err(err)?);
            }
            RecordKey::Outbox(x) => {
                self.inventory.outbox.insert(x, dec(value).map_err(err)?);
            }
            RecordKey::Inbox(i) => {
                self.inventory.inbox.insert(i, dec(value).map_err(err)?);
            }
            RecordKey::Audit(a) => {
                self.audit.insert(a, dec(value).map_err(err)?);
            }
            RecordKey::Drained(n) => {
                self.directory.drained.insert(n);
            }
            RecordKey::Move(m) => {
                self.directory.moves.insert(m, dec(value).map_err(err)?);
            }
            RecordKey::NextMoveId => self.directory.next_move_id = dec(value).map_err(err)?,
        }
        Ok(())
    }

    /// Remove one stored record (the inverse of `load_record`).
    pub fn remove_record(&mut self, key: &[u8]) -> Result<(), DecodeError> {
        match RecordKey::decode(key).ok_or_else(|| DecodeError {
            key: key.to_vec(),
            reason: "unknown key".into(),
        })? {
            RecordKey::Kv(k) => {
                self.kv.remove(&k);
            }
            RecordKey::Node(n) => {
                self.directory.nodes.remove(&n);
            }
            RecordKey::Group(g) => {
                self.directory.groups.remove(&g);
            }
            RecordKey::NextGroupId => self.directory.next_group_id = 0,
            RecordKey::Route(e) => {
                self.directory.events.remove(&e);
            }
            RecordKey::Event => self.inventory.event = None,
            RecordKey::Seat(s) => {
                self.inventory.seats.remove(&s);
            }
            RecordKey::Hold(h) => {
                self.inventory.holds.remove(&h);
            }
            RecordKey::Op(o, k) => {
                self.inventory.ops.remove(&OpKey::new(o, k));
            }
            RecordKey::Booking(b) => {
                self.inventory.bookings.remove(&b);
            }
            RecordKey::Outbox(x) => {
                self.inventory.outbox.remove(&x);
            }
            RecordKey::Inbox(i) => {
                self.inventory.inbox.remove(&i);
            }
            RecordKey::Audit(a) => {
                self.audit.remove(&a);
            }
            RecordKey::Drained(n) => {
                self.directory.drained.remove(&n);
            }
            RecordKey::Move(m) => {
                self.directory.moves.remove(&m);
            }
            RecordKey::NextMoveId => self.directory.next_move_id = 0,
        }
        Ok(())
    }

    /// Every record of the state, as stored.
    pub fn records(&self) -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> + '_ {
        let keys = self
            .kv
            .keys()
            .map(|k| RecordKey::Kv(k.clone()))
            .chain(self.directory.nodes.keys().map(|n| RecordKey::Node(*n)))
            .chain(self.directory.groups.keys().map(|g| RecordKey::Group(*g)))
            .chain(std::iter::once(RecordKey::NextGroupId))
            .chain(
                self.directory
                    .events
                    .keys()
                    .map(|e| RecordKey::Route(e.clone())),
            )
            .chain(std::iter::once(RecordKey::Event))
            .chain(
                self.inventory
                    .seats
                    .keys()
                    .map(|s| RecordKey::Seat(s.clone())),
            )
            .chain(self.inventory.holds.keys().map(|h| RecordKey::Hold(*h)))
            .chain(
                self.inventory
                    .ops
                    .keys()
                    .map(|k| RecordKey::Op(k.owner.clone(), k.key.clone())),
            )
            .chain(
                self.inventory
                    .bookings
                    .keys()
                    .map(|b| RecordKey::Booking(*b)),
            )
            .chain(self.inventory.outbox.keys().map(|x| RecordKey::Outbox(*x)))
            .chain(
                self.inventory
                    .inbox
                    .keys()
                    .map(|i| RecordKey::Inbox(i.clone())),
            )
            .chain(self.audit.keys().map(|a| RecordKey::Audit(*a)))
            .chain(
                self.directory
                    .drained
                    .iter()
                    .map(|n| RecordKey::Drained(*n)),
            )
            .chain(self.directory.moves.keys().map(|m| RecordKey::Move(*m)))
            .chain(std::iter::once(RecordKey::NextMoveId));
        keys.filter_map(|k| self.encode_record(&k).map(|v| (k.encode(), v)))
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
}
