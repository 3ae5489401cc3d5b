//! Whether a held copy may be served without asking the origin: in a cluster, it was made
//! under the key's owner now (a copy from another owner's term may be older than a write
//! acknowledged elsewhere); and it was confirmed after the last "revalidate everything"
//! (a member back after its lease was lost).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::catalog;
use crate::cluster::{still_tied, tie_now, Peers};
use crate::store::StoredVersion;

/// Who owns each key now, and since when every held copy is to be revalidated.
#[derive(Debug)]
pub(super) struct Ties {
    /// The other members (`None`: a single gateway, which owns every key).
    peers: Option<Arc<Peers>>,
    /// Versions the origin confirmed before this instant are revalidated on their next
    /// read, whatever their age ([`Ties::revalidate_all`]). (Nanoseconds after `born`; 0:
    /// never.) Read on every hit, so an atomic, not a lock.
    stale_before: AtomicU64,
    born: Instant,
}

impl Ties {
    pub(super) fn new(peers: Option<Arc<Peers>>) -> Self {
        Self {
            peers,
            stale_before: AtomicU64::new(0),
            born: Instant::now(),
        }
    }

    /// Whether this member owns `key` (always, outside a cluster).
    pub(super) fn owns(&self, key: &str) -> bool {
        self.peers.as_ref().is_none_or(|p| p.owns(key))
    }

    /// Whether `v`, a copy of `key`, was made under another owner of the key than the one
    /// now (never outside a cluster).
    pub(super) fn untied(&self, key: &str, v: &StoredVersion) -> bool {
        if crate::planted::planted(crate::planted::Bug::UntiedCopy) {
            return false;
        }
        self.peers
            .as_ref()
            .is_some_and(|p| !v.origin.tie_holds(|tag, at| still_tied(p, key, tag, at)))
    }

    /// Ties `v`, a version of `key` written, fetched or confirmed here, to the key's owner
    /// now (see [`crate::cluster::Peers::owner_tag`]).
    pub(super) fn tie(&self, key: &str, v: &StoredVersion) {
        if let Some(p) = &self.peers {
            let (tag, at) = tie_now(p, key);
            v.origin.tie(tag, at);
        }
    }

    /// What a verdict on `key` heard now is tied to (`(0, 0)` outside a cluster).
    pub(super) fn tie_of(&self, key: &str) -> super::remembered::Tie {
        self.peers.as_ref().map_or((0, 0), |p| tie_now(p, key))
    }

    /// Whether a "not found" on `key` heard under `tie` is this member's to answer now:
    /// always outside a cluster; in one, only while this member owns the key and has
    /// owned it in every view since (else it may predate a write another owner took).
    pub(super) fn still_owner(&self, key: &str, tie: super::remembered::Tie) -> bool {
        self.peers
            .as_ref()
            .is_none_or(|p| p.owns(key) && still_tied(p, key, tie.0, tie.1).is_some())
    }

    /// Makes every version held now be revalidated on its next read.
    pub(super) fn revalidate_all(&self) {
        let at = u64::try_from(self.born.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.stale_before.store(at.max(1), Ordering::Release);
        catalog::CACHE_REVALIDATE_ALL.counter().increment(1);
    }

    /// Whether `v` was last confirmed before [`Ties::revalidate_all`].
    pub(super) fn confirmed_before_all_stale(&self, v: &StoredVersion) -> bool {
        let at = self.stale_before.load(Ordering::Acquire);
        match (at, v.origin.age()) {
            (0, _) | (_, None) => false,
            // Confirmed `age` ago, before `born + at` when `age` exceeds the time since.
            (at, Some(age)) => age >= self.born.elapsed().saturating_sub(Duration::from_nanos(at)),
        }
    }
}
