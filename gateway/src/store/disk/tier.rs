//! The store over its disk tier: reading a key that missed memory (one disk read per key
//! however many wait, [`Flights`]), admitting it into memory (promotion), and writing
//! every current version down at shutdown.

use crate::catalog;
use std::sync::Arc;
use std::time::Duration;

use super::{Disk, Found, Record};
use crate::keyed::Keyed;
use crate::store::upload::{reserve_frame, room_wait};
use crate::store::{Store, StoreError, StoredVersion};

/// Why a version is wanted from disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// A read over HTTP or S3: admitted into memory as the policy says.
    Read,
    /// A descriptor: one-sided readers read memory, so always admitted.
    Descriptor,
    /// A write's preconditions: read for the check, never admitted.
    Check,
}

/// Reads of keys from disk under way: one per key, its answer shared by every caller that
/// asks while it runs.
#[derive(Debug, Default)]
pub(super) struct Flights(Keyed<tokio::sync::OnceCell<Option<Arc<StoredVersion>>>>);

impl Flights {
    /// `load`'s answer for `key`, shared with every caller that asks while it runs.
    async fn once(
        &self,
        key: &str,
        load: impl std::future::Future<Output = Option<Arc<StoredVersion>>>,
    ) -> Option<Arc<StoredVersion>> {
        self.0.enter(key).get_or_init(|| load).await.clone()
    }
}

/// The store over its disk tier, as reads and shutdown see it: [`Store::tier`]. Field
/// access reaches the store.
#[derive(Clone, Copy)]
pub struct Tier<'a>(&'a Arc<Store>);

impl std::ops::Deref for Tier<'_> {
    type Target = Store;
    fn deref(&self) -> &Store {
        self.0
    }
}

impl Store {
    /// Its disk tier, seen from the store: reading from it, admitting into memory.
    pub fn tier(self: &Arc<Self>) -> Tier<'_> {
        Tier(self)
    }

    /// Its disk tier, when it has one.
    pub fn disk(&self) -> Option<&Arc<Disk>> {
        self.disk.as_ref()
    }
}

impl Tier<'_> {
    /// Whether `key`'s current version is on disk (memory aside).
    pub fn on_disk(&self, key: &str) -> bool {
        self.disk.as_ref().is_some_and(|d| d.contains(key))
    }

    /// `key`'s current version from the disk tier, for a read that missed memory: admitted
    /// into memory as `want` and the policy say (else a copy for this read only, which
    /// one-sided readers cannot reach). `Ok(None)` when the disk has none.
    pub async fn from_disk(
        &self,
        key: &str,
        want: Want,
    ) -> Result<Option<Arc<StoredVersion>>, StoreError> {
        let Some(disk) = self.disk.as_ref().filter(|d| d.contains(key)) else {
            return Ok(None);
        };
        if want == Want::Check {
            return Ok(match disk.locate(key) {
                Some(Found::Held(v)) => Some(v),
                Some(Found::Record(r)) => self.read(disk, key, r).await,
                None => None,
            });
        }
        let load = async {
            let record = match disk.locate(key)? {
                Found::Held(v) => return Some(v),
                Found::Record(r) => r,
            };
            // Admitted since this read missed memory (the copy it held let go after).
            if let Some(v) = self.current(key) {
                return Some(v);
            }
            let admit = record.admit;
            let version = self.read(disk, key, record).await?;
            let Some(reason) = admit else {
                return Some(version);
            };
            let promoted = self.promote(Arc::clone(&version), reason, false).await;
            if !promoted.in_memory() && disk.hold(&version) {
                // No room now (spills still being written): this copy answers the key's
                // reads while the admission waits for room.
                let (store, disk) = (Arc::clone(self.0), Arc::clone(disk));
                tokio::spawn(async move {
                    store
                        .tier()
                        .promote(Arc::clone(&version), reason, true)
                        .await;
                    disk.release(&version);
                });
            }
            Some(promoted)
        };
        let Some(v) = disk.flights.once(key, load).await else {
            return Ok(None);
        };
        catalog::DISK_HITS.counter().increment(1);
        match want {
            Want::Descriptor => self.admit(v).await.map(Some),
            _ => Ok(Some(v)),
        }
    }

    /// The version in record `r` of `key`, read off the async worker.
    async fn read(&self, disk: &Arc<Disk>, key: &str, r: Record) -> Option<Arc<StoredVersion>> {
        let (d, k) = (Arc::clone(disk), key.to_owned());
        tokio::task::spawn_blocking(move || d.read(&k, &r))
            .await
            .ok()?
    }

    /// The current version of `key` for a read that has no origin behind it, from memory
    /// or the disk tier: counted as a cache hit or miss (reads through an origin are
    /// counted by the read-through).
    pub async fn read_current(&self, key: &str) -> Option<Arc<StoredVersion>> {
        let found = match self.current(key) {
            Some(v) => Some(v),
            None => self.from_disk(key, Want::Read).await.ok().flatten(),
        };
        match found {
            Some(_) => catalog::CACHE_HITS.counter().increment(1),
            None => catalog::CACHE_MISSES.counter().increment(1),
        }
        found
    }

    /// `v` in memory where a descriptor may name it: itself when the index reaches it,
    /// else (read back from disk, or evicted and still queued for the writer, its arena
    /// draining) a copy admitted into memory, waiting for room as a PUT does
    /// ([`StoreError::Busy`] when none comes).
    pub async fn admit(&self, v: Arc<StoredVersion>) -> Result<Arc<StoredVersion>, StoreError> {
        let reachable = || {
            self.version(v.key(), v.version())
                .is_some_and(|x| Arc::ptr_eq(&x, &v))
        };
        if v.in_memory() && reachable() {
            return Ok(v);
        }
        let promoted = self.promote(v, "descriptor", true).await;
        match promoted.in_memory() {
            true => Ok(promoted),
            false => Err(StoreError::Busy {
                retry_after: self.config.lease + self.config.grace,
            }),
        }
    }

    /// Copies `v`, read back from disk, into arena memory and makes it the key's current
    /// version again (same version id) unless the key was written or deleted meanwhile:
    /// then the version now current. `v` itself when there is no room (waiting for it
    /// as a PUT does only when `wait`).
    async fn promote(
        &self,
        v: Arc<StoredVersion>,
        reason: &'static str,
        wait: bool,
    ) -> Arc<StoredVersion> {
        let len = v.frame.len();
        let attempt = || reserve_frame(&self.arenas, len, false);
        let reserved = match wait {
            true => self.with_room(attempt, room_wait(&self.config)).await,
            // What a PUT does before it waits: make room, reclaim, try again.
            false => self.with_room(attempt, Duration::ZERO).await,
        };
        let Ok((arena, mut slot)) = reserved else {
            if wait {
                catalog::DISK_PROMOTIONS_SKIPPED.counter().increment(1);
            }
            return v;
        };
        slot.as_mut_slice().copy_from_slice(v.frame.as_slice());
        if let (true, Some(fabric)) = (arena.dedicated, &self.fabric) {
            if let Err(e) = arena.register_sealed(fabric) {
                tracing::warn!(error = %e, "cannot register a promoted value's arena");
                arena.finish_pending();
                return v;
            }
        }
        let copy = Arc::new(StoredVersion {
            frame: slot.freeze(),
            arena: Arc::clone(&arena),
            origin: v.origin.duplicate(true),
        });
        let key = copy.key_bytes();
        let mut shard = self.index.write(key);
        let admitted = shard.current(key).is_none()
            && self
                .disk
                .as_ref()
                .is_some_and(|d| d.holds(key, copy.version().0));
        if admitted {
            arena.add_live(&copy, len as u64);
            shard.replace(Arc::clone(&copy));
        }
        drop(shard);
        arena.finish_pending();
        if !admitted {
            // Written or deleted meanwhile: what is current now, if anything, else this read's copy.
            return self.current(v.key()).unwrap_or(v);
        }
        catalog::DISK_PROMOTIONS
            .counter_by(&[("reason", reason)])
            .increment(1);
        copy
    }

    /// Queues every current version not yet on disk to be written, then waits until they
    /// are (at most `timeout`): at a clean shutdown, so a restart finds them. How many
    /// were queued, and whether all were written in time.
    pub fn spill_all(&self, timeout: Duration) -> (usize, bool) {
        let Some(disk) = self.disk.as_ref() else {
            return (0, true);
        };
        let mut queued = 0;
        let mut after: Option<String> = None;
        loop {
            let (page, more) = self.list("", after.as_deref(), 1024);
            for v in &page {
                let shard = self.index.write(v.key_bytes());
                if shard
                    .current(v.key_bytes())
                    .is_some_and(|c| std::ptr::eq(c, &**v))
                    && v.origin.tied() != super::super::REPLICA_TIE
                {
                    disk.spill(v);
                    queued += 1;
                }
            }
            after = page.last().map(|v| v.key().to_owned());
            if !more || after.is_none() {
                break;
            }
        }
        (queued, disk.close_cleanly(timeout))
    }
}

impl Disk {
    /// Publishes its gauges.
    pub fn observe(&self) {
        let (values, bytes, index) = self.usage();
        let r = self.recovered();
        catalog::DISK_VALUES.gauge().set(values as f64);
        catalog::DISK_BYTES.gauge().set(bytes as f64);
        catalog::DISK_BUDGET_BYTES.gauge().set(self.size() as f64);
        catalog::DISK_INDEX_BYTES.gauge().set(index as f64);
        catalog::DISK_RECOVERY_SECONDS
            .gauge()
            .set(r.took.as_secs_f64());
        catalog::DISK_RECOVERED_VALUES.gauge().set(r.values as f64);
        catalog::DISK_TORN_BYTES.gauge().set(r.torn as f64);
    }
}
