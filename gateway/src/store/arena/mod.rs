//! Arenas: large buffers that values are appended into, and their life cycle under a
//! memory budget.
//!
//! ```text
//!   free ──► open ──► sealed ──► draining ──► (key revoked, memory reset) ──► free
//!            (appending)  (full)    (no value reachable;      ▲
//!                                    waits for leases + grace │ dedicated arenas are
//!                                    and local readers)       └ released instead
//! ```
//!
//! **The lease invariant is enforced here**: an arena's bytes change only when it is
//! recycled, and [`Arenas::reclaim`] recycles an arena only after (1) no value in it is
//! reachable for new requests (so no new descriptor can name it), (2) the latest lease
//! deadline it handed out plus the grace period has passed, (3) its memory region has been
//! closed, revoking the remote key every descriptor carried, and (4) no local reader (an
//! HTTP response in flight, an upload) still holds its memory. A reader that comes late
//! uses a revoked key and gets a protection error, never other bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rasa_fastpath::buffer::{ArenaBuffer, WriteSlot, BUFFER_ALIGN};
use rasa_fastpath::fabric::{FabricError, MemoryRegion};
use rasa_fastpath::frame::FRAME_ALIGN;
use rasa_fastpath::server::FabricServer;

use super::{StoreError, VersionId};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One arena: a buffer registered as one memory region with one remote key.
#[derive(Debug)]
pub struct Arena {
    /// Process-unique id (a recycled arena gets a new one), for logs and metrics.
    pub id: u64,
    /// The memory.
    pub buffer: Arc<ArenaBuffer>,
    /// Whether this arena holds a single value larger than the arena size.
    pub dedicated: bool,
    /// The registration with the fabric (one memory region, one remote key), when the
    /// fast path is on. Closed (key revoked) before the memory is reused.
    region: RwLock<Option<MemoryRegion>>,
    /// When the current region was registered (ms since the epoch), for `--key-lifetime`.
    key_since_ms: AtomicU64,
    /// Regions superseded by a key refresh, each closed once the leases handed out under
    /// its key (plus grace) have ended.
    retiring: Mutex<Vec<(MemoryRegion, SystemTime)>>,
    /// Latest lease deadline handed out for any value in this arena (ms since the epoch).
    lease_deadline_ms: AtomicU64,
    /// Last time a value in this arena was written or read (ms since the epoch): the
    /// recency that eviction orders arenas by.
    last_access_ms: AtomicU64,
    /// Current versions (reachable by key) in this arena, and their frame bytes.
    live_count: AtomicU64,
    live_bytes: AtomicU64,
    /// Uploads that reserved space here and are not finished yet.
    pending: AtomicU64,
    /// Every version committed here, so that draining can make them unreachable.
    members: Mutex<Vec<(String, VersionId)>>,
}

impl Arena {
    fn new(
        id: u64,
        buffer: Arc<ArenaBuffer>,
        dedicated: bool,
        region: Option<MemoryRegion>,
    ) -> Self {
        Self {
            id,
            buffer,
            dedicated,
            region: RwLock::new(region),
            key_since_ms: AtomicU64::new(now_ms()),
            retiring: Mutex::new(Vec::new()),
            lease_deadline_ms: AtomicU64::new(0),
            last_access_ms: AtomicU64::new(now_ms()),
            live_count: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            members: Mutex::new(Vec::new()),
        }
    }

    /// The remote address and key of `offset` within this arena, when registered.
    pub fn remote(&self, fabric: &FabricServer, offset: usize) -> Option<(u64, u64)> {
        let region = self.region.read().unwrap_or_else(PoisonError::into_inner);
        region
            .as_ref()
            .map(|r| (fabric.remote_addr(r, offset), r.key()))
    }

    /// Registers the arena again under a fresh remote key and revokes the old one. Readers
    /// holding the old key get a protection error from then on, never other bytes.
    pub fn rotate_key(&self, fabric: &FabricServer) -> Result<(), FabricError> {
        let mut region = self.region.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = region.take() {
            let old_key = old.key();
            let fresh = fabric.rotate(old).inspect_err(|e| {
                // The old region is closed either way: the arena is HTTP-only now.
                tracing::error!(arena = self.id, error = %e, "key rotation failed; arena unregistered");
            })?;
            tracing::debug!(
                arena = self.id,
                old_key,
                new_key = fresh.key(),
                "remote key rotated"
            );
            metrics::counter!("rasa_keys_rotated_total").increment(1);
            *region = Some(fresh);
        }
        Ok(())
    }

    /// Puts a fresh remote key in force for new descriptors *without* revoking the current
    /// one yet: the arena is registered again, and the old region is kept until the latest
    /// lease handed out under its key, plus `grace`, has ended ([`Arena::close_retired`]).
    /// Bounds how long a key — a capability for the whole arena — stays usable.
    ///
    /// The deadline is read under the region's write lock, and a descriptor extends the
    /// lease before it reads the key under the read lock: a lease handed out with the old
    /// key is always covered by the old region's deadline.
    pub fn refresh_key(&self, fabric: &FabricServer, grace: Duration) -> Result<bool, FabricError> {
        let mut region = self.region.write().unwrap_or_else(PoisonError::into_inner);
        let Some(current) = region.as_ref() else {
            return Ok(false);
        };
        let fresh = fabric.register(Arc::clone(current.buffer()))?;
        let old = region.replace(fresh).expect("checked above");
        let until = self.lease_deadline() + grace;
        tracing::debug!(
            arena = self.id,
            old_key = old.key(),
            ?until,
            "remote key refreshed"
        );
        self.retiring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((old, until));
        self.key_since_ms.store(now_ms(), Ordering::Release);
        Ok(true)
    }

    /// How long the current key has been in force.
    pub fn key_age(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.key_since_ms.load(Ordering::Acquire)))
    }

    /// Closes superseded regions whose leases (plus grace) have ended; returns how many.
    pub fn close_retired(&self, now: SystemTime) -> usize {
        let mut retiring = self.retiring.lock().unwrap_or_else(PoisonError::into_inner);
        let before = retiring.len();
        retiring.retain(|(_, until)| *until > now);
        before - retiring.len()
    }

    /// Closes the memory region (and any superseded one): every descriptor naming this
    /// arena is now a clean miss.
    fn revoke(&self) -> bool {
        let mut region = self.region.write().unwrap_or_else(PoisonError::into_inner);
        let retired =
            std::mem::take(&mut *self.retiring.lock().unwrap_or_else(PoisonError::into_inner));
        region.take().is_some() || !retired.is_empty()
    }

    /// Records that a descriptor naming this arena is valid until `deadline`.
    pub fn extend_lease(&self, deadline: SystemTime) {
        let ms = deadline
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        self.lease_deadline_ms.fetch_max(ms, Ordering::AcqRel);
    }

    /// Latest lease deadline handed out for this arena (the epoch when none).
    pub fn lease_deadline(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.lease_deadline_ms.load(Ordering::Acquire))
    }

    /// Notes an access, for eviction order.
    pub fn touch(&self) {
        self.last_access_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// A version of `bytes` frame bytes became current here.
    pub(super) fn add_live(&self, key: &str, version: VersionId, bytes: u64) {
        self.live_count.fetch_add(1, Ordering::AcqRel);
        self.live_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((key.to_owned(), version));
        self.touch();
    }

    /// A version of `bytes` frame bytes here stopped being current.
    pub(super) fn sub_live(&self, bytes: u64) {
        self.live_count.fetch_sub(1, Ordering::AcqRel);
        self.live_bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Current versions in this arena.
    pub fn live_count(&self) -> u64 {
        self.live_count.load(Ordering::Acquire)
    }

    /// Frame bytes of current versions in this arena.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes.load(Ordering::Acquire)
    }

    pub(super) fn finish_pending(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    pub(super) fn restore_members(&self, members: Vec<(String, VersionId)>) {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(members);
    }

    pub(super) fn take_members(&self) -> Vec<(String, VersionId)> {
        std::mem::take(&mut *self.members.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Counters of the arena life cycle.
#[derive(Debug, Default)]
pub struct ArenaStats {
    /// Arenas whose memory was reset and registered again under a fresh key.
    pub recycled: AtomicU64,
    /// Remote keys revoked by reclamation.
    pub keys_revoked: AtomicU64,
    /// Dedicated arenas released back to the system.
    pub released: AtomicU64,
    /// Current versions evicted to make room.
    pub evicted: AtomicU64,
    /// Current versions moved out of sparse arenas by compaction.
    pub compacted: AtomicU64,
}

/// Arena counts by state, and memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArenaCounts {
    /// Open arena (0 or 1).
    pub open: usize,
    /// Sealed arenas holding reachable values.
    pub sealed: usize,
    /// Arenas waiting for leases and readers before reuse.
    pub draining: usize,
    /// Recycled arenas ready for reuse.
    pub free: usize,
    /// Bytes of arena memory allocated.
    pub allocated: u64,
}

#[derive(Debug, Default)]
struct Table {
    open: Option<Arc<Arena>>,
    sealed: Vec<Arc<Arena>>,
    draining: Vec<Arc<Arena>>,
    free: Vec<Arc<Arena>>,
    allocated: u64,
}

/// Why a reservation did not succeed now.
#[derive(Debug)]
pub enum ReserveError {
    /// Memory is full; room can be made by draining arenas.
    NeedRoom,
    /// The value can never fit.
    Never(StoreError),
}

/// Hands out frame slots from arenas within the memory budget, and runs their life cycle.
#[derive(Debug)]
pub struct Arenas {
    arena_size: usize,
    budget: u64,
    grace: Duration,
    next_id: AtomicU64,
    table: Mutex<Table>,
    fabric: Option<Arc<FabricServer>>,
    /// Life-cycle counters.
    pub stats: ArenaStats,
}

impl Arenas {
    /// No arenas yet: memory is allocated as values arrive, up to `budget`.
    pub fn new(
        arena_size: usize,
        budget: u64,
        grace: Duration,
        fabric: Option<Arc<FabricServer>>,
    ) -> Self {
        Self {
            arena_size,
            budget,
            grace,
            next_id: AtomicU64::new(1),
            table: Mutex::new(Table::default()),
            fabric,
            stats: ArenaStats::default(),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes of arena memory allocated now.
    pub fn allocated(&self) -> u64 {
        self.table().allocated
    }

    /// Arena counts by state.
    pub fn counts(&self) -> ArenaCounts {
        let t = self.table();
        ArenaCounts {
            open: usize::from(t.open.is_some()),
            sealed: t.sealed.len(),
            draining: t.draining.len(),
            free: t.free.len(),
            allocated: t.allocated,
        }
    }

    fn size_of(&self, frame_len: usize) -> u64 {
        if frame_len > self.arena_size {
            frame_len.next_multiple_of(BUFFER_ALIGN) as u64
        } else {
            self.arena_size as u64
        }
    }

    /// Whether a frame this long could ever be stored.
    pub fn fits(&self, frame_len: usize) -> bool {
        self.size_of(frame_len) <= self.budget
    }

    /// Claims `frame_len` bytes for one frame, without waiting.
    pub fn reserve(&self, frame_len: usize) -> Result<(Arc<Arena>, WriteSlot), ReserveError> {
        if !self.fits(frame_len) {
            return Err(ReserveError::Never(StoreError::InsufficientStorage {
                needed: frame_len as u64,
                allocated: self.allocated(),
                budget: self.budget,
            }));
        }
        let mut t = self.table();
        let claim = |arena: &Arc<Arena>| {
            let slot = arena.buffer.try_reserve(frame_len, FRAME_ALIGN)?;
            arena.pending.fetch_add(1, Ordering::AcqRel);
            Some((Arc::clone(arena), slot))
        };
        if frame_len > self.arena_size {
            let size = self.size_of(frame_len);
            // Recycled shared arenas give their memory back for a dedicated one.
            while t.allocated + size > self.budget {
                let Some(f) = t.free.pop() else { break };
                t.allocated -= f.buffer.capacity() as u64;
                self.stats.released.fetch_add(1, Ordering::Relaxed);
            }
            if t.allocated + size > self.budget {
                return Err(ReserveError::NeedRoom);
            }
            let arena = self
                .allocate(&mut t, size as usize, true)
                .map_err(ReserveError::Never)?;
            let got = claim(&arena).expect("a dedicated arena fits its value");
            t.sealed.push(arena);
            return Ok(got);
        }
        if let Some(got) = t.open.as_ref().and_then(claim) {
            return Ok(got);
        }
        let next = match t.free.pop() {
            Some(a) => a,
            None if t.allocated + self.arena_size as u64 <= self.budget => self
                .allocate(&mut t, self.arena_size, false)
                .map_err(ReserveError::Never)?,
            None => return Err(ReserveError::NeedRoom),
        };
        let got = claim(&next).expect("an empty arena fits a value no larger than an arena");
        if let Some(sealed) = t.open.replace(next) {
            tracing::debug!(
                arena = sealed.id,
                used = sealed.buffer.used(),
                "arena sealed"
            );
            t.sealed.push(sealed);
        }
        Ok(got)
    }

    fn register(&self, buffer: &Arc<ArenaBuffer>) -> Result<Option<MemoryRegion>, StoreError> {
        match &self.fabric {
            Some(fabric) => fabric.register(Arc::clone(buffer)).map(Some).map_err(|e| {
                tracing::error!(error = %e, "arena registration failed");
                StoreError::Fabric(e.to_string())
            }),
            None => Ok(None),
        }
    }

    fn allocate(
        &self,
        t: &mut Table,
        size: usize,
        dedicated: bool,
    ) -> Result<Arc<Arena>, StoreError> {
        let buffer = ArenaBuffer::new(size).map_err(|e| {
            tracing::error!(error = %e, "arena allocation failed");
            StoreError::InsufficientStorage {
                needed: size as u64,
                allocated: t.allocated,
                budget: self.budget,
            }
        })?;
        let region = self.register(&buffer)?;
        t.allocated += buffer.capacity() as u64;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("rasa_arenas_created_total").increment(1);
        tracing::debug!(arena = id, size, dedicated, "arena allocated");
        Ok(Arc::new(Arena::new(id, buffer, dedicated, region)))
    }

    /// Arenas with a lease still running at `now`, and bytes of current versions, over all
    /// arenas (for metrics).
    pub fn observe(&self, now: SystemTime) -> (usize, u64) {
        let t = self.table();
        let all = t.open.iter().chain(&t.sealed).chain(&t.draining);
        let mut leased = 0;
        let mut live = 0;
        for a in all {
            if a.lease_deadline() > now {
                leased += 1;
            }
            live += a.live_bytes();
        }
        (leased, live)
    }

    /// Sealed arenas that no value keeps reachable any more (nor an unfinished upload).
    pub fn take_dead(&self) -> Vec<Arc<Arena>> {
        let mut t = self.table();
        let (dead, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut t.sealed)
            .into_iter()
            .partition(|a| a.live_count() == 0 && a.pending.load(Ordering::Acquire) == 0);
        t.sealed = keep;
        dead
    }

    /// The sealed arena to clear next when memory is full: the sparsest one when it is at
    /// most a quarter full (compact it), else the least recently used one (evict it).
    /// Returns it removed from the sealed list, and whether to compact.
    pub fn take_victim(&self) -> Option<(Arc<Arena>, bool)> {
        let mut t = self.table();
        let candidates = t
            .sealed
            .iter()
            .enumerate()
            .filter(|(_, a)| a.pending.load(Ordering::Acquire) == 0);
        let sparsest = candidates
            .clone()
            .filter(|(_, a)| !a.dedicated)
            .min_by_key(|(_, a)| a.live_bytes());
        if let Some((i, a)) = sparsest {
            let room = t
                .open
                .as_ref()
                .map(|o| o.buffer.capacity() - o.buffer.used())
                .unwrap_or(0) as u64;
            if a.live_bytes() * 4 <= a.buffer.capacity() as u64 && a.live_bytes() <= room {
                return Some((t.sealed.swap_remove(i), true));
            }
        }
        let (i, _) = candidates.min_by_key(|(_, a)| a.last_access_ms.load(Ordering::Relaxed))?;
        Some((t.sealed.swap_remove(i), false))
    }

    /// Hands arenas over to draining (their values are unreachable now).
    pub fn drain(&self, arenas: Vec<Arc<Arena>>) {
        if arenas.is_empty() {
            return;
        }
        let mut t = self.table();
        for a in &arenas {
            tracing::debug!(arena = a.id, deadline = ?a.lease_deadline(), "arena draining");
        }
        t.draining.extend(arenas);
    }

    /// Whether any arena is draining (so room will come without evicting more).
    pub fn draining(&self) -> usize {
        self.table().draining.len()
    }

    /// Refreshes the key of every arena whose key is older than `lifetime` (new descriptors
    /// get the new key), and closes superseded keys whose leases have ended. Returns
    /// (keys refreshed, old keys closed).
    pub fn refresh_keys(&self, now: SystemTime, lifetime: Duration) -> (usize, usize) {
        let Some(fabric) = &self.fabric else {
            return (0, 0);
        };
        let (current, all): (Vec<Arc<Arena>>, Vec<Arc<Arena>>) = {
            let t = self.table();
            let current = t.open.iter().chain(&t.sealed).cloned().collect();
            let all = t
                .open
                .iter()
                .chain(&t.sealed)
                .chain(&t.draining)
                .cloned()
                .collect();
            (current, all)
        };
        let mut refreshed = 0;
        for a in current.iter().filter(|a| a.key_age() >= lifetime) {
            match a.refresh_key(fabric, self.grace) {
                Ok(true) => refreshed += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(arena = a.id, error = %e, "key refresh failed; the current key stays")
                }
            }
        }
        let closed: usize = all.iter().map(|a| a.close_retired(now)).sum();
        if refreshed > 0 {
            metrics::counter!("rasa_keys_refreshed_total").increment(refreshed as u64);
        }
        if closed > 0 {
            metrics::counter!("rasa_keys_retired_total").increment(closed as u64);
        }
        (refreshed, closed)
    }

    /// Recycles draining arenas whose leases (plus grace) have ended: revokes their keys,
    /// waits for local readers, resets and re-registers them under fresh keys (dedicated
    /// arenas are released instead). Returns how many became reusable.
    pub fn reclaim(&self, now: SystemTime) -> usize {
        let mut t = self.table();
        let mut freed = 0;
        let mut waiting = Vec::new();
        for arena in std::mem::take(&mut t.draining) {
            if now < arena.lease_deadline() + self.grace {
                waiting.push(arena);
                continue;
            }
            if arena.revoke() {
                self.stats.keys_revoked.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("rasa_keys_revoked_total").increment(1);
            }
            // Local holders (an index entry on its way out, a request that looked the value
            // up) keep the arena; try again next time.
            let arena = match Arc::try_unwrap(arena) {
                Ok(a) => a,
                Err(shared) => {
                    waiting.push(shared);
                    continue;
                }
            };
            let Arena {
                id,
                mut buffer,
                dedicated,
                lease_deadline_ms,
                ..
            } = arena;
            if !ArenaBuffer::reset(&mut buffer) {
                // An HTTP body still reads it: keep waiting, unregistered.
                let a = Arena::new(id, buffer, dedicated, None);
                a.lease_deadline_ms
                    .store(lease_deadline_ms.into_inner(), Ordering::Release);
                waiting.push(Arc::new(a));
                continue;
            }
            freed += 1;
            if dedicated {
                t.allocated -= buffer.capacity() as u64;
                self.stats.released.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(arena = id, "dedicated arena released");
                continue;
            }
            match self.register(&buffer) {
                Ok(region) => {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    t.free.push(Arc::new(Arena::new(id, buffer, false, region)));
                    self.stats.recycled.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("rasa_arenas_recycled_total").increment(1);
                }
                Err(_) => t.allocated -= buffer.capacity() as u64,
            }
        }
        t.draining = waiting;
        freed
    }
}
