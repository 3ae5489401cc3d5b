//! One-sided reads by cross-memory attach (`shm` on the gateway's host): this process
//! copies each piece out of the gateway with `process_vm_readv`; nothing is ever in
//! flight on the fabric.
//!
//! One thread copies at ~8.6 GB/s here, short of what memory moves (a `memcpy` of the
//! same bytes: ~14 GB/s), and the gateway's CPU is idle meanwhile. So a large batch whose
//! pieces each have room of their own is copied by two threads: a helper copies every
//! other piece ahead while the caller copies the rest and hands every piece over in order,
//! as before. Pieces are independent copies into disjoint memory, so the order they land
//! in does not matter; only delivery (validation) is in order. One-sided writes
//! ([`write_all`]: `process_vm_writev` into an upload region) are split the same way.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Failed, ReadError};
use crate::local::CopyError;

/// What receives each copied piece (its index and bytes), in order; an error stops the
/// read.
type OnPiece<'a> = dyn FnMut(usize, &[u8]) -> Result<(), ReadError> + 'a;

/// One piece to copy: `len` bytes from `remote` in the gateway to `at` here (inside a
/// buffer the caller holds exclusively for the read; `run` checked it).
pub(super) struct Span {
    /// Where the bytes land, as an address.
    pub(super) at: usize,
    /// Where they are in the gateway.
    pub(super) remote: u64,
    /// How many.
    pub(super) len: usize,
}

/// A piece's state, as the helper leaves it.
const PENDING: u8 = 0;
const COPIED: u8 = 1;
const FAILED: u8 = 2;

#[path = "cma_write.rs"]
mod write;
pub(super) use write::write_all;

/// Bytes one cross-memory call copies at most (a piece is never split): the deadline is
/// looked at between calls, and two threads share a batch call by call.
const CALL_BYTES: usize = 1 << 20;

/// Copies each piece from process `pid`, handing each to `on_piece` in order, consecutive
/// pieces copied by one system call ([`calls`]): by two threads when the batch is large,
/// every piece has room of its own (`apart`) and the machine has two cores; else one call
/// at a time.
pub(super) fn copy_all(
    pid: u32,
    pieces: &[Span],
    apart: bool,
    deadline: Instant,
    on_piece: &mut OnPiece<'_>,
) -> Result<(), Failed> {
    let total: usize = pieces.iter().map(|p| p.len).sum();
    let calls = calls(pieces, apart);
    if !apart || !crate::helper::two_threads_for(total as u64, calls.len()) {
        return copy_in_order(pid, pieces, &calls, deadline, on_piece);
    }
    copy_on_two(pid, pieces, &calls, deadline, on_piece)
}

/// The batch cut into system calls: runs of consecutive pieces of at most
/// [`crate::local::MAX_IOV`] pieces and about [`CALL_BYTES`]; one piece a call when
/// pieces share scratch space (not `apart`: each is handed over before a later one
/// overwrites it).
fn calls(pieces: &[Span], apart: bool) -> Vec<Range<usize>> {
    let mut calls = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, p) in pieces.iter().enumerate() {
        let full = !apart || i - start == crate::local::MAX_IOV || bytes + p.len > CALL_BYTES;
        if i > start && full {
            calls.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += p.len;
    }
    if start < pieces.len() {
        calls.push(start..pieces.len());
    }
    calls
}

/// Each call's pieces copied and handed over in turn.
fn copy_in_order(
    pid: u32,
    pieces: &[Span],
    calls: &[Range<usize>],
    deadline: Instant,
    on_piece: &mut OnPiece<'_>,
) -> Result<(), Failed> {
    for call in calls {
        if Instant::now() >= deadline {
            return Err(timeout());
        }
        let copied = copy_call(pid, &pieces[call.clone()]);
        let upto = match &copied {
            Ok(()) => call.end,
            Err((i, _)) => call.start + i,
        };
        for (i, p) in pieces.iter().enumerate().take(upto).skip(call.start) {
            p.deliver(i, on_piece)?;
        }
        copied.map_err(|(_, e)| failed(e))?;
    }
    Ok(())
}

/// About half the bytes copied ahead by a helper thread ([`helper_calls`]), the rest by
/// the caller, every piece handed over in order by the caller. A failure (the helper's
/// included) stops both.
fn copy_on_two(
    pid: u32,
    pieces: &[Span],
    calls: &[Range<usize>],
    deadline: Instant,
    on_piece: &mut OnPiece<'_>,
) -> Result<(), Failed> {
    let helpers = helper_calls(pieces, calls);
    let state: Vec<AtomicU8> = calls.iter().map(|_| AtomicU8::new(PENDING)).collect();
    let error: Mutex<Option<CopyError>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let theirs = calls.iter().enumerate().filter(|(c, _)| helpers[*c]);
            for (c, call) in theirs {
                if stop.load(Ordering::Acquire) || Instant::now() >= deadline {
                    return;
                }
                let outcome = match copy_call(pid, &pieces[call.clone()]) {
                    Ok(()) => COPIED,
                    Err((_, e)) => {
                        *error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                        FAILED
                    }
                };
                state[c].store(outcome, Ordering::Release);
                if outcome == FAILED {
                    return;
                }
            }
        });
        let result = (|| {
            for (c, call) in calls.iter().enumerate() {
                if helpers[c] {
                    wait_for(&state[c], &error, deadline)?;
                } else {
                    if Instant::now() >= deadline {
                        return Err(timeout());
                    }
                    copy_call(pid, &pieces[call.clone()]).map_err(|(_, e)| failed(e))?;
                }
                for (i, p) in pieces.iter().enumerate().take(call.end).skip(call.start) {
                    p.deliver(i, on_piece)?;
                }
            }
            Ok(())
        })();
        stop.store(true, Ordering::Release);
        result
    })
}

/// Which calls the helper makes: each call goes to whichever thread has the fewer bytes
/// so far, so that both copy about half whatever the sizes.
fn helper_calls(pieces: &[Span], calls: &[Range<usize>]) -> Vec<bool> {
    to_helper(
        calls
            .iter()
            .map(|call| pieces[call.clone()].iter().map(|p| p.len).sum()),
    )
}

/// For jobs of these byte counts, in order, whether each goes to the helper: to whichever
/// thread holds fewer bytes so far (the caller on a tie), so that both get about half.
pub(super) fn to_helper(bytes: impl Iterator<Item = usize>) -> Vec<bool> {
    let (mut caller, mut helper) = (0usize, 0usize);
    bytes
        .map(|n| {
            let theirs = helper < caller;
            *(if theirs { &mut helper } else { &mut caller }) += n;
            theirs
        })
        .collect()
}

/// Copies `spans` from process `pid` with one system call; `Err((i, why))` when span `i`
/// could not be copied (those before it were).
fn copy_call(pid: u32, spans: &[Span]) -> Result<(), (usize, CopyError)> {
    let parts = parts_of(spans);
    // SAFETY: each span's `at .. at + len` lies in the scratch slot or the landing buffer
    // (`run` checked every piece), which the caller holds exclusively (&mut) for this
    // call; the spans of one call are disjoint (consecutive pieces of a batch whose pieces
    // each have room of their own, or a single piece), and the two threads copy disjoint
    // calls; no read is in flight on the fabric.
    unsafe { crate::local::copy_many_from(pid, &parts) }
}

/// `spans` as the parts of a cross-memory call.
fn parts_of(spans: &[Span]) -> Vec<crate::local::Part> {
    spans
        .iter()
        .map(|s| crate::local::Part {
            local: s.at as *mut u8,
            remote: s.remote,
            len: s.len,
        })
        .collect()
}

/// Waits until the helper has copied a piece (`state`), or failed, or the deadline.
fn wait_for(
    state: &AtomicU8,
    error: &Mutex<Option<CopyError>>,
    deadline: Instant,
) -> Result<(), Failed> {
    let mut spins = 0u32;
    loop {
        match state.load(Ordering::Acquire) {
            COPIED => return Ok(()),
            FAILED => {
                let e = error.lock().unwrap_or_else(PoisonError::into_inner).take();
                return Err(e.map_or_else(timeout, failed));
            }
            _ if Instant::now() >= deadline => return Err(timeout()),
            _ if spins < 100 => {
                spins += 1;
                std::hint::spin_loop();
            }
            _ => std::thread::yield_now(),
        }
    }
}

impl Span {
    /// Hands this piece (copied), number `i`, to `on_piece`.
    fn deliver(&self, i: usize, on_piece: &mut OnPiece<'_>) -> Result<(), Failed> {
        // SAFETY: the piece has been copied (by this thread, or by the helper, which wrote
        // it before publishing COPIED with Release, read here with Acquire) and nothing
        // writes its bytes any more: each piece has room of its own.
        let bytes = unsafe { std::slice::from_raw_parts(self.at as *const u8, self.len) };
        on_piece(i, bytes).map_err(|error| Failed { error, quiet: true })
    }
}

/// A failed cross-memory copy as a read error: an unmapped range is a revoked key.
fn copy_error(e: crate::local::CopyError) -> ReadError {
    use crate::local::CopyError;
    match e {
        CopyError::Unmapped(f) => ReadError::KeyRevoked(f),
        CopyError::Gone(f) => ReadError::ConnectionLost(f),
        CopyError::Failed(f) => ReadError::Fabric(f),
    }
}

fn failed(e: CopyError) -> Failed {
    Failed {
        error: copy_error(e),
        quiet: true,
    }
}

fn timeout() -> Failed {
    Failed {
        error: ReadError::Timeout(Duration::ZERO),
        quiet: true,
    }
}

#[cfg(test)]
mod tests {
    use super::{calls, helper_calls, Span, CALL_BYTES};
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
        let cut = calls(&pieces, true);
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
        assert_eq!(calls(&tiny, true).len(), 3);
        // Pieces sharing scratch space: one a call.
        assert_eq!(calls(&pieces, false).len(), pieces.len());
        // A piece larger than a call's bytes is a call of its own, never split.
        assert_eq!(calls(&spans(&[4 << 20, 64, 4 << 20]), true).len(), 3);
    }

    #[test]
    fn each_thread_copies_about_half_of_a_batch_of_frames() {
        let pieces = spans(&[64, 65536].repeat(256));
        let cut = calls(&pieces, true);
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
        let cut = calls(&same, true);
        assert_eq!(cut.len(), 16);
        assert_eq!(helper_calls(&same, &cut).iter().filter(|h| **h).count(), 8);
    }
}
