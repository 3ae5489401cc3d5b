//! The key index: each key's current version and the older versions still readable by id.
//! Lookups, deletes and prefix listing; publishing lives with uploads
//! ([`Store::publish`](super::Store::publish)).

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::{Arc, PoisonError};

use super::{Store, StoreError, StoredVersion, VersionId};

/// One key's versions.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) current: Arc<StoredVersion>,
    /// Overwritten versions, still readable by id until reclaimed; allocated only for a
    /// key that has some (most keys never do). Boxed so that an entry without any holds
    /// one pointer, not an empty map's 48 bytes, in every index node.
    #[allow(clippy::box_collection)]
    older: Option<Box<HashMap<VersionId, Arc<StoredVersion>>>>,
}

impl Entry {
    /// A key's first version.
    pub(super) fn new(current: Arc<StoredVersion>) -> Self {
        Self {
            current,
            older: None,
        }
    }

    /// The retained older version `v`.
    pub(super) fn older(&self, v: VersionId) -> Option<&Arc<StoredVersion>> {
        self.older.as_ref()?.get(&v)
    }

    /// Keeps an overwritten version readable by id.
    pub(super) fn keep_older(&mut self, old: Arc<StoredVersion>) {
        self.older
            .get_or_insert_with(Default::default)
            .insert(old.version(), old);
    }

    /// Forgets the older version `v`.
    pub(super) fn drop_older(&mut self, v: VersionId) {
        if let Some(o) = &mut self.older {
            o.remove(&v);
            if o.is_empty() {
                self.older = None;
            }
        }
    }
}

impl Store {
    /// The current version of `key`.
    pub fn current(&self, key: &str) -> Option<Arc<StoredVersion>> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        let v = index.get(key).map(|e| Arc::clone(&e.current))?;
        v.arena.touch();
        Some(v)
    }

    /// The current version of `key` for a read that has no origin behind it: counted as
    /// a cache hit or miss (reads through an origin are counted by the read-through).
    pub fn read_current(&self, key: &str) -> Option<Arc<StoredVersion>> {
        let found = self.current(key);
        match found {
            Some(_) => metrics::counter!("rasa_cache_hits_total").increment(1),
            None => metrics::counter!("rasa_cache_misses_total").increment(1),
        }
        found
    }

    /// A given version of `key`, current or older, while retained.
    pub fn version(&self, key: &str, version: VersionId) -> Option<Arc<StoredVersion>> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        let entry = index.get(key)?;
        let v = if entry.current.version() == version {
            Arc::clone(&entry.current)
        } else {
            Arc::clone(entry.older(version)?)
        };
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
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        check(index.get(key).map(|e| &*e.current))?;
        let removed = index.remove(key);
        drop(index);
        if let Some(e) = &removed {
            e.current.arena.sub_live(e.current.frame.len() as u64);
        }
        Ok(removed.is_some())
    }

    /// Current versions of keys starting with `prefix` and sorting after `after`, in key
    /// order, at most `limit`; plus whether more follow.
    pub fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Arc<StoredVersion>>, bool) {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded(a),
            _ => Bound::Included(prefix),
        };
        let mut iter = index
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, e)| Arc::clone(&e.current));
        let page: Vec<_> = iter.by_ref().take(limit).collect();
        let more = iter.next().is_some();
        (page, more)
    }
}
