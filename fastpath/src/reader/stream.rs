//! Streaming one-sided reads: a frame of any size through a fixed ring of registered
//! scratch space, handed out in order as it arrives, the last piece only once the whole
//! frame has been validated.

use std::time::Instant;

use super::engine::{self, Piece};
use super::{ReadError, Reader, RemoteFrame, CHUNK, MAX_IN_FLIGHT};
use crate::fabric::plan;
use crate::frame::{FrameCheck, HEADER_LEN};

/// Scratch space of a streaming read: this many pieces of [`CHUNK`] bytes.
pub const STREAM_PIECES: usize = MAX_IN_FLIGHT;

impl Reader {
    /// Reads the frame `f` one-sided and hands its payload to `out` in order, a piece
    /// (at most [`CHUNK`] bytes) at a time, through a fixed scratch ring of
    /// [`STREAM_PIECES`] pieces — memory does not grow with the value. The last piece is
    /// handed over only after the whole frame has been validated: when this returns an
    /// error, what `out` received is not the value and must be discarded. No read is
    /// issued, and no completion awaited, after `deadline` (a descriptor's lease bounds
    /// it).
    pub fn read_to(
        &mut self,
        f: &RemoteFrame,
        deadline: Instant,
        out: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), ReadError> {
        let result = self.try_read_to(f, deadline, out);
        self.settle(result)
    }

    fn try_read_to(
        &mut self,
        f: &RemoteFrame,
        deadline: Instant,
        out: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), super::Failed> {
        let total = f.len()?;
        let efa = plan::is_efa(&self.config.provider);
        self.reconnect().map_err(|e| super::classify(efa, e))?;
        let conn = self.conn.as_mut().expect("connected above");
        let slots = total.div_ceil(CHUNK).clamp(1, STREAM_PIECES);
        conn.ensure_scratch(slots * CHUNK.min(total), efa)?;
        let pieces: Vec<Piece> = (0..total.div_ceil(CHUNK))
            .map(|i| Piece {
                local: (i % slots) * CHUNK.min(total),
                remote: f.addr + (i * CHUNK) as u64,
                rkey: f.rkey,
                len: CHUNK.min(total - i * CHUNK),
                landing: false,
                write: false,
            })
            .collect();
        let last = pieces.len() - 1;
        let mut check: Option<FrameCheck> = None;
        let mut on_piece = |i: usize, bytes: &[u8]| -> Result<(), ReadError> {
            let payload = if i == 0 {
                check = Some(FrameCheck::new(bytes, f.identity, f.checksum)?);
                &bytes[HEADER_LEN..]
            } else {
                bytes
            };
            let c = check.as_mut().expect("the header came first");
            c.payload(payload);
            if i == last {
                check.take().expect("set").finish()?;
            }
            if payload.is_empty() {
                return Ok(());
            }
            out(payload).map_err(ReadError::Output)
        };
        let allowed = deadline.saturating_duration_since(Instant::now());
        engine::run(conn, &pieces, None, slots, deadline, &mut on_piece)
            .map_err(|failed| failed.timed_out_after(allowed))
    }
}
