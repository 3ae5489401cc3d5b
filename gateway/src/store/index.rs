//! The key index: each key's current version and the older versions still readable by id.
//! Lookups, deletes and prefix listing; publishing lives with uploads
//! ([`Store::publish`](super::Store::publish)).

use std::borrow::Borrow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{Store, StoreError, StoredVersion, VersionId};

/// Shards of the index (a power of two). A key's shard is fixed by the hash of its bytes,
/// so readers of different keys rarely meet on one lock, and a writer holds up only the
/// readers of its shard.
const SHARDS: usize = 64;

/// Keys → their versions: [`SHARDS`] B-trees, each behind its own lock; a prefix listing
/// merges them in key order.
#[derive(Debug)]
pub(super) struct Index(Box<[RwLock<Shard>]>);

impl Default for Index {
    fn default() -> Self {
        Self((0..SHARDS).map(|_| RwLock::default()).collect())
    }
}

impl Index {
    fn shard(&self, key: &[u8]) -> &RwLock<Shard> {
        &self.0[xxhash_rust::xxh3::xxh3_64(key) as usize & (SHARDS - 1)]
    }

    /// `key`'s shard, to read.
    pub(super) fn read(&self, key: &[u8]) -> RwLockReadGuard<'_, Shard> {
        self.shard(key)
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `key`'s shard, to change.
    pub(super) fn write(&self, key: &[u8]) -> RwLockWriteGuard<'_, Shard> {
        self.shard(key)
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Current versions of keys from `start` on that begin with `prefix`, in key order, at
    /// most `limit`; plus whether more follow. Holds every shard's read lock meanwhile.
    fn list(
        &self,
        start: Bound<&[u8]>,
        prefix: &[u8],
        limit: usize,
    ) -> (Vec<Arc<StoredVersion>>, bool) {
        let guards: Vec<_> = self
            .0
            .iter()
            .map(|s| s.read().unwrap_or_else(PoisonError::into_inner))
            .collect();
        let mut runs: Vec<_> = guards
            .iter()
            .map(|g| {
                g.from(start)
                    .take_while(|v| v.key_bytes().starts_with(prefix))
            })
            .collect();
        // The next version of every shard, and their keys, smallest first (keys are unique
        // across shards).
        let mut heads: Vec<Option<&Arc<StoredVersion>>> =
            runs.iter_mut().map(Iterator::next).collect();
        let mut next: BinaryHeap<Reverse<(&[u8], usize)>> = heads
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| Reverse((v.key_bytes(), i))))
            .collect();
        let mut page = Vec::with_capacity(limit.min(1024));
        while let Some(Reverse((_, i))) = next.pop() {
            if page.len() == limit {
                return (page, true);
            }
            page.push(Arc::clone(heads[i].expect("a head for every key queued")));
            heads[i] = runs[i].next();
            if let Some(v) = heads[i] {
                next.push(Reverse((v.key_bytes(), i)));
            }
        }
        (page, false)
    }
}

/// One shard: keys → their versions, in key order. Each entry is the key's current
/// version, ordered by the key bytes in its frame (so the key is held once, in arena
/// memory), and the overwritten versions still readable by id. An entry costs 16 bytes in
/// a B-tree node.
#[derive(Debug, Default)]
pub(super) struct Shard(BTreeMap<Current, Older>, Tombstones);

/// Keys deleted while a fill was in flight, with the delete's sequence number
/// ([`super::fills`]); pruned of those no fill still needs.
#[derive(Debug, Default)]
struct Tombstones(HashMap<Box<[u8]>, u64>);

/// Tombstones a shard holds before it prunes those no fill needs any more.
const TOMBSTONES_BEFORE_PRUNING: usize = 32;

/// A key's current version, as an index key: ordered and looked up by its key's bytes.
#[derive(Debug)]
struct Current(Arc<StoredVersion>);

impl Borrow<[u8]> for Current {
    fn borrow(&self) -> &[u8] {
        self.0.key_bytes()
    }
}

impl PartialEq for Current {
    fn eq(&self, other: &Self) -> bool {
        self.0.key_bytes() == other.0.key_bytes()
    }
}

impl Eq for Current {}

impl PartialOrd for Current {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Current {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.key_bytes().cmp(other.0.key_bytes())
    }
}

/// Overwritten versions, still readable by id until reclaimed; allocated only for a key
/// that has some (most keys never do): one pointer otherwise.
#[derive(Debug, Default)]
#[allow(clippy::box_collection)]
struct Older(Option<Box<HashMap<VersionId, Arc<StoredVersion>>>>);

impl Shard {
    /// The current version of `key`.
    pub(super) fn current(&self, key: &[u8]) -> Option<&StoredVersion> {
        self.0.get_key_value(key).map(|(c, _)| &*c.0)
    }

    /// The version `v` of `key`, current or older.
    fn version(&self, key: &[u8], v: VersionId) -> Option<&Arc<StoredVersion>> {
        let (current, older) = self.0.get_key_value(key)?;
        if current.0.version() == v {
            return Some(&current.0);
        }
        older.0.as_ref()?.get(&v)
    }

    /// Makes `new` its key's current version; the one it replaces (returned) stays
    /// readable by id.
    pub(super) fn replace(&mut self, new: Arc<StoredVersion>) -> Option<Arc<StoredVersion>> {
        match self.0.remove_entry(new.key_bytes()) {
            Some((Current(old), mut older)) => {
                older
                    .0
                    .get_or_insert_with(Default::default)
                    .insert(old.version(), Arc::clone(&old));
                self.0.insert(Current(new), older);
                Some(old)
            }
            None => {
                self.0.insert(Current(new), Older::default());
                None
            }
        }
    }

    /// Puts `copy` (the same version, moved to another arena) in place of its key's
    /// current version; false when that is no longer `copy`'s version.
    pub(super) fn move_current(&mut self, copy: Arc<StoredVersion>) -> bool {
        match self.0.remove_entry(copy.key_bytes()) {
            Some((Current(old), older)) if old.version() == copy.version() => {
                self.0.insert(Current(copy), older);
                true
            }
            Some((current, older)) => {
                self.0.insert(current, older);
                false
            }
            None => false,
        }
    }

    /// Remembers that `key` was deleted with sequence number `seq`, for the fills in
    /// flight (the oldest taken at `oldest`).
    fn bury(&mut self, key: &[u8], seq: u64, oldest: u64) {
        let t = &mut self.1 .0;
        if t.len() >= TOMBSTONES_BEFORE_PRUNING {
            t.retain(|_, s| *s > oldest);
        }
        t.insert(key.into(), seq);
    }

    /// Whether `key` was deleted after sequence number `since`.
    pub(super) fn deleted_since(&self, key: &[u8], since: u64) -> bool {
        self.1 .0.get(key).is_some_and(|&s| s > since)
    }

    /// Removes `key` with all its versions; returns its current version.
    pub(super) fn remove(&mut self, key: &[u8]) -> Option<Arc<StoredVersion>> {
        self.0.remove_entry(key).map(|(c, _)| c.0)
    }

    /// Forgets the older version `v` of `key`.
    pub(super) fn drop_older(&mut self, key: &[u8], v: VersionId) {
        if let Some(older) = self.0.get_mut(key) {
            if let Some(o) = &mut older.0 {
                o.remove(&v);
                if o.is_empty() {
                    older.0 = None;
                }
            }
        }
    }

    /// Current versions of keys from `start` on, in key order.
    fn from(&self, start: Bound<&[u8]>) -> impl Iterator<Item = &Arc<StoredVersion>> {
        self.0
            .range::<[u8], _>((start, Bound::Unbounded))
            .map(|(c, _)| &c.0)
    }
}

impl Store {
    /// The current version of `key`.
    pub fn current(&self, key: &str) -> Option<Arc<StoredVersion>> {
        let shard = self.index.read(key.as_bytes());
        let v = Arc::clone(&shard.0.get_key_value(key.as_bytes())?.0 .0);
        drop(shard);
        v.arena.touch();
        Some(v)
    }

    /// A given version of `key`, current or older, while retained.
    pub fn version(&self, key: &str, version: VersionId) -> Option<Arc<StoredVersion>> {
        let shard = self.index.read(key.as_bytes());
        let v = Arc::clone(shard.version(key.as_bytes(), version)?);
        drop(shard);
        v.arena.touch();
        Some(v)
    }

    /// Makes every version of `key` unreachable for new requests. Returns whether the key
    /// existed, after checking `check` against its current version.
    pub fn delete(
        &self,
        key: &str,
        check: impl FnOnce(Option<&StoredVersion>) -> Result<(), StoreError>,
    ) -> Result<bool, StoreError> {
        let mut shard = self.index.write(key.as_bytes());
        check(shard.current(key.as_bytes()))?;
        let removed = shard.remove(key.as_bytes());
        if let Some((seq, oldest)) = self.fills.delete() {
            shard.bury(key.as_bytes(), seq, oldest);
        }
        let forgot = self.disk.as_ref().is_some_and(|d| d.forget(key.as_bytes()));
        drop(shard);
        if let Some(v) = &removed {
            v.arena.sub_live(v.frame.len() as u64);
        }
        Ok(removed.is_some() || forgot)
    }

    /// Current versions of keys starting with `prefix` and sorting after `after`, in key
    /// order, at most `limit`; plus whether more follow.
    pub fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Arc<StoredVersion>>, bool) {
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded(a.as_bytes()),
            _ => Bound::Included(prefix.as_bytes()),
        };
        self.index.list(start, prefix.as_bytes(), limit)
    }
}
