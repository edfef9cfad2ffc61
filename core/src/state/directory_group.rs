//! The directory's state (group 0): its key→value table, the directory,
//! the operators' audit trail and the first answers to keyed requests, and
//! the commands only the directory takes.

use serde::{Deserialize, Serialize};

use super::{put, RecordKey};
use crate::audit::{AuditEntry, AUDIT_KEEP};
use crate::command::{Command, Response};
use crate::directory::{Directory, EventRoute, GroupInfo, NodeInfo, Placement, RouteState};
use crate::ids::{Epoch, EventId, GroupId, NodeId, RegionId};
use crate::inventory::Survival;

/// What group 0 replicates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryState {
    /// The shared key→value table (`PutShared`: gateway tokens and the
    /// like). A persistent map: cloning it (for a snapshot) is O(1).
    pub kv: imbl::OrdMap<String, Vec<u8>>,
    /// Nodes, groups, event routes, moves and node lifecycle.
    pub directory: Directory,
    /// The operators' audit trail, by `seq`.
    pub audit: imbl::OrdMap<u64, AuditEntry>,
    /// First answers to keyed requests, by `(owner, key)`.
    pub answers: imbl::OrdMap<(String, String), crate::answers::KeyedAnswer>,
    /// The restore of a backup into this cluster, if one began.
    pub restore: Option<crate::restore::RestoreMark>,
}

impl DirectoryState {
    /// Apply one command that is not a batch. A command for an event group
    /// is `WrongGroup` and changes nothing.
    pub(super) fn apply(&mut self, cmd: &Command, changed: &mut Vec<RecordKey>) -> Response {
        match cmd {
            Command::PutShared { key, value } => put(&mut self.kv, key, value, changed),
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
                put(&mut self.kv, key, value, changed)
            }
            Command::RegisterNode(node) => self.register_node(node, changed),
            Command::SetFormat { version } => self.set_format(*version, changed),
            Command::Restore(op) => self.restore_step(op, changed),
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
            Command::Node { op, at_ms } => Response::Node(
                self.directory
                    .apply_node_op(op, *at_ms, changed)
                    .map(Box::new),
            ),
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
            Command::Put { .. } | Command::Delete { .. } | Command::Event(_) => {
                Response::WrongGroup
            }
            // `State::apply_one` takes a batch apart before it gets here.
            Command::Batch(_) => Response::WrongGroup,
        }
    }

    /// `RegisterNode`: add or update a node of the directory. A node
    /// known under another (recorded) incarnation is refused: its data dir
    /// is not the one that voted and acknowledged under its id. So is one
    /// claiming another region: a node keeps its region (its address may
    /// change, its data dir with it).
    fn register_node(&mut self, node: &NodeInfo, changed: &mut Vec<RecordKey>) -> Response {
        if let Some(known) = self.directory.nodes.get(&node.id) {
            if known.incarnation != 0 && known.incarnation != node.incarnation {
                return Response::IncarnationMismatch {
                    node_id: node.id,
                    known: known.incarnation,
                    claimed: node.incarnation,
                };
            }
            if known.region != node.region {
                return Response::RegionMismatch {
                    node_id: node.id,
                    known: known.region.clone(),
                    claimed: node.region.clone(),
                };
            }
        }
        let active = self.directory.format();
        if node.format_max < active {
            return Response::FormatRefused {
                reason: format!(
                    "the cluster writes data format v{active} and node {}'s binary reads v{} \
                     at most: run a release that reads v{active}",
                    node.id.0, node.format_max
                ),
            };
        }
        changed.push(RecordKey::Node(node.id));
        self.directory.nodes.insert(node.id, node.clone());
        Response::NodeRegistered { node_id: node.id }
    }

    /// `SetFormat`: raise the active data format once every live node
    /// reads it; asking for the current one (or an older one) answers the
    /// current one and changes nothing.
    fn set_format(
        &mut self,
        version: crate::format::Version,
        changed: &mut Vec<RecordKey>,
    ) -> Response {
        let active = self.directory.format();
        if version <= active {
            return Response::FormatSet { version: active };
        }
        if let Some(reason) = self.directory.format_blocker(version) {
            return Response::FormatRefused { reason };
        }
        changed.push(RecordKey::Format);
        self.directory.active_format = version;
        Response::FormatSet { version }
    }

    /// `CreateGroup`: place a group and record it. An id that exists answers
    /// the existing group; `None` allocates the next free id (never 0, the
    /// directory's).
    pub(crate) fn create_group(
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
        // A cluster being restored takes its events from the backup alone
        // until the restore finishes (or is aborted).
        if let Some(backup) = self.restore_running() {
            return Response::Restore(Err(format!(
                "backup {backup} is being restored into this cluster: events are created once it finishes or is aborted"
            )));
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
    pub(crate) fn append_audit(
        &mut self,
        entry: &AuditEntry,
        changed: &mut Vec<RecordKey>,
    ) -> Response {
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
}
