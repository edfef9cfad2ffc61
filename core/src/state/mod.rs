//! The replicated state of one group and its pure `apply`.
//!
//! One state type per kind of group: [`DirectoryState`] for group 0
//! (`directory_group.rs`), [`EventState`] for every other group
//! (`event_group.rs`). A [`State`] is one of them, chosen by the group id
//! when the group is opened ([`State::new`]); a command for the other kind
//! answers `WrongGroup` and changes nothing, and a snapshot or record of
//! the other kind is refused.
//!
//! The state is stored record by record (one sled key per record), so `apply`
//! also reports which records it changed: the storage layer writes exactly
//! those, atomically with the applied log id. The record encoding lives in
//! `records.rs` ([`RecordKey`], [`State::records`], [`State::load_record`]).

mod directory_group;
mod event_group;
mod records;

pub use directory_group::DirectoryState;
pub use event_group::EventState;
pub use records::{DecodeError, RecordKey};

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::audit::AuditEntry;
use crate::command::{Command, Response};
use crate::directory::Directory;
use crate::ids::GroupId;
use crate::inventory::Inventory;

/// Everything a group replicates: the directory's state or an event
/// group's.
// One value per group, held in place behind its lock: the directory's
// unused bytes are one group's, and boxing the common kind would add a
// pointer chase to every apply.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// Group 0.
    Directory(DirectoryState),
    /// Every other group.
    Event(EventState),
}

/// The result of one `apply`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// What the command answers.
    pub response: Response,
    /// The records it wrote or removed, in order; one may appear more than once.
    pub changed: Vec<RecordKey>,
}

/// `Put`, `PutShared`: set `key` in a key→value table.
fn put(
    kv: &mut imbl::OrdMap<String, Vec<u8>>,
    key: &str,
    value: &[u8],
    changed: &mut Vec<RecordKey>,
) -> Response {
    changed.push(RecordKey::Kv(key.to_owned()));
    let existed = kv.insert(key.to_owned(), value.to_vec()).is_some();
    Response::Written { existed }
}

/// What a group of the other kind reads: it has none of these.
struct Empty {
    directory: Directory,
    inventory: Inventory,
    audit: imbl::OrdMap<u64, AuditEntry>,
    answers: imbl::OrdMap<(String, String), crate::answers::KeyedAnswer>,
}

fn empty() -> &'static Empty {
    static EMPTY: OnceLock<Empty> = OnceLock::new();
    EMPTY.get_or_init(|| Empty {
        directory: Directory::default(),
        inventory: Inventory::default(),
        audit: imbl::OrdMap::new(),
        answers: imbl::OrdMap::new(),
    })
}

impl State {
    /// The empty state of `group`: the directory's for group 0, an event
    /// group's for any other.
    pub fn new(group: GroupId) -> State {
        if group.is_directory() {
            State::Directory(DirectoryState::default())
        } else {
            State::Event(EventState::default())
        }
    }

    /// Whether this is the state of `group`'s kind.
    pub fn is_for(&self, group: GroupId) -> bool {
        matches!(self, State::Directory(_)) == group.is_directory()
    }

    /// The group's key→value table.
    pub fn kv(&self) -> &imbl::OrdMap<String, Vec<u8>> {
        match self {
            State::Directory(d) => &d.kv,
            State::Event(e) => &e.kv,
        }
    }

    /// The directory (empty for an event group: it has none).
    pub fn directory(&self) -> &Directory {
        match self {
            State::Directory(d) => &d.directory,
            State::Event(_) => &empty().directory,
        }
    }

    /// The event's seat inventory (empty for the directory: it has none).
    pub fn inventory(&self) -> &Inventory {
        match self {
            State::Directory(_) => &empty().inventory,
            State::Event(e) => &e.inventory,
        }
    }

    /// The operators' audit trail, by `seq` (empty for an event group).
    pub fn audit(&self) -> &imbl::OrdMap<u64, AuditEntry> {
        match self {
            State::Directory(d) => &d.audit,
            State::Event(_) => &empty().audit,
        }
    }

    /// First answers to keyed requests, by `(owner, key)` (empty for an
    /// event group).
    pub fn answers(&self) -> &imbl::OrdMap<(String, String), crate::answers::KeyedAnswer> {
        match self {
            State::Directory(d) => &d.answers,
            State::Event(_) => &empty().answers,
        }
    }

    /// Apply one command to the state of group `group`. A state of the
    /// other kind than `group`'s answers `WrongGroup` and changes nothing.
    pub fn apply(&mut self, group: GroupId, cmd: &Command) -> Applied {
        let mut changed = Vec::new();
        let response = if self.is_for(group) {
            self.apply_one(cmd, &mut changed)
        } else {
            Response::WrongGroup
        };
        Applied { response, changed }
    }

    /// Apply one command (a batch: each of its commands, in order), adding
    /// the records it changes to `changed`. A command for the other kind of
    /// group is `WrongGroup` and changes nothing.
    fn apply_one(&mut self, cmd: &Command, changed: &mut Vec<RecordKey>) -> Response {
        // Bounds every replica checks (a batch inside a batch refuses the
        // outer batch whole; any other command is refused alone, so the
        // commands sharing its entry still apply).
        if let Err(reason) = cmd.check_bounds() {
            return Response::Invalid { reason };
        }
        match (self, cmd) {
            (s, Command::Batch(cmds)) => {
                Response::Batch(cmds.iter().map(|c| s.apply_one(c, changed)).collect())
            }
            (State::Directory(d), cmd) => d.apply(cmd, changed),
            (State::Event(e), cmd) => e.apply(cmd, changed),
        }
    }

    /// Recompute derived indexes after the records were loaded.
    pub fn rebuild_indexes(&mut self) {
        if let State::Event(e) = self {
            e.inventory.rebuild_indexes();
        }
    }
}

#[cfg(test)]
mod tests;
