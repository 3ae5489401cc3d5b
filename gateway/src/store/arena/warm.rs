//! Warm memory: spare memory kept mapped and faulted in, so writes land in pages that are
//! already there.
//!
//! A write into fresh memory pays a page fault per page (the kernel zeroes it; on a VM the
//! host may have to back it first), and a one-sided writer pays the gateway's faults
//! inside its own copy: measured here, 16 MiB values went in at 0.8 GB/s into fresh
//! memory against 5.6 GB/s into memory written before. So the store keeps up to its
//! *warm target* of spare memory faulted in ([`Warm::fill`], off the request path),
//! within the budget, and takes new arenas and upload regions out of it
//! ([`Table::take_spare`]): cut to size when the spare is larger, the rest left spare.
//! Reclaimed region memory goes back to the spare, joined with its neighbours
//! ([`Table::put_spare`]). Spare memory is allocated memory: it gives way, cut to what is
//! needed, before anything is evicted ([`Table::release_spare`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rasa_fastpath::buffer::{ArenaBuffer, HUGE_PAGE};

use crate::catalog;

use super::{Arenas, Table};

/// How much one step of a warm-up faults in before handing it over as spare: writers can
/// take what is warm while the rest is still being faulted in.
const WARM_STEP: usize = 32 << 20;

/// The step of a warm-up within `budget`: [`WARM_STEP`], or a quarter of a smaller budget
/// (whole huge pages, at least one).
fn step_of(budget: u64) -> u64 {
    let huge = HUGE_PAGE as u64;
    (budget / 4 / huge * huge).clamp(huge, WARM_STEP as u64)
}

/// How long after a writer took memory a warm-up waits before it faults more in.
const QUIET: Duration = Duration::from_millis(250);

impl Table {
    /// Bytes of spare memory.
    pub(super) fn spare_bytes(&self) -> u64 {
        self.spare.iter().map(|b| b.capacity() as u64).sum()
    }

    /// The spare buffer [`Table::take_spare`] would take for `size` bytes: the smallest
    /// that holds it without giving more than twice `size` (a small region does not take
    /// a huge page). `None` when nothing fits.
    pub(super) fn spare_for(&self, size: usize) -> Option<usize> {
        let cut = size.next_multiple_of(HUGE_PAGE);
        let usable = |b: &Arc<ArenaBuffer>| {
            let take = if b.splittable() { cut } else { b.capacity() };
            b.capacity() >= size && take <= 2 * size.max(1)
        };
        let (i, _) = self
            .spare
            .iter()
            .enumerate()
            .filter(|(_, b)| usable(b))
            .min_by_key(|(_, b)| b.capacity())?;
        Some(i)
    }

    /// Spare memory for `size` bytes, taken out of the spare ([`Table::spare_for`]), cut to
    /// `size` rounded up to a huge page when it is larger (the rest stays spare).
    pub(super) fn take_spare(&mut self, size: usize) -> Option<Arc<ArenaBuffer>> {
        let i = self.spare_for(size)?;
        let cut = size.next_multiple_of(HUGE_PAGE);
        let buffer = self.spare.swap_remove(i);
        let taken = match buffer.splittable() && buffer.capacity() > cut {
            true => match ArenaBuffer::split(buffer, cut) {
                Ok((taken, rest)) => {
                    self.put_spare(rest);
                    taken
                }
                // Still shared somewhere (it cannot be: spare memory is reset): whole.
                Err(whole) => whole,
            },
            false => buffer,
        };
        catalog::ARENA_BYTES_FROM_WARM
            .counter()
            .increment(taken.capacity() as u64);
        self.last_take = Some(Instant::now());
        Some(taken)
    }

    /// Puts reset memory into the spare, joined with the spare buffers next to it.
    pub(super) fn put_spare(&mut self, mut buffer: Arc<ArenaBuffer>) {
        loop {
            let next = self.spare.iter().position(|b| {
                let (lo, hi) = (b.base_addr(), b.base_addr() + b.capacity());
                hi == buffer.base_addr() || lo == buffer.base_addr() + buffer.capacity()
            });
            let Some(i) = next else { break };
            let other = self.spare.swap_remove(i);
            let (front, back) = if other.base_addr() < buffer.base_addr() {
                (other, buffer)
            } else {
                (buffer, other)
            };
            match ArenaBuffer::join(front, back) {
                Ok(joined) => buffer = joined,
                Err((front, back)) => {
                    self.spare.push(front);
                    self.spare.push(back);
                    return;
                }
            }
        }
        self.spare.push(buffer);
    }

    /// Releases spare memory towards `need` bytes: the last spare buffer, only the part
    /// needed (rounded up to a huge page) when it can be cut. Bytes released (0: none
    /// spare).
    pub(super) fn release_spare(&mut self, need: u64) -> u64 {
        let Some(buffer) = self.spare.pop() else {
            return 0;
        };
        let cap = buffer.capacity();
        let part = (need as usize).max(1).next_multiple_of(HUGE_PAGE);
        if buffer.splittable() && part < cap {
            if let Ok((keep, released)) = ArenaBuffer::split(buffer, cap - part) {
                self.spare.push(keep);
                return released.capacity() as u64;
            }
            // Not cut (cannot be, as above): released whole below, already dropped.
        }
        cap as u64
    }
}

/// An [`Arenas`]' warm memory: its target, and the warm-up that fills it.
#[derive(Clone, Copy)]
pub struct Warm<'a>(&'a Arenas);

impl<'a> Warm<'a> {
    /// The warm memory of `arenas`.
    pub fn of(arenas: &'a Arenas) -> Self {
        Self(arenas)
    }

    /// Sets how much spare memory to keep faulted in (at most the budget's room).
    pub fn set_target(&self, bytes: u64) {
        self.0.warm.store(bytes, Ordering::Relaxed);
    }

    /// Whether [`Warm::fill`] has work to do.
    pub fn wanted(&self) -> bool {
        let a = self.0;
        let t = a.table();
        t.warming == 0
            && !t.writing()
            && t.warm_deficit(a.warm.load(Ordering::Relaxed), a.budget()) > 0
    }

    /// Maps and faults in spare memory up to the warm target, within the budget's room, a
    /// step at a time (each step spare as soon as it is in). Slow (it touches every page):
    /// call it off the request path. Bytes added; 0 when another warm-up runs.
    ///
    /// Only the step being faulted in is claimed from the budget: a writer finds room
    /// beside a warm-up however slowly it goes (at the lowest priority, busy cores may
    /// starve it for seconds; a writer waiting for a warm-up of the whole budget was
    /// refused after a lease). The memory is mapped whole, so the steps join as one spare.
    pub fn fill(&self) -> u64 {
        let a = self.0;
        let target = || a.warm.load(Ordering::Relaxed);
        let (want, first) = {
            let mut t = a.table();
            if t.warming > 0 {
                return 0;
            }
            let want = t.warm_deficit(target(), a.budget());
            let first = want.min(step_of(a.budget()));
            // Claimed now (allocated, and warm while it is faulted in).
            t.allocated += first;
            t.warming = first;
            (want, first)
        };
        if first == 0 {
            return 0;
        }
        let Ok(buffer) = ArenaBuffer::new(want as usize) else {
            let mut t = a.table();
            t.allocated -= first;
            t.warming = 0;
            return 0;
        };
        // Faulted in a step at a time, each step spare at once (joined to the last). While
        // writers take memory it stops and unmaps the rest: faulting pages in beside
        // writers that fault their own slows them (the same CPU, and on a VM the same
        // host backing); the reclaimer's next tick starts again once they are quiet.
        let (mut rest, mut step, mut added) = (Some(buffer), first, 0);
        while let Some(left) = rest.take() {
            let (mut part, tail) = match ArenaBuffer::split(left, step as usize) {
                Ok((part, tail)) => (part, Some(tail)),
                Err(whole) => (whole, None),
            };
            // A buffer that could not be cut is faulted in whole: claimed whole.
            let more = (part.capacity() as u64).saturating_sub(step);
            if more > 0 {
                let mut t = a.table();
                t.allocated += more;
                t.warming += more;
            }
            ArenaBuffer::populate(&mut part);
            let mut t = a.table();
            t.warming -= part.capacity() as u64;
            added += part.capacity() as u64;
            t.put_spare(part);
            step = match (&tail, t.writing()) {
                (Some(tail), false) => {
                    let room = t.warm_deficit(target(), a.budget());
                    room.min(step_of(a.budget())).min(tail.capacity() as u64)
                }
                _ => 0,
            };
            t.allocated += step;
            t.warming = step;
            rest = tail.filter(|_| step > 0);
        }
        tracing::debug!(bytes = added, "spare memory faulted in");
        added
    }
}

impl Table {
    /// Whether writers took memory within the last [`QUIET`].
    fn writing(&self) -> bool {
        self.last_take.is_some_and(|at| at.elapsed() < QUIET)
    }

    /// Bytes to fault in now to reach `target` within `budget`: whole huge pages.
    fn warm_deficit(&self, target: u64, budget: u64) -> u64 {
        let room = budget.saturating_sub(self.allocated);
        let want = target.saturating_sub(self.spare_bytes()).min(room);
        want / HUGE_PAGE as u64 * HUGE_PAGE as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    /// A warm-up fills the spare to its target within the budget; regions and shared
    /// arenas are cut out of it (no new memory allocated), reclaimed regions join it
    /// again, and a dedicated arena that needs room releases only the part it needs.
    #[test]
    fn warm_memory_is_cut_for_regions_and_arenas_and_joined_when_reclaimed() {
        let arenas = Arenas::new(4 << 20, 96 << 20, Duration::ZERO, None);
        Warm::of(&arenas).set_target(64 << 20);
        assert!(Warm::of(&arenas).wanted());
        assert_eq!(Warm::of(&arenas).fill(), 64 << 20);
        assert!(!Warm::of(&arenas).wanted(), "target met");
        assert_eq!(arenas.counts().warm, 64 << 20);
        assert_eq!(arenas.allocated(), 64 << 20);

        let shared = arenas.reserve_upload(1000, true, false).unwrap();
        assert_eq!(
            arenas.allocated(),
            64 << 20,
            "cut from the spare, nothing new"
        );
        drop(shared);
        let (region, slots) = arenas.reserve_region(&[10 << 20, 10 << 20], true).unwrap();
        assert!(region.buffer.capacity() >= 20 << 20);
        assert_eq!(arenas.allocated(), 64 << 20, "a region too");
        drop(slots);
        region.finish_pending(); // nothing committed, two frames
        region.finish_pending();
        drop(region);
        let dead = arenas.take_dead(SystemTime::now());
        assert_eq!(dead.len(), 1);
        arenas.drain(dead);
        assert_eq!(arenas.reclaim(SystemTime::now()), 1);
        let spare = arenas.table().spare.len();
        assert_eq!(spare, 1, "the region joined the rest again");
        assert_eq!(arenas.counts().warm, 60 << 20);

        // 40 MiB for a dedicated value: 32 MiB of room, 8 MiB released out of the spare.
        let (big, _slot) = arenas.reserve_upload(40 << 20, true, false).unwrap();
        assert_eq!(arenas.counts().warm, 52 << 20);
        assert_eq!(arenas.allocated(), 96 << 20);
        drop(big);
        assert!(!Warm::of(&arenas).wanted(), "no room in the budget");
    }

    /// A warm-up of the whole budget holds one step of it at a time: a writer finds room
    /// beside it at once, however slowly it runs (its thread has the lowest priority, and
    /// busy cores may starve it: a writer that waited for it was refused after a lease).
    #[test]
    fn a_warm_up_of_the_whole_budget_holds_one_step_of_it_at_a_time() {
        let arenas = Arenas::new(4 << 20, 256 << 20, Duration::ZERO, None);
        Warm::of(&arenas).set_target(256 << 20);
        let most = std::thread::scope(|s| {
            let filling = s.spawn(|| Warm::of(&arenas).fill());
            let mut most = 0;
            while !filling.is_finished() {
                most = most.max(arenas.table().warming);
            }
            assert!(filling.join().unwrap() > 0);
            most
        });
        assert!(most <= WARM_STEP as u64, "held {most} bytes at once");
        assert_eq!(
            arenas.counts().warm,
            256 << 20,
            "the whole target in the end"
        );
    }
}
