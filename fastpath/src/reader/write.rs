//! One-sided writes of values into a gateway's upload region ([`Reader::write_many`]):
//! the client half of a one-sided PUT. The gateway registered the region for remote
//! writes only, under a key it revokes before it seals what was written.

use std::time::{Duration, Instant};

use super::engine::{self, Piece};
use super::{classify, Failed, ReadError, Reader, CHUNK};
use crate::fabric::plan;

/// One value's bytes and where they go on the gateway endpoint the reader is connected
/// to: an address inside an upload region, and the region's (write-only) key.
#[derive(Clone, Copy, Debug)]
pub struct RemoteWrite<'a> {
    /// Remote address (virtual or offset, as the provider addresses) of the first byte.
    pub addr: u64,
    /// The upload region's remote key.
    pub rkey: u64,
    /// The bytes to write there.
    pub bytes: &'a [u8],
}

/// What sees each piece of a value just before it is written: the value's index and the
/// piece's bytes, a value's pieces in order (all from one thread). The one-sided PUT hashes
/// its values here, each piece while it is in the cache the write then reads it from,
/// instead of in a pass of its own over memory.
pub type Seen<'a> = dyn Fn(usize, &[u8]) + Sync + 'a;

impl Reader {
    /// Writes every `writes` entry one-sided, all pieces in flight together, within
    /// `timeout`. On `shm` with cross-memory attach the bytes go straight from the caller's
    /// memory (`process_vm_writev`); elsewhere they are copied into the reader's
    /// registered scratch buffer first (where `FI_MR_LOCAL` providers need them) and sent
    /// with `fi_write`. A failure leaves the endpoint as a failed read does; nothing tells
    /// what landed, so the caller commits nothing after one.
    ///
    /// `seen` is shown each piece of each value (its index in `writes`, a value's pieces in
    /// order) just before it is written: a hash of the values made there reads each piece
    /// while it is in the cache, not in a pass of its own over memory (`&|_, _| {}` when
    /// nothing needs to see them).
    pub fn write_many(
        &mut self,
        writes: &[RemoteWrite<'_>],
        seen: &Seen<'_>,
        timeout: Duration,
    ) -> Result<(), ReadError> {
        let result = try_write_many(self, writes, seen, timeout);
        self.settle(result)
    }
}

/// [`Reader::write_many`], its failure not yet settled.
fn try_write_many(
    reader: &mut Reader,
    writes: &[RemoteWrite<'_>],
    seen: &Seen<'_>,
    timeout: Duration,
) -> Result<(), Failed> {
    let deadline = Instant::now() + timeout;
    let efa = plan::is_efa(&reader.config.provider);
    reader.reconnect().map_err(|e| classify(efa, e))?;
    let conn = reader.conn.as_mut().expect("connected above");
    if let Some(pid) = conn.cma_pid {
        let values: Vec<(&[u8], u64)> = writes.iter().map(|w| (w.bytes, w.addr)).collect();
        return super::cma::write_all(pid, &values, seen, deadline)
            .map_err(|f| f.timed_out_after(timeout));
    }
    let mut layout = Vec::with_capacity(writes.len());
    let mut total = 0usize;
    for w in writes {
        layout.push(total);
        total = (total + w.bytes.len()).next_multiple_of(64);
    }
    conn.ensure_scratch(total.max(1), efa)?;
    let (slot, _) = conn.scratch.as_mut().expect("scratch set above");
    let scratch = slot.as_mut_slice();
    let mut pieces = Vec::new();
    for (i, (w, &at)) in writes.iter().zip(&layout).enumerate() {
        for (c, piece) in w.bytes.chunks(CHUNK).enumerate() {
            seen(i, piece);
            let to = at + c * CHUNK;
            scratch[to..to + piece.len()].copy_from_slice(piece);
        }
        let first = pieces.len();
        engine::split(&mut pieces, at, w.addr, w.rkey, w.bytes.len(), false);
        pieces[first..]
            .iter_mut()
            .for_each(|p: &mut Piece| p.write = true);
    }
    engine::run_all(
        conn,
        &pieces,
        None,
        deadline.saturating_duration_since(Instant::now()),
    )
    .map_err(|f| f.timed_out_after(timeout))
}

#[cfg(test)]
#[path = "write_tests.rs"]
mod tests;
