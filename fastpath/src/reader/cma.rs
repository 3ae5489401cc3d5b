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
//!
//! A batch of frames names its [`Groups`] (a frame's header and payload pieces): calls
//! are cut between groups, a group's calls are made by one thread in order, and that
//! thread hands over what each call held of each group right away, while its bytes are
//! still in that core's cache, instead of a second pass over the whole batch from memory
//! after the copy.

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

/// Runs of consecutive pieces that belong together (a frame's header and payload), and
/// what to do with each as it is copied: the cross-memory way copies a run that fits a
/// call in one call, and all the calls of a larger run on one thread, in order; after
/// each call, that thread hands `check` the part of each run the call held.
pub(super) struct Groups<'a> {
    /// The first piece of each group, ascending; a group ends where the next begins (the
    /// last at the last piece).
    pub(super) starts: &'a [usize],
    /// Called with each part of a group as soon as it is copied, the parts of a group in
    /// order and on one thread (a batch that fails stops handing them over).
    pub(super) check: &'a (dyn Fn(Part<'_>) + Sync),
}

/// What one call copied of a group.
pub(super) struct Part<'b> {
    /// Which group.
    pub(super) group: usize,
    /// The bytes of its pieces the call held, in order.
    pub(super) pieces: &'b [&'b [u8]],
    /// Whether these begin the group (its first piece is the first here).
    pub(super) first: bool,
    /// Whether these end it.
    pub(super) last: bool,
}

impl Groups<'_> {
    /// The pieces of group `g` (of `pieces` in all).
    fn pieces(&self, g: usize, pieces: usize) -> Range<usize> {
        self.starts[g]..self.starts.get(g + 1).copied().unwrap_or(pieces)
    }

    /// Hands over the part of each group that `call`, just copied, held.
    fn after(&self, pieces: &[Span], call: &Range<usize>) {
        // The group holding the call's first piece, if any, then those beginning in it.
        let first = self
            .starts
            .partition_point(|&s| s <= call.start)
            .saturating_sub(1);
        let mut bytes: Vec<&[u8]> = Vec::new(); // one for the call, not one a group
        for g in first..self.starts.len() {
            let run = self.pieces(g, pieces.len());
            if run.start >= call.end {
                break;
            }
            let held = run.start.max(call.start)..run.end.min(call.end);
            if held.is_empty() {
                continue;
            }
            bytes.clear();
            bytes.extend(pieces[held].iter().map(|p| {
                // SAFETY: as in `Span::deliver`: each piece of `call` was just copied by
                // this thread and has room of its own, which nothing writes any more.
                unsafe { p.bytes() }
            }));
            (self.check)(Part {
                group: g,
                pieces: &bytes,
                first: run.start >= call.start,
                last: run.end <= call.end,
            });
        }
    }
}

/// A piece's state, as the helper leaves it.
const PENDING: u8 = 0;
const COPIED: u8 = 1;
const FAILED: u8 = 2;

#[path = "cma_write.rs"]
mod write;
pub(super) use write::write_all;

/// Bytes one cross-memory call copies at most (a piece is never split): the deadline is
/// looked at between calls, two threads share a batch call by call, and what a call
/// copied is hashed while it is still in the core's cache.
const CALL_BYTES: usize = super::CMA_CHUNK;

/// Copies each piece from process `pid`, handing each to `on_piece` in order, consecutive
/// pieces copied by one system call ([`calls`]): by two threads when the batch is large,
/// every piece has room of its own (`apart`) and the machine has two cores; else one call
/// at a time.
pub(super) fn copy_all(
    pid: u32,
    pieces: &[Span],
    apart: bool,
    groups: Option<&Groups<'_>>,
    deadline: Instant,
    on_piece: &mut OnPiece<'_>,
) -> Result<(), Failed> {
    let total: usize = pieces.iter().map(|p| p.len).sum();
    let groups = groups.filter(|_| apart);
    let calls = calls(pieces, apart, groups.map(|g| g.starts));
    let run = Run {
        pid,
        pieces,
        calls: &calls,
        groups,
        deadline,
    };
    if !apart || !crate::helper::two_threads_for(total as u64, calls.len()) {
        return run.in_order(on_piece);
    }
    run.on_two(on_piece)
}

/// A batch being copied: its pieces, cut into calls.
struct Run<'a> {
    pid: u32,
    pieces: &'a [Span],
    calls: &'a [Range<usize>],
    groups: Option<&'a Groups<'a>>,
    deadline: Instant,
}

/// The batch cut into system calls: runs of consecutive pieces of at most
/// [`crate::local::MAX_IOV`] pieces and about [`CALL_BYTES`]; one piece a call when pieces
/// share scratch space (not `apart`: each is handed over before a later one overwrites
/// it). With `groups` (the first piece of each), a group that fits a call is never split
/// over two, and a larger one has calls of its own (so that one thread can copy it).
fn calls(pieces: &[Span], apart: bool, groups: Option<&[usize]>) -> Vec<Range<usize>> {
    if !apart {
        return (0..pieces.len()).map(|i| i..i + 1).collect();
    }
    // Without groups, each piece is one (a piece larger than a call is a call alone).
    let ends: Box<dyn Iterator<Item = usize>> = match groups {
        Some(starts) => Box::new(starts.iter().copied().chain([pieces.len()])),
        None => Box::new(1..=pieces.len()),
    };
    let mut calls = Calls::default();
    let mut at = 0;
    for end in ends {
        if end <= at {
            continue;
        }
        let group = at..end;
        let bytes: usize = pieces[group.clone()].iter().map(|p| p.len).sum();
        if group.len() <= crate::local::MAX_IOV && bytes <= CALL_BYTES {
            calls.add(group, bytes);
        } else {
            calls.cut();
            for i in group {
                calls.add(i..i + 1, pieces[i].len);
            }
            calls.cut();
        }
        at = end;
    }
    calls.cut();
    calls.done
}

/// Calls being made up ([`calls`]): those done, and the one still open (`start..end`).
#[derive(Default)]
struct Calls {
    done: Vec<Range<usize>>,
    start: usize,
    end: usize,
    bytes: usize,
}

impl Calls {
    /// Adds the pieces `unit` (`n` bytes) to the open call, or to a new one when they
    /// would make it too long.
    fn add(&mut self, unit: Range<usize>, n: usize) {
        let full = unit.end - self.start > crate::local::MAX_IOV || self.bytes + n > CALL_BYTES;
        if self.end > self.start && full {
            self.cut();
        }
        if self.end == self.start {
            self.start = unit.start;
        }
        (self.end, self.bytes) = (unit.end, self.bytes + n);
    }

    /// Closes the open call, if it has pieces.
    fn cut(&mut self) {
        if self.end > self.start {
            self.done.push(self.start..self.end);
        }
        (self.start, self.bytes) = (self.end, 0);
    }
}

impl Run<'_> {
    /// Copies call `c` with one system call, then hands over what it held of each group.
    fn copy(&self, c: usize) -> Result<(), (usize, CopyError)> {
        let call = &self.calls[c];
        copy_call(self.pid, &self.pieces[call.clone()])?;
        if let Some(groups) = self.groups {
            groups.after(self.pieces, call);
        }
        Ok(())
    }

    /// Hands the pieces of `call` (copied) over in order.
    fn deliver(&self, call: &Range<usize>, on_piece: &mut OnPiece<'_>) -> Result<(), Failed> {
        for i in call.clone() {
            self.pieces[i].deliver(i, on_piece)?;
        }
        Ok(())
    }

    /// Each call's pieces copied and handed over in turn.
    fn in_order(&self, on_piece: &mut OnPiece<'_>) -> Result<(), Failed> {
        for (c, call) in self.calls.iter().enumerate() {
            if Instant::now() >= self.deadline {
                return Err(timeout());
            }
            let copied = self.copy(c);
            let upto = match &copied {
                Ok(()) => call.end,
                Err((i, _)) => call.start + i,
            };
            self.deliver(&(call.start..upto), on_piece)?;
            copied.map_err(|(_, e)| failed(e))?;
        }
        Ok(())
    }

    /// About half the bytes copied ahead by a helper thread ([`helper_calls`]; the calls
    /// of a group on one thread), the rest by the caller, every piece handed over in
    /// order by the caller. A failure (the helper's included) stops both.
    fn on_two(&self, on_piece: &mut OnPiece<'_>) -> Result<(), Failed> {
        let (calls, deadline) = (self.calls, self.deadline);
        let helpers = helper_calls(self.pieces, calls, self.groups.map(|g| g.starts));
        let state: Vec<AtomicU8> = calls.iter().map(|_| AtomicU8::new(PENDING)).collect();
        let error: Mutex<Option<CopyError>> = Mutex::new(None);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for c in (0..calls.len()).filter(|c| helpers[*c]) {
                    if stop.load(Ordering::Acquire) || Instant::now() >= deadline {
                        return;
                    }
                    let outcome = match self.copy(c) {
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
                        self.copy(c).map_err(|(_, e)| failed(e))?;
                    }
                    self.deliver(call, on_piece)?;
                }
                Ok(())
            })();
            stop.store(true, Ordering::Release);
            result
        })
    }
}

/// Which calls the helper makes: each job goes to whichever thread has the fewer bytes
/// so far, so that both copy about half whatever the sizes. A job is a call, or the calls
/// a group spans (cut only where a call ends at a group's start: `groups`), so that a
/// group is copied by one thread, in order.
fn helper_calls(pieces: &[Span], calls: &[Range<usize>], groups: Option<&[usize]>) -> Vec<bool> {
    let clean =
        |end: usize| groups.is_none_or(|g| end == pieces.len() || g.binary_search(&end).is_ok());
    let mut jobs: Vec<Range<usize>> = Vec::new();
    let mut start = 0;
    for (c, call) in calls.iter().enumerate() {
        if clean(call.end) {
            jobs.push(start..c + 1);
            start = c + 1;
        }
    }
    if start < calls.len() {
        jobs.push(start..calls.len());
    }
    let bytes = |job: &Range<usize>| -> usize {
        calls[job.clone()]
            .iter()
            .flat_map(|call| &pieces[call.clone()])
            .map(|p| p.len)
            .sum()
    };
    let theirs = to_helper(jobs.iter().map(bytes));
    jobs.iter()
        .zip(theirs)
        .flat_map(|(job, h)| job.clone().map(move |_| h))
        .collect()
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
    /// Its bytes where they landed.
    ///
    /// # Safety
    ///
    /// The piece has been copied, by this thread or by one that published it with Release
    /// (read here with Acquire), and nothing writes its bytes while the slice lives.
    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: `at .. at + len` lies in a buffer the read holds (`run` checked every
        // piece); the caller promises it is copied and written no more.
        unsafe { std::slice::from_raw_parts(self.at as *const u8, self.len) }
    }

    /// Hands this piece (copied), number `i`, to `on_piece`.
    fn deliver(&self, i: usize, on_piece: &mut OnPiece<'_>) -> Result<(), Failed> {
        // SAFETY: the piece has been copied (by this thread, or by the helper, which wrote
        // it before publishing COPIED with Release, read here with Acquire) and nothing
        // writes its bytes any more: each piece has room of its own.
        let bytes = unsafe { self.bytes() };
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
#[path = "cma_tests.rs"]
mod tests;
