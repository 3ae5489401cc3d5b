//! Closing endpoints safely on libfabric 1.17: `shm` ones whose first contact was never
//! answered, and `tcp;ofi_rxm` ones with reads in flight.
//!
//! An `shm` reader's first read to a gateway cannot complete until the gateway's progress
//! thread has handled the reader's *first contact* (a connection request naming the
//! reader's shared-memory region). libfabric before 2.0 (Debian's 1.17 here) handles that
//! request by mapping the region by name without checking that it still exists: if the
//! reader closed its endpoint (which unlinks the region) before the gateway got to the
//! request — a read with a short timeout, a frozen or busy gateway — the **gateway** dies of
//! SIGSEGV (`smr_progress_connreq`; fixed upstream in 2.0, commit 607be0b80).
//!
//! So an `shm` endpoint that never got a completion is never closed: [`abandon`] keeps it
//! open for the rest of the process (1.17 unlinks no region at a normal exit, only on
//! `fi_close` and on SIGINT/SIGTERM). At most [`MAX_ABANDONED`] are kept; beyond that no
//! new `shm` endpoint is opened in this process ([`may_open`]), so a gateway that never
//! answers costs bounded memory.
//!
//! **`tcp;ofi_rxm` with reads in flight.** Closing an rxm endpoint whose reads did not all
//! complete (a read timed out against a frozen or cut-off gateway) makes the tcp provider
//! flush its queues as cancelled completions, and rxm 1.17's `rxm_handle_comp_error`
//! dereferences an entry's `op_context` that is NULL: the **reader** dies of SIGSEGV
//! inside `fi_close` (`segfault at 20 … libfabric.so.1.20.0[b83f9]`, found from a core
//! dump of a reader hammering a gateway that was frozen and cut off in turns). Such an
//! endpoint is never closed either: it is kept, never progressed again (so rxm never
//! handles its flushed entries), at most [`MAX_ABANDONED_RXM_PER_GATEWAY`] per gateway
//! endpoint and [`MAX_ABANDONED_RXM`] per process; beyond that no new `tcp;ofi_rxm`
//! endpoint is opened towards that gateway (or at all), and reads go over HTTP: a gateway
//! that keeps timing out costs bounded memory, never a crash, and other gateways keep
//! their fast path.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Most `shm` endpoints kept open after an unanswered first contact.
pub const MAX_ABANDONED: usize = 8;

/// Most `tcp;ofi_rxm` endpoints kept open after reads were left in flight, per process.
pub const MAX_ABANDONED_RXM: usize = 256;
/// Most of them towards one gateway endpoint (its fabric address).
pub const MAX_ABANDONED_RXM_PER_GATEWAY: usize = 16;

/// Endpoints whose first contact was never answered (never dropped: see the module).
static ABANDONED: Mutex<Vec<super::Conn>> = Mutex::new(Vec::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// `tcp;ofi_rxm` endpoints left with reads in flight, with the gateway address each
/// read from (never dropped: see the module).
static ABANDONED_RXM: Mutex<Vec<(Vec<u8>, super::Conn)>> = Mutex::new(Vec::new());
static COUNT_RXM: AtomicUsize = AtomicUsize::new(0);

/// Keeps `conn` (a `tcp;ofi_rxm` endpoint with reads in flight) open, never progressed,
/// for the rest of the process instead of closing it.
pub(super) fn abandon_in_flight(target: &[u8], conn: super::Conn) {
    let mut all = ABANDONED_RXM.lock().unwrap_or_else(PoisonError::into_inner);
    all.push((target.to_vec(), conn));
    COUNT_RXM.store(all.len(), Ordering::Release);
    tracing::warn!(
        kept = all.len(),
        "a tcp;ofi_rxm endpoint still had reads in flight; it stays open, unused (closing it crashes this process on libfabric 1.17)"
    );
}

/// Why this process may not open another `tcp;ofi_rxm` endpoint towards `target`
/// (too many were abandoned, towards it or in all), or `None`.
pub(super) fn may_not_open_rxm(target: &[u8]) -> Option<String> {
    if COUNT_RXM.load(Ordering::Acquire) == 0 {
        return None;
    }
    let all = ABANDONED_RXM.lock().unwrap_or_else(PoisonError::into_inner);
    let towards = all.iter().filter(|(t, _)| t == target).count();
    if towards >= MAX_ABANDONED_RXM_PER_GATEWAY {
        Some(format!(
            "{towards} tcp;ofi_rxm endpoints towards this gateway were left with reads in flight; no more are opened towards it"
        ))
    } else if all.len() >= MAX_ABANDONED_RXM {
        Some(format!(
            "{} tcp;ofi_rxm endpoints of this process were left with reads in flight; no more are opened",
            all.len()
        ))
    } else {
        None
    }
}

/// How many `tcp;ofi_rxm` endpoints this process abandoned with reads in flight.
pub fn abandoned_in_flight() -> usize {
    COUNT_RXM.load(Ordering::Acquire)
}

/// Keeps `conn` (an `shm` endpoint whose first contact was never answered) open for the
/// rest of the process instead of closing it.
pub(super) fn abandon(conn: super::Conn) {
    let mut all = ABANDONED.lock().unwrap_or_else(PoisonError::into_inner);
    all.push(conn);
    COUNT.store(all.len(), Ordering::Release);
    tracing::warn!(
        kept = all.len(),
        "the gateway never answered this shm endpoint's first contact; it stays open (closing it could crash a gateway on libfabric < 2.0)"
    );
}

/// Whether this process may open another `shm` endpoint (fewer than [`MAX_ABANDONED`]
/// were abandoned).
pub(super) fn may_open() -> bool {
    COUNT.load(Ordering::Acquire) < MAX_ABANDONED
}

/// How many `shm` endpoints this process abandoned.
pub fn abandoned() -> usize {
    COUNT.load(Ordering::Acquire)
}
