//! What the origin said of keys lately: "not found", or "too large to cache" (with the
//! length), each for `--negative-ttl`. One bounded memory for both (quick_cache, weighted by
//! the bytes an entry holds, at most `--negative-cache-size`): a scan of millions of missing
//! keys evicts old entries instead of growing the gateway outside `--memory`; evictions are
//! counted (`rasa_origin_remembered_evictions_total`) and the bytes held are a gauge
//! (`rasa_origin_remembered_bytes`).

use crate::catalog;
use std::collections::hash_map::RandomState;
use std::time::{Duration, Instant};

use quick_cache::sync::Cache;
use quick_cache::{Lifecycle, Weighter};

/// What the origin said of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It has no such object.
    NotFound,
    /// Its object is this long, over `--max-object-size`.
    TooLarge(u64),
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    verdict: Verdict,
    at: Instant,
    /// In a cluster, the owner and view the verdict was given under ([`Tie`]).
    tie: Tie,
}

/// The key's owner and the cluster view a verdict was given under (`(0, 0)` outside a
/// cluster): a "not found" heard before the key changed owners may predate a write the
/// other owner acknowledged ([`crate::cluster::still_tied`]).
pub type Tie = (u64, u64);

/// Bytes an entry costs besides its key: the entry, the key's `String` and the table's
/// slot (measured: see the test), and the entry's cluster tie.
pub const ENTRY_OVERHEAD: u64 = 112;

#[derive(Clone, Copy, Debug)]
struct ByBytes;

impl Weighter<String, Entry> for ByBytes {
    fn weight(&self, key: &String, _: &Entry) -> u64 {
        key.len() as u64 + ENTRY_OVERHEAD
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct CountEvictions;

impl Lifecycle<String, Entry> for CountEvictions {
    type RequestState = ();

    fn begin_request(&self) -> Self::RequestState {}

    fn on_evict(&self, _: &mut (), _: String, _: Entry) {
        catalog::ORIGIN_REMEMBERED_EVICTIONS.counter().increment(1);
    }
}

/// The bounded memory of verdicts.
pub struct Remembered {
    cache: Cache<String, Entry, ByBytes, RandomState, CountEvictions>,
    ttl: Duration,
}

impl std::fmt::Debug for Remembered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remembered")
            .field("entries", &self.cache.len())
            .field("bytes", &self.cache.weight())
            .finish()
    }
}

impl Remembered {
    /// At most `capacity` bytes of entries, each valid for `ttl`.
    pub fn new(capacity: u64, ttl: Duration) -> Self {
        let items = usize::try_from(capacity / (ENTRY_OVERHEAD + 32)).unwrap_or(usize::MAX);
        Self {
            cache: Cache::with(
                items.max(16),
                capacity.max(1),
                ByBytes,
                RandomState::default(),
                CountEvictions,
            ),
            ttl,
        }
    }

    /// The length of `key`'s object, when it is remembered as too large to cache.
    pub fn too_large(&self, key: &str) -> Option<u64> {
        match self.get(key) {
            Some(Verdict::TooLarge(length)) => Some(length),
            _ => None,
        }
    }

    /// Whether "not found at the origin" is remembered for `key` (and still fresh).
    pub fn not_found(&self, key: &str) -> bool {
        self.get(key) == Some(Verdict::NotFound)
    }

    /// The tie of a "not found" remembered for `key` (and still fresh).
    pub fn not_found_tie(&self, key: &str) -> Option<Tie> {
        self.entry(key)
            .filter(|e| e.verdict == Verdict::NotFound)
            .map(|e| e.tie)
    }

    /// The verdict remembered for `key`, if it is still fresh.
    pub fn get(&self, key: &str) -> Option<Verdict> {
        self.entry(key).map(|e| e.verdict)
    }

    fn entry(&self, key: &str) -> Option<Entry> {
        let e = self.cache.get(key)?;
        if e.at.elapsed() < self.ttl {
            Some(e)
        } else {
            self.cache.remove(key);
            None
        }
    }

    /// Remembers `verdict` for `key` from now, given under `tie`.
    pub fn remember(&self, key: &str, verdict: Verdict, tie: Tie) {
        self.cache.insert(
            key.to_owned(),
            Entry {
                verdict,
                at: Instant::now(),
                tie,
            },
        );
        catalog::ORIGIN_REMEMBERED_BYTES
            .gauge()
            .set(self.cache.weight() as f64);
    }

    /// Forgets what was remembered for `key` (it was written here).
    pub fn forget(&self, key: &str) {
        self.cache.remove(key);
    }

    /// Bytes held by the entries now.
    pub fn bytes(&self) -> u64 {
        self.cache.weight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_expire_and_the_memory_stays_within_its_capacity() {
        let r = Remembered::new(64 << 10, Duration::from_millis(50));
        r.remember("a", Verdict::NotFound, (0, 0));
        r.remember("b", Verdict::TooLarge(7), (0, 0));
        assert_eq!(r.get("a"), Some(Verdict::NotFound));
        assert_eq!(r.get("b"), Some(Verdict::TooLarge(7)));
        r.forget("a");
        assert_eq!(r.get("a"), None);
        for i in 0..100_000 {
            r.remember(&format!("missing/{i:08}"), Verdict::NotFound, (0, 0));
        }
        assert!(r.bytes() <= 64 << 10, "{} bytes", r.bytes());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(r.get("missing/00099999"), None, "expired");
    }
}
