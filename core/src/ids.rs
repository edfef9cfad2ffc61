//! Identifier newtypes. They are `Copy` where they are numbers so they can be
//! passed around freely; a region is a short label such as `us-east`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A `seatfence node` process. Also the openraft node id (`u64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u64);

/// A Raft group. Group 0 is the directory.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct GroupId(pub u64);

impl GroupId {
    /// The directory group: one voter per region, knows every node and group.
    pub const DIRECTORY: GroupId = GroupId(0);

    /// Whether this is group 0, the directory.
    pub fn is_directory(self) -> bool {
        self == Self::DIRECTORY
    }
}

/// A region label (`us-east`, `eu-west`, `ap-south`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RegionId(pub String);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

impl fmt::Display for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for RegionId {
    fn from(s: &str) -> Self {
        RegionId(s.to_string())
    }
}

/// An event, chosen by the operator: 1–64 characters of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EventId(pub String);

impl EventId {
    /// Whether `s` is a well-formed event id.
    pub fn is_valid(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }
}

/// A buyer (or operator): the `sub` of their token.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct UserId(pub String);

/// An event's ownership epoch: 1 at creation, +1 at every ownership move.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Epoch(pub u64);

/// The fencing token `(epoch, term)`, compared lexicographically: a newer
/// owner beats any term of an older one, and within one ownership a newer
/// leader beats an older one.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Fence {
    /// The event's ownership epoch.
    pub epoch: Epoch,
    /// The Raft term of the event group's leader that answered.
    pub term: u64,
}

/// A hold: the group that owns it and its sequence number there, written
/// `h<group>-<seq>` so any edge can route a request for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HoldId {
    /// The event group that owns the hold.
    pub group: GroupId,
    /// The hold's sequence number in that group.
    pub seq: u64,
}

impl HoldId {
    /// Parse `h<group>-<seq>` (decimal, at most 20 digits each); `None` if malformed.
    pub fn parse(s: &str) -> Option<HoldId> {
        let (group, seq) = parse_group_seq(s, 'h')?;
        Some(HoldId { group, seq })
    }
}

/// A booking: one per hold, so it shares the hold's group and sequence
/// number, written `b<group>-<seq>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BookingId {
    /// The event group that owns the booking (its hold's group).
    pub group: GroupId,
    /// The booking's sequence number there (its hold's).
    pub seq: u64,
}

impl BookingId {
    /// Parse `b<group>-<seq>` (decimal, at most 20 digits each); `None` if malformed.
    pub fn parse(s: &str) -> Option<BookingId> {
        let (group, seq) = parse_group_seq(s, 'b')?;
        Some(BookingId { group, seq })
    }

    /// The hold this booking was made from (same group and sequence number).
    pub fn hold(self) -> HoldId {
        HoldId {
            group: self.group,
            seq: self.seq,
        }
    }
}

/// `<prefix><group>-<seq>`, both decimal.
fn parse_group_seq(s: &str, prefix: char) -> Option<(GroupId, u64)> {
    let (g, seq) = s.strip_prefix(prefix)?.split_once('-')?;
    let digits = |x: &str| !x.is_empty() && x.len() <= 20 && x.bytes().all(|b| b.is_ascii_digit());
    if !digits(g) || !digits(seq) {
        return None;
    }
    Some((GroupId(g.parse().ok()?), seq.parse().ok()?))
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.epoch.0, self.term)
    }
}

impl fmt::Display for HoldId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "h{}-{}", self.group.0, self.seq)
    }
}

impl fmt::Display for BookingId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}-{}", self.group.0, self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_ids_round_trip_and_reject_garbage() {
        let h = HoldId {
            group: GroupId(12),
            seq: 345,
        };
        assert_eq!(h.to_string(), "h12-345");
        assert_eq!(HoldId::parse("h12-345"), Some(h));
        for bad in [
            "",
            "h",
            "h12",
            "h-1",
            "h1-",
            "x1-2",
            "h1-2-3",
            "h+1-2",
            "h99999999999999999999999-1",
        ] {
            assert_eq!(HoldId::parse(bad), None, "{bad}");
        }
        let b = BookingId {
            group: GroupId(3),
            seq: 9,
        };
        assert_eq!(BookingId::parse(&b.to_string()), Some(b));
        assert_eq!(BookingId::parse("h3-9"), None);
    }

    #[test]
    fn fences_compare_epoch_first() {
        let f = |epoch, term| Fence {
            epoch: Epoch(epoch),
            term,
        };
        assert!(f(2, 1) > f(1, 9));
        assert!(f(1, 3) > f(1, 2));
    }
}
