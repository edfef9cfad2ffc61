//! Restoring a backup into a new, empty cluster (`seatfence restore`):
//! the commands that load a backed-up group's records and make its event
//! live again, and what each group remembers of it.
//!
//! ```text
//!  directory: Begin{backup}          refused unless no event is routed (or this backup's restore runs)
//!    per event group of the backup:
//!  directory: Group{id, placement}   the group under its backed-up id (hold and booking ids name it)
//!  group:     Records{..}*           its records, as stored (format envelopes), chunk by chunk
//!  group:     Seal{..}               the epoch raised by EPOCH_JUMP; no more records
//!  directory: Route{route}           edges route to it
//!  directory: Records{..}*           the audit trail, keyed answers, finished moves
//!  directory: Finish{backup}
//! ```
//!
//! Every step is idempotent under the same backup id, so a restore cut
//! short runs again from the start. A group takes records only while it
//! holds no event or is being restored by the same backup, never after its
//! seal; the directory takes them only while the same backup's restore
//! runs. The epoch jump puts every restored event's fence past any the old
//! cluster could reach (it would need 2^32 ownership moves), so a gateway
//! fence or a zombie request from the old cluster never passes here.

use serde::{Deserialize, Serialize};

use crate::directory::{EventRoute, Placement};
use crate::ids::{Epoch, GroupId};

/// How far a restored event's epoch is raised.
pub const EPOCH_JUMP: u64 = 1 << 32;

/// One step of a restore (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestoreOp {
    /// Directory: start restoring backup `backup`.
    Begin {
        /// The backup's id (its manifest's).
        backup: String,
    },
    /// Directory: create the backed-up group `group_id`, placed by the new
    /// cluster's rules.
    Group {
        /// The backup's id.
        backup: String,
        /// The group's id in the backup.
        group_id: GroupId,
        /// Where its voters go.
        placement: Placement,
    },
    /// Load records as stored (storage key, value). In an event group: its
    /// backed-up records; in the directory: audit entries, keyed answers
    /// and finished moves (other kinds are refused).
    Records {
        /// The backup's id.
        backup: String,
        /// The records.
        records: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// Event group: the group is complete; raise its epoch by
    /// [`EPOCH_JUMP`] and take no more records.
    Seal {
        /// The backup's id.
        backup: String,
    },
    /// Directory: route the restored event (its epoch already raised).
    Route {
        /// The backup's id.
        backup: String,
        /// The route edges use.
        route: EventRoute,
    },
    /// Directory: the restore is complete.
    Finish {
        /// The backup's id.
        backup: String,
    },
}

impl RestoreOp {
    /// The backup the step belongs to.
    pub fn backup(&self) -> &str {
        match self {
            RestoreOp::Begin { backup }
            | RestoreOp::Group { backup, .. }
            | RestoreOp::Records { backup, .. }
            | RestoreOp::Seal { backup }
            | RestoreOp::Route { backup, .. }
            | RestoreOp::Finish { backup } => backup,
        }
    }
}

/// What a group remembers of the restore that made it (the record
/// [`crate::RecordKey::Restore`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreMark {
    /// The backup's id.
    pub backup: String,
    /// Directory: the restore finished. Event group: the group is sealed.
    pub done: bool,
    /// Event group: the last change of the backed-up changefeed (0 for
    /// the directory).
    pub changes_through: u64,
}

/// The answer to a restore step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestoreDone {
    /// Done (or done before, for a repeated step).
    Ok,
    /// A group was created (or existed): its voters.
    Group {
        /// The group's voters.
        members: Vec<crate::ids::NodeId>,
    },
    /// An event group was sealed: its event's epoch now.
    Sealed {
        /// The raised epoch.
        epoch: Epoch,
    },
}

use crate::command::Response;
use crate::record_key::RecordKey;
use crate::state::{DirectoryState, EventState};

type Step = Result<RestoreDone, String>;

impl DirectoryState {
    /// Whether backup `backup`'s restore runs here.
    fn restoring(&self, backup: &str) -> Result<(), String> {
        match &self.restore {
            Some(m) if m.backup == backup && !m.done => Ok(()),
            Some(m) if m.backup == backup => {
                Err(format!("backup {backup} was restored here already"))
            }
            Some(m) => Err(format!(
                "this cluster is restoring backup {}, not {backup}",
                m.backup
            )),
            None => Err(format!(
                "no restore of backup {backup} runs here (it begins with Begin)"
            )),
        }
    }

    /// A restore step for the directory.
    pub(crate) fn restore_step(
        &mut self,
        op: &RestoreOp,
        changed: &mut Vec<RecordKey>,
    ) -> Response {
        Response::Restore(self.restore_inner(op, changed))
    }

    fn restore_inner(&mut self, op: &RestoreOp, changed: &mut Vec<RecordKey>) -> Step {
        match op {
            RestoreOp::Begin { backup } => {
                if let Some(m) = &self.restore {
                    return match (m.backup == *backup, m.done) {
                        (true, false) => Ok(RestoreDone::Ok),
                        (true, true) => Err(format!("backup {backup} was restored here already")),
                        (false, _) => Err(format!(
                            "this cluster holds a restore of backup {} already: restore into a new, empty cluster",
                            m.backup
                        )),
                    };
                }
                if !self.directory.events.is_empty() {
                    return Err(format!(
                        "this cluster is not empty: it routes {} events (restore into a new, empty cluster)",
                        self.directory.events.len()
                    ));
                }
                self.restore = Some(RestoreMark {
                    backup: backup.clone(),
                    done: false,
                    changes_through: 0,
                });
                changed.push(RecordKey::Restore);
                Ok(RestoreDone::Ok)
            }
            RestoreOp::Group {
                backup,
                group_id,
                placement,
            } => {
                self.restoring(backup)?;
                if group_id.is_directory() {
                    return Err("group 0 is the directory".into());
                }
                match self.create_group(Some(*group_id), placement, changed) {
                    Response::GroupCreated { members, .. } => Ok(RestoreDone::Group { members }),
                    Response::PlacementFailed { reason } => Err(reason),
                    other => Err(format!("{other:?}")),
                }
            }
            RestoreOp::Route { backup, route } => {
                self.restoring(backup)?;
                if !self.directory.groups.contains_key(&route.group) {
                    return Err(format!("group {} is not restored yet", route.group));
                }
                let route = EventRoute {
                    state: crate::directory::RouteState::Active,
                    ..route.clone()
                };
                changed.push(RecordKey::Route(route.event_id.clone()));
                self.directory.events.insert(route.event_id.clone(), route);
                Ok(RestoreDone::Ok)
            }
            RestoreOp::Records { backup, records } => {
                self.restoring(backup)?;
                self.restore_records(records, changed)
            }
            RestoreOp::Finish { backup } => {
                self.restoring(backup)?;
                if let Some(m) = &mut self.restore {
                    m.done = true;
                }
                changed.push(RecordKey::Restore);
                Ok(RestoreDone::Ok)
            }
            RestoreOp::Seal { .. } => Err("Seal is for an event group".into()),
        }
    }

    /// The directory's records a restore keeps: the audit trail (appended
    /// in order, deduplicated by entry id), keyed answers, and finished
    /// moves. All of a chunk or none.
    fn restore_records(
        &mut self,
        records: &[(Vec<u8>, Vec<u8>)],
        changed: &mut Vec<RecordKey>,
    ) -> Step {
        let mut audit = Vec::new();
        let mut scratch = DirectoryState::default();
        let mut keys = Vec::new();
        for (k, v) in records {
            let rk = RecordKey::decode(k).ok_or_else(|| format!("unknown record key {k:?}"))?;
            match &rk {
                RecordKey::Audit(_) => audit.push(
                    crate::format::decode::<crate::audit::AuditEntry>(v)
                        .map_err(|e| e.to_string())?,
                ),
                RecordKey::Answer(..) | RecordKey::Move(_) => {
                    scratch.load(&rk, k, v)?;
                    keys.push(rk);
                }
                other => {
                    return Err(format!(
                        "a restore does not load the directory record {other:?}"
                    ))
                }
            }
        }
        if let Some(m) = scratch
            .directory
            .moves
            .values()
            .find(|m| m.state == crate::moves::MoveState::Running)
        {
            return Err(format!(
                "move {} is not finished: a restore keeps finished moves only",
                m.move_id
            ));
        }
        for rk in keys {
            match rk {
                RecordKey::Answer(o, key) => {
                    let a = scratch.answers[&(o.clone(), key.clone())].clone();
                    self.answers.insert((o.clone(), key.clone()), a);
                    changed.push(RecordKey::Answer(o, key));
                }
                RecordKey::Move(id) => {
                    self.directory
                        .moves
                        .insert(id, scratch.directory.moves[&id].clone());
                    changed.push(RecordKey::Move(id));
                    if self.directory.next_move_id <= id {
                        self.directory.next_move_id = id + 1;
                        changed.push(RecordKey::NextMoveId);
                    }
                }
                _ => unreachable!("filtered above"),
            }
        }
        for entry in &audit {
            self.append_audit(entry, changed);
        }
        Ok(RestoreDone::Ok)
    }

    fn load(&mut self, rk: &RecordKey, k: &[u8], v: &[u8]) -> Result<(), String> {
        let mut s = crate::State::Directory(std::mem::take(self));
        let r = s
            .load_record(k, v)
            .map_err(|e| format!("{rk:?}: {}", e.reason));
        if let crate::State::Directory(d) = s {
            *self = d;
        }
        r
    }
}

impl EventState {
    /// A restore step for an event group.
    pub(crate) fn restore_step(
        &mut self,
        op: &RestoreOp,
        changed: &mut Vec<RecordKey>,
    ) -> Response {
        Response::Restore(self.restore_inner(op, changed))
    }

    fn restore_inner(&mut self, op: &RestoreOp, changed: &mut Vec<RecordKey>) -> Step {
        let backup = op.backup();
        match (&self.restore, op) {
            (Some(m), _) if m.backup != backup => {
                return Err(format!("this group was restored from backup {}", m.backup))
            }
            (None, RestoreOp::Records { .. })
                if self.inventory.event().is_some() || !self.kv.is_empty() =>
            {
                return Err(
                    "this group holds data of its own: a restore loads only into a new group"
                        .into(),
                )
            }
            (None, RestoreOp::Seal { .. }) => {
                return Err("nothing of this backup was loaded here".into())
            }
            _ => {}
        }
        match op {
            RestoreOp::Records { records, .. } => {
                if self.restore.as_ref().is_some_and(|m| m.done) {
                    return Err("this group is sealed: it takes no more records".into());
                }
                let mut next = crate::State::Event(self.clone());
                let mut keys = Vec::with_capacity(records.len());
                for (k, v) in records {
                    let rk =
                        RecordKey::decode(k).ok_or_else(|| format!("unknown record key {k:?}"))?;
                    // A backup of a restored group carries its mark: this
                    // restore writes its own.
                    if rk == RecordKey::Restore {
                        continue;
                    }
                    next.load_record(k, v)
                        .map_err(|e| format!("{rk:?}: {}", e.reason))?;
                    keys.push(rk);
                }
                let crate::State::Event(mut next) = next else {
                    unreachable!("an event state stays one")
                };
                next.inventory.rebuild_indexes();
                *self = next;
                changed.extend(keys);
                if self.restore.is_none() {
                    self.restore = Some(RestoreMark {
                        backup: backup.to_string(),
                        done: false,
                        changes_through: 0,
                    });
                    changed.push(RecordKey::Restore);
                }
                Ok(RestoreDone::Ok)
            }
            RestoreOp::Seal { .. } => {
                let through = self
                    .inventory
                    .changes
                    .keys()
                    .next_back()
                    .copied()
                    .unwrap_or(0);
                let Some(event) = self.inventory.event.as_mut() else {
                    return Err("no event record was loaded into this group".into());
                };
                let mark = self.restore.as_mut().expect("checked above");
                if !mark.done {
                    event.epoch = Epoch(event.epoch.0.saturating_add(EPOCH_JUMP));
                    mark.done = true;
                    mark.changes_through = through;
                    changed.push(RecordKey::Event);
                    changed.push(RecordKey::Restore);
                }
                Ok(RestoreDone::Sealed { epoch: event.epoch })
            }
            _ => Err("a directory step sent to an event group".into()),
        }
    }
}
