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

/// Copies each piece from process `pid`, handing each to `on_piece` in order: by two
/// threads when the batch is large, every piece has room of its own (`apart`) and the
/// machine has two cores; else one at a time.
pub(super) fn copy_all(
    pid: u32,
    pieces: &[Span],
    apart: bool,
    deadline: Instant,
    on_piece: &mut OnPiece<'_>,
) -> Result<(), Failed> {
    let total: usize = pieces.iter().map(|p| p.len).sum();
    if !apart || !crate::helper::two_threads_for(total as u64, pieces.len()) {
        return copy_in_order(pid, pieces, deadline, on_piece);
    }
    copy_on_two(pid, pieces, deadline, on_piece)
}

/// Each piece copied and handed over in turn.
fn copy_in_order(
    pid: u32,
    pieces: &[Span],
    deadline: Instant,
    on_piece: &mut OnPiece<'_>,
) -> Result<(), Failed> {
    for (i, p) in pieces.iter().enumerate() {
        if Instant::now() >= deadline {
            return Err(timeout());
        }
        p.copy(pid).map_err(failed)?;
        p.deliver(i, on_piece)?;
    }
    Ok(())
}

/// Half the bytes copied ahead by a helper thread ([`helper_pieces`]), the rest by the
/// caller, every piece handed over in order by the caller. A failure (the helper's
/// included) stops both.
fn copy_on_two(
    pid: u32,
    pieces: &[Span],
    deadline: Instant,
    on_piece: &mut OnPiece<'_>,
) -> Result<(), Failed> {
    let helpers = helper_pieces(pieces);
    let state: Vec<AtomicU8> = pieces.iter().map(|_| AtomicU8::new(PENDING)).collect();
    let error: Mutex<Option<CopyError>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let theirs = pieces.iter().enumerate().filter(|(i, _)| helpers[*i]);
            for (i, p) in theirs {
                if stop.load(Ordering::Acquire) || Instant::now() >= deadline {
                    return;
                }
                let outcome = match p.copy(pid) {
                    Ok(()) => COPIED,
                    Err(e) => {
                        *error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                        FAILED
                    }
                };
                state[i].store(outcome, Ordering::Release);
                if outcome == FAILED {
                    return;
                }
            }
        });
        let result = (|| {
            for (i, p) in pieces.iter().enumerate() {
                if !helpers[i] {
                    if Instant::now() >= deadline {
                        return Err(timeout());
                    }
                    p.copy(pid).map_err(failed)?;
                } else {
                    wait_for(&state[i], &error, deadline)?;
                }
                p.deliver(i, on_piece)?;
            }
            Ok(())
        })();
        stop.store(true, Ordering::Release);
        result
    })
}

/// Which pieces the helper copies: each piece goes to whichever thread has the fewer
/// bytes so far, so that both copy about half whatever the sizes (a batch of frames
/// alternates a 64-byte header with its payload: every other piece would leave every
/// payload to one thread).
fn helper_pieces(pieces: &[Span]) -> Vec<bool> {
    let (mut caller, mut helper) = (0usize, 0usize);
    pieces
        .iter()
        .map(|p| {
            let theirs = helper < caller;
            *(if theirs { &mut helper } else { &mut caller }) += p.len;
            theirs
        })
        .collect()
}

/// Writes each part (bytes, and the address in process `pid` they go to) with
/// `process_vm_writev`: by two threads (every other part each) when there are 8 MiB or
/// more and two cores, else in turn. Stops at the first failure, or at the deadline.
pub(super) fn write_all(pid: u32, parts: &[(&[u8], u64)], deadline: Instant) -> Result<(), Failed> {
    let total: usize = parts.iter().map(|(b, _)| b.len()).sum();
    let stop = AtomicBool::new(false);
    let write = |from: usize, step: usize| -> Result<(), Failed> {
        for &(bytes, at) in parts.iter().skip(from).step_by(step) {
            if stop.load(Ordering::Acquire) {
                return Ok(()); // the other thread failed: it reports why
            }
            if Instant::now() >= deadline {
                stop.store(true, Ordering::Release);
                return Err(timeout());
            }
            crate::local::copy_to(pid, bytes, at).map_err(|e| {
                stop.store(true, Ordering::Release);
                failed(e)
            })?;
        }
        Ok(())
    };
    if !crate::helper::two_threads_for(total as u64, parts.len()) {
        return write(0, 1);
    }
    std::thread::scope(|s| {
        let helper = s.spawn(|| write(1, 2));
        let mine = write(0, 2);
        let theirs = helper
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        mine.and(theirs)
    })
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
    /// Copies this piece from process `pid` into its place.
    fn copy(&self, pid: u32) -> Result<(), CopyError> {
        // SAFETY: `at .. at + len` lies in the scratch slot or the landing buffer (`run`
        // checked every piece), which the caller holds exclusively (&mut) for this call;
        // pieces are disjoint (each has room of its own when two threads copy), so only
        // this copy writes these bytes, and no read is in flight on the fabric.
        unsafe { crate::local::copy_from(pid, self.at as *mut u8, self.remote, self.len) }
            .map(|_| ())
    }

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
    use super::{helper_pieces, Span};

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
    fn each_thread_copies_about_half_of_a_batch_of_frames() {
        // Header, payload, header, payload…: every other piece would give every payload to
        // one thread.
        let pieces = spans(&[64, 65536].repeat(256));
        let helpers = helper_pieces(&pieces);
        let theirs: usize = pieces
            .iter()
            .zip(&helpers)
            .filter(|(_, h)| **h)
            .map(|(p, _)| p.len)
            .sum();
        let all: usize = pieces.iter().map(|p| p.len).sum();
        assert!(
            theirs.abs_diff(all - theirs) <= 65536 + 64,
            "{theirs} of {all}"
        );
        let same = spans(&[1 << 20; 16]);
        assert_eq!(helper_pieces(&same).iter().filter(|h| **h).count(), 8);
    }
}
