//! Arena table tests that need no store around it.

use super::*;
use std::sync::Barrier;

/// Writers that find no open arena at once open one between them: an arena allocated by
/// a writer that lost the race goes to the free list, not in place of the winner's (which
/// would seal it nearly empty, and drop its superseded versions as soon as none is
/// current: CI once saw a version answered 404 a moment after its PUT).
#[test]
fn writers_racing_for_the_first_arena_open_one() {
    for _ in 0..20 {
        let arenas = Arenas::new(4 << 20, 64 << 20, Duration::ZERO, None);
        let start = Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..4 {
                        let (arena, slot) = arenas.reserve_upload(4096, true, false).unwrap();
                        drop(slot);
                        arena.finish_pending();
                    }
                });
            }
        });
        let counts = arenas.counts();
        assert_eq!(
            counts.sealed, 0,
            "no arena sealed before it was full: {counts:?}"
        );
        assert_eq!(counts.open, 1);
    }
}
