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

impl Reader {
    /// Writes every `writes` entry one-sided, all pieces in flight together, within
    /// `timeout`. On `shm` with cross-memory attach the bytes go straight from the caller's
    /// memory (`process_vm_writev`); elsewhere they are copied into the reader's
    /// registered scratch buffer first (where `FI_MR_LOCAL` providers need them) and sent
    /// with `fi_write`. A failure leaves the endpoint as a failed read does; nothing tells
    /// what landed, so the caller commits nothing after one.
    pub fn write_many(
        &mut self,
        writes: &[RemoteWrite<'_>],
        timeout: Duration,
    ) -> Result<(), ReadError> {
        let result = try_write_many(self, writes, timeout);
        self.settle(result)
    }
}

/// [`Reader::write_many`], its failure not yet settled.
fn try_write_many(
    reader: &mut Reader,
    writes: &[RemoteWrite<'_>],
    timeout: Duration,
) -> Result<(), Failed> {
    let deadline = Instant::now() + timeout;
    let efa = plan::is_efa(&reader.config.provider);
    reader.reconnect().map_err(|e| classify(efa, e))?;
    let conn = reader.conn.as_mut().expect("connected above");
    if let Some(pid) = conn.cma_pid {
        let parts: Vec<(&[u8], u64)> = writes
            .iter()
            .flat_map(|w| {
                let chunks = w.bytes.chunks(CHUNK).enumerate();
                chunks.map(move |(i, part)| (part, w.addr + (i * CHUNK) as u64))
            })
            .collect();
        return super::cma::write_all(pid, &parts, deadline)
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
    for (w, &at) in writes.iter().zip(&layout) {
        scratch[at..at + w.bytes.len()].copy_from_slice(w.bytes);
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
