//! An event group's state: its seat inventory (and the plain key→value
//! table the raft benchmark and tests write), and the commands it takes.

use serde::{Deserialize, Serialize};

use super::{put, RecordKey};
use crate::command::{Command, Response};
use crate::inventory::Inventory;

/// What an event group replicates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventState {
    /// A key→value table (`Put`, `Delete`): plain groups' only state.
    pub kv: imbl::OrdMap<String, Vec<u8>>,
    /// The event's seat inventory.
    pub inventory: Inventory,
    /// The restore that loaded this group, if one did.
    pub restore: Option<crate::restore::RestoreMark>,
}

impl EventState {
    /// Apply one command that is not a batch. A command for the directory
    /// is `WrongGroup` and changes nothing.
    pub(super) fn apply(&mut self, cmd: &Command, changed: &mut Vec<RecordKey>) -> Response {
        match cmd {
            Command::Put { key, value } => put(&mut self.kv, key, value, changed),
            Command::Delete { key } => {
                changed.push(RecordKey::Kv(key.to_owned()));
                Response::Written {
                    existed: self.kv.remove(key).is_some(),
                }
            }
            // A group a restore is loading sells nothing until its seal.
            Command::Event(_) if self.restore.as_ref().is_some_and(|m| !m.done) => {
                Response::Restore(Err(
                    "this group is being restored: it takes no command until its seal".into(),
                ))
            }
            Command::Event(c) => Response::Event(self.inventory.apply(c, changed)),
            Command::Restore(op) => self.restore_step(op, changed),
            Command::PutShared { .. }
            | Command::PutSharedIf { .. }
            | Command::RegisterNode(_)
            | Command::SetFormat { .. }
            | Command::CreateGroup { .. }
            | Command::RegisterEvent { .. }
            | Command::SetDrained { .. }
            | Command::Move { .. }
            | Command::Node { .. }
            | Command::Audit(_)
            | Command::RememberAnswer { .. }
            | Command::ForgetAnswer { .. } => Response::WrongGroup,
            // `State::apply_one` takes a batch apart before it gets here.
            Command::Batch(_) => Response::WrongGroup,
        }
    }
}
