//! The loop every one-sided read runs: issue pieces (a window at a time), reap
//! completions, hand completed pieces over in order.

use std::time::{Duration, Instant};

use super::{classify, Conn, Failed, ReadError, MAX_IN_FLIGHT};
use crate::fabric::plan;
use crate::fabric::queue::{Completion, Polled, Posted, ReadContext, ReadOp};

/// Empty polls of the completion queue before the reader yields its core between polls.
const SPIN_POLLS: u32 = 200;
/// Empty polls (spins plus yields) before the reader sleeps on the queue's wait object.
const YIELD_POLLS: u32 = 2_000;

/// One read: `len` bytes from `remote` (under `rkey`) into the scratch buffer at `local`,
/// or into the caller's landing buffer there when `landing`; or, when `write`, one write
/// of the scratch buffer's bytes at `local` to `remote`.
pub(super) struct Piece {
    pub(super) local: usize,
    pub(super) remote: u64,
    pub(super) rkey: u64,
    pub(super) len: usize,
    pub(super) landing: bool,
    pub(super) write: bool,
}

/// A caller's registered buffer that pieces marked `landing` are read into: its bytes
/// (held exclusively for the read) and its registration's descriptor on this endpoint;
/// and the pieces' groups, each checked as soon as it is copied when the read is by
/// cross-memory attach (other providers complete pieces in no useful order: the caller
/// checks after the read).
pub(super) struct Landing<'a> {
    pub(super) bytes: &'a mut [u8],
    pub(super) desc: *mut libc::c_void,
    pub(super) groups: Option<&'a super::cma::Groups<'a>>,
}

/// Appends the reads of `len` bytes from `remote` into scratch at `local` (into the landing
/// buffer there when `landing`), in pieces of at most [`CHUNK`](super::CHUNK) bytes.
pub(super) fn split(
    pieces: &mut Vec<Piece>,
    local: usize,
    remote: u64,
    rkey: u64,
    len: usize,
    landing: bool,
) {
    split_by(pieces, (local, remote, rkey), len, landing, super::CHUNK);
}

/// [`split`] in pieces of at most `chunk` bytes; `at` is (local, remote, rkey).
pub(super) fn split_by(
    pieces: &mut Vec<Piece>,
    (local, remote, rkey): (usize, u64, u64),
    len: usize,
    landing: bool,
    chunk: usize,
) {
    let mut off = 0;
    while off < len {
        let n = chunk.min(len - off);
        pieces.push(Piece {
            local: local + off,
            remote: remote + off as u64,
            rkey,
            len: n,
            landing,
            write: false,
        });
        off += n;
    }
}

/// Runs `pieces` with all of them in flight (each has scratch space of its own), within
/// `timeout`, which a timeout failure names.
pub(super) fn run_all(
    conn: &mut Conn,
    pieces: &[Piece],
    landing: Option<Landing<'_>>,
    timeout: Duration,
) -> Result<(), Failed> {
    let deadline = Instant::now() + timeout;
    let window = pieces.len();
    run(conn, pieces, landing, window, deadline, &mut |_, _| Ok(()))
        .map_err(|f| f.timed_out_after(timeout))
}

/// What receives each completed piece (its index and bytes), in order; an error stops the
/// read.
pub(super) type OnPiece<'a> = dyn FnMut(usize, &[u8]) -> Result<(), ReadError> + 'a;

/// Issues `pieces` (up to [`MAX_IN_FLIGHT`] at once, and piece `i` only once fewer than
/// `window` pieces before it are still undelivered: scratch space is reused every
/// `window` pieces) and hands each completed piece's bytes to `on_piece`, in order.
///
/// When a read fails with a revoked key, or `on_piece` refuses a piece, nothing more is
/// issued and the reads in flight are reaped (until the deadline), so the failure can be
/// reported with the endpoint quiet — which lets a provider whose endpoint survives a
/// revoked key keep it, and keeps the endpoint after a rejected frame.
pub(super) fn run(
    conn: &mut Conn,
    pieces: &[Piece],
    landing: Option<Landing<'_>>,
    window: usize,
    deadline: Instant,
    on_piece: &mut OnPiece<'_>,
) -> Result<(), Failed> {
    let groups = landing.as_ref().and_then(|l| l.groups);
    let targets = targets(conn, pieces, landing);
    // A read whose time was over before it began (a lease that ended while the call waited
    // for a thread, under load) issues nothing and leaves the endpoint as it was.
    if Instant::now() >= deadline {
        return Err(Failed {
            error: ReadError::Expired,
            quiet: true,
        });
    }
    if let Some(pid) = conn.cma_pid {
        return by_cma(pid, pieces, &targets, window, groups, deadline, on_piece);
    }
    // One context per piece; the provider may write into it while the read is in flight.
    let mut contexts: Vec<ReadContext> = vec![ReadContext::default(); pieces.len()];
    let ctx_base = contexts.as_mut_ptr();
    let mut done = vec![false; pieces.len()];
    let mut delivered = 0usize;
    let mut next = 0usize;
    let mut in_flight = 0usize;
    let mut entries = [Completion::default(); MAX_IN_FLIGHT];
    let mut idle_polls = 0u32;
    let efa = plan::is_efa(conn.node.provided().provider());
    let classify = |e| classify(efa, e);
    // The first failure; once set, nothing more is issued and the rest is reaped.
    let mut failed: Option<ReadError> = None;
    while (failed.is_none() && delivered < pieces.len()) || in_flight > 0 {
        if failed.is_none() {
            let limit = (pieces.len())
                .min(delivered + window)
                .min(next + MAX_IN_FLIGHT - in_flight);
            let posted = issue(conn, pieces, &targets, ctx_base, next..limit, efa)?;
            next += posted;
            in_flight += posted;
        }
        let mut polled = conn.node.poll_completions(&mut entries);
        if let Polled::Empty = polled {
            if Instant::now() >= deadline {
                return Err(failed.unwrap_or(ReadError::Timeout(Duration::ZERO)).into());
            }
            idle_polls += 1;
            polled = idle(conn, idle_polls, &mut entries);
            if let Polled::Empty = polled {
                continue;
            }
        }
        if let Polled::Completed(n) = polled {
            conn.contacted = true;
            in_flight -= n;
            idle_polls = 0;
            for e in &entries[..n] {
                let at = (e.op_context as usize).wrapping_sub(ctx_base as usize)
                    / std::mem::size_of::<ReadContext>();
                if let Some(d) = done.get_mut(at) {
                    *d = true;
                }
            }
            let ready = &done[delivered..next];
            let ready = ready.iter().take_while(|d| **d).count();
            if failed.is_none() {
                (delivered, failed) = deliver(pieces, &targets, delivered, ready, on_piece);
            }
            continue;
        }
        if let Polled::ErrorPending = polled {
            // The error entry is one of ours: it completes that read.
            conn.contacted = true;
            in_flight -= 1;
            let call = if pieces.first().is_some_and(|p| p.write) {
                "fi_write"
            } else {
                "fi_read"
            };
            let e = classify(conn.node.completion_error(call));
            match (&failed, &e) {
                (None, ReadError::KeyRevoked(_)) => failed = Some(e),
                (None, _) => return Err(e.into()),
                (Some(_), _) => {} // reaping after a failure: later errors say no more
            }
            continue;
        }
        let Polled::Failed(e) = polled else {
            unreachable!("every other answer continues the loop")
        };
        return Err(failed.unwrap_or(classify(e)).into());
    }
    match failed {
        None => Ok(()),
        Some(error) => Err(Failed { error, quiet: true }),
    }
}

/// [`run`] by cross-memory attach from process `pid`: every piece copied by this process
/// ([`super::cma`]); two threads copy when every piece has room of its own (`window`
/// covers them all), and each group is checked as soon as it is copied.
fn by_cma(
    pid: u32,
    pieces: &[Piece],
    targets: &Targets,
    window: usize,
    groups: Option<&super::cma::Groups<'_>>,
    deadline: Instant,
    on_piece: &mut OnPiece<'_>,
) -> Result<(), Failed> {
    let spans: Vec<super::cma::Span> = pieces
        .iter()
        .map(|p| super::cma::Span {
            at: targets[usize::from(p.landing)].0 as usize + p.local,
            remote: p.remote,
            len: p.len,
        })
        .collect();
    let apart = window >= pieces.len();
    super::cma::copy_all(pid, &spans, apart, groups, deadline, on_piece)
}

/// Where each kind of piece lands: `[scratch, landing]` as (base, length, descriptor).
type Targets = [(*mut u8, usize, *mut libc::c_void); 2];

/// Where each kind of piece lands: [scratch, landing] (base, length, descriptor); every
/// piece is checked to lie inside its buffer.
fn targets(conn: &mut Conn, pieces: &[Piece], landing: Option<Landing<'_>>) -> Targets {
    let (slot, mr) = conn.scratch.as_mut().expect("scratch registered");
    let scratch = slot.as_mut_slice();
    let targets = [
        (scratch.as_mut_ptr(), scratch.len(), mr.desc()),
        match landing {
            Some(l) => (l.bytes.as_mut_ptr(), l.bytes.len(), l.desc),
            None => (std::ptr::null_mut(), 0, std::ptr::null_mut()),
        },
    ];
    for p in pieces {
        let (_, room, _) = targets[usize::from(p.landing)];
        assert!(p.local + p.len <= room, "a piece outside its buffer");
    }
    targets
}

/// Posts the reads of `pieces[range]` in order until the queue is full (then completions
/// must be reaped, which also drives progress); answers how many were posted.
fn issue(
    conn: &mut Conn,
    pieces: &[Piece],
    targets: &Targets,
    contexts: *mut ReadContext,
    range: std::ops::Range<usize>,
    efa: bool,
) -> Result<usize, ReadError> {
    let mut posted = 0;
    for i in range {
        let p = &pieces[i];
        let (base, _, desc) = targets[usize::from(p.landing)];
        // SAFETY: `base + p.local .. + p.len` lies in the registered scratch slot or the
        // registered landing buffer (`run` checked every piece), which the caller holds
        // exclusively (&mut) and which outlive the read: on any early return the caller
        // drops the endpoint (cancelling reads) while it still holds both, unless every
        // issued read has completed. No other piece in flight or undelivered uses that
        // space (the window). The context (`contexts[i]`) stays at a fixed address (the
        // caller does not resize them) until completion or endpoint close.
        let op = ReadOp {
            // SAFETY: inside the buffer (checked by `run`).
            local: unsafe { base.add(p.local) },
            len: p.len,
            desc,
            peer: conn.peer,
            remote: p.remote,
            rkey: p.rkey,
        };
        let context = contexts.wrapping_add(i);
        let result = match p.write {
            // SAFETY: see above; `contexts` has one context per piece. A write only reads
            // its bytes, which nothing writes while it is in flight (the caller holds them).
            true => unsafe { conn.node.post_write(op, context) },
            // SAFETY: see above; `contexts` has one context per piece.
            false => unsafe { conn.node.post_read(op, context) },
        };
        if result.map_err(|e| classify(efa, e))? == Posted::QueueFull {
            break;
        }
        posted += 1;
    }
    Ok(posted)
}

/// Hands pieces `from .. from + count`, all completed, to `on_piece` in order; stops at the
/// first it refuses. Answers the next piece to deliver and the refusal, if any.
fn deliver(
    pieces: &[Piece],
    targets: &Targets,
    from: usize,
    count: usize,
    on_piece: &mut OnPiece<'_>,
) -> (usize, Option<ReadError>) {
    for (i, p) in pieces.iter().enumerate().skip(from).take(count) {
        let (base, _, _) = targets[usize::from(p.landing)];
        // SAFETY: piece `i` has completed: the provider writes no more into its bytes, and
        // no read is issued into them until it has been delivered.
        let bytes = unsafe { std::slice::from_raw_parts(base.add(p.local), p.len) };
        if let Err(e) = on_piece(i, bytes) {
            return (i + 1, Some(e));
        }
    }
    (from + count, None)
}

/// After `idle_polls` empty polls: spin, then yield the core to whoever serves the read
/// (on loopback, the gateway's progress thread) without sleeping through the completion,
/// then sleep on the queue's wait object (which also drives progress) instead of burning
/// a core. Providers do not always signal it for RMA completions, so it sleeps 1 ms at a
/// time; its other failures count as "nothing" ([`Polled::Empty`]).
fn idle(conn: &Conn, idle_polls: u32, entries: &mut [Completion]) -> Polled {
    if idle_polls < SPIN_POLLS {
        std::hint::spin_loop();
        return Polled::Empty;
    }
    if idle_polls < YIELD_POLLS || !conn.node.waitable() {
        std::thread::yield_now();
        return Polled::Empty;
    }
    match conn.node.wait_completions(entries, 1) {
        Polled::Failed(_) => Polled::Empty,
        polled => polled,
    }
}
