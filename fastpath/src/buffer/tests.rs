//! The buffer's own tests: layout, slots, and memory the caller owns.

use super::*;

#[test]
fn large_buffers_sit_on_huge_page_boundaries_and_small_ones_on_the_heap() {
    let big = ArenaBuffer::new(4 * HUGE_PAGE).unwrap();
    assert!(big.huge_pages());
    assert_eq!(big.base_addr() % HUGE_PAGE, 0);
    assert_eq!(big.capacity(), 4 * HUGE_PAGE);
    // Zero-filled and writable end to end.
    let mut slot = big.try_reserve(big.capacity(), 64).unwrap();
    assert!(slot.as_mut_slice().iter().all(|b| *b == 0));
    slot.as_mut_slice().fill(7);
    let small = ArenaBuffer::new(256 << 10).unwrap();
    assert!(!small.huge_pages());
    // Over a huge page but not a multiple of one (a dedicated arena for a large
    // value): rounded up and mapped (zeroed lazily), its capacity says so, and the
    // arenas account that capacity.
    let odd = ArenaBuffer::new(HUGE_PAGE + 4096).unwrap();
    assert!(odd.huge_pages());
    assert_eq!(odd.capacity(), 2 * HUGE_PAGE);
    assert_eq!(odd.base_addr() % HUGE_PAGE, 0);
}
use std::thread;

#[test]
fn slots_are_disjoint_aligned_and_bounded() {
    let buf = ArenaBuffer::new(10_000).unwrap();
    assert_eq!(buf.capacity(), 12_288);
    let a = buf.try_reserve(100, 64).unwrap();
    let b = buf.try_reserve(100, 64).unwrap();
    assert_eq!(a.offset(), 0);
    assert_eq!(b.offset(), 128);
    assert!(buf.try_reserve(20_000, 64).is_none());
    // A failed reservation claims nothing.
    assert_eq!(buf.used(), 228);
}

#[test]
fn frozen_reads_what_was_written_and_reset_needs_sole_owner() {
    let mut buf = ArenaBuffer::new(4096).unwrap();
    let mut slot = buf.try_reserve(5, 8).unwrap();
    slot.as_mut_slice().copy_from_slice(b"hello");
    let frozen = slot.freeze();
    assert_eq!(frozen.as_slice(), b"hello");
    assert_eq!(frozen.slice(1, 3).as_slice(), b"el");
    assert_eq!(frozen.addr(), buf.base_addr());
    assert!(
        !ArenaBuffer::reset(&mut buf),
        "reset while an extent is alive"
    );
    drop(frozen);
    assert!(ArenaBuffer::reset(&mut buf));
    assert_eq!(buf.used(), 0);
}

#[test]
fn concurrent_writers_never_overlap() {
    let buf = ArenaBuffer::new(1 << 20).unwrap();
    let extents: Vec<Frozen> = thread::scope(|s| {
        let handles: Vec<_> = (0..8u8)
            .map(|t| {
                let buf = &buf;
                s.spawn(move || {
                    let mut out = Vec::new();
                    while let Some(mut slot) = buf.try_reserve(1000, 64) {
                        slot.as_mut_slice().fill(t);
                        out.push((t, slot.freeze()));
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .map(|(t, f)| {
                assert!(f.as_slice().iter().all(|&b| b == t), "torn slot");
                f
            })
            .collect()
    });
    assert_eq!(extents.len(), (1 << 20) / 1024);
}

#[test]
fn zero_size_is_refused() {
    assert!(matches!(
        ArenaBuffer::new(0),
        Err(BufferError::InvalidSize(0))
    ));
}

#[test]
fn the_callers_memory_is_used_in_place_and_dropped_with_the_buffer() {
    use std::sync::atomic::AtomicBool;
    static DROPPED: AtomicBool = AtomicBool::new(false);
    struct Lent(Vec<u8>);
    impl AsMut<[u8]> for Lent {
        fn as_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }
    impl Drop for Lent {
        fn drop(&mut self) {
            DROPPED.store(true, Ordering::SeqCst);
        }
    }
    let lent = Lent(vec![5u8; 1000]);
    let addr = lent.0.as_ptr() as usize;
    let buf = ArenaBuffer::from_owned(lent).unwrap();
    assert_eq!((buf.base_addr(), buf.capacity()), (addr, 1000));
    assert!(!buf.huge_pages());
    let mut slot = buf.try_reserve(1000, 1).unwrap();
    assert!(
        slot.as_slice().iter().all(|&b| b == 5),
        "not zeroed: the caller's bytes"
    );
    slot.as_mut_slice()[0] = 9;
    drop(slot);
    assert!(!DROPPED.load(Ordering::SeqCst));
    drop(buf);
    assert!(
        DROPPED.load(Ordering::SeqCst),
        "the owner goes with the buffer"
    );
    assert!(matches!(
        ArenaBuffer::from_owned(Vec::<u8>::new()),
        Err(BufferError::InvalidSize(0))
    ));
}

#[test]
fn a_slot_splits_into_disjoint_parts_that_join_again() {
    let buf = ArenaBuffer::new(4096).unwrap();
    let mut head = buf.try_reserve(1000, 1).unwrap();
    let mut tail = head.split_off(600);
    assert_eq!((head.offset(), head.len()), (0, 600));
    assert_eq!((tail.offset(), tail.len()), (600, 400));
    head.as_mut_slice().fill(1);
    tail.as_mut_slice().fill(2);
    let other = buf.try_reserve(10, 1).unwrap();
    let other = head.unsplit(other).expect_err("not the part that follows");
    let far = tail.split_off(400);
    assert!(far.is_empty());
    head.unsplit(tail).unwrap();
    head.unsplit(far).unwrap();
    assert_eq!(head.len(), 1000);
    assert!(head.as_slice()[..600].iter().all(|&b| b == 1));
    assert!(head.as_slice()[600..].iter().all(|&b| b == 2));
    assert_eq!(other.offset(), 1000);
}

/// Warm memory: a populated buffer cut into parts that each write, read and unmap on
/// their own, joined back into one when neighbours; what cannot be cut is given back.
#[test]
fn mapped_buffers_split_and_join_on_huge_page_boundaries() {
    let mut whole = ArenaBuffer::new(8 * HUGE_PAGE).unwrap();
    assert!(whole.splittable());
    assert!(ArenaBuffer::populate(&mut whole), "pages faulted in");
    let base = whole.base_addr();
    let whole = ArenaBuffer::split(whole, HUGE_PAGE + 4096).expect_err("not on a boundary");
    let held = Arc::clone(&whole);
    let whole = ArenaBuffer::split(whole, HUGE_PAGE).expect_err("shared");
    drop(held);
    let (front, back) = ArenaBuffer::split(whole, 3 * HUGE_PAGE).unwrap();
    assert_eq!((front.base_addr(), front.capacity()), (base, 3 * HUGE_PAGE));
    assert_eq!(back.base_addr(), base + 3 * HUGE_PAGE);
    assert_eq!(back.capacity(), 5 * HUGE_PAGE);
    for part in [&front, &back] {
        let mut slot = part.try_reserve(part.capacity(), 64).unwrap();
        assert!(slot.as_slice().iter().all(|b| *b == 0), "zero-filled");
        slot.as_mut_slice().fill(9);
    }
    // Used buffers neither split nor join.
    let (front, back) = ArenaBuffer::join(front, back).expect_err("slots were claimed");
    let (mut front, mut back) = (front, back);
    assert!(ArenaBuffer::reset(&mut front) && ArenaBuffer::reset(&mut back));
    let (back, front) = ArenaBuffer::join(back, front).expect_err("out of order");
    let joined = ArenaBuffer::join(front, back).unwrap();
    assert_eq!(
        (joined.base_addr(), joined.capacity()),
        (base, 8 * HUGE_PAGE)
    );
    let (a, rest) = ArenaBuffer::split(joined, HUGE_PAGE).unwrap();
    drop(a); // unmaps its own range only
    let slot = rest.try_reserve(rest.capacity(), 64).unwrap();
    assert!(
        slot.as_slice().iter().all(|b| *b == 9),
        "the rest still mapped"
    );
    let small = ArenaBuffer::new(64 << 10).unwrap();
    assert!(!small.splittable());
    assert!(ArenaBuffer::split(small, HUGE_PAGE).is_err());
}

/// Faulting a buffer in (a warm-up, on a thread of its own) holds no lock the process's
/// other mappings wait for: a `mmap` made meanwhile takes a small part of the warm-up's
/// time. `MADV_POPULATE_WRITE` held the address space's lock until its last page was in,
/// and a mapping made meanwhile (a new arena, an allocation) waited for all of it.
#[test]
fn a_warm_up_holds_up_no_mapping_made_beside_it() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::time::{Duration, Instant};
    let mut big = ArenaBuffer::new(256 << 20).unwrap();
    let (started, done) = (AtomicBool::new(false), AtomicBool::new(false));
    thread::scope(|s| {
        let warm = s.spawn(|| {
            started.store(true, SeqCst);
            let t = Instant::now();
            assert!(ArenaBuffer::populate(&mut big), "pages faulted in");
            let took = t.elapsed();
            done.store(true, SeqCst);
            took
        });
        while !started.load(SeqCst) {
            std::hint::spin_loop();
        }
        let (mut longest, mut maps) = (Duration::ZERO, 0);
        while !done.load(SeqCst) {
            let t = Instant::now();
            drop(ArenaBuffer::new(HUGE_PAGE).unwrap());
            longest = longest.max(t.elapsed());
            maps += 1;
        }
        let took = warm.join().unwrap();
        assert!(
            longest < took / 4,
            "a mapping made beside a warm-up of {took:?} waited {longest:?} ({maps} made)"
        );
    });
}
