//! How a [`State`] is stored: one storage key per record.
//!
//! [`RecordKey`] names a record and encodes it as a storage key (the kind
//! of record in a prefix); `State` encodes one record's value, loads or
//! removes one stored record, and lists every record as stored.

use serde::{Deserialize, Serialize};

use crate::inventory::OpKey;
pub use crate::record_key::RecordKey;

use super::{DirectoryState, EventState, State};

/// A stored record that cannot be decoded: the storage is corrupt.
#[derive(Debug, thiserror::Error)]
#[error("undecodable record {key:?}: {reason}")]
pub struct DecodeError {
    /// The record's storage key, as stored.
    pub key: Vec<u8>,
    /// Why it could not be decoded.
    pub reason: String,
}

impl DecodeError {
    /// The stable error code, `record_corrupt`.
    pub fn code(&self) -> &'static str {
        "record_corrupt"
    }
}

impl State {
    /// The stored bytes of one record, `None` if it does not exist (or
    /// belongs to the other kind of group).
    pub fn encode_record(&self, key: &RecordKey) -> Option<Vec<u8>> {
        match self {
            State::Directory(d) => d.encode_record(key),
            State::Event(e) => e.encode_record(key),
        }
    }

    /// Load one stored record back into the state (used when opening a
    /// group). A record of the other kind of group is refused.
    pub fn load_record(&mut self, key: &[u8], value: &[u8]) -> Result<(), DecodeError> {
        let err = |reason: String| DecodeError {
            key: key.to_vec(),
            reason,
        };
        let rk = RecordKey::decode(key).ok_or_else(|| err("unknown key".into()))?;
        let loaded = match self {
            State::Directory(d) => d.load_record(rk, value),
            State::Event(e) => e.load_record(rk, value),
        };
        match loaded.map_err(err)? {
            true => Ok(()),
            false => Err(err("a record of the other kind of group".into())),
        }
    }

    /// Remove one stored record (the inverse of `load_record`).
    pub fn remove_record(&mut self, key: &[u8]) -> Result<(), DecodeError> {
        let err = |reason: &str| DecodeError {
            key: key.to_vec(),
            reason: reason.into(),
        };
        let rk = RecordKey::decode(key).ok_or_else(|| err("unknown key"))?;
        let removed = match self {
            State::Directory(d) => d.remove_record(rk),
            State::Event(e) => e.remove_record(rk),
        };
        removed.ok_or_else(|| err("a record of the other kind of group"))
    }

    /// Every record of the state, as stored.
    pub fn records(&self) -> Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)> + '_> {
        let keys: Box<dyn Iterator<Item = RecordKey> + '_> = match self {
            State::Directory(d) => Box::new(d.record_keys()),
            State::Event(e) => Box::new(e.record_keys()),
        };
        Box::new(keys.filter_map(|k| self.encode_record(&k).map(|v| (k.encode(), v))))
    }
}

fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    crate::format::encode(v).expect("in-memory records always serialize")
}

fn dec<T: for<'de> Deserialize<'de>>(v: &[u8]) -> Result<T, String> {
    crate::format::decode(v).map_err(|e| e.to_string())
}

impl DirectoryState {
    /// One record's bytes; `None` if absent or not a directory record.
    fn encode_record(&self, key: &RecordKey) -> Option<Vec<u8>> {
        let d = &self.directory;
        match key {
            RecordKey::Kv(k) => self.kv.get(k).cloned(),
            RecordKey::Node(n) => d.nodes.get(n).map(enc),
            RecordKey::Group(g) => d.groups.get(g).map(enc),
            RecordKey::NextGroupId => Some(enc(&d.next_group_id)),
            RecordKey::Route(e) => d.events.get(e).map(enc),
            RecordKey::Audit(a) => self.audit.get(a).map(enc),
            RecordKey::Drained(n) => d.drained.contains(n).then(|| enc(&true)),
            RecordKey::Move(m) => d.moves.get(m).map(enc),
            RecordKey::NextMoveId => Some(enc(&d.next_move_id)),
            RecordKey::Format => Some(enc(&d.active_format)),
            RecordKey::Restore => self.restore.as_ref().map(enc),
            RecordKey::Answer(o, k) => self.answers.get(&(o.clone(), k.clone())).map(enc),
            RecordKey::NodeState(n) => d.node_states.get(n).map(enc),
            RecordKey::Repair(g) => d.repairs.get(g).map(enc),
            RecordKey::Rejoin(n) => d.rejoins.get(n).map(enc),
            _ => None,
        }
    }

    /// Load one record; `Ok(false)` if it is not a directory record.
    fn load_record(&mut self, key: RecordKey, value: &[u8]) -> Result<bool, String> {
        let d = &mut self.directory;
        match key {
            RecordKey::Kv(k) => {
                self.kv.insert(k, value.to_vec());
            }
            RecordKey::Node(n) => {
                d.nodes.insert(n, dec(value)?);
            }
            RecordKey::Group(g) => {
                d.groups.insert(g, dec(value)?);
            }
            RecordKey::NextGroupId => d.next_group_id = dec(value)?,
            RecordKey::Route(e) => {
                d.events.insert(e, dec(value)?);
            }
            RecordKey::Audit(a) => {
                self.audit.insert(a, dec(value)?);
            }
            RecordKey::Drained(n) => {
                d.drained.insert(n);
            }
            RecordKey::Move(m) => {
                d.moves.insert(m, dec(value)?);
            }
            RecordKey::NextMoveId => d.next_move_id = dec(value)?,
            RecordKey::Format => d.active_format = dec(value)?,
            RecordKey::Restore => self.restore = Some(dec(value)?),
            RecordKey::Answer(o, k) => {
                self.answers.insert((o, k), dec(value)?);
            }
            RecordKey::NodeState(n) => {
                d.node_states.insert(n, dec(value)?);
            }
            RecordKey::Repair(g) => {
                d.repairs.insert(g, dec(value)?);
            }
            RecordKey::Rejoin(n) => {
                d.rejoins.insert(n, dec(value)?);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Remove one record; `None` if it is not a directory record.
    fn remove_record(&mut self, key: RecordKey) -> Option<()> {
        let d = &mut self.directory;
        match key {
            RecordKey::Kv(k) => {
                self.kv.remove(&k);
            }
            RecordKey::Node(n) => {
                d.nodes.remove(&n);
            }
            RecordKey::Group(g) => {
                d.groups.remove(&g);
            }
            RecordKey::NextGroupId => d.next_group_id = 0,
            RecordKey::Route(e) => {
                d.events.remove(&e);
            }
            RecordKey::Audit(a) => {
                self.audit.remove(&a);
            }
            RecordKey::Drained(n) => {
                d.drained.remove(&n);
            }
            RecordKey::Move(m) => {
                d.moves.remove(&m);
            }
            RecordKey::NextMoveId => d.next_move_id = 0,
            RecordKey::Format => d.active_format = 0,
            RecordKey::Restore => self.restore = None,
            RecordKey::Answer(o, k) => {
                self.answers.remove(&(o, k));
            }
            RecordKey::NodeState(n) => {
                d.node_states.remove(&n);
            }
            RecordKey::Repair(g) => {
                d.repairs.remove(&g);
            }
            RecordKey::Rejoin(n) => {
                d.rejoins.remove(&n);
            }
            _ => return None,
        }
        Some(())
    }

    /// The key of every record the state may hold.
    fn record_keys(&self) -> impl Iterator<Item = RecordKey> + '_ {
        let d = &self.directory;
        self.kv
            .keys()
            .map(|k| RecordKey::Kv(k.clone()))
            .chain(d.nodes.keys().map(|n| RecordKey::Node(*n)))
            .chain(d.groups.keys().map(|g| RecordKey::Group(*g)))
            .chain(std::iter::once(RecordKey::NextGroupId))
            .chain(d.events.keys().map(|e| RecordKey::Route(e.clone())))
            .chain(self.audit.keys().map(|a| RecordKey::Audit(*a)))
            .chain(d.drained.iter().map(|n| RecordKey::Drained(*n)))
            .chain(d.moves.keys().map(|m| RecordKey::Move(*m)))
            .chain(std::iter::once(RecordKey::NextMoveId))
            .chain(std::iter::once(RecordKey::Format))
            .chain(std::iter::once(RecordKey::Restore))
            .chain(
                self.answers
                    .keys()
                    .map(|(o, k)| RecordKey::Answer(o.clone(), k.clone())),
            )
            .chain(d.node_states.keys().map(|n| RecordKey::NodeState(*n)))
            .chain(d.repairs.keys().map(|g| RecordKey::Repair(*g)))
            .chain(d.rejoins.keys().map(|n| RecordKey::Rejoin(*n)))
    }
}

impl EventState {
    /// One record's bytes; `None` if absent or not an event group's record.
    fn encode_record(&self, key: &RecordKey) -> Option<Vec<u8>> {
        let inv = &self.inventory;
        match key {
            RecordKey::Kv(k) => self.kv.get(k).cloned(),
            RecordKey::Event => inv.event.as_ref().map(enc),
            RecordKey::Seat(s) => inv.seats.get(s).map(enc),
            RecordKey::Hold(h) => inv.holds.get(h).map(enc),
            RecordKey::Op(o, k) => inv.ops.get(&OpKey::new(o.clone(), k.clone())).map(enc),
            RecordKey::Booking(b) => inv.bookings.get(b).map(enc),
            RecordKey::Outbox(x) => inv.outbox.get(x).map(enc),
            RecordKey::Inbox(i) => inv.inbox.get(i).map(enc),
            RecordKey::Change(c) => inv.changes.get(c).map(enc),
            RecordKey::Room => inv.room.as_ref().map(enc),
            RecordKey::Place(u) => inv.places.get(u).map(enc),
            RecordKey::Restore => self.restore.as_ref().map(enc),
            _ => None,
        }
    }

    /// Load one record; `Ok(false)` if it is not an event group's record.
    fn load_record(&mut self, key: RecordKey, value: &[u8]) -> Result<bool, String> {
        let inv = &mut self.inventory;
        match key {
            RecordKey::Kv(k) => {
                self.kv.insert(k, value.to_vec());
            }
            RecordKey::Event => inv.event = Some(dec(value)?),
            RecordKey::Seat(s) => {
                inv.seats.insert(s, dec(value)?);
            }
            RecordKey::Hold(h) => {
                inv.holds.insert(h, dec(value)?);
            }
            RecordKey::Op(o, k) => {
                inv.ops.insert(OpKey::new(o, k), dec(value)?);
            }
            RecordKey::Booking(b) => {
                inv.bookings.insert(b, dec(value)?);
            }
            RecordKey::Outbox(x) => {
                inv.outbox.insert(x, dec(value)?);
            }
            RecordKey::Inbox(i) => {
                inv.inbox.insert(i, dec(value)?);
            }
            RecordKey::Change(c) => {
                inv.changes.insert(c, dec(value)?);
            }
            RecordKey::Room => inv.room = Some(dec(value)?),
            RecordKey::Place(u) => {
                inv.places.insert(u, dec(value)?);
            }
            RecordKey::Restore => self.restore = Some(dec(value)?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Remove one record; `None` if it is not an event group's record.
    fn remove_record(&mut self, key: RecordKey) -> Option<()> {
        let inv = &mut self.inventory;
        match key {
            RecordKey::Kv(k) => {
                self.kv.remove(&k);
            }
            RecordKey::Event => inv.event = None,
            RecordKey::Seat(s) => {
                inv.seats.remove(&s);
            }
            RecordKey::Hold(h) => {
                inv.holds.remove(&h);
            }
            RecordKey::Op(o, k) => {
                inv.ops.remove(&OpKey::new(o, k));
            }
            RecordKey::Booking(b) => {
                inv.bookings.remove(&b);
            }
            RecordKey::Outbox(x) => {
                inv.outbox.remove(&x);
            }
            RecordKey::Inbox(i) => {
                inv.inbox.remove(&i);
            }
            RecordKey::Change(c) => {
                inv.changes.remove(&c);
            }
            RecordKey::Room => inv.room = None,
            RecordKey::Place(u) => {
                inv.places.remove(&u);
            }
            RecordKey::Restore => self.restore = None,
            _ => return None,
        }
        Some(())
    }

    /// The key of every record the state may hold.
    fn record_keys(&self) -> impl Iterator<Item = RecordKey> + '_ {
        let inv = &self.inventory;
        self.kv
            .keys()
            .map(|k| RecordKey::Kv(k.clone()))
            .chain(std::iter::once(RecordKey::Event))
            .chain(inv.seats.keys().map(|s| RecordKey::Seat(s.clone())))
            .chain(inv.holds.keys().map(|h| RecordKey::Hold(*h)))
            .chain(
                inv.ops
                    .keys()
                    .map(|k| RecordKey::Op(k.owner.clone(), k.key.clone())),
            )
            .chain(inv.bookings.keys().map(|b| RecordKey::Booking(*b)))
            .chain(inv.outbox.keys().map(|x| RecordKey::Outbox(*x)))
            .chain(inv.inbox.keys().map(|i| RecordKey::Inbox(i.clone())))
            .chain(inv.changes.keys().map(|c| RecordKey::Change(*c)))
            .chain(std::iter::once(RecordKey::Room))
            .chain(inv.places.keys().map(|u| RecordKey::Place(u.clone())))
            .chain(std::iter::once(RecordKey::Restore))
    }
}
