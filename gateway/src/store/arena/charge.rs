//! Charging a dedicated arena to the memory budget as its value arrives.
//!
//! An upload declares its length before its first byte. Reserving all of it from the
//! budget at once let clients that declare large values and then send nothing (or a byte
//! every half minute) hold the budget with no data: eight such uploads of 64 MiB left no
//! room for an honest one. A dedicated arena (a value larger than `--arena-size`) is
//! therefore mapped at its full size (the kernel gives pages only as they are written) but
//! charged one [`CHARGE_STEP`] ahead of what has been written, and in full only when the
//! last byte arrives. Shared arenas are charged whole when allocated, as before: an upload
//! into one holds at most its slot of an arena that exists anyway.

use std::sync::atomic::Ordering;

use super::{Arena, ArenaStats, Arenas, Table};

/// How far ahead of the bytes written a growing dedicated arena is charged.
pub const CHARGE_STEP: u64 = 8 << 20;

impl Table {
    /// Makes `need` bytes of `budget` available by releasing spare memory (only what is
    /// needed), then recycled shared arenas; false when that is not enough.
    pub(super) fn make_budget(&mut self, need: u64, budget: u64, stats: &ArenaStats) -> bool {
        while self.allocated + need > budget {
            let over = self.allocated + need - budget;
            let released = match self.release_spare(over) {
                0 => match self.free.pop() {
                    Some(f) => f.buffer.capacity() as u64,
                    None => break,
                },
                spare => spare,
            };
            self.allocated -= released;
            stats.released.fetch_add(1, Ordering::Relaxed);
        }
        self.allocated + need <= budget
    }
}

impl Arenas {
    /// Charges `arena` up to `upto` bytes of the budget (at most its capacity); false, and
    /// nothing charged, when the budget cannot hold that now.
    pub fn charge(&self, arena: &Arena, upto: u64) -> bool {
        let upto = upto.min(arena.buffer.capacity() as u64);
        let mut t = self.table();
        // Under the table lock: one upload owns a dedicated arena, and releasing reads
        // the charge only once the upload is gone.
        let have = arena.charged.load(Ordering::Acquire);
        if upto <= have {
            return true;
        }
        if !t.make_budget(upto - have, self.budget(), &self.stats) {
            return false;
        }
        t.allocated += upto - have;
        arena.charged.store(upto, Ordering::Release);
        true
    }
}
