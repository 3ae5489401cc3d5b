//! Arenas: large buffers that values are appended into, under a memory budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use rasa_fastpath::buffer::{ArenaBuffer, WriteSlot};
use rasa_fastpath::fabric::{FabricError, MemoryRegion};
use rasa_fastpath::frame::FRAME_ALIGN;
use rasa_fastpath::server::FabricServer;

use super::StoreError;

/// One arena: a buffer registered (later) as one memory region with one remote key.
#[derive(Debug)]
pub struct Arena {
    /// Process-unique id, for logs and metrics.
    pub id: u64,
    /// The memory.
    pub buffer: Arc<ArenaBuffer>,
    /// Whether this arena holds a single value larger than the arena size.
    pub dedicated: bool,
    /// The arena's registration with the fabric (one memory region, one remote key), when
    /// the fast path is on. Replaced by [`Arena::rotate_key`].
    region: RwLock<Option<MemoryRegion>>,
    /// Latest lease deadline handed out for any value in this arena, in milliseconds since
    /// the Unix epoch. The arena's memory must not change before this moment plus a grace
    /// period, and its remote key must be revoked first: that is the lease invariant.
    lease_deadline_ms: AtomicU64,
    /// The budget counter this arena's capacity is charged to, credited back on drop.
    charged_to: Arc<AtomicU64>,
}

impl Drop for Arena {
    fn drop(&mut self) {
        // Only local references can keep an arena alive while the fast path is off; with
        // it on, the reclaimer owns arenas until their leases end (see the store docs).
        let size = self.buffer.capacity() as u64;
        let left = self.charged_to.fetch_sub(size, Ordering::AcqRel) - size;
        metrics::gauge!("rasa_arena_bytes_allocated").set(left as f64);
        tracing::debug!(arena = self.id, size, "arena freed");
    }
}

impl Arena {
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
            match fabric.rotate(old) {
                Ok(fresh) => {
                    tracing::info!(
                        arena = self.id,
                        old_key,
                        new_key = fresh.key(),
                        "remote key rotated"
                    );
                    metrics::counter!("rasa_keys_rotated_total").increment(1);
                    *region = Some(fresh);
                }
                Err(e) => {
                    // The old region is closed either way: the arena is HTTP-only now.
                    tracing::error!(arena = self.id, error = %e, "key rotation failed; arena unregistered");
                    return Err(e);
                }
            }
        }
        Ok(())
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
        UNIX_EPOCH
            + std::time::Duration::from_millis(self.lease_deadline_ms.load(Ordering::Acquire))
    }
}

/// Hands out frame slots from arenas while keeping the total allocated arena memory within
/// the budget.
#[derive(Debug)]
pub struct Arenas {
    arena_size: usize,
    budget: u64,
    /// Bytes of arena memory allocated (capacity, not use): what the budget bounds.
    allocated: Arc<AtomicU64>,
    next_id: AtomicU64,
    /// The arena new values are appended to. Full arenas are sealed: dropped from here,
    /// they live on as long as a value in them is referenced.
    open: Mutex<Option<Arc<Arena>>>,
    /// Registers every new arena for remote reads, when the fast path is on.
    fabric: Option<Arc<FabricServer>>,
}

impl Arenas {
    /// An empty set of arenas: nothing is allocated until the first value arrives.
    pub fn new(arena_size: usize, budget: u64, fabric: Option<Arc<FabricServer>>) -> Self {
        Self {
            arena_size,
            budget,
            allocated: Arc::new(AtomicU64::new(0)),
            next_id: AtomicU64::new(1),
            open: Mutex::new(None),
            fabric,
        }
    }

    /// Bytes of arena memory allocated now.
    pub fn allocated(&self) -> u64 {
        self.allocated.load(Ordering::Acquire)
    }

    /// The memory budget.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Claims `frame_len` bytes for one frame.
    pub fn reserve(&self, frame_len: usize) -> Result<(Arc<Arena>, WriteSlot), StoreError> {
        if frame_len > self.arena_size {
            let arena = self.allocate(frame_len, true)?;
            let slot = arena
                .buffer
                .try_reserve(frame_len, FRAME_ALIGN)
                .expect("a dedicated arena fits its value");
            return Ok((arena, slot));
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(arena) = open.as_ref() {
            if let Some(slot) = arena.buffer.try_reserve(frame_len, FRAME_ALIGN) {
                return Ok((Arc::clone(arena), slot));
            }
        }
        let arena = self.allocate(self.arena_size, false)?;
        let slot = arena
            .buffer
            .try_reserve(frame_len, FRAME_ALIGN)
            .expect("a fresh arena fits a value no larger than an arena");
        if let Some(sealed) = open.replace(Arc::clone(&arena)) {
            tracing::debug!(
                arena = sealed.id,
                used = sealed.buffer.used(),
                "arena sealed"
            );
        }
        Ok((arena, slot))
    }

    fn allocate(&self, size: usize, dedicated: bool) -> Result<Arc<Arena>, StoreError> {
        let size = size.next_multiple_of(rasa_fastpath::buffer::BUFFER_ALIGN) as u64;
        self.allocated
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                cur.checked_add(size).filter(|&n| n <= self.budget)
            })
            .map_err(|cur| StoreError::InsufficientStorage {
                needed: size,
                allocated: cur,
                budget: self.budget,
            })?;
        let buffer = match ArenaBuffer::new(size as usize) {
            Ok(b) => b,
            Err(e) => {
                self.allocated.fetch_sub(size, Ordering::AcqRel);
                tracing::error!(error = %e, "arena allocation failed");
                return Err(StoreError::InsufficientStorage {
                    needed: size,
                    allocated: self.allocated(),
                    budget: self.budget,
                });
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let region = match &self.fabric {
            Some(fabric) => match fabric.register(Arc::clone(&buffer)) {
                Ok(r) => Some(r),
                Err(e) => {
                    self.allocated.fetch_sub(size, Ordering::AcqRel);
                    tracing::error!(error = %e, "arena registration failed");
                    return Err(StoreError::Fabric(e.to_string()));
                }
            },
            None => None,
        };
        metrics::gauge!("rasa_arena_bytes_allocated").set(self.allocated() as f64);
        metrics::counter!("rasa_arenas_created_total").increment(1);
        tracing::debug!(arena = id, size, dedicated, "arena allocated");
        Ok(Arc::new(Arena {
            id,
            buffer,
            dedicated,
            region: RwLock::new(region),
            lease_deadline_ms: AtomicU64::new(0),
            charged_to: Arc::clone(&self.allocated),
        }))
    }
}
