//! How a [`State`] is stored: one storage key per record.
//!
//! [`RecordKey`] names a record and encodes it as a storage key (the kind
//! of record in a prefix); `State` encodes one record's value, loads or
//! removes one stored record, and lists every record as stored.

use serde::{Deserialize, Serialize};

use crate::inventory::OpKey;
pub use crate::record_key::RecordKey;

use super::State;

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
            RecordKey::Answer(o, k) => self.answers.get(&(o.clone(), k.clone())).map(enc),
            RecordKey::NodeState(n) => self.directory.node_states.get(n).map(enc),
            RecordKey::Repair(g) => self.directory.repairs.get(g).map(enc),
            RecordKey::Rejoin(n) => self.directory.rejoins.get(n).map(enc),
            RecordKey::Change(c) => self.inventory.changes.get(c).map(enc),
            RecordKey::Room => self.inventory.room.as_ref().map(enc),
            RecordKey::Place(u) => self.inventory.places.get(u).map(enc),
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
            RecordKey::Answer(o, k) => {
                self.answers.insert((o, k), dec(value).map_err(err)?);
            }
            RecordKey::NodeState(n) => {
                self.directory
                    .node_states
                    .insert(n, dec(value).map_err(err)?);
            }
            RecordKey::Repair(g) => {
                self.directory.repairs.insert(g, dec(value).map_err(err)?);
            }
            RecordKey::Rejoin(n) => {
                self.directory.rejoins.insert(n, dec(value).map_err(err)?);
            }
            RecordKey::Change(c) => {
                self.inventory.changes.insert(c, dec(value).map_err(err)?);
            }
            RecordKey::Room => self.inventory.room = Some(dec(value).map_err(err)?),
            RecordKey::Place(u) => {
                self.inventory.places.insert(u, dec(value).map_err(err)?);
            }
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
            RecordKey::Answer(o, k) => {
                self.answers.remove(&(o, k));
            }
            RecordKey::NodeState(n) => {
                self.directory.node_states.remove(&n);
            }
            RecordKey::Repair(g) => {
                self.directory.repairs.remove(&g);
            }
            RecordKey::Rejoin(n) => {
                self.directory.rejoins.remove(&n);
            }
            RecordKey::Change(c) => {
                self.inventory.changes.remove(&c);
            }
            RecordKey::Room => self.inventory.room = None,
            RecordKey::Place(u) => {
                self.inventory.places.remove(&u);
            }
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
            .chain(std::iter::once(RecordKey::NextMoveId))
            .chain(
                self.answers
                    .keys()
                    .map(|(o, k)| RecordKey::Answer(o.clone(), k.clone())),
            )
            .chain(
                self.directory
                    .node_states
                    .keys()
                    .map(|n| RecordKey::NodeState(*n)),
            )
            .chain(self.directory.repairs.keys().map(|g| RecordKey::Repair(*g)))
            .chain(self.directory.rejoins.keys().map(|n| RecordKey::Rejoin(*n)))
            .chain(self.inventory.changes.keys().map(|c| RecordKey::Change(*c)))
            .chain(std::iter::once(RecordKey::Room))
            .chain(
                self.inventory
                    .places
                    .keys()
                    .map(|u| RecordKey::Place(u.clone())),
            );
        keys.filter_map(|k| self.encode_record(&k).map(|v| (k.encode(), v)))
    }
}
