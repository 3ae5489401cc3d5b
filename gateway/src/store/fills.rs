//! Deletes a fill in flight must not undo.
//!
//! A read-through fill fetches the origin's object, then publishes it if the key's current
//! version did not change meanwhile. A delete in between can leave the key just as the
//! fill found it — absent — while the object the fill holds is the one the delete removed
//! at the origin: published, it would bring the deleted value back (found by the chaos
//! runs, issue 65). So each fill takes a [`FillTicket`] before it fetches; a delete while
//! any ticket is out leaves a tombstone (its sequence number) in its key's index shard;
//! and a fill's publish fails when its key has a tombstone newer than its ticket.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The fills in flight, by the delete sequence number each started at.
#[derive(Debug, Default)]
pub(super) struct Fills {
    /// Deletes so far.
    seq: AtomicU64,
    /// Tickets out: the sequence number each was taken at → how many.
    out: Mutex<BTreeMap<u64, usize>>,
}

impl Fills {
    fn out(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, usize>> {
        self.out.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A delete: its sequence number, when a fill in flight may need its tombstone, and
    /// the oldest ticket out (tombstones older than it are needed by no fill).
    pub(super) fn delete(&self) -> Option<(u64, u64)> {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let out = self.out();
        out.keys().next().map(|&oldest| (seq, oldest))
    }
}

/// Held by a fill from before it fetches until it publishes (or gives up).
#[derive(Debug)]
pub struct FillTicket {
    since: u64,
    fills: Arc<Fills>,
}

impl FillTicket {
    /// A ticket of `fills`: deletes from now on are remembered for it.
    pub(super) fn new(fills: &Arc<Fills>) -> FillTicket {
        let mut out = fills.out();
        // Read under the lock a delete checks the tickets under: a delete numbered after
        // this finds the ticket out.
        let since = fills.seq.load(Ordering::SeqCst);
        *out.entry(since).or_default() += 1;
        drop(out);
        FillTicket {
            since,
            fills: Arc::clone(fills),
        }
    }

    /// The delete sequence number it was taken at.
    pub(super) fn since(&self) -> u64 {
        self.since
    }
}

impl Drop for FillTicket {
    fn drop(&mut self) {
        let mut out = self.fills.out();
        if let Some(n) = out.get_mut(&self.since) {
            *n -= 1;
            if *n == 0 {
                out.remove(&self.since);
            }
        }
    }
}
