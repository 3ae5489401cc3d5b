//! The descriptors a client holds until their lease deadline (counted from when the request
//! was *sent*, minus a margin): what a read reuses instead of asking the gateway again, and
//! what this client's own writes drop.
//!
//! A client of a cluster holds one client per member, and at most one descriptor per key
//! among them all ([`Held`]): a member's client that caches a descriptor of a key drops
//! the one another member's client held. Otherwise a read that failed over to a key's
//! next choice (or came back to its owner) could reuse a descriptor older than one this
//! client had since read, and go back in time (the chaos checker found it, issue 65).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rasa_openapi::Descriptor;

/// A held descriptor: the member client that holds it, the descriptor (shared with the
/// reads that use it), and the instant after which no read may start.
type Entry = (u64, Arc<Descriptor>, Instant);

/// The descriptors one client (all its members' clients) holds, by key: the member
/// client that holds it, the descriptor, and the instant after which no read may start.
#[derive(Debug, Default)]
pub(crate) struct Held {
    by_key: Mutex<HashMap<String, Entry>>,
}

/// One member client's side of [`Held`]: the descriptors it holds, each with the instant
/// after which no read may start (its lease, counted from when it was asked for, less a
/// margin).
#[derive(Debug)]
pub(crate) struct DescriptorCache {
    held: Arc<Held>,
    /// This member client's mark in `held` (one per client made, never reused: a client
    /// of a member's new process does not see its predecessor's descriptors).
    mine: u64,
    /// The member's node id, when this client is one of a cluster's member clients.
    node: Option<String>,
}

impl DescriptorCache {
    /// A member client's side of `held` (`node`: the member's node id, in a cluster).
    pub(crate) fn new(held: Arc<Held>, node: Option<&str>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self {
            held,
            mine: NEXT.fetch_add(1, Ordering::Relaxed),
            node: node.map(str::to_owned),
        }
    }

    /// Whether `d` was handed out by another member than this client's (a member relays
    /// the owner's descriptor when it cannot answer itself): its address and key open the
    /// other member's memory, not this member's, so this client cannot read it one-sided.
    pub(crate) fn foreign(&self, d: &Descriptor) -> bool {
        matches!((&self.node, &d.node_id), (Some(me), Some(by)) if me != by)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.held.by_key.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The descriptor of `key` while a read may still start on it, if this member client
    /// holds it.
    pub(crate) fn fresh(&self, key: &str) -> Option<(Arc<Descriptor>, Instant)> {
        let held = self.held();
        let (by, d, deadline) = held.get(key)?;
        self.usable(*by, *deadline, Instant::now())
            .then(|| (Arc::clone(d), *deadline))
    }

    /// [`DescriptorCache::fresh`] of each of `keys`, in order, under one look at the lock
    /// (a batch's keys; the descriptors shared, not copied).
    pub(crate) fn fresh_many(&self, keys: &[&str]) -> Vec<Option<(Arc<Descriptor>, Instant)>> {
        let held = self.held();
        let now = Instant::now();
        keys.iter()
            .map(|k| {
                let (by, d, deadline) = held.get(*k)?;
                self.usable(*by, *deadline, now)
                    .then(|| (Arc::clone(d), *deadline))
            })
            .collect()
    }

    /// Which of `keys` this member client holds no fresh descriptor of (one look under
    /// the lock, nothing copied).
    pub(crate) fn missing<'k>(&self, keys: &[&'k str]) -> Vec<&'k str> {
        let held = self.held();
        let now = Instant::now();
        keys.iter()
            .copied()
            .filter(|k| {
                !held
                    .get(*k)
                    .is_some_and(|(by, _, deadline)| self.usable(*by, *deadline, now))
            })
            .collect()
    }

    /// Whether a descriptor held by member client `by` until `deadline` may still start a
    /// read of this one's at `now`.
    fn usable(&self, by: u64, deadline: Instant, now: Instant) -> bool {
        by == self.mine && now < deadline
    }

    /// Holds `d` for `key` until `deadline` (dropping any other member client's).
    pub(crate) fn insert(&self, key: &str, d: Descriptor, deadline: Instant) {
        self.insert_many([(key, d, deadline)]);
    }

    /// [`DescriptorCache::insert`] of each of `held`, under one look at the lock.
    pub(crate) fn insert_many<'k>(
        &self,
        held: impl IntoIterator<Item = (&'k str, Descriptor, Instant)>,
    ) {
        let mut map = self.held();
        for (key, d, deadline) in held {
            if !self.foreign(&d) {
                map.insert(key.to_owned(), (self.mine, Arc::new(d), deadline));
            }
        }
    }

    /// Drops the descriptor of `key` (a read with it failed, or this client wrote the key).
    pub(crate) fn forget(&self, key: &str) {
        self.held().remove(key);
    }

    /// Drops every descriptor this member client holds (they named a gateway process that
    /// is gone).
    pub(crate) fn clear(&self) {
        self.held().retain(|_, (by, _, _)| *by != self.mine);
    }
}
