//! Zero-copy reads: the payload lands straight in memory the caller keeps and reuses (a
//! [`LandingBuffer`], registered once on each endpoint that reads into it), the header in
//! the reader's scratch; the frame is validated where it landed.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::cma::{Groups, Part};
use super::engine::{self, Landing, Piece};
use super::{classify, Conn, Failed, ReadError, Reader, RemoteFrame};
use crate::buffer::{ArenaBuffer, BufferError, WriteSlot};
use crate::fabric::{plan, MemoryRegion, Node};
use crate::frame::{FrameCheck, HEADER_LEN};

/// A reader's zero-copy reads ([`Reader::direct`]): the payload lands straight in a
/// [`LandingBuffer`] the caller keeps.
#[derive(Debug)]
pub struct Direct<'a>(&'a mut Reader);

impl Reader {
    /// Its zero-copy reads (`reader.direct().read(…)`).
    pub fn direct(&mut self) -> Direct<'_> {
        Direct(self)
    }
}

/// Registrations a landing buffer keeps (one per endpoint that read into it; an SDK client
/// has a few endpoints, and a rebuilt endpoint is a new one). Beyond this the oldest is
/// closed.
pub const MAX_REGISTRATIONS: usize = 8;

/// Memory that one-sided reads write into directly, for a caller that reads value after
/// value into the same place: page-aligned (huge-page mapped from 2 MiB), never moving,
/// registered with `FI_READ` on each endpoint the first time it reads into it — or the
/// caller's own memory ([`LandingBuffer::from_owned`]). It can be cut into parts that
/// reads fill at once ([`split_off`](Self::split_off)), which share its registrations, and
/// joined again ([`unsplit`](Self::unsplit)).
pub struct LandingBuffer {
    // Drop order: the registrations (which hold the buffer) before the slot.
    regions: Arc<Mutex<Vec<Arc<MemoryRegion>>>>,
    slot: WriteSlot,
}

impl std::fmt::Debug for LandingBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LandingBuffer")
            .field("capacity", &self.capacity())
            .field("registrations", &self.registrations())
            .finish()
    }
}

impl LandingBuffer {
    /// Registers this buffer on `reader`'s endpoint now, when it is connected, so that
    /// the first read into it does not pay for the registration; whether it is registered
    /// there.
    pub fn prepare_on(&self, reader: &Reader) -> Result<bool, ReadError> {
        let Some(conn) = &reader.conn else {
            return Ok(false);
        };
        let efa = plan::is_efa(&reader.config.provider);
        self.region_on(&conn.node)
            .map(|_| true)
            .map_err(|e| classify(efa, e))
    }

    /// A zeroed buffer of `capacity` bytes, registered nowhere yet, its pages faulted in
    /// now: the first read into it costs what the next ones do (a software provider does
    /// not touch memory when registering it; the reads would take the page faults).
    pub fn new(capacity: usize) -> Result<Self, BufferError> {
        let buffer = ArenaBuffer::new(capacity.max(1))?;
        let slot = buffer
            .try_reserve(capacity, 1)
            .expect("a fresh buffer has room for what it was sized for");
        let mut landing = Self::over(slot);
        for page in landing.as_mut_slice().chunks_mut(4096) {
            page[0] = 0;
        }
        Ok(landing)
    }

    /// Reads land in `owner`'s own bytes (`owner.as_mut()`, taken once): a `Vec<u8>`, or
    /// memory another runtime lends with a guard that pins it. It is kept (and dropped)
    /// with the buffer; empty memory is refused.
    pub fn from_owned<M: AsMut<[u8]> + Send + 'static>(owner: M) -> Result<Self, BufferError> {
        let buffer = ArenaBuffer::from_owned(owner)?;
        let slot = buffer
            .try_reserve(buffer.capacity(), 1)
            .expect("a fresh buffer has room for what it was sized for");
        Ok(Self::over(slot))
    }

    fn over(slot: WriteSlot) -> Self {
        Self {
            regions: Arc::new(Mutex::new(Vec::new())),
            slot,
        }
    }

    /// Bytes it holds.
    pub fn capacity(&self) -> usize {
        self.slot.len()
    }

    /// Its bytes (after a read, the value is at the front).
    pub fn as_slice(&self) -> &[u8] {
        self.slot.as_slice()
    }

    /// Its bytes, for writing.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.slot.as_mut_slice()
    }

    /// Endpoints it is registered with now.
    pub fn registrations(&self) -> usize {
        self.regions.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Cuts the buffer at `at`: `self` keeps the bytes before, the part returned those
    /// from `at` on; both share the registrations. Panics when `at > capacity`.
    pub fn split_off(&mut self, at: usize) -> LandingBuffer {
        LandingBuffer {
            regions: Arc::clone(&self.regions),
            slot: self.slot.split_off(at),
        }
    }

    /// Joins `tail`, the part [`split_off`](Self::split_off) made of this buffer, back
    /// onto its end; any other buffer is given back.
    pub fn unsplit(&mut self, tail: LandingBuffer) -> Result<(), LandingBuffer> {
        let LandingBuffer { regions, slot } = tail;
        self.slot
            .unsplit(slot)
            .map_err(|slot| LandingBuffer { regions, slot })
    }

    /// Its registration on `node`, made now if there is none (held by the read that uses
    /// it: another part may close the oldest registration meanwhile).
    fn region_on(&self, node: &Node) -> Result<Arc<MemoryRegion>, crate::fabric::FabricError> {
        let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = regions.iter().find(|r| node.owns(r)) {
            return Ok(Arc::clone(r));
        }
        if regions.len() >= MAX_REGISTRATIONS {
            regions.remove(0);
        }
        let buffer: Arc<ArenaBuffer> = Arc::clone(self.slot.buffer());
        let region = Arc::new(node.register_local(buffer)?);
        regions.push(Arc::clone(&region));
        Ok(region)
    }
}

impl Direct<'_> {
    /// Reads the frame `f` one-sided with its payload landing at the front of `dst` (no
    /// copy) and its header in the reader's scratch, all in flight together, then validates
    /// the frame where it landed; returns the payload's length. A value longer than `dst`
    /// is refused before anything is read. On an error `dst` holds nothing meaningful.
    /// Never blocks longer than `timeout` (plus endpoint set-up after a failure).
    pub fn read(
        &mut self,
        f: &RemoteFrame,
        dst: &mut LandingBuffer,
        timeout: Duration,
    ) -> Result<usize, ReadError> {
        let len = f.len()? - HEADER_LEN;
        if len > dst.capacity() {
            return Err(ReadError::Output(format!(
                "a value of {len} bytes does not fit a registered buffer of {}",
                dst.capacity()
            )));
        }
        let r = self.try_read(f, len, dst, timeout);
        self.0.settle(r)
    }

    fn try_read(
        &mut self,
        f: &RemoteFrame,
        len: usize,
        dst: &mut LandingBuffer,
        timeout: Duration,
    ) -> Result<usize, Failed> {
        let mut pieces = vec![Piece {
            local: 0,
            remote: f.addr,
            rkey: f.rkey,
            len: HEADER_LEN,
            landing: false,
            write: false,
        }];
        engine::split(
            &mut pieces,
            0,
            f.addr + HEADER_LEN as u64,
            f.rkey,
            len,
            true,
        );
        let conn = self.run_into(&pieces, dst, HEADER_LEN, None, timeout)?;
        let (slot, _) = conn.scratch.as_mut().expect("scratch set by run_into");
        check_landed(
            f,
            &slot.as_mut_slice()[..HEADER_LEN],
            &[&dst.as_slice()[..len]],
        )
        .map_err(|error| Failed { error, quiet: true })?;
        Ok(len)
    }

    /// Reads the frames `frames` one-sided, all in flight together, each payload landing
    /// in `dst` at its offset (no copy) and the headers in the reader's scratch, and
    /// validates each where it landed (by cross-memory attach as soon as the call that
    /// copied it returns, on that thread; else after): one result per frame, its
    /// payload's length, or why that frame was refused (the others stand). The outer
    /// error is a failure of the whole batch (a revoked key, a lost connection, the
    /// timeout), after which `dst` holds nothing meaningful. A payload longer than the
    /// room its offset leaves before the next one (or the buffer's end) is refused before
    /// anything is read.
    pub fn read_many(
        &mut self,
        frames: &[(RemoteFrame, std::ops::Range<usize>)],
        dst: &mut LandingBuffer,
        timeout: Duration,
    ) -> Result<Vec<Result<usize, ReadError>>, ReadError> {
        if frames.is_empty() {
            return Ok(Vec::new());
        }
        let mut pieces = Vec::with_capacity(2 * frames.len());
        let mut starts = Vec::with_capacity(frames.len());
        for (i, (f, room)) in frames.iter().enumerate() {
            starts.push(pieces.len());
            let len = f.len()? - HEADER_LEN;
            if len > room.len() || room.end > dst.capacity() {
                return Err(ReadError::Output(format!(
                    "a value of {len} bytes does not fit bytes {room:?} of a registered \
                     buffer of {}",
                    dst.capacity()
                )));
            }
            pieces.push(Piece {
                local: i * HEADER_LEN,
                remote: f.addr,
                rkey: f.rkey,
                len: HEADER_LEN,
                landing: false,
                write: false,
            });
            let payload = f.addr + HEADER_LEN as u64;
            let at = (room.start, payload, f.rkey);
            engine::split_by(&mut pieces, at, len, true, super::piece_len(&self.0.config));
        }
        let headers = frames.len().max(1) * HEADER_LEN;
        // Frames checked as they are copied (cross-memory attach); the rest after.
        let copied = AsCopied::new(frames);
        let check = |part: Part<'_>| copied.part(part);
        let groups = Groups {
            starts: &starts,
            check: &check,
        };
        let r = self
            .run_into(&pieces, dst, headers, Some(&groups), timeout)
            .map(|_| ());
        self.0.settle(r)?;
        let conn = self.0.conn.as_mut().expect("connected by the read");
        let scratch = conn
            .scratch
            .as_mut()
            .expect("scratch set by run_into")
            .0
            .as_mut_slice();
        Ok(check_rest(frames, scratch, dst.as_slice(), copied.checked))
    }

    /// Reads `len` bytes at `addr` under `rkey` into the front of `dst` exactly as they are,
    /// with no frame to check them against: what any holder of a remote key can do. For
    /// audits of what a key exposes (the trust-model tests); clients read frames.
    pub fn read_raw(
        &mut self,
        addr: u64,
        rkey: u64,
        len: usize,
        dst: &mut LandingBuffer,
        timeout: Duration,
    ) -> Result<(), ReadError> {
        if len > dst.capacity() {
            return Err(ReadError::Output(format!(
                "{len} bytes do not fit a registered buffer of {}",
                dst.capacity()
            )));
        }
        let r = self.try_read_raw(addr, rkey, len, dst, timeout);
        self.0.settle(r)
    }

    fn try_read_raw(
        &mut self,
        addr: u64,
        rkey: u64,
        len: usize,
        dst: &mut LandingBuffer,
        timeout: Duration,
    ) -> Result<(), Failed> {
        let mut pieces = Vec::new();
        engine::split(&mut pieces, 0, addr, rkey, len, true);
        self.run_into(&pieces, dst, HEADER_LEN, None, timeout)
            .map(|_| ())
    }

    /// Connects when needed and runs `pieces` within `timeout`, those marked `landing`
    /// into `dst` (registered on this endpoint first), the others into the scratch; the
    /// endpoint, whose scratch the caller may read.
    fn run_into(
        &mut self,
        pieces: &[Piece],
        dst: &mut LandingBuffer,
        scratch: usize,
        groups: Option<&Groups<'_>>,
        timeout: Duration,
    ) -> Result<&mut Conn, Failed> {
        let efa = plan::is_efa(&self.0.config.provider);
        self.0.reconnect().map_err(|e| classify(efa, e))?;
        let conn = self.0.conn.as_mut().expect("connected above");
        conn.ensure_scratch(scratch, efa)?;
        let region = dst.region_on(&conn.node).map_err(|e| classify(efa, e))?;
        let desc = region.desc();
        let bytes = dst.as_mut_slice();
        let landing = Landing {
            bytes,
            desc,
            groups,
        };
        engine::run_all(conn, pieces, Some(landing), timeout)?;
        drop(region); // held until the reads into it completed
        Ok(conn)
    }
}

/// A frame's check: its payload's length, or why it was refused.
type Checked = Result<usize, ReadError>;

/// Frames checked as the parts of each are copied (by cross-memory attach: [`Groups`]):
/// each frame's hash fed in order, on the thread that copied them.
struct AsCopied<'f> {
    frames: &'f [(RemoteFrame, std::ops::Range<usize>)],
    /// The check of each frame begun and not finished.
    hashing: Vec<Mutex<Option<FrameCheck>>>,
    /// The result of each frame checked whole.
    checked: Vec<OnceLock<Checked>>,
}

impl<'f> AsCopied<'f> {
    fn new(frames: &'f [(RemoteFrame, std::ops::Range<usize>)]) -> Self {
        Self {
            hashing: frames.iter().map(|_| Mutex::new(None)).collect(),
            checked: frames.iter().map(|_| OnceLock::new()).collect(),
            frames,
        }
    }

    /// Feeds a part of frame `part.group` just copied: its header first (checked against
    /// what the frame promises), then its payload, and at its end the frame's result.
    fn part(&self, part: Part<'_>) {
        let (g, f) = (part.group, &self.frames[part.group].0);
        let mut hashing = self.hashing[g].lock().unwrap_or_else(|e| e.into_inner());
        let mut pieces = part.pieces.iter();
        if part.first {
            let header = pieces.next().expect("a frame's first piece is its header");
            match FrameCheck::new(header, f.identity, f.checksum) {
                Ok(check) => *hashing = Some(check),
                Err(e) => {
                    let _ = self.checked[g].set(Err(e.into()));
                    return;
                }
            }
        }
        let Some(check) = hashing.as_mut() else {
            return; // its header was refused
        };
        pieces.for_each(|p| check.payload(p));
        if part.last {
            let len = f.identity.payload_len as usize;
            let done = hashing.take().expect("begun").finish();
            let _ = self.checked[g].set(done.map(|()| len).map_err(ReadError::from));
        }
    }
}

/// The result of each of `frames`: as `checked` holds it (checked while the batch was
/// copied), else checked now where it landed (its header in `scratch`, in order; its
/// payload in its room of `landed`). A large rest is checked by two threads, each about
/// half the bytes (hashing is a pass over every byte).
fn check_rest(
    frames: &[(RemoteFrame, std::ops::Range<usize>)],
    scratch: &[u8],
    landed: &[u8],
    checked: Vec<OnceLock<Checked>>,
) -> Vec<Checked> {
    let rest: Vec<usize> = (0..frames.len())
        .filter(|&i| checked[i].get().is_none())
        .collect();
    let check = |i: usize| {
        let (f, room) = &frames[i];
        let len = f.identity.payload_len as usize; // within room: read_many checked
        let header = &scratch[i * HEADER_LEN..(i + 1) * HEADER_LEN];
        check_landed(f, header, &[&landed[room.start..room.start + len]]).map(|()| len)
    };
    let bytes = |&i: &usize| frames[i].0.identity.payload_len;
    let mut late = crate::helper::each_on_two(rest, bytes, check).into_iter();
    checked
        .into_iter()
        .map(|c| {
            c.into_inner()
                .unwrap_or_else(|| late.next().expect("a result for each frame not checked"))
        })
        .collect()
}

/// Checks a frame read one-sided: its `header` against what `f` promises, and the
/// payload that landed (its `parts`, in order) against the header's checksum.
fn check_landed(f: &RemoteFrame, header: &[u8], parts: &[&[u8]]) -> Result<(), ReadError> {
    FrameCheck::new(header, f.identity, f.checksum)
        .and_then(|mut check| {
            parts.iter().for_each(|part| check.payload(part));
            check.finish()
        })
        .map_err(ReadError::from)
}
