//! The arena of a one-sided upload ([`Arenas::reserve_region`]): frames a client writes
//! over the fabric, in memory no read key covers until they are sealed.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rasa_fastpath::buffer::{WriteSlot, BUFFER_ALIGN};
use rasa_fastpath::frame::FRAME_ALIGN;

use super::{Arena, Arenas, ReserveError};
use crate::store::StoreError;

impl Arenas {
    /// An arena of its own for one one-sided upload: room for frames of `lens` bytes, one
    /// after another, each slot claimed (the arena stays pending until every slot is
    /// committed or dropped). Not registered with the fabric: the upload registers it for
    /// remote writes, and for reads once its frames are sealed. `NeedAllocation` without
    /// `may_allocate`, as [`Arenas::reserve_upload`].
    pub fn reserve_region(
        &self,
        lens: &[usize],
        may_allocate: bool,
    ) -> Result<(Arc<Arena>, Vec<WriteSlot>), ReserveError> {
        let size = lens
            .iter()
            .map(|l| l.next_multiple_of(FRAME_ALIGN))
            .sum::<usize>()
            .max(1)
            .next_multiple_of(BUFFER_ALIGN);
        if size as u64 > self.budget() {
            return Err(ReserveError::Never(StoreError::InsufficientStorage {
                needed: size as u64,
                allocated: self.allocated(),
                budget: self.budget(),
            }));
        }
        let mut t = self.table();
        // Spare memory (warm, or a reclaimed region's), cut to size: its pages are in
        // place already.
        let arena = if let Some(buffer) = t.take_spare(size) {
            drop(t);
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            Arc::new(Arena::new(id, buffer, true, None))
        } else {
            if !t.make_budget(size as u64, self.budget(), &self.stats) {
                return Err(ReserveError::NeedRoom);
            }
            if !may_allocate {
                return Err(ReserveError::NeedAllocation);
            }
            t.allocated += size as u64;
            drop(t);
            self.allocate(size, true, None)?
        };
        let slots = lens
            .iter()
            .map(|&len| {
                let slot = arena.buffer.try_reserve(len, FRAME_ALIGN);
                arena.pending.fetch_add(1, Ordering::AcqRel);
                slot.expect("the region was sized for its frames")
            })
            .collect();
        self.table().sealed.push(Arc::clone(&arena));
        Ok((arena, slots))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    /// A reclaimed region's memory is kept as spare for the next region, and a shared
    /// arena is cut out of it before anything must be evicted (the engines bench once
    /// found a batch's own values evicted while spare memory filled the budget).
    #[test]
    fn spare_region_memory_is_reused_and_gives_way_to_shared_arenas() {
        let arenas = Arenas::new(1 << 20, 8 << 20, Duration::ZERO, None);
        let spare_of = |arenas: &Arenas| {
            let (arena, slots) = arenas.reserve_region(&[7 << 20], true).unwrap();
            let base = arena.buffer.base_addr();
            drop(slots);
            arena.finish_pending(); // nothing committed
            drop(arena);
            let dead = arenas.take_dead(SystemTime::now());
            assert_eq!(dead.len(), 1, "an uncommitted region is unreachable");
            arenas.drain(dead);
            assert_eq!(arenas.reclaim(SystemTime::now()), 1);
            base
        };
        let first = spare_of(&arenas);
        assert_eq!(arenas.allocated(), 8 << 20, "kept, still allocated");
        assert_eq!(
            spare_of(&arenas),
            first,
            "the next region takes the same memory"
        );
        let shared = arenas.reserve_upload(1000, true, false);
        assert!(
            shared.is_ok(),
            "a shared arena in place of the spare: {shared:?}"
        );
        assert_eq!(arenas.allocated(), 8 << 20, "cut out of the spare");
        assert_eq!(arenas.counts().warm, 6 << 20, "the rest still spare");
    }
}
