//! Warm memory: faulting a buffer's pages in ahead of its first write, and cutting a
//! mapped buffer in two or joining two neighbours back, so a reserve of faulted-in memory
//! can serve regions of any size.
//!
//! A first write to a fresh anonymous mapping costs the writer a page fault per page: the
//! kernel zeroes it (and on a VM the host may have to back it first: 2–6 ms for one 2 MiB
//! page on the machine this was measured on). A one-sided writer takes the gateway's
//! faults itself, inside its `process_vm_writev`, so fresh memory halves or worse a
//! write's speed. A gateway keeps some memory faulted in ([`ArenaBuffer::populate`]) and
//! carves regions out of it ([`ArenaBuffer::split`]); reclaimed neighbours join again
//! ([`ArenaBuffer::join`]).
//!
//! Only buffers this crate mapped on huge-page boundaries ([`ArenaBuffer::splittable`])
//! can be cut or joined: each part is itself such a mapping's range (the kernel unmaps any
//! page-aligned range on its own), cut on a huge-page boundary so each part keeps whole
//! huge pages.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use super::{ArenaBuffer, Backing, BUFFER_ALIGN, HUGE_PAGE};

impl ArenaBuffer {
    /// Whether [`split`](Self::split) and [`join`](Self::join) apply: memory mapped on
    /// huge-page boundaries, a whole number of huge pages long.
    pub fn splittable(&self) -> bool {
        matches!(self.backing, Backing::Mapped)
            && self.base_addr().is_multiple_of(HUGE_PAGE)
            && self.len.is_multiple_of(HUGE_PAGE)
    }

    /// Cuts an unused buffer in two at `at` (a multiple of [`HUGE_PAGE`] strictly inside
    /// it): `[0, at)` and `[at, len)`, each unmapped on its own when dropped. Gives the
    /// buffer back unchanged when it is shared, has claimed slots, is not
    /// [`splittable`](Self::splittable) or `at` is not such a boundary.
    pub fn split(this: Arc<Self>, at: usize) -> Result<(Arc<Self>, Arc<Self>), Arc<Self>> {
        if !this.splittable() || at == 0 || at >= this.len || !at.is_multiple_of(HUGE_PAGE) {
            return Err(this);
        }
        let mut buf = Arc::try_unwrap(this)?;
        if *buf.next.get_mut() != 0 {
            return Err(Arc::new(buf));
        }
        // The two parts take over the mapping: the whole must not be unmapped on drop.
        let whole = ManuallyDrop::new(buf);
        // SAFETY: `at < len`, so `ptr + at` lies inside the mapping (and is not null).
        let back = unsafe { NonNull::new_unchecked(whole.ptr.as_ptr().add(at)) };
        Ok((
            Arc::new(Self::mapped(whole.ptr, at)),
            Arc::new(Self::mapped(back, whole.len - at)),
        ))
    }

    /// Joins two unused buffers when `back` begins where `front` ends and both are
    /// [`splittable`](Self::splittable): one buffer over both ranges. Gives both back
    /// otherwise.
    pub fn join(front: Arc<Self>, back: Arc<Self>) -> Result<Arc<Self>, (Arc<Self>, Arc<Self>)> {
        let adjacent = front.splittable()
            && back.splittable()
            && front.base_addr() + front.len == back.base_addr()
            && front.used() == 0
            && back.used() == 0;
        if !adjacent || Arc::strong_count(&front) != 1 || Arc::strong_count(&back) != 1 {
            return Err((front, back));
        }
        let (front, back) = match (Arc::try_unwrap(front), Arc::try_unwrap(back)) {
            (Ok(f), Ok(b)) => (ManuallyDrop::new(f), ManuallyDrop::new(b)),
            (f, b) => return Err((rewrap(f), rewrap(b))),
        };
        Ok(Arc::new(Self::mapped(front.ptr, front.len + back.len)))
    }

    /// Faults every page of an unused buffer held by this call alone in, so writes into it
    /// (one-sided ones included) find their pages in place: one zero written per page (the
    /// memory is zero-filled already). Whether the pages are in (`false`: the buffer is
    /// shared or in use).
    ///
    /// Each of those page faults locks only the mapping it falls in (Linux 6.4 and later;
    /// before, the address space's lock for one fault at a time). `MADV_POPULATE_WRITE` is
    /// not used: it holds the address space's lock (`mmap_lock`) until every page is in,
    /// and a warm-up at the lowest priority on busy cores held it for tens of milliseconds
    /// at a time. The gateway's own `mmap` calls (an allocation, a new arena) waited behind
    /// it, and one-sided writes into the gateway (cross-memory attach takes the same lock)
    /// queued behind those: HTTP batches of 256 × 64 KiB took 80–320 ms, not 25.
    pub fn populate(this: &mut Arc<Self>) -> bool {
        let Some(buf) = Arc::get_mut(this) else {
            return false;
        };
        if *buf.next.get_mut() != 0 {
            return false;
        }
        for page in (0..buf.len).step_by(BUFFER_ALIGN) {
            // SAFETY: `page < len`, inside the allocation; `&mut` to the only `Arc` with
            // no slot claimed means nothing else reads or writes it; the byte is 0 already.
            unsafe { buf.ptr.as_ptr().add(page).write_volatile(0) };
        }
        true
    }

    /// A buffer over `len` bytes at `ptr` of a mapping made by `map_huge`.
    fn mapped(ptr: NonNull<u8>, len: usize) -> Self {
        Self {
            ptr,
            len,
            backing: Backing::Mapped,
            next: AtomicUsize::new(0),
        }
    }
}

/// A buffer taken out of its `Arc` (or still in it) as an `Arc` again.
fn rewrap(b: Result<ArenaBuffer, Arc<ArenaBuffer>>) -> Arc<ArenaBuffer> {
    match b {
        Ok(b) => Arc::new(b),
        Err(shared) => shared,
    }
}

/// Lowers the calling thread to the lowest scheduling priority (nice 19), so that a thread
/// faulting memory in ahead of need gives way to those serving reads and writes (the
/// thread stays so: call it on a thread of its own). Whether the kernel allowed it.
pub fn lower_priority() -> bool {
    // SAFETY: `gettid` has no preconditions; `setpriority` on this thread's id changes
    // only its own nice value (Linux keeps one per thread).
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) == 0
    }
}
