//! Restoring a backup into a new, empty cluster (`seatfence restore`):
//! the commands that load a backed-up group's records and make its event
//! live again, and what each group remembers of it.
//!
//! ```text
//!  directory: Begin{backup}          refused unless no event is routed (or this backup's restore runs)
//!    per event group of the backup:
//!  directory: Group{id, placement}   the group under its backed-up id (hold and booking ids name it)
//!  group:     Records{..}*           its records, as stored (format envelopes), chunk by chunk
//!  group:     Seal{..}               the epoch raised by EPOCH_JUMP, id sequences by ID_JUMP; no more records
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

/// How far a restored event's id sequences (holds, and so bookings, and
/// outbox items) are raised at its seal: past every id the old cluster
/// could have handed out after the backup (it would need 2^40 holds of
/// one event), so no hold, booking or payment key of the old cluster is
/// ever handed out again by the restored one.
pub const ID_JUMP: u64 = 1 << 40;

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
    /// Directory: give up the restore of `backup` (`seatfence restore
    /// --abort`). It ends like a finished one: no step of it applies
    /// again, and a new restore needs a new, empty cluster.
    Abort {
        /// The backup's id.
        backup: String,
    },
    /// Directory: [`RestoreOp::Begin`] by the operator certificate
    /// `operator`. Only a node writes it (its gate turns an operator's
    /// `Begin` into this, naming the caller's certificate): every later
    /// step of the restore must come from the same certificate (an
    /// `Abort` from any operator's).
    BeginBy {
        /// The backup's id.
        backup: String,
        /// The certificate that began it.
        operator: String,
    },
}

/// Directory key-value entries a restore writes (plain names, so every
/// node's gate can read them from its replica of the directory).
pub mod keys {
    /// The operator certificate that began the running restore.
    pub const OPERATOR: &str = "restore/operator";
    /// The backup whose restore was aborted, if one was.
    pub const ABORTED: &str = "restore/aborted";

    /// The key naming the backup whose restore created group `id`.
    pub fn group(id: crate::ids::GroupId) -> String {
        format!("restore/group/{}", id.0)
    }
}

impl RestoreOp {
    /// The backup the step belongs to.
    pub fn backup(&self) -> &str {
        match self {
            RestoreOp::Begin { backup }
            | RestoreOp::BeginBy { backup, .. }
            | RestoreOp::Group { backup, .. }
            | RestoreOp::Records { backup, .. }
            | RestoreOp::Seal { backup }
            | RestoreOp::Route { backup, .. }
            | RestoreOp::Finish { backup }
            | RestoreOp::Abort { backup } => backup,
        }
    }

    /// The step's name, for the audit trail.
    pub fn name(&self) -> &'static str {
        match self {
            RestoreOp::Begin { .. } | RestoreOp::BeginBy { .. } => "restore_begin",
            RestoreOp::Group { .. } => "restore_group",
            RestoreOp::Records { .. } => "restore_records",
            RestoreOp::Seal { .. } => "restore_seal",
            RestoreOp::Route { .. } => "restore_route",
            RestoreOp::Finish { .. } => "restore_finish",
            RestoreOp::Abort { .. } => "restore_abort",
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
    /// The backup whose restore runs here (begun, neither finished nor
    /// aborted), if one does.
    pub fn restore_running(&self) -> Option<&str> {
        self.restore
            .as_ref()
            .filter(|m| !m.done)
            .map(|m| m.backup.as_str())
    }

    /// Whether group `id` was created by backup `backup`'s restore.
    pub fn restored_by(&self, id: GroupId, backup: &str) -> bool {
        self.kv
            .get(&keys::group(id))
            .is_some_and(|b| b.as_slice() == backup.as_bytes())
    }

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
            RestoreOp::Begin { backup } | RestoreOp::BeginBy { backup, .. } => {
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
                if let RestoreOp::BeginBy { operator, .. } = op {
                    self.put_kv(keys::OPERATOR, operator.as_bytes(), changed);
                }
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
                // A restore creates its groups; it never takes over one
                // that exists (a repeated step finds its own).
                if self.directory.groups.contains_key(group_id)
                    && !self.restored_by(*group_id, backup)
                {
                    return Err(format!(
                        "group {group_id} exists and was not created by this restore"
                    ));
                }
                match self.create_group(Some(*group_id), placement, changed) {
                    Response::GroupCreated { members, .. } => {
                        self.put_kv(&keys::group(*group_id), backup.as_bytes(), changed);
                        Ok(RestoreDone::Group { members })
                    }
                    Response::PlacementFailed { reason } => Err(reason),
                    other => Err(format!("{other:?}")),
                }
            }
            RestoreOp::Route { backup, route } => {
                self.restoring(backup)?;
                if !self.restored_by(route.group, backup) {
                    return Err(format!(
                        "group {} was not created by this restore",
                        route.group
                    ));
                }
                // A route is never pointed elsewhere: only a repeated step
                // writes an event's route again, to the same group.
                if let Some(now) = self.directory.events.get(&route.event_id) {
                    if now.group != route.group {
                        return Err(format!(
                            "event {} is routed to group {} already",
                            route.event_id, now.group
                        ));
                    }
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
            RestoreOp::Finish { backup } | RestoreOp::Abort { backup } => {
                self.restoring(backup)?;
                if let Some(m) = &mut self.restore {
                    m.done = true;
                }
                changed.push(RecordKey::Restore);
                if matches!(op, RestoreOp::Abort { .. }) {
                    self.put_kv(keys::ABORTED, backup.as_bytes(), changed);
                }
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

    fn put_kv(&mut self, key: &str, value: &[u8], changed: &mut Vec<RecordKey>) {
        changed.push(RecordKey::Kv(key.to_owned()));
        self.kv.insert(key.to_owned(), value.to_vec());
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
                    event.next_hold_seq = event.next_hold_seq.saturating_add(ID_JUMP);
                    event.next_outbox_id = event.next_outbox_id.saturating_add(ID_JUMP);
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
