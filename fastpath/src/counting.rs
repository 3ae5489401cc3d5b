//! A global allocator that counts, per thread, the heap bytes held: for tests that bound
//! what a data structure costs (e.g. the gateway's heap per cached version), measured
//! exactly rather than through RSS. It lives here because it needs `unsafe`, which only
//! this crate may contain.
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: rasa_fastpath::counting::Counting = rasa_fastpath::counting::Counting;
//! let before = rasa_fastpath::counting::held();
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting the bytes each thread holds.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
}

/// Heap bytes allocated and not yet freed by this thread (net of what it freed that
/// others allocated), since it started.
pub fn held() -> isize {
    HELD.with(Cell::get)
}

fn add(n: isize) {
    // During thread teardown the counter may be gone: then the change goes uncounted.
    let _ = HELD.try_with(|h| h.set(h.get() + n));
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; the bookkeeping is a const-initialised thread-local integer
// that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as isize);
        // SAFETY: the caller upholds `alloc`'s contract, which is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(-(layout.size() as isize));
        // SAFETY: `ptr` was allocated by this allocator (so by the system's) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as isize);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(new_size as isize - layout.size() as isize);
        // SAFETY: `ptr` and `layout` are this allocator's, `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
