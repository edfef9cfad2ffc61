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
