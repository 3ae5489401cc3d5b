//! One arena: a buffer registered as one memory region (per fabric endpoint) with one remote key, the latest
//! lease deadline it handed out, the versions living in it, and its keys (current and
//! retired). The life cycle that uses these facts is in [`super`].

use crate::catalog;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rasa_fastpath::buffer::ArenaBuffer;
use rasa_fastpath::fabric::FabricError;
use rasa_fastpath::fabrics::{Fabrics, Regions};

use crate::store::StoredVersion;

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
    /// Whether this is the heap copy of one version read back from the disk tier: never in
    /// the arena table, never registered, gone with its last reader.
    pub detached: bool,
    /// The registration with the fabric (one memory region, one remote key), when the
    /// fast path is on. Closed (key revoked) before the memory is reused.
    pub(super) region: RwLock<Option<Regions>>,
    /// When the current region was registered (ms since the epoch), for `--key-lifetime`.
    key_since_ms: AtomicU64,
    /// This arena's share of `--key-lifetime`, in [0.8, 1.0): arenas made together do not
    /// all re-register at once (on EFA each registration of 64 MiB costs ~100 ms), and no
    /// key outlives the configured lifetime.
    pub(in crate::store) key_jitter: f64,
    /// Regions superseded by a key refresh, each closed once the leases handed out under
    /// its key (plus grace) have ended.
    retiring: Mutex<Vec<(Regions, SystemTime)>>,
    /// Latest lease deadline handed out for any value in this arena (ms since the epoch).
    pub(super) lease_deadline_ms: AtomicU64,
    /// Last time a value in this arena was written or read (ms since the epoch): the
    /// recency that eviction orders arenas by.
    pub(super) last_access_ms: AtomicU64,
    /// Current versions (reachable by key) in this arena, and their frame bytes.
    live_count: AtomicU64,
    live_bytes: AtomicU64,
    /// Uploads that reserved space here and are not finished yet.
    pub(super) pending: AtomicU64,
    /// Bytes of the memory budget charged for this arena: its capacity, but for a
    /// dedicated arena whose upload is still arriving ([`super::Arenas::charge`]).
    pub(super) charged: AtomicU64,
    /// Every version committed here, so that draining can make them unreachable. Weak: a
    /// member holds no memory but its record (the key and version id are in its frame).
    pub(super) members: Mutex<Vec<Weak<StoredVersion>>>,
}

impl Arena {
    pub(super) fn new(
        id: u64,
        buffer: Arc<ArenaBuffer>,
        dedicated: bool,
        region: Option<Regions>,
    ) -> Self {
        let capacity = buffer.capacity() as u64;
        Self {
            id,
            buffer,
            dedicated,
            detached: false,
            region: RwLock::new(region),
            key_since_ms: AtomicU64::new(now_ms()),
            key_jitter: 0.8 + 0.2 * rand::random::<f64>(),
            retiring: Mutex::new(Vec::new()),
            lease_deadline_ms: AtomicU64::new(0),
            last_access_ms: AtomicU64::new(now_ms()),
            live_count: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            charged: AtomicU64::new(capacity),
            members: Mutex::new(Vec::new()),
        }
    }

    /// An arena of its own for the frame in `buffer`, read back from the disk tier: not in
    /// any table, not registered, charged to no budget.
    pub(in crate::store) fn detached(buffer: Arc<ArenaBuffer>) -> Self {
        let mut arena = Self::new(0, buffer, true, None);
        arena.detached = true;
        arena.charged = AtomicU64::new(0);
        arena
    }

    /// The remote address and key of `offset` within this arena on each fabric endpoint
    /// (the primary first), when registered.
    pub fn remote(&self, fabric: &Fabrics, offset: usize) -> Option<Vec<(u64, u64)>> {
        let region = self.region.read().unwrap_or_else(PoisonError::into_inner);
        region.as_ref().map(|r| fabric.remotes(r, offset).collect())
    }

    /// Registers the arena again under a fresh remote key and revokes the old one. Readers
    /// holding the old key get a protection error from then on, never other bytes.
    pub fn rotate_key(&self, fabric: &Fabrics) -> Result<(), FabricError> {
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
            catalog::KEYS_ROTATED.counter().increment(1);
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
    ///
    /// The new registration is made before the write lock is taken (on EFA it costs tens
    /// to hundreds of milliseconds, which descriptor requests must not wait for); if the
    /// arena was revoked meanwhile, the fresh region is dropped.
    pub fn refresh_key(&self, fabric: &Fabrics, grace: Duration) -> Result<bool, FabricError> {
        let buffer = match self
            .region
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            Some(current) => Arc::clone(current.buffer()),
            None => return Ok(false),
        };
        let fresh = fabric.register(buffer)?;
        let mut region = self.region.write().unwrap_or_else(PoisonError::into_inner);
        let Some(old) = region.take() else {
            return Ok(false); // revoked while we registered: no key to refresh
        };
        *region = Some(fresh);
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

    /// Registers a dedicated arena whose value has just been written (it was allocated
    /// unregistered, so that no key opened it while its bytes were arriving).
    pub fn register_sealed(&self, fabric: &Fabrics) -> Result<(), FabricError> {
        let fresh = fabric.register(Arc::clone(&self.buffer))?;
        *self.region.write().unwrap_or_else(PoisonError::into_inner) = Some(fresh);
        self.key_since_ms.store(now_ms(), Ordering::Release);
        Ok(())
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
    pub(super) fn revoke(&self) -> bool {
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
    pub(in crate::store) fn add_live(&self, version: &Arc<StoredVersion>, bytes: u64) {
        self.live_count.fetch_add(1, Ordering::AcqRel);
        self.live_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(version));
        self.touch();
    }

    /// A version of `bytes` frame bytes here stopped being current.
    pub(in crate::store) fn sub_live(&self, bytes: u64) {
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

    /// Bytes of the memory budget charged for this arena now.
    pub fn charged(&self) -> u64 {
        self.charged.load(Ordering::Acquire)
    }

    pub(in crate::store) fn finish_pending(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    pub(in crate::store) fn restore_members(&self, members: Vec<Weak<StoredVersion>>) {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(members);
    }

    pub(in crate::store) fn take_members(&self) -> Vec<Weak<StoredVersion>> {
        std::mem::take(&mut *self.members.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
