//! [`RecordKey`]: the name of one stored record of a group's state, and its
//! storage key (the kind of record in a prefix). Every part of `apply`
//! reports the records it changed by these names; `state/records.rs`
//! encodes their values.

use crate::ids::{EventId, GroupId, NodeId, UserId};

/// One stored record of a group's state (`State`).
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
    /// Directory: the cluster's active data format.
    Format,
    /// The restore that loaded the group (directory: the cluster).
    Restore,
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
            RecordKey::Format => b"m/format".to_vec(),
            RecordKey::Restore => b"m/restore".to_vec(),
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
            (b"m/", b"format") => Some(RecordKey::Format),
            (b"m/", b"restore") => Some(RecordKey::Restore),
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
