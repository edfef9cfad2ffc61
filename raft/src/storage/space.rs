//! [`Space`]: one group's keys inside a node-wide sled tree.
//!
//! A node keeps three trees (`log`, `meta`, `sm`) for all its groups, not
//! three per group: sled rewrites its table of tree names on every new
//! tree, and per-tree state made 10,000 groups cost ~0.57 MB each on disk
//! and in memory (docs/PERFORMANCE.md). Every key is prefixed with the
//! group id (8 bytes, big-endian), so a group's keys are one contiguous
//! range and sort as they did in a tree of their own.

use std::ops::Bound;

use seatfence_core::GroupId;
use sled::IVec;

/// One group's part of a node-wide tree. Keys in and out are the group's
/// own (without the prefix). Cheap to clone.
#[derive(Clone)]
pub(crate) struct Space {
    tree: sled::Tree,
    prefix: [u8; 8],
}

/// An atomic batch of writes to one [`Space`].
pub(crate) struct SpaceBatch {
    batch: sled::Batch,
    prefix: [u8; 8],
}

impl SpaceBatch {
    pub fn insert(&mut self, key: &[u8], value: impl Into<IVec>) {
        self.batch.insert(prefixed(&self.prefix, key), value);
    }

    pub fn remove(&mut self, key: &[u8]) {
        self.batch.remove(prefixed(&self.prefix, key));
    }
}

fn prefixed(prefix: &[u8; 8], key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + key.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(key);
    k
}

/// The group id a prefixed key belongs to.
pub(crate) fn group_of(key: &[u8]) -> Option<GroupId> {
    Some(GroupId(u64::from_be_bytes(key.get(..8)?.try_into().ok()?)))
}

impl Space {
    pub fn new(tree: sled::Tree, group: GroupId) -> Space {
        Space {
            tree,
            prefix: group.0.to_be_bytes(),
        }
    }

    pub fn get(&self, key: &[u8]) -> sled::Result<Option<IVec>> {
        self.tree.get(prefixed(&self.prefix, key))
    }

    pub fn insert(&self, key: &[u8], value: impl Into<IVec>) -> sled::Result<()> {
        self.tree
            .insert(prefixed(&self.prefix, key), value)
            .map(drop)
    }

    pub fn remove(&self, key: &[u8]) -> sled::Result<()> {
        self.tree.remove(prefixed(&self.prefix, key)).map(drop)
    }

    pub fn batch(&self) -> SpaceBatch {
        SpaceBatch {
            batch: sled::Batch::default(),
            prefix: self.prefix,
        }
    }

    pub fn apply_batch(&self, batch: SpaceBatch) -> sled::Result<()> {
        debug_assert_eq!(batch.prefix, self.prefix);
        self.tree.apply_batch(batch.batch)
    }

    /// The group's entries with keys between `start` and `end`, in key
    /// order, keys without the prefix.
    pub fn range(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> impl DoubleEndedIterator<Item = sled::Result<(Vec<u8>, IVec)>> {
        let lo = match start {
            Bound::Included(k) => Bound::Included(prefixed(&self.prefix, k)),
            Bound::Excluded(k) => Bound::Excluded(prefixed(&self.prefix, k)),
            Bound::Unbounded => Bound::Included(self.prefix.to_vec()),
        };
        let hi = match end {
            Bound::Included(k) => Bound::Included(prefixed(&self.prefix, k)),
            Bound::Excluded(k) => Bound::Excluded(prefixed(&self.prefix, k)),
            Bound::Unbounded => match u64::from_be_bytes(self.prefix).checked_add(1) {
                Some(next) => Bound::Excluded(next.to_be_bytes().to_vec()),
                None => Bound::Unbounded,
            },
        };
        self.tree
            .range::<Vec<u8>, _>((lo, hi))
            .map(|kv| kv.map(|(k, v)| (k[8..].to_vec(), v)))
    }

    /// The group's entries whose keys start with `prefix`.
    pub fn scan_prefix(
        &self,
        prefix: &[u8],
    ) -> impl DoubleEndedIterator<Item = sled::Result<(Vec<u8>, IVec)>> {
        self.tree
            .scan_prefix(prefixed(&self.prefix, prefix))
            .map(|kv| kv.map(|(k, v)| (k[8..].to_vec(), v)))
    }

    /// Remove every key of the group.
    pub fn clear(&self) -> sled::Result<()> {
        let mut batch = self.batch();
        for kv in self.range(Bound::Unbounded, Bound::Unbounded) {
            batch.remove(&kv?.0);
        }
        self.apply_batch(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_never_see_each_others_keys() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let tree = db.open_tree("log").unwrap();
        let (a, b) = (
            Space::new(tree.clone(), GroupId(1)),
            Space::new(tree.clone(), GroupId(2)),
        );
        let last = Space::new(tree, GroupId(u64::MAX));
        for (i, s) in [&a, &b, &last].into_iter().enumerate() {
            let mut batch = s.batch();
            for k in 0u64..3 {
                batch.insert(&k.to_be_bytes(), vec![i as u8]);
            }
            s.apply_batch(batch).unwrap();
        }
        let keys = |s: &Space| -> Vec<Vec<u8>> {
            s.range(Bound::Unbounded, Bound::Unbounded)
                .map(|kv| kv.unwrap().0)
                .collect()
        };
        assert_eq!(
            keys(&a),
            (0u64..3)
                .map(|k| k.to_be_bytes().to_vec())
                .collect::<Vec<_>>()
        );
        let last_value = |s: &Space| s.range(Bound::Unbounded, Bound::Unbounded).next_back();
        assert_eq!(last_value(&a).unwrap().unwrap().1, vec![0u8]);
        assert_eq!(last_value(&b).unwrap().unwrap().1, vec![1u8]);
        assert_eq!(last_value(&last).unwrap().unwrap().1, vec![2u8]);
        let from1: Vec<_> = b
            .range(Bound::Included(&1u64.to_be_bytes()), Bound::Unbounded)
            .map(|kv| kv.unwrap().1)
            .collect();
        assert_eq!(from1, vec![IVec::from(vec![1u8]); 2]);
        b.clear().unwrap();
        assert!(keys(&b).is_empty());
        assert_eq!(keys(&a).len(), 3);
        assert_eq!(keys(&last).len(), 3);
        assert_eq!(
            group_of(&prefixed(&[0, 0, 0, 0, 0, 0, 0, 7], b"x")),
            Some(GroupId(7))
        );
    }
}
