//! The store of immutable versions. Knows nothing of HTTP.
//!
//! Every write produces a new [`StoredVersion`] with a fresh [`VersionId`], framed (see
//! [`rasa_fastpath::frame`]) in an arena; then, and only then, the key's current pointer
//! moves to it. Bytes of a version never change after it becomes visible, which is what
//! makes one-sided reads safe.
//!
//! - Writes stream: [`Store::begin`] reserves the whole frame up front, [`Upload::write`]
//!   copies each body chunk straight into arena memory while SHA-256 and the frame checksum
//!   are computed, and [`Store::commit`] seals the header and publishes. An upload dropped
//!   before commit (client gone, body too long or short) publishes nothing: its slot is
//!   unreachable garbage until its arena is reused.
//! - Older versions of a key stay readable by version id until reclaimed; a delete makes
//!   every version of the key unreachable for new requests at once. Readers that already
//!   hold a version (an HTTP response in flight, a fast-path lease) keep its arena alive.

pub mod arena;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Bound;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rasa_fastpath::buffer::{Frozen, WriteSlot};
use rasa_fastpath::frame::{self, FrameHasher, FrameIdentity, HEADER_LEN};
use rasa_fastpath::server::FabricServer;
use sha2::{Digest, Sha256};

use arena::{Arena, Arenas, ReserveError};

/// Identity of one immutable version: unique across the keys and the restarts of a gateway.
///
/// A version id is the gateway's random 64-bit incarnation (drawn at start) plus a counter,
/// so two processes collide only if their ranges overlap: about `n / 2^64` for `n` writes.
/// Ids are opaque: compare them for equality only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionId(pub u64);

impl fmt::Display for VersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A version id that is not 16 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a version id is 16 hexadecimal digits")]
pub struct BadVersionId;

impl FromStr for VersionId {
    type Err = BadVersionId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BadVersionId);
        }
        u64::from_str_radix(s, 16)
            .map(VersionId)
            .map_err(|_| BadVersionId)
    }
}

/// One stored, immutable version of a key.
#[derive(Debug)]
pub struct StoredVersion {
    /// The key.
    pub key: String,
    /// The version id.
    pub version: VersionId,
    /// Header and payload in arena memory.
    pub frame: Frozen,
    /// The arena holding the frame.
    pub arena: Arc<Arena>,
    /// SHA-256 of the payload.
    pub sha256: [u8; 32],
    /// Frame checksum (XXH3-64 over payload and header).
    pub checksum: u64,
    /// Media type given at upload.
    pub content_type: String,
    /// When the version was committed.
    pub created: SystemTime,
    /// Freshness against the origin, for versions the origin also holds.
    pub origin: OriginMeta,
}

/// What the gateway knows of a version's copy at the origin.
#[derive(Debug, Default)]
pub struct OriginMeta {
    /// The origin's entity tag (for conditional revalidation), once known.
    pub etag: std::sync::OnceLock<String>,
    /// When the origin last confirmed this version (ms since the epoch; 0 = never).
    pub validated_ms: AtomicU64,
}

impl OriginMeta {
    /// Metadata of a copy the origin confirmed just now, with entity tag `etag`.
    pub fn confirmed(etag: Option<String>) -> Self {
        let m = Self::default();
        if let Some(e) = etag {
            let _ = m.etag.set(e);
        }
        m.touch();
        m
    }

    /// Records that the origin confirmed the copy now.
    pub fn touch(&self) {
        let now = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        self.validated_ms.store(now, Ordering::Release);
    }

    /// How long ago the origin last confirmed the copy (`None`: never).
    pub fn age(&self) -> Option<Duration> {
        let ms = self.validated_ms.load(Ordering::Acquire);
        (ms > 0).then(|| {
            SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH + Duration::from_millis(ms))
                .unwrap_or_default()
        })
    }
}

impl StoredVersion {
    /// Payload length.
    pub fn len(&self) -> u64 {
        (self.frame.len() - HEADER_LEN) as u64
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload bytes (shares the arena; no copy).
    pub fn payload(&self) -> Frozen {
        self.frame.slice(HEADER_LEN, self.frame.len())
    }

    /// SHA-256 as lowercase hex.
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }

    /// The strong entity tag, quotes included.
    pub fn etag(&self) -> String {
        format!("\"{}\"", self.sha256_hex())
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The memory budget cannot hold the value.
    #[error("memory budget exhausted: {needed} more bytes needed, {allocated} of {budget} in use")]
    InsufficientStorage {
        /// Bytes the value needed.
        needed: u64,
        /// Bytes allocated when it was refused.
        allocated: u64,
        /// The budget.
        budget: u64,
    },
    /// The body did not have the declared length.
    #[error("the body has {got} bytes but {declared} were declared")]
    LengthMismatch {
        /// Declared length.
        declared: u64,
        /// Bytes that arrived (so far, when too many).
        got: u64,
    },
    /// Registering memory with the fabric failed.
    #[error("fabric registration failed: {0}")]
    Fabric(String),
    /// Memory is full and nothing became reusable in time (leases still running).
    #[error("memory is full of leased values; retry in {retry_after:?}")]
    Busy {
        /// When retrying makes sense.
        retry_after: Duration,
    },
    /// A conditional write's precondition did not hold at commit.
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
}

impl From<ReserveError> for StoreError {
    fn from(e: ReserveError) -> Self {
        match e {
            ReserveError::NeedRoom => StoreError::Busy {
                retry_after: Duration::from_secs(1),
            },
            ReserveError::Never(e) => e,
        }
    }
}

#[derive(Debug)]
struct Entry {
    current: Arc<StoredVersion>,
    /// Overwritten versions, still readable by id until reclaimed.
    older: HashMap<VersionId, Arc<StoredVersion>>,
}

/// Sizing of a store.
#[derive(Clone, Copy, Debug)]
pub struct StoreConfig {
    /// Total bytes of arena memory the store may allocate.
    pub memory_budget: u64,
    /// Size of a shared arena; larger values get an arena of their own.
    pub arena_size: usize,
    /// How long a descriptor handed out stays valid.
    pub lease: Duration,
    /// Extra time after the latest lease deadline before an arena's memory is reused.
    pub grace: Duration,
    /// Longest time one remote key stays in force for new descriptors before its arena is
    /// registered under a fresh one (the old key is revoked once its leases end); `None`
    /// rotates keys only on reclaim.
    pub key_lifetime: Option<Duration>,
}

/// Keys → versions, over arenas.
#[derive(Debug)]
pub struct Store {
    config: StoreConfig,
    incarnation: u64,
    counter: AtomicU64,
    arenas: Arenas,
    fabric: Option<Arc<FabricServer>>,
    index: RwLock<BTreeMap<String, Entry>>,
    /// Woken whenever reclamation makes memory reusable (PUTs waiting for room).
    room: tokio::sync::Notify,
}

impl Store {
    /// An empty store with a fresh random incarnation. With `fabric`, every arena is
    /// registered for one-sided reads.
    pub fn new(config: StoreConfig, fabric: Option<Arc<FabricServer>>) -> Self {
        Self {
            incarnation: rand::random(),
            counter: AtomicU64::new(1),
            arenas: Arenas::new(
                config.arena_size,
                config.memory_budget,
                config.grace,
                fabric.clone(),
            ),
            fabric,
            room: tokio::sync::Notify::new(),
            index: RwLock::new(BTreeMap::new()),
            config,
        }
    }

    /// The random id of this process; version ids count up from it.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The store's sizing.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The fabric endpoint serving one-sided reads, when the fast path is on.
    pub fn fabric(&self) -> Option<&Arc<FabricServer>> {
        self.fabric.as_ref()
    }

    /// Where `v`'s frame can be read one-sided: (remote address, remote key).
    pub fn remote(&self, v: &StoredVersion) -> Option<(u64, u64)> {
        let fabric = self.fabric.as_ref()?;
        v.arena.remote(fabric, v.frame.offset())
    }

    /// Rotates the remote key of the arena holding `v` (revoking the key every descriptor
    /// of that arena carried so far).
    pub fn rotate_key(&self, v: &StoredVersion) -> Result<(), StoreError> {
        match &self.fabric {
            Some(fabric) => v
                .arena
                .rotate_key(fabric)
                .map_err(|e| StoreError::Fabric(e.to_string())),
            None => Ok(()),
        }
    }

    /// Test support: a copy of `v`'s frame, in arena memory, with one byte flipped (the
    /// last payload byte, or a header byte of an empty value), under `v`'s identity and
    /// checksum. A reader given it must reject it.
    pub fn corrupt_copy(&self, v: &StoredVersion) -> Result<Arc<StoredVersion>, StoreError> {
        let (arena, mut slot) = self.arenas.reserve(v.frame.len())?;
        let bytes = slot.as_mut_slice();
        bytes.copy_from_slice(v.frame.as_slice());
        let last = bytes.len() - 1;
        bytes[if v.is_empty() { 20 } else { last }] ^= 0x01;
        Ok(Arc::new(StoredVersion {
            key: v.key.clone(),
            version: v.version,
            frame: slot.freeze(),
            arena,
            sha256: v.sha256,
            checksum: v.checksum,
            content_type: v.content_type.clone(),
            created: v.created,
            origin: OriginMeta::default(),
        }))
    }

    /// Bytes of arena memory allocated now.
    pub fn allocated(&self) -> u64 {
        self.arenas.allocated()
    }

    fn next_version(&self) -> VersionId {
        VersionId(
            self.incarnation
                .wrapping_add(self.counter.fetch_add(1, Ordering::Relaxed)),
        )
    }

    /// Starts storing a value of exactly `len` bytes under `key`: reserves its frame.
    ///
    /// When memory is full, makes room (compacting a sparse arena or evicting the least
    /// recently used one; see [`Store::make_room`]) and waits for reclamation, at most a
    /// lease plus the grace period; then answers [`StoreError::Busy`]. A value that can
    /// never fit is refused at once.
    pub async fn begin(
        &self,
        key: &str,
        content_type: &str,
        len: u64,
    ) -> Result<Upload, StoreError> {
        let never = || StoreError::InsufficientStorage {
            needed: len,
            allocated: self.allocated(),
            budget: self.config.memory_budget,
        };
        let frame_len = usize::try_from(len)
            .ok()
            .and_then(|n| n.checked_add(HEADER_LEN))
            .ok_or_else(never)?;
        let give_up = std::time::Instant::now() + self.config.lease + self.config.grace * 2;
        loop {
            let wake = self.room.notified();
            match self.arenas.reserve(frame_len) {
                Ok((arena, slot)) => {
                    return Ok(Upload {
                        key: key.to_owned(),
                        content_type: content_type.to_owned(),
                        declared: len,
                        written: 0,
                        sha256: Sha256::new(),
                        frame: FrameHasher::new(),
                        arena,
                        slot: Some(slot),
                        origin: OriginMeta::default(),
                    })
                }
                Err(ReserveError::Never(e)) => return Err(e),
                Err(ReserveError::NeedRoom) => {}
            }
            self.make_room();
            if self.reclaim() > 0 {
                continue;
            }
            let now = std::time::Instant::now();
            if now >= give_up {
                return Err(StoreError::Busy {
                    retry_after: self.config.lease + self.config.grace,
                });
            }
            // Woken by the reclaimer; the timeout only bounds the wait.
            let _ =
                tokio::time::timeout((give_up - now).min(Duration::from_millis(100)), wake).await;
        }
    }

    /// Makes unreachable what no longer needs to be reachable so its arenas can drain:
    /// sealed arenas without current versions first; if none is draining after that, the
    /// sparsest sealed arena is compacted (its current versions copied to the open arena,
    /// same version ids) when at most a quarter full, else the least recently used sealed
    /// arena is evicted whole. Eviction works on arenas, not single values, because memory
    /// comes back one arena (one memory region, one key) at a time: evicting scattered cold
    /// values would free nothing until every neighbour died too.
    pub fn make_room(&self) {
        self.drain_dead();
        if self.arenas.draining() > 0 {
            return;
        }
        let Some((arena, compact)) = self.arenas.take_victim() else {
            return;
        };
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        if compact {
            self.compact(&mut index, &arena);
        }
        let evicted = self.purge(&mut index, &arena);
        drop(index);
        if evicted > 0 {
            tracing::info!(
                arena = arena.id,
                evicted,
                "evicted the least recently used arena"
            );
        }
        self.arenas.drain(vec![arena]);
    }

    /// One reclamation pass: drains dead arenas and recycles those whose leases and grace
    /// have passed. Returns how many arenas became reusable. The gateway runs this
    /// periodically ([`Store::run_reclaimer`]); PUTs waiting for room run it too.
    pub fn reclaim(&self) -> usize {
        self.drain_dead();
        if let Some(lifetime) = self.config.key_lifetime {
            self.arenas.refresh_keys(SystemTime::now(), lifetime);
        }
        let freed = self.arenas.reclaim(SystemTime::now());
        if freed > 0 {
            self.room.notify_waiters();
        }
        freed
    }

    /// Runs [`Store::reclaim`] every `interval` until the store is dropped by everyone else.
    pub async fn run_reclaimer(self: Arc<Self>, interval: Duration) {
        let weak = Arc::downgrade(&self);
        drop(self);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(store) = weak.upgrade() else { return };
            store.reclaim();
        }
    }

    /// Publishes gauges that are cheaper to compute when scraped than to keep current:
    /// arenas by state, memory allocated and budget, bytes of current versions, arenas
    /// under a live lease, and the fast path's progress-thread activity.
    pub fn observe(&self) {
        let c = self.arenas.counts();
        for (state, n) in [
            ("open", c.open),
            ("sealed", c.sealed),
            ("draining", c.draining),
            ("free", c.free),
        ] {
            metrics::gauge!("rasa_arenas", "state" => state).set(n as f64);
        }
        metrics::gauge!("rasa_arena_bytes_allocated").set(c.allocated as f64);
        metrics::gauge!("rasa_memory_budget_bytes").set(self.config.memory_budget as f64);
        let (leased, live) = self.arenas.observe(SystemTime::now());
        metrics::gauge!("rasa_arenas_leased").set(leased as f64);
        metrics::gauge!("rasa_live_bytes").set(live as f64);
        if let Some(f) = &self.fabric {
            let st = f.stats();
            metrics::counter!("rasa_fabric_progress_wakeups_total")
                .absolute(st.wakeups.load(Ordering::Relaxed));
            metrics::counter!("rasa_fabric_progress_errors_total")
                .absolute(st.errors.load(Ordering::Relaxed));
        }
    }

    /// Arena life-cycle counters.
    pub fn arena_stats(&self) -> &arena::ArenaStats {
        &self.arenas.stats
    }

    /// Arena counts by state.
    pub fn arena_counts(&self) -> arena::ArenaCounts {
        self.arenas.counts()
    }

    fn drain_dead(&self) {
        let dead = self.arenas.take_dead();
        if dead.is_empty() {
            return;
        }
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        for a in &dead {
            self.purge(&mut index, a);
        }
        drop(index);
        self.arenas.drain(dead);
    }

    /// Makes every version in `arena` unreachable: retained older versions are dropped, and
    /// keys whose current version lives there are evicted. Returns the evicted keys' count.
    fn purge(&self, index: &mut BTreeMap<String, Entry>, arena: &Arc<Arena>) -> u64 {
        let mut evicted = 0;
        for (key, ver) in arena.take_members() {
            let Some(e) = index.get_mut(&key) else {
                continue;
            };
            if e.current.version == ver && Arc::ptr_eq(&e.current.arena, arena) {
                let e = index.remove(&key).expect("present");
                arena.sub_live(e.current.frame.len() as u64);
                evicted += 1;
            } else if e
                .older
                .get(&ver)
                .is_some_and(|o| Arc::ptr_eq(&o.arena, arena))
            {
                e.older.remove(&ver);
            }
        }
        if evicted > 0 {
            self.arenas
                .stats
                .evicted
                .fetch_add(evicted, Ordering::Relaxed);
            metrics::counter!("rasa_evictions_total").increment(evicted);
        }
        evicted
    }

    /// Copies the current versions living in `arena` to the open arena (same version ids,
    /// same frames) and moves their keys there, as far as room allows.
    fn compact(&self, index: &mut BTreeMap<String, Entry>, arena: &Arc<Arena>) {
        let members = arena.take_members();
        let mut kept = Vec::new();
        let mut moved = 0u64;
        for (key, ver) in members {
            let Some(e) = index.get_mut(&key) else {
                continue;
            };
            if !(e.current.version == ver && Arc::ptr_eq(&e.current.arena, arena)) {
                kept.push((key, ver));
                continue;
            }
            let old = Arc::clone(&e.current);
            let Ok((to, mut slot)) = self.arenas.reserve(old.frame.len()) else {
                kept.push((key, ver));
                continue;
            };
            slot.as_mut_slice().copy_from_slice(old.frame.as_slice());
            let copy = Arc::new(StoredVersion {
                key: old.key.clone(),
                version: old.version,
                frame: slot.freeze(),
                arena: Arc::clone(&to),
                sha256: old.sha256,
                checksum: old.checksum,
                content_type: old.content_type.clone(),
                created: old.created,
                origin: OriginMeta {
                    etag: old.origin.etag.clone(),
                    validated_ms: AtomicU64::new(old.origin.validated_ms.load(Ordering::Acquire)),
                },
            });
            to.add_live(&key, ver, copy.frame.len() as u64);
            to.finish_pending();
            arena.sub_live(old.frame.len() as u64);
            e.current = copy;
            moved += 1;
        }
        // Whatever could not move stays a member, to be evicted by the purge that follows.
        arena.restore_members(kept);
        if moved > 0 {
            self.arenas
                .stats
                .compacted
                .fetch_add(moved, Ordering::Relaxed);
            metrics::counter!("rasa_compacted_total").increment(moved);
            tracing::info!(arena = arena.id, moved, "compacted a sparse arena");
        }
    }

    /// Publishes a fully written upload as the key's current version, if `check` accepts
    /// the current version (or its absence) at that moment. On any error nothing is
    /// published.
    pub fn commit(
        &self,
        upload: Upload,
        check: impl FnOnce(Option<&StoredVersion>) -> Result<(), StoreError>,
    ) -> Result<Arc<StoredVersion>, StoreError> {
        self.publish(self.seal(upload)?, check)
    }

    /// Finishes a fully written upload as an immutable version (header written, digests
    /// final) without making it visible: write-through sends it to the origin first.
    pub fn seal(&self, mut upload: Upload) -> Result<Sealed, StoreError> {
        if upload.written != upload.declared {
            return Err(StoreError::LengthMismatch {
                declared: upload.declared,
                got: upload.written,
            });
        }
        let mut slot = upload.slot.take().expect("an upload is sealed once");
        let version = self.next_version();
        let id = FrameIdentity {
            key_hash: frame::key_hash(&upload.key),
            version: version.0,
            payload_len: upload.declared,
        };
        let hasher = std::mem::take(&mut upload.frame);
        let (header, checksum) = hasher.seal(id);
        slot.as_mut_slice()[..HEADER_LEN].copy_from_slice(&header);
        let sha256: [u8; 32] = std::mem::take(&mut upload.sha256).finalize().into();
        let stored = Arc::new(StoredVersion {
            key: std::mem::take(&mut upload.key),
            version,
            frame: slot.freeze(),
            arena: Arc::clone(&upload.arena),
            sha256,
            checksum,
            content_type: std::mem::take(&mut upload.content_type),
            created: SystemTime::now(),
            origin: std::mem::take(&mut upload.origin),
        });
        Ok(Sealed {
            version: stored,
            _upload: upload,
        })
    }

    /// Makes a sealed version the key's current version, if `check` accepts the current
    /// version (or its absence) at that moment.
    pub fn publish(
        &self,
        sealed: Sealed,
        check: impl FnOnce(Option<&StoredVersion>) -> Result<(), StoreError>,
    ) -> Result<Arc<StoredVersion>, StoreError> {
        let stored = Arc::clone(&sealed.version);
        let version = stored.version;
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        check(index.get(&stored.key).map(|e| &*e.current))?;
        stored
            .arena
            .add_live(&stored.key, version, stored.frame.len() as u64);
        match index.get_mut(&stored.key) {
            Some(entry) => {
                let old = std::mem::replace(&mut entry.current, Arc::clone(&stored));
                old.arena.sub_live(old.frame.len() as u64);
                entry.older.insert(old.version, old);
            }
            None => {
                index.insert(
                    stored.key.clone(),
                    Entry {
                        current: Arc::clone(&stored),
                        older: HashMap::new(),
                    },
                );
            }
        }
        drop(index);
        drop(sealed);
        metrics::counter!("rasa_versions_stored_total").increment(1);
        metrics::counter!("rasa_bytes_stored_total").increment(stored.len());
        Ok(stored)
    }

    /// The current version of `key`.
    pub fn current(&self, key: &str) -> Option<Arc<StoredVersion>> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        let v = index.get(key).map(|e| Arc::clone(&e.current))?;
        v.arena.touch();
        Some(v)
    }

    /// A given version of `key`, current or older, while retained.
    pub fn version(&self, key: &str, version: VersionId) -> Option<Arc<StoredVersion>> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        let entry = index.get(key)?;
        let v = if entry.current.version == version {
            Arc::clone(&entry.current)
        } else {
            Arc::clone(entry.older.get(&version)?)
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

    /// Grants a lease on `version`: returns its deadline and records it on the arena, which
    /// therefore keeps the bytes unchanged at least until then.
    pub fn lease(&self, version: &StoredVersion) -> SystemTime {
        let deadline = SystemTime::now() + self.config.lease;
        version.arena.extend_lease(deadline);
        metrics::counter!("rasa_leases_granted_total").increment(1);
        deadline
    }
}

/// A value being written. Dropping it unfinished publishes nothing.
#[derive(Debug)]
pub struct Upload {
    key: String,
    content_type: String,
    declared: u64,
    written: u64,
    sha256: Sha256,
    frame: FrameHasher,
    arena: Arc<Arena>,
    slot: Option<WriteSlot>,
    origin: OriginMeta,
}

/// A finished, immutable version that is not visible yet (see [`Store::seal`]). Dropping it
/// publishes nothing; its space is reclaimed with its arena.
#[derive(Debug)]
pub struct Sealed {
    version: Arc<StoredVersion>,
    _upload: Upload,
}

impl Sealed {
    /// The version as it will be published.
    pub fn version(&self) -> &Arc<StoredVersion> {
        &self.version
    }
}

impl Upload {
    /// Marks the value as a copy of an origin object with entity tag `etag`, confirmed now.
    pub fn from_origin(&mut self, etag: Option<String>) {
        self.origin = OriginMeta::confirmed(etag);
    }

    /// Appends the next body chunk: copies it into arena memory and feeds both digests.
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), StoreError> {
        let end = self.written + chunk.len() as u64;
        if end > self.declared {
            return Err(StoreError::LengthMismatch {
                declared: self.declared,
                got: end,
            });
        }
        let slot = self.slot.as_mut().expect("writing a committed upload");
        let at = HEADER_LEN + self.written as usize;
        slot.as_mut_slice()[at..at + chunk.len()].copy_from_slice(chunk);
        self.sha256.update(chunk);
        self.frame.update(chunk);
        self.written = end;
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        // Committed or not, this upload no longer holds its arena open.
        self.arena.finish_pending();
        if let Some(slot) = &self.slot {
            metrics::counter!("rasa_uploads_abandoned_total").increment(1);
            tracing::debug!(
                key = %self.key,
                written = self.written,
                declared = self.declared,
                wasted = slot.len(),
                "upload abandoned; nothing published"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(budget: u64, arena: usize, lease: Duration, grace: Duration) -> Store {
        Store::new(
            StoreConfig {
                memory_budget: budget,
                arena_size: arena,
                lease,
                grace,
                key_lifetime: None,
            },
            None,
        )
    }

    fn store(budget: u64, arena: usize) -> Store {
        store_with(
            budget,
            arena,
            Duration::from_secs(10),
            Duration::from_secs(1),
        )
    }

    async fn put(s: &Store, key: &str, body: &[u8]) -> Result<Arc<StoredVersion>, StoreError> {
        let mut up = s
            .begin(key, "application/octet-stream", body.len() as u64)
            .await?;
        for part in body.chunks(3) {
            up.write(part)?;
        }
        s.commit(up, |_| Ok(()))
    }

    #[tokio::test]
    async fn frames_validate_and_versions_stay_readable() {
        let s = store(1 << 20, 64 << 10);
        let v1 = put(&s, "k", b"one").await.unwrap();
        let v2 = put(&s, "k", b"two!").await.unwrap();
        assert_ne!(v1.version, v2.version);
        assert_eq!(s.current("k").unwrap().version, v2.version);
        assert_eq!(
            s.version("k", v1.version).unwrap().payload().as_slice(),
            b"one"
        );
        for v in [&v1, &v2] {
            let id = FrameIdentity {
                key_hash: frame::key_hash("k"),
                version: v.version.0,
                payload_len: v.len(),
            };
            let payload = frame::validate(v.frame.as_slice(), id, v.checksum).unwrap();
            assert_eq!(payload, v.payload().as_slice());
        }
        assert_eq!(
            v2.sha256_hex(),
            hex::encode(Sha256::digest(b"two!")),
            "sha256 computed while streaming"
        );
        assert!(s.delete("k", |_| Ok(())).unwrap());
        assert!(s.current("k").is_none());
        assert!(s.version("k", v1.version).is_none());
        assert!(!s.delete("k", |_| Ok(())).unwrap());
    }

    #[tokio::test]
    async fn wrong_length_or_dropped_upload_publishes_nothing() {
        let s = store(1 << 20, 64 << 10);
        let mut up = s.begin("k", "t", 4).await.unwrap();
        up.write(b"abc").unwrap();
        assert!(matches!(
            s.commit(up, |_| Ok(())),
            Err(StoreError::LengthMismatch { .. })
        ));
        let mut up = s.begin("k", "t", 2).await.unwrap();
        assert!(up.write(b"abc").is_err());
        drop(up);
        assert!(s.current("k").is_none());
    }

    #[tokio::test]
    async fn a_value_that_can_never_fit_is_refused_at_once() {
        let s = store(256 << 10, 64 << 10);
        assert!(matches!(
            put(&s, "huge", &vec![0u8; 300 << 10]).await,
            Err(StoreError::InsufficientStorage { .. })
        ));
    }

    #[tokio::test]
    async fn eviction_and_recycling_keep_memory_within_budget() {
        let s = store_with(
            256 << 10,
            64 << 10,
            Duration::from_millis(20),
            Duration::from_millis(5),
        );
        let mut last = Vec::new();
        for i in 0..200u32 {
            let body = vec![(i % 251) as u8; 20 << 10];
            let v = put(&s, &format!("k{}", i % 50), &body).await.unwrap();
            s.lease(&v);
            assert!(s.allocated() <= 256 << 10, "over budget after {i} puts");
            last = body;
        }
        // The most recent value is readable; older ones were evicted or overwritten.
        assert_eq!(s.current("k49").unwrap().payload().as_slice(), &last[..]);
        let st = s.arena_stats();
        assert!(st.recycled.load(Ordering::Relaxed) > 0, "{st:?}");
        assert!(
            st.keys_revoked.load(Ordering::Relaxed) == 0,
            "no fabric, no keys"
        );
        // A large value gets its own arena within the budget, evicting what it must.
        let big = vec![9u8; 150 << 10];
        let v = put(&s, "big", &big).await.unwrap();
        assert!(v.arena.dedicated);
        assert!(s.allocated() <= 256 << 10);
        assert_eq!(s.current("big").unwrap().payload().as_slice(), &big[..]);
    }

    #[tokio::test]
    async fn arenas_wait_for_leases_and_local_readers_before_reuse() {
        let s = store_with(
            1 << 20,
            64 << 10,
            Duration::from_secs(5),
            Duration::from_millis(100),
        );
        // Fill one arena, lease a value in it, then make every value in it dead.
        let first = put(&s, "a", &[1u8; 40 << 10]).await.unwrap();
        let deadline = s.lease(&first);
        let reader = first.payload(); // like an HTTP body in flight
        let arena_id = first.arena.id;
        put(&s, "b", &[2u8; 40 << 10]).await.unwrap(); // seals the first arena
        put(&s, "a", &[3u8; 10]).await.unwrap(); // overwrites the only value in it
        drop(first);
        s.drain_dead();
        assert_eq!(s.arena_counts().draining, 1);
        // Not before the lease deadline plus grace...
        assert_eq!(s.arenas.reclaim(deadline), 0);
        assert_eq!(s.arenas.reclaim(deadline + Duration::from_millis(99)), 0);
        // ...and not while a local reader holds its memory.
        let after = deadline + Duration::from_millis(101);
        assert_eq!(s.arenas.reclaim(after), 0);
        assert_eq!(reader.as_slice()[0], 1, "bytes unchanged under a reader");
        drop(reader);
        assert_eq!(s.arenas.reclaim(after), 1);
        let counts = s.arena_counts();
        assert_eq!(
            (counts.draining, counts.free),
            (0, 1),
            "{counts:?} (arena {arena_id})"
        );
        // The old version went with it.
        assert_eq!(s.current("a").unwrap().payload().as_slice(), &[3u8; 10]);
    }

    #[tokio::test]
    async fn compaction_moves_live_values_out_of_sparse_arenas() {
        let s = store_with(
            192 << 10,
            64 << 10,
            Duration::from_millis(1),
            Duration::ZERO,
        );
        // Arena 1: one small live value among dead ones.
        let (kept_version, kept_arena) = {
            let v = put(&s, "keep", b"kept value").await.unwrap();
            (v.version, v.arena.id)
        };
        for i in 0..5 {
            put(&s, &format!("dead{i}"), &[0u8; 10 << 10])
                .await
                .unwrap();
        }
        for i in 0..5 {
            s.delete(&format!("dead{i}"), |_| Ok(())).unwrap();
        }
        // Fill the rest of the budget.
        for i in 0..4 {
            put(&s, &format!("fill{i}"), &[1u8; 40 << 10])
                .await
                .unwrap();
        }
        let mut spin = 0;
        while s.arena_stats().compacted.load(Ordering::Relaxed) == 0 {
            put(&s, &format!("more{spin}"), &[2u8; 40 << 10])
                .await
                .unwrap();
            spin += 1;
            assert!(spin < 20, "no compaction happened");
        }
        let after = s
            .current("keep")
            .expect("a compacted value stays reachable");
        assert_eq!(
            after.version, kept_version,
            "compaction keeps the version id"
        );
        assert_ne!(
            after.arena.id, kept_arena,
            "the value moved to another arena"
        );
        assert_eq!(after.payload().as_slice(), b"kept value");
    }

    #[tokio::test]
    async fn list_pages_in_key_order_within_prefix() {
        let s = store(1 << 20, 64 << 10);
        for k in ["a/1", "a/2", "a/3", "b/1", "a"] {
            put(&s, k, k.as_bytes()).await.unwrap();
        }
        let keys = |v: Vec<Arc<StoredVersion>>| v.iter().map(|x| x.key.clone()).collect::<Vec<_>>();
        let (p, more) = s.list("a/", None, 2);
        assert_eq!((keys(p), more), (vec!["a/1".into(), "a/2".into()], true));
        let (p, more) = s.list("a/", Some("a/2"), 2);
        assert_eq!((keys(p), more), (vec!["a/3".to_string()], false));
        let (p, _) = s.list("", Some("a/3"), 10);
        assert_eq!(keys(p), vec!["b/1".to_string()]);
    }

    #[test]
    fn version_ids_parse_and_print() {
        let v = VersionId(0x00ab_cdef_0123_4567);
        assert_eq!(v.to_string(), "00abcdef01234567");
        assert_eq!("00abcdef01234567".parse::<VersionId>(), Ok(v));
        assert!("abc".parse::<VersionId>().is_err());
        assert!("+0abcdef01234567".parse::<VersionId>().is_err());
    }
}
