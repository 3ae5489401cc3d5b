//! One-sided range reads: the header, the blocks covering the range and their table
//! entries, in flight together; each block checked against its entry before any byte of
//! the range is handed out.

use std::ops::Range;
use std::time::Duration;

use super::engine::{self, Piece};
use super::{Failed, ReadError, Reader, RemoteFrame};
use crate::fabric::plan;
use crate::frame::{self, FrameError, ENTRY_LEN, HEADER_LEN};

impl Reader {
    /// Reads bytes `range` of the payload of frame `f` one-sided into `out` (exactly
    /// `range` long): the header, the covering blocks and their table entries are read
    /// together, every block is checked against its entry, and only then are the bytes
    /// copied out. On any error `out` holds nothing of the value. An empty range reads
    /// nothing. Never blocks longer than `timeout` (plus endpoint set-up after a failure).
    pub fn read_range_into(
        &mut self,
        f: &RemoteFrame,
        range: Range<u64>,
        timeout: Duration,
        out: &mut [u8],
    ) -> Result<(), ReadError> {
        let len = f.identity.payload_len;
        if range.start > range.end || range.end > len {
            return Err(ReadError::OutOfRange {
                start: range.start,
                end: range.end,
                len,
            });
        }
        if out.len() as u64 != range.end - range.start {
            return Err(ReadError::Output(format!(
                "a buffer of {} bytes for a range of {}",
                out.len(),
                range.end - range.start
            )));
        }
        if range.is_empty() {
            return Ok(());
        }
        let r = self.try_read_range(f, range, timeout, out);
        self.settle(r)
    }

    /// [`Reader::read_range_into`] into a new vector.
    pub fn read_range(
        &mut self,
        f: &RemoteFrame,
        range: Range<u64>,
        timeout: Duration,
    ) -> Result<Vec<u8>, ReadError> {
        let mut out = vec![0u8; range.end.saturating_sub(range.start) as usize];
        self.read_range_into(f, range, timeout, &mut out)?;
        Ok(out)
    }

    fn try_read_range(
        &mut self,
        f: &RemoteFrame,
        range: Range<u64>,
        timeout: Duration,
        out: &mut [u8],
    ) -> Result<(), Failed> {
        let Some(table) = f.blocks else {
            return Err(FrameError::BlockSize {
                expected: 0,
                found: 0,
            }
            .into());
        };
        let bs = u64::from(table.block_size);
        let (first, n) = frame::covering_blocks(&range, table.block_size);
        let block_start = first * bs;
        let block_end = ((first + n) * bs).min(f.identity.payload_len);
        let blocks_len = (block_end - block_start) as usize;
        let entries_len = n as usize * ENTRY_LEN;
        // Scratch layout: header at 0, entries after it, blocks at the next 64 bytes.
        let entries_at = HEADER_LEN;
        let blocks_at = (entries_at + entries_len).next_multiple_of(64);
        let efa = plan::is_efa(&self.config.provider);
        self.reconnect().map_err(|e| super::classify(efa, e))?;
        let conn = self.conn.as_mut().expect("connected above");
        conn.ensure_scratch(blocks_at + blocks_len, efa)?;
        let mut pieces = vec![
            Piece {
                local: 0,
                remote: f.addr,
                rkey: f.rkey,
                len: HEADER_LEN,
                landing: false,
                write: false,
            },
            Piece {
                local: entries_at,
                remote: f.addr + table.at + first * ENTRY_LEN as u64,
                rkey: f.rkey,
                len: entries_len,
                landing: false,
                write: false,
            },
        ];
        let blocks_remote = f.addr + HEADER_LEN as u64 + block_start;
        engine::split(
            &mut pieces,
            blocks_at,
            blocks_remote,
            f.rkey,
            blocks_len,
            false,
        );
        engine::run_all(conn, &pieces, None, timeout)?;
        let (slot, _) = conn.scratch.as_mut().expect("scratch set above");
        let bytes = slot.as_mut_slice();
        let blocks = &bytes[blocks_at..blocks_at + blocks_len];
        frame::validate_blocks(
            &bytes[..HEADER_LEN],
            f.identity,
            table.block_size,
            first,
            &bytes[entries_at..entries_at + entries_len],
            blocks,
        )
        .map_err(|e| Failed {
            error: e.into(),
            quiet: true,
        })?;
        let skip = (range.start - block_start) as usize;
        out.copy_from_slice(&blocks[skip..skip + out.len()]);
        Ok(())
    }
}
