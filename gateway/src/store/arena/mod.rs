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

use crate::catalog;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use rasa_fastpath::buffer::{ArenaBuffer, WriteSlot, BUFFER_ALIGN};
use rasa_fastpath::fabrics::{Fabrics, Regions};
use rasa_fastpath::frame::FRAME_ALIGN;

mod charge;
mod reclaim;
mod region;
mod single;
#[cfg(test)]
mod tests;
mod warm;

pub use charge::CHARGE_STEP;

pub use single::Arena;
pub use warm::Warm;

use super::StoreError;

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
    /// Bytes of it spare (faulted in, in no arena yet) or being faulted in ([`warm`]).
    pub warm: u64,
}

#[derive(Debug, Default)]
struct Table {
    open: Option<Arc<Arena>>,
    sealed: Vec<Arc<Arena>>,
    draining: Vec<Arc<Arena>>,
    free: Vec<Arc<Arena>>,
    /// Spare memory (reset, unregistered, still allocated, its pages in place): warm
    /// memory faulted in ahead of writes and reclaimed upload regions, joined where they
    /// are neighbours; new arenas and regions are cut out of it ([`warm`]). Released
    /// before `free` when room is needed.
    spare: Vec<Arc<ArenaBuffer>>,
    /// Bytes a warm-up is faulting in (allocated, not spare yet).
    warming: u64,
    /// When a writer last took memory (spare or fresh): a warm-up gives way to writers.
    last_take: Option<std::time::Instant>,
    allocated: u64,
}

/// Why a reservation did not succeed now.
#[derive(Debug)]
pub enum ReserveError {
    /// Memory is full; room can be made by draining arenas.
    NeedRoom,
    /// A new arena must be allocated and registered (only from
    /// [`Arenas::reserve_upload`] without `may_allocate`).
    NeedAllocation,
    /// The value can never fit.
    Never(StoreError),
}

/// Hands out frame slots from arenas within the memory budget, and runs their life cycle.
#[derive(Debug)]
pub struct Arenas {
    arena_size: usize,
    /// Bytes of arena memory this set may allocate (a namespace's quota can change).
    budget: AtomicU64,
    grace: Duration,
    next_id: AtomicU64,
    table: Mutex<Table>,
    fabric: Option<Arc<Fabrics>>,
    /// Arenas taken out of `draining` by a reclaim pass that is revoking, resetting or
    /// re-registering them outside the table lock; still counted as draining.
    reclaiming: AtomicUsize,
    /// Bytes of spare memory to keep faulted in ([`Warm::set_target`]).
    warm: AtomicU64,
    /// Life-cycle counters.
    pub stats: ArenaStats,
}

impl Arenas {
    /// No arenas yet: memory is allocated as values arrive, up to `budget`.
    pub fn new(
        arena_size: usize,
        budget: u64,
        grace: Duration,
        fabric: Option<Arc<Fabrics>>,
    ) -> Self {
        Self {
            arena_size,
            budget: AtomicU64::new(budget),
            grace,
            next_id: AtomicU64::new(1),
            table: Mutex::new(Table::default()),
            fabric,
            reclaiming: AtomicUsize::new(0),
            warm: AtomicU64::new(0),
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

    /// Bytes of arena memory this set may allocate.
    pub fn budget(&self) -> u64 {
        self.budget.load(Ordering::Relaxed)
    }

    /// Changes the budget. Below what is allocated, new reservations give recycled arenas
    /// back and make room first; [`Arenas::release_over_budget`] gives back what it can now.
    pub fn set_budget(&self, budget: u64) {
        self.budget.store(budget, Ordering::Relaxed);
    }

    /// Releases recycled arenas while more is allocated than the budget; whether the budget
    /// holds what is left.
    pub fn release_over_budget(&self) -> bool {
        let mut t = self.table();
        t.make_budget(0, self.budget(), &self.stats)
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
            warm: t.spare_bytes() + t.warming,
        }
    }

    /// Whether a frame this long could ever be stored.
    pub fn fits(&self, frame_len: usize) -> bool {
        arena_len(self.arena_size, frame_len) <= self.budget()
    }

    /// Claims `frame_len` bytes for one frame, without waiting: from memory that is
    /// already registered unless `may_allocate` (else `NeedAllocation` when a new arena
    /// would have to be allocated and registered, which the caller then does off its
    /// async worker). With `growing` (a
    /// body still arriving), a frame that needs a dedicated arena is charged to the budget
    /// as it is written ([`Arenas::charge`]), starting with one [`CHARGE_STEP`], so an
    /// upload that stalls holds little of the budget.
    pub fn reserve_upload(
        &self,
        frame_len: usize,
        may_allocate: bool,
        growing: bool,
    ) -> Result<(Arc<Arena>, WriteSlot), ReserveError> {
        self.reserve_with(frame_len, may_allocate, growing)
    }

    fn reserve_with(
        &self,
        frame_len: usize,
        may_allocate: bool,
        growing: bool,
    ) -> Result<(Arc<Arena>, WriteSlot), ReserveError> {
        if !self.fits(frame_len) {
            return Err(ReserveError::Never(StoreError::InsufficientStorage {
                needed: frame_len as u64,
                allocated: self.allocated(),
                budget: self.budget(),
            }));
        }
        let claim = |arena: &Arc<Arena>| {
            let slot = arena.buffer.try_reserve(frame_len, FRAME_ALIGN)?;
            arena.pending.fetch_add(1, Ordering::AcqRel);
            Some((Arc::clone(arena), slot))
        };
        let mut t = self.table();
        if frame_len > self.arena_size {
            let size = arena_len(self.arena_size, frame_len);
            let charge = if growing { size.min(CHARGE_STEP) } else { size };
            // Recycled shared arenas give their memory back for a dedicated one.
            if !t.make_budget(charge, self.budget(), &self.stats) {
                return Err(ReserveError::NeedRoom);
            }
            if !may_allocate {
                return Err(ReserveError::NeedAllocation);
            }
            t.allocated += charge;
            drop(t);
            let arena = self.allocate(size as usize, true, (charge < size).then_some(charge))?;
            let got = claim(&arena).expect("a dedicated arena fits its value");
            self.table().sealed.push(arena);
            return Ok(got);
        }
        if let Some(got) = t.open.as_ref().and_then(claim) {
            return Ok(got);
        }
        // A new shared arena is cut out of spare memory (its pages in place), or spare
        // memory gives way to it before anything is evicted. Registering the cut is the
        // caller's to do off its worker: asked first, nothing is released meanwhile.
        let from_spare = t.free.is_empty() && t.spare_for(self.arena_size).is_some();
        if from_spare && !may_allocate {
            return Err(ReserveError::NeedAllocation);
        }
        let warm = match from_spare {
            true => t.take_spare(self.arena_size),
            false => None,
        };
        let room = t.free.is_empty()
            && (warm.is_some()
                || t.make_budget(self.arena_size as u64, self.budget(), &self.stats));
        let next = match t.free.pop() {
            Some(a) => a,
            None if !may_allocate && room => return Err(ReserveError::NeedAllocation),
            None if room => {
                let fresh = match warm {
                    Some(buffer) => {
                        drop(t);
                        arena_over(self, buffer, false, None)?
                    }
                    None => {
                        // Accounted now, allocated and registered without the lock.
                        t.allocated += self.arena_size as u64;
                        drop(t);
                        self.allocate(self.arena_size, false, None)?
                    }
                };
                t = self.table();
                // Another writer opened an arena meanwhile: fill it first, keep this one
                // free (sealing it now would strand an arena nearly empty).
                if let Some(got) = t.open.as_ref().and_then(claim) {
                    t.free.push(fresh);
                    return Ok(got);
                }
                fresh
            }
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

    /// A new arena of `size` bytes, already accounted in the table (`charged` bytes of it
    /// when it is charged as it fills, else all): allocated and registered without holding
    /// the table lock (registration is slow on EFA). On failure the accounting is undone.
    fn allocate(
        &self,
        size: usize,
        dedicated: bool,
        charged: Option<u64>,
    ) -> Result<Arc<Arena>, ReserveError> {
        let undo = |e: StoreError| {
            self.table().allocated -= charged.unwrap_or(size as u64);
            ReserveError::Never(e)
        };
        let buffer = ArenaBuffer::new(size).map_err(|e| {
            tracing::error!(error = %e, "arena allocation failed");
            undo(StoreError::InsufficientStorage {
                needed: size as u64,
                allocated: self.allocated(),
                budget: self.budget(),
            })
        })?;
        catalog::ARENA_BYTES_COLD
            .counter()
            .increment(buffer.capacity() as u64);
        self.table().last_take = Some(std::time::Instant::now());
        // The buffer is `size` rounded up to a page; account what it really holds (a
        // growing arena's last charge covers it).
        if charged.is_none() {
            self.table().allocated += buffer.capacity() as u64 - size as u64;
        }
        arena_over(self, buffer, dedicated, charged)
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

    /// Sealed arenas that no value keeps reachable any more (no current version, nor an
    /// unfinished upload) and whose leases (plus grace) have ended at `now`. Until then
    /// their older versions stay readable by id: a reader holding a descriptor of one gets
    /// it over HTTP too, not only one-sided.
    pub fn take_dead(&self, now: SystemTime) -> Vec<Arc<Arena>> {
        let mut t = self.table();
        let (dead, keep): (Vec<_>, Vec<_>) =
            std::mem::take(&mut t.sealed).into_iter().partition(|a| {
                a.live_count() == 0
                    && a.pending.load(Ordering::Acquire) == 0
                    && now >= a.lease_deadline() + self.grace
            });
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
        self.table().draining.len() + self.reclaiming.load(Ordering::Acquire)
    }
}

/// An arena over `buffer`, whose memory is accounted in the table (`charged` bytes of
/// it when it is charged as it fills, else all of it): registered (unless dedicated:
/// a dedicated arena is registered once its value is written,
/// `Arena::register_sealed`) without holding the table lock. On failure the
/// accounting is undone.
fn arena_over(
    arenas: &Arenas,
    buffer: Arc<ArenaBuffer>,
    dedicated: bool,
    charged: Option<u64>,
) -> Result<Arc<Arena>, ReserveError> {
    let region = match dedicated {
        true => None,
        false => register(arenas.fabric.as_ref(), &buffer).map_err(|e| {
            arenas.table().allocated -= charged.unwrap_or(buffer.capacity() as u64);
            ReserveError::Never(e)
        })?,
    };
    let id = arenas.next_id.fetch_add(1, Ordering::Relaxed);
    catalog::ARENAS_CREATED.counter().increment(1);
    tracing::debug!(
        arena = id,
        size = buffer.capacity(),
        huge_pages = buffer.huge_pages(),
        dedicated,
        "arena allocated"
    );
    let arena = Arena::new(id, buffer, dedicated, region);
    if let Some(charged) = charged {
        arena.charged.store(charged, Ordering::Release);
    }
    Ok(Arc::new(arena))
}

/// Registers `buffer` with `fabric` (its regions, one per fabric); `None` without one.
fn register(
    fabric: Option<&Arc<Fabrics>>,
    buffer: &Arc<ArenaBuffer>,
) -> Result<Option<Regions>, StoreError> {
    match fabric {
        Some(fabric) => fabric.register(Arc::clone(buffer)).map(Some).map_err(|e| {
            tracing::error!(error = %e, "arena registration failed");
            StoreError::Fabric(e.to_string())
        }),
        None => Ok(None),
    }
}

/// The size of the arena a frame of `frame_len` bytes goes in: a shared one of
/// `arena_size`, or one of its own (aligned) when it is larger.
fn arena_len(arena_size: usize, frame_len: usize) -> u64 {
    if frame_len > arena_size {
        frame_len.next_multiple_of(BUFFER_ALIGN) as u64
    } else {
        arena_size as u64
    }
}
