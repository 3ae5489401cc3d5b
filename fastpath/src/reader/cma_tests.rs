//! The cross-memory copies: how a batch is cut into calls and shared by two threads, and
//! its groups checked as they land.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{calls, copy_all, helper_calls, Groups, Part, Span, CALL_BYTES};
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
    // Frames of 64 + 65,536 bytes: as many as fit a call go in one, not one a piece.
    let per = CALL_BYTES / (64 + 65536);
    assert!(per >= 2, "a call holds several 64 KiB values");
    assert!(
        cut.len() <= 256usize.div_ceil(per) + 1,
        "{} calls for 256 frames of 64 KiB",
        cut.len()
    );
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
    let helpers = helper_calls(&pieces, &cut, None);
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
    assert_eq!(
        helper_calls(&same, &cut, None)
            .iter()
            .filter(|h| **h)
            .count(),
        8
    );
}

#[test]
fn a_batch_is_cut_between_groups_that_fit_a_call() {
    // Header, payload…; then one frame larger than a call.
    let mut lens = [64, 65536].repeat(256);
    lens.extend([64, CALL_BYTES, CALL_BYTES]);
    let pieces = spans(&lens);
    let starts: Vec<usize> = (0..=256).map(|g| 2 * g).collect();
    let cut = calls(&pieces, true, Some(&starts));
    // As many whole frames a call as fit, then the frames left in one call, then the
    // large frame in calls of its own (its header, then each payload piece).
    let per = CALL_BYTES / (64 + 65536);
    let full = 256 / per;
    for (c, call) in cut[..full].iter().enumerate() {
        assert_eq!(*call, 2 * per * c..2 * per * (c + 1), "whole frames");
    }
    let mut rest = Vec::new();
    if 256 % per > 0 {
        rest.push(2 * per * full..512);
    }
    rest.extend([512..513, 513..514, 514..515]);
    assert_eq!(cut[full..], rest, "{cut:?}");
    // Without groups, a call may end after a header: its payload goes in the next.
    assert!(calls(&pieces, true, None)
        .iter()
        .any(|c| !starts.contains(&c.end)));
}

#[test]
fn each_group_is_handed_over_in_order_on_one_thread_as_its_calls_are_copied() {
    // 256 frames of 64 KiB (16 MiB: two threads copy), then two frames larger than a call.
    let mut lens = [64, 65536].repeat(256);
    lens.extend([64, CALL_BYTES, CALL_BYTES, 5].repeat(2));
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
    let mut starts: Vec<usize> = (0..256).map(|g| 2 * g).collect();
    starts.extend([512, 516]);
    let group_bytes = |g: usize| {
        let from: usize = lens[..starts[g]].iter().sum();
        let to: usize = lens[..starts.get(g + 1).copied().unwrap_or(lens.len())]
            .iter()
            .sum();
        &src[from..to]
    };
    let seen = Mutex::new(Vec::new());
    let check = |part: Part<'_>| {
        let thread = std::thread::current().id();
        let bytes = part.pieces.concat();
        seen.lock()
            .unwrap()
            .push((part.group, bytes, part.first, part.last, thread));
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
    seen.sort_by_key(|(g, ..)| *g); // stable: a group's parts stay in the order given
    for (g, _) in starts.iter().enumerate() {
        let parts: Vec<_> = seen.iter().filter(|(pg, ..)| *pg == g).collect();
        let want = if g < 256 { 1 } else { 4 };
        assert_eq!(parts.len(), want, "group {g}: a part a call it spans");
        let whole: Vec<u8> = parts.iter().flat_map(|(_, b, ..)| b.clone()).collect();
        assert!(
            whole == group_bytes(g),
            "group {g}: its bytes as copied, in order"
        );
        for (i, (_, _, first, last, thread)) in parts.iter().enumerate() {
            assert_eq!(*first, i == 0, "group {g}: first");
            assert_eq!(*last, i + 1 == parts.len(), "group {g}: last");
            assert_eq!(*thread, parts[0].4, "group {g}: one thread");
        }
    }
    assert_eq!(seen.len(), 256 + 2 * 4, "nothing else handed over");
    let threads: std::collections::HashSet<_> = seen.iter().map(|(.., t)| *t).collect();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
        assert_eq!(threads.len(), 2, "each thread checks what it copied");
    }
}

#[test]
fn a_group_larger_than_a_call_is_copied_by_one_thread_and_groups_are_shared() {
    // 16 frames of 16 MiB: a header, then 16 pieces of a call each.
    let frame = [&[64][..], &[CALL_BYTES; 16][..]].concat();
    let pieces = spans(&frame.repeat(16));
    let starts: Vec<usize> = (0..16).map(|g| 17 * g).collect();
    let cut = calls(&pieces, true, Some(&starts));
    assert_eq!(
        cut.len(),
        16 * 17,
        "a header, then each piece: calls of its own"
    );
    let helpers = helper_calls(&pieces, &cut, Some(&starts));
    let of_frame: Vec<bool> = (0..16)
        .map(|g| {
            let mine: Vec<bool> = (0..17).map(|c| helpers[17 * g + c]).collect();
            assert!(mine.iter().all(|h| *h == mine[0]), "frame {g}: one thread");
            mine[0]
        })
        .collect();
    assert_eq!(of_frame.iter().filter(|h| **h).count(), 8, "{of_frame:?}");
    // Without groups, the calls are shared one by one.
    let loose = helper_calls(&pieces, &cut, None);
    assert!((0..17).any(|c| loose[c] != loose[0]));
}
