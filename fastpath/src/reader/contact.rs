//! Closing `shm` endpoints safely on libfabric 1.17.
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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Most `shm` endpoints kept open after an unanswered first contact.
pub const MAX_ABANDONED: usize = 8;

/// Endpoints whose first contact was never answered (never dropped: see the module).
static ABANDONED: Mutex<Vec<super::Conn>> = Mutex::new(Vec::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);

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
