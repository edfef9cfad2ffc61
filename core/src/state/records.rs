//! How a [`State`] is stored: one storage key per record.
//!
//! [`RecordKey`] names a record and encodes it as a storage key (the kind
//! of record in a prefix); `State` encodes one record's value, loads or
//! removes one stored record, and lists every record as stored.

use serde::{Deserialize, Serialize};

use crate::ids::{EventId, GroupId, NodeId, UserId};
use crate::inventory::OpKey;

use super::State;

/// One stored record of a [`State`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecordKey {
    /// Plain groups (and the directory's shared values): one key→value entry.
    Kv(String),
    /// Directory: one node.
    Node(NodeId),
    /// Directory: one group and its voters.
    Group(GroupId),
    /// Directory: the next group id to hand out.
    NextGroupId,
    /// Directory: one event's route.
    Route(EventId),
    /// Event group: the event record (settings, epoch, counters).
    Event,
    /// Event group: one seat, by seat id.
    Seat(String),
    /// Event group: one hold, by seq.
    Hold(u64),
    /// An idempotency record: `(owner, key)`.
    Op(UserId, String),
    /// Event group: a booking, by hold seq.
    Booking(u64),
    /// Event group: one outbox item, by its id.
    Outbox(u64),
    /// A webhook's provider event id.
    Inbox(String),
    /// Directory: one audit entry.
    Audit(u64),
    /// Directory: a drained node.
    Drained(NodeId),
    /// Directory: an ownership move.
    Move(u64),
    /// Directory: the id the next move gets.
    NextMoveId,
    /// Directory: a keyed request's first answer, `(owner, key)`.
    Answer(String, String),
    /// Directory: a node's lifecycle state (absent: live).
    NodeState(NodeId),
    /// Directory: a group's running repair.
    Repair(GroupId),
    /// Directory: a node's rejoin on an empty data dir.
    Rejoin(NodeId),
    /// Event group: one change of the changefeed, by its seq.
    Change(u64),
    /// Event group: the waiting room.
    Room,
    /// Event group: a buyer's place in the waiting room.
    Place(UserId),
}

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
            RecordKey::NodeState(n) => [b"l/".as_slice(), &n.0.to_be_bytes()].concat(),
            RecordKey::Repair(g) => [b"p/".as_slice(), &g.0.to_be_bytes()].concat(),
            RecordKey::Rejoin(n) => [b"j/".as_slice(), &n.0.to_be_bytes()].concat(),
            RecordKey::Change(c) => [b"c/".as_slice(), &c.to_be_bytes()].concat(),
            RecordKey::Room => b"m/room".to_vec(),
            RecordKey::Place(u) => [b"w/".as_slice(), u.0.as_bytes()].concat(),
            RecordKey::Op(owner, key) => owner_key(b"o/", &owner.0, key),
            RecordKey::Answer(owner, key) => owner_key(b"q/", owner, key),
        }
    }

    /// The record a storage key names; `None` for an unknown prefix or a malformed key.
    pub fn decode(key: &[u8]) -> Option<RecordKey> {
        let num = |b: &[u8]| b.try_into().ok().map(u64::from_be_bytes);
        match key.split_at_checked(2)? {
            (b"k/", k) => String::from_utf8(k.to_vec()).ok().map(RecordKey::Kv),
            (b"n/", n) => num(n).map(|n| RecordKey::Node(NodeId(n))),
            (b"g/", g) => num(g).map(|g| RecordKey::Group(GroupId(g))),
            (b"m/", b"next_group_id") => Some(RecordKey::NextGroupId),
            (b"m/", b"event") => Some(RecordKey::Event),
            (b"m/", b"next_move_id") => Some(RecordKey::NextMoveId),
            (b"m/", b"room") => Some(RecordKey::Room),
            (b"w/", u) => String::from_utf8(u.to_vec())
                .ok()
                .map(|u| RecordKey::Place(UserId(u))),
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
            (b"l/", n) => num(n).map(|n| RecordKey::NodeState(NodeId(n))),
            (b"p/", g) => num(g).map(|g| RecordKey::Repair(GroupId(g))),
            (b"j/", n) => num(n).map(|n| RecordKey::Rejoin(NodeId(n))),
            (b"c/", c) => num(c).map(RecordKey::Change),
            (b"o/", rest) => {
                let (owner, key) = split_owner_key(rest)?;
                Some(RecordKey::Op(UserId(owner), key))
            }
            (b"q/", rest) => {
                let (owner, key) = split_owner_key(rest)?;
                Some(RecordKey::Answer(owner, key))
            }
            _ => None,
        }
    }
}

/// `prefix`, the owner's length, the owner, the key: the length first, so
/// owner and key cannot run together.
fn owner_key(prefix: &[u8], owner: &str, key: &str) -> Vec<u8> {
    let len = u16::try_from(owner.len()).expect("user ids are short");
    [prefix, &len.to_be_bytes(), owner.as_bytes(), key.as_bytes()].concat()
}

fn split_owner_key(rest: &[u8]) -> Option<(String, String)> {
    let (len, rest) = rest.split_at_checked(2)?;
    let len = usize::from(u16::from_be_bytes(len.try_into().ok()?));
    let (owner, key) = rest.split_at_checked(len)?;
    Some((
        String::from_utf8(owner.to_vec()).ok()?,
        String::from_utf8(key.to_vec()).ok()?,
    ))
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
