//! Append-only shared memory for arenas.
//!
//! An [`ArenaBuffer`] is one page-aligned allocation that never moves or shrinks while it
//! exists, so its address can be registered with libfabric and handed to remote readers.
//! Writers carve disjoint, exclusive [`WriteSlot`]s out of it with an atomic bump pointer
//! and fill them; a finished slot becomes a [`Frozen`] extent that can be read (and
//! shared) but never written again.
//!
//! # Soundness
//!
//! The type system, not the caller, keeps readers and writers apart:
//!
//! - slots come from a bump pointer that only moves forward, so two slots never overlap;
//! - a [`Frozen`] extent can only be made by consuming its [`WriteSlot`], so once bytes are
//!   readable nobody holds a mutable view of them, and no later slot can cover them;
//! - slots and extents hold an `Arc` of the buffer, and [`ArenaBuffer::reset`] (which
//!   moves the bump pointer back to zero for reuse) needs the only `Arc`, so no slot or
//!   extent survives a reset.
//!
//! Remote one-sided readers are outside the type system; keeping them away from memory
//! that is about to be reused is the job of leases and key rotation (see the gateway's
//! store).

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Alignment of every buffer: one page, which memory registration prefers.
pub const BUFFER_ALIGN: usize = 4096;

/// A transparent huge page. Buffers whose size is a multiple of it are mapped on its
/// boundary and advised `MADV_HUGEPAGE`: registered with a NIC (EFA caps the page-table
/// entries a device holds, ~24 M), 2 MiB pages let a budget 512 times larger fit than 4 KiB
/// pages do. Where the kernel has no transparent huge pages the advice is ignored.
pub const HUGE_PAGE: usize = 2 << 20;

/// Why a buffer could not be created.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// The requested size is zero or does not fit a page-aligned layout.
    #[error("invalid arena buffer size {0}")]
    InvalidSize(usize),
    /// The operating system refused the allocation.
    #[error("out of memory allocating an arena buffer of {0} bytes")]
    OutOfMemory(usize),
}

/// A fixed-size, page-aligned, zero-initialised block of memory written append-only.
pub struct ArenaBuffer {
    ptr: NonNull<u8>,
    /// Its size in bytes.
    len: usize,
    /// Where the memory came from, and so how it is given back.
    backing: Backing,
    /// Offset of the first byte no slot has claimed yet.
    next: AtomicUsize,
}

/// Where an [`ArenaBuffer`]'s memory came from.
enum Backing {
    /// A zeroed heap block of this layout.
    Heap(Layout),
    /// An anonymous mapping on huge-page boundaries (`map_huge`).
    Mapped,
    /// The caller's memory ([`ArenaBuffer::from_owned`]): the owner, dropped with the buffer.
    Owned(#[allow(dead_code)] Box<dyn Send>),
}

// SAFETY: the buffer owns its allocation; all shared access goes through `WriteSlot`
// (exclusive, disjoint ranges) and `Frozen` (read-only ranges nobody writes), as argued in
// the module documentation, so sharing and sending it between threads is sound.
unsafe impl Send for ArenaBuffer {}
// SAFETY: see `Send` above: `&ArenaBuffer` only hands out disjoint exclusive slots (via an
// atomic bump pointer) and read-only views of frozen ranges.
unsafe impl Sync for ArenaBuffer {}

impl ArenaBuffer {
    /// Allocates `capacity` bytes (rounded up to a page, or to a huge page from one huge
    /// page up), zeroed.
    ///
    /// Buffers of a huge page or more are always mapped, never taken from the heap: the
    /// kernel zeroes a mapping lazily, page by page as it is written, where an aligned
    /// zeroed heap block is written whole first (a 200 MiB value waited 120 ms for that
    /// before its first byte could stream).
    ///
    /// Fails cleanly instead of aborting when the system has no memory left.
    pub fn new(capacity: usize) -> Result<Arc<Self>, BufferError> {
        let page = if capacity > HUGE_PAGE {
            HUGE_PAGE
        } else {
            BUFFER_ALIGN
        };
        let rounded = capacity
            .checked_next_multiple_of(page)
            .filter(|&n| n > 0)
            .ok_or(BufferError::InvalidSize(capacity))?;
        if rounded % HUGE_PAGE == 0 {
            if let Some(ptr) = map_huge(rounded) {
                return Ok(Arc::new(Self {
                    ptr,
                    len: rounded,
                    backing: Backing::Mapped,
                    next: AtomicUsize::new(0),
                }));
            }
        }
        let layout = Layout::from_size_align(rounded, BUFFER_ALIGN)
            .map_err(|_| BufferError::InvalidSize(capacity))?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(BufferError::OutOfMemory(rounded))?;
        Ok(Arc::new(Self {
            ptr,
            len: rounded,
            backing: Backing::Heap(layout),
            next: AtomicUsize::new(0),
        }))
    }

    /// A buffer over memory the caller owns (a `Vec<u8>`, a boxed array, memory another
    /// runtime lends with a guard that pins it): `owner` moves in and is dropped with the
    /// buffer, and its bytes — `owner.as_mut()`, taken once, now — are used in place for
    /// the buffer's whole life. Not zeroed; not necessarily page-aligned.
    pub fn from_owned<M: AsMut<[u8]> + Send + 'static>(owner: M) -> Result<Arc<Self>, BufferError> {
        let mut owner = Box::new(owner);
        let bytes = (*owner).as_mut();
        let len = bytes.len();
        let ptr = NonNull::new(bytes.as_mut_ptr())
            .filter(|_| len > 0)
            .ok_or(BufferError::InvalidSize(0))?;
        Ok(Arc::new(Self {
            ptr,
            len,
            backing: Backing::Owned(owner),
            next: AtomicUsize::new(0),
        }))
    }

    /// Whether the buffer is mapped on huge-page boundaries with `MADV_HUGEPAGE`.
    pub fn huge_pages(&self) -> bool {
        matches!(self.backing, Backing::Mapped)
    }

    /// Total size in bytes.
    pub fn capacity(&self) -> usize {
        self.len
    }

    /// Bytes claimed by slots so far (including padding).
    pub fn used(&self) -> usize {
        self.next.load(Ordering::Acquire).min(self.capacity())
    }

    /// Address of the first byte, for memory registration and descriptors.
    pub fn base_addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Claims `len` bytes starting at a multiple of `align` (a power of two), or `None`
    /// when the rest of the buffer is too small.
    pub fn try_reserve(self: &Arc<Self>, len: usize, align: usize) -> Option<WriteSlot> {
        assert!(align.is_power_of_two(), "alignment must be a power of two");
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            let start = cur.checked_next_multiple_of(align)?;
            let end = start.checked_add(len)?;
            if end > self.capacity() {
                return None;
            }
            match self
                .next
                .compare_exchange_weak(cur, end, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    return Some(WriteSlot {
                        buf: Arc::clone(self),
                        off: start,
                        len,
                    })
                }
                Err(seen) => cur = seen,
            }
        }
    }

    /// Makes the whole buffer available again. Only possible for the sole owner, which
    /// proves that no slot or extent is alive. Returns `false` (and does nothing) otherwise.
    pub fn reset(this: &mut Arc<Self>) -> bool {
        match Arc::get_mut(this) {
            Some(buf) => {
                *buf.next.get_mut() = 0;
                true
            }
            None => false,
        }
    }
}

/// An anonymous, zero-filled mapping of `len` bytes (a multiple of [`HUGE_PAGE`]) starting
/// on a huge-page boundary, advised `MADV_HUGEPAGE`; `None` if the kernel refuses (the
/// caller then uses the heap).
fn map_huge(len: usize) -> Option<NonNull<u8>> {
    let span = len.checked_add(HUGE_PAGE)?;
    // SAFETY: an anonymous private mapping with no address hint; the result is checked.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let start = raw as usize;
    let aligned = start.next_multiple_of(HUGE_PAGE);
    let (head, tail) = (aligned - start, span - (aligned - start) - len);
    // SAFETY: both ranges lie inside the mapping just made and are not used afterwards;
    // what remains is exactly [aligned, aligned + len).
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        // Advice only: without transparent huge pages the kernel ignores it.
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    NonNull::new(aligned as *mut u8)
}

impl Drop for ArenaBuffer {
    fn drop(&mut self) {
        match &self.backing {
            // SAFETY: `ptr` is the start of a mapping of exactly `len` bytes made by
            // `map_huge`, unmapped once, here; no slot or extent outlives the buffer.
            Backing::Mapped => unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), self.len);
            },
            // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly this layout and is
            // freed once, here; no slot or extent outlives the buffer (they hold an `Arc`).
            Backing::Heap(layout) => unsafe { alloc::dealloc(self.ptr.as_ptr(), *layout) },
            // The owner (dropped with this field) gives its memory back its own way.
            Backing::Owned(_) => {}
        }
    }
}

impl std::fmt::Debug for ArenaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaBuffer")
            .field("base", &format_args!("{:#x}", self.base_addr()))
            .field("capacity", &self.capacity())
            .field("used", &self.used())
            .finish()
    }
}

/// An exclusive, writable range of an [`ArenaBuffer`] that nobody can read yet.
///
/// Dropping a slot without [`freeze`](Self::freeze)ing it abandons the range: its bytes are
/// never readable and return to use only when the whole buffer is reset.
#[derive(Debug)]
pub struct WriteSlot {
    buf: Arc<ArenaBuffer>,
    off: usize,
    len: usize,
}

impl WriteSlot {
    /// Offset of the slot within its buffer.
    pub fn offset(&self) -> usize {
        self.off
    }

    /// Length of the slot.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slot is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot's bytes, for writing.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `off + len <= capacity` (checked in `try_reserve`), so the range lies in
        // the live allocation (kept alive by our `Arc`). The range is disjoint from every
        // other slot and from every frozen extent (bump allocation, see module docs), and
        // `&mut self` makes this the only view of it for the returned lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.buf.ptr.as_ptr().add(self.off), self.len) }
    }

    /// The slot's bytes, for reading (its owner's own view: nobody else sees them).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as for `as_mut_slice`; `&self` rules out a mutable view for the returned
        // lifetime.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.as_ptr().add(self.off), self.len) }
    }

    /// The buffer the slot lies in (to register it).
    pub fn buffer(&self) -> &Arc<ArenaBuffer> {
        &self.buf
    }

    /// Splits the slot in two at `at`: `self` keeps `[0, at)`, the returned slot has
    /// `[at, len)` (as `BytesMut::split_off`). Panics when `at > len`.
    pub fn split_off(&mut self, at: usize) -> WriteSlot {
        assert!(at <= self.len, "split at {at} past a slot of {}", self.len);
        let tail = WriteSlot {
            buf: Arc::clone(&self.buf),
            off: self.off + at,
            len: self.len - at,
        };
        self.len = at;
        tail
    }

    /// Joins `tail` back onto the end of `self`, when it is the slot that follows it in
    /// the same buffer (as made by [`split_off`](Self::split_off)); otherwise gives it back.
    pub fn unsplit(&mut self, tail: WriteSlot) -> Result<(), WriteSlot> {
        if !Arc::ptr_eq(&self.buf, &tail.buf) || self.off + self.len != tail.off {
            return Err(tail);
        }
        self.len += tail.len;
        Ok(())
    }

    /// Ends writing: the range becomes immutable and readable.
    pub fn freeze(self) -> Frozen {
        // SAFETY: `off` lies within the allocation (a slot never extends past it), so the
        // sum is in bounds and not null.
        let ptr = unsafe { self.buf.ptr.add(self.off) };
        Frozen {
            buf: self.buf,
            ptr,
            len: self.len,
        }
    }
}

/// An immutable, readable range of an [`ArenaBuffer`]. Cheap to clone; keeps the buffer
/// alive (an HTTP response holding one holds its arena). It holds its first byte's address
/// itself, so reading it costs no trip through the buffer (the store's index compares
/// keys held in frames).
#[derive(Clone, Debug)]
pub struct Frozen {
    buf: Arc<ArenaBuffer>,
    /// The first byte: inside `buf`'s allocation.
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Frozen` is a shared, immutable view of memory kept alive by its `Arc` (which
// is Send and Sync); the pointer is only read through, never written through.
unsafe impl Send for Frozen {}
// SAFETY: as above: concurrent shared reads of bytes nobody mutates.
unsafe impl Sync for Frozen {}

impl Frozen {
    /// The buffer this extent lives in.
    pub fn buffer(&self) -> &Arc<ArenaBuffer> {
        &self.buf
    }

    /// Offset within the buffer.
    pub fn offset(&self) -> usize {
        self.addr() - self.buf.base_addr()
    }

    /// Address of the first byte (buffer base + offset).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the extent is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The extent's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the range lies in the live allocation (kept alive by our `Arc`), it was
        // fully owned by the `WriteSlot` we were made from, which is gone, and no other slot
        // can ever cover it until a reset, which cannot happen while we hold an `Arc`. So
        // nobody mutates these bytes while the shared view exists.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// A sub-range of this extent (`start..end`, relative to the extent).
    ///
    /// # Panics
    /// When the range is out of bounds or reversed.
    pub fn slice(&self, start: usize, end: usize) -> Frozen {
        assert!(start <= end && end <= self.len, "slice out of bounds");
        Frozen {
            buf: Arc::clone(&self.buf),
            // SAFETY: `start <= len`, so the result stays within this extent.
            ptr: unsafe { self.ptr.add(start) },
            len: end - start,
        }
    }
}

impl AsRef<[u8]> for Frozen {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

mod carve;
pub use carve::lower_priority;

#[cfg(test)]
mod tests;
