//! The cross-memory copies: how a batch is cut into calls and shared by two threads, and
//! its groups checked as they land.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{calls, copy_all, helper_calls, Groups, Span, CALL_BYTES};
use crate::local::MAX_IOV;

fn spans(lens: &[usize]) -> Vec<Span> {
    lens.iter()
        .map(|&len| Span {
            at: 0,
            remote: 0,
            len,
        })
        .collect()
}

#[test]
fn a_batch_is_cut_into_calls_in_order_of_bounded_size() {
    // Header, payload, header, payload…
    let pieces = spans(&[64, 65536].repeat(256));
    let cut = calls(&pieces, true, None);
    let mut next = 0;
    for call in &cut {
        assert_eq!(call.start, next, "in order, none left out");
        next = call.end;
        let bytes: usize = pieces[call.clone()].iter().map(|p| p.len).sum();
        assert!(
            call.len() == 1 || bytes <= CALL_BYTES,
            "{bytes} bytes a call"
        );
        assert!(call.len() <= MAX_IOV);
    }
    assert_eq!(next, pieces.len());
    // 15 frames (64 + 65,536 bytes each) fit in a call: 18 calls, not 512.
    assert_eq!(cut.len(), 18, "calls for 256 frames of 64 KiB");
    // Many tiny pieces: the iovec limit cuts them.
    let tiny = spans(&[64; 3000]);
    assert_eq!(calls(&tiny, true, None).len(), 3);
    // Pieces sharing scratch space: one a call.
    assert_eq!(calls(&pieces, false, None).len(), pieces.len());
    // A piece larger than a call's bytes is a call of its own, never split.
    assert_eq!(calls(&spans(&[4 << 20, 64, 4 << 20]), true, None).len(), 3);
}

#[test]
fn each_thread_copies_about_half_of_a_batch_of_frames() {
    let pieces = spans(&[64, 65536].repeat(256));
    let cut = calls(&pieces, true, None);
    let helpers = helper_calls(&pieces, &cut);
    let bytes =
        |c: &std::ops::Range<usize>| -> usize { pieces[c.clone()].iter().map(|p| p.len).sum() };
    let theirs: usize = cut
        .iter()
        .zip(&helpers)
        .filter(|(_, h)| **h)
        .map(|(c, _)| bytes(c))
        .sum();
    let all: usize = pieces.iter().map(|p| p.len).sum();
    assert!(
        theirs.abs_diff(all - theirs) <= CALL_BYTES,
        "{theirs} of {all}"
    );
    let same = spans(&[1 << 20; 16]);
    let cut = calls(&same, true, None);
    assert_eq!(cut.len(), 16);
    assert_eq!(helper_calls(&same, &cut).iter().filter(|h| **h).count(), 8);
}

#[test]
fn a_batch_is_cut_between_groups_that_fit_a_call() {
    // Header, payload…; then one frame larger than a call.
    let mut lens = [64, 65536].repeat(256);
    lens.extend([64, CALL_BYTES, CALL_BYTES]);
    let pieces = spans(&lens);
    let starts: Vec<usize> = (0..=256).map(|g| 2 * g).collect();
    let cut = calls(&pieces, true, Some(&starts));
    for call in &cut[..17] {
        assert!(starts.contains(&call.start), "{call:?} begins a frame");
        assert!(starts.contains(&call.end), "{call:?} ends a frame");
    }
    // 15 frames a call (17 calls); the last frame with the large one's header, which may
    // share a call (the large frame is cut anyway), then its payload pieces alone.
    assert_eq!(cut.len(), 17 + 3, "{cut:?}");
    assert_eq!(cut[17..], [510..513, 513..514, 514..515]);
    // Without groups, a call may end after a header: its payload goes in the next.
    assert!(calls(&pieces, true, None)
        .iter()
        .any(|c| !starts.contains(&c.end)));
}

#[test]
fn each_group_is_checked_once_as_soon_as_the_call_that_holds_it_is_copied() {
    // 256 frames of 64 KiB (16 MiB: two threads copy), then a frame larger than a call.
    let mut lens = [64, 65536].repeat(256);
    lens.extend([64, CALL_BYTES, 5]);
    let total: usize = lens.iter().sum();
    let src: Vec<u8> = (0..total).map(|i| (i * 7 + i / 4093) as u8).collect();
    let mut dst = vec![0u8; total];
    let mut pieces = Vec::new();
    let mut off = 0;
    for len in &lens {
        pieces.push(Span {
            at: dst.as_mut_ptr() as usize + off,
            remote: src.as_ptr() as u64 + off as u64,
            len: *len,
        });
        off += len;
    }
    let starts: Vec<usize> = (0..=256).map(|g| 2 * g).collect();
    let group_bytes = |g: usize| {
        let from: usize = lens[..starts[g]].iter().sum();
        let to: usize = lens[..starts.get(g + 1).copied().unwrap_or(lens.len())]
            .iter()
            .sum();
        &src[from..to]
    };
    let seen = Mutex::new(Vec::new());
    let check = |g: usize, bytes: &[&[u8]]| {
        let same = bytes.concat() == group_bytes(g);
        let thread = std::thread::current().id();
        seen.lock().unwrap().push((g, same, thread));
    };
    let groups = Groups {
        starts: &starts,
        check: &check,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    copy_all(
        std::process::id(),
        &pieces,
        true,
        Some(&groups),
        deadline,
        &mut |_, _| Ok(()),
    )
    .unwrap_or_else(|f| panic!("{}", f.error));
    assert!(dst == src, "every piece copied");
    let mut seen = seen.into_inner().unwrap();
    seen.sort_by_key(|(g, _, _)| *g);
    let checked: Vec<usize> = seen.iter().map(|(g, _, _)| *g).collect();
    assert_eq!(
        checked,
        (0..256).collect::<Vec<_>>(),
        "each frame in a call, once; not the large one"
    );
    assert!(
        seen.iter().all(|(_, same, _)| *same),
        "a group's bytes as copied"
    );
    let threads: std::collections::HashSet<_> = seen.iter().map(|(_, _, t)| *t).collect();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
        assert_eq!(threads.len(), 2, "each thread checks what it copied");
    }
}
