//! The client side: one-sided reads of a gateway's frames, validated before they are
//! returned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::buffer::{ArenaBuffer, WriteSlot};
use crate::fabric::plan::{self, ReadFailure};
use crate::fabric::{FabricConfig, FabricError, MemoryRegion, Node};
use crate::frame::{self, FrameError, FrameIdentity, HEADER_LEN};
use crate::sys;

/// Reads are split into pieces of this size, kept in flight together.
pub const CHUNK: usize = 1 << 20;
/// Most reads in flight at once.
pub const MAX_IN_FLIGHT: usize = 16;
/// Empty polls of the completion queue before the reader yields its core between polls.
const SPIN_POLLS: u32 = 200;
/// Empty polls (spins plus yields) before the reader sleeps on the queue's wait object.
const YIELD_POLLS: u32 = 2_000;

/// Where a frame lives on the fabric and what it must contain: what a descriptor promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteFrame {
    /// Remote address of the frame header.
    pub addr: u64,
    /// Remote key of the region.
    pub rkey: u64,
    /// The key hash, version and payload length the header must carry.
    pub identity: FrameIdentity,
    /// The frame checksum the bytes must hash to.
    pub checksum: u64,
}

/// Why a one-sided read returned no bytes. In every case no bytes were returned, so a
/// caller can fall back (fresh descriptor, then HTTP) without ever seeing wrong data.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The remote key was revoked, or the range lies outside the region (`FI_ECANCELED`,
    /// `FI_EACCES`): the descriptor is stale.
    #[error("remote key revoked or range out of bounds: {0}")]
    KeyRevoked(FabricError),
    /// The connection to the gateway is gone (`FI_ENOTCONN`, …); the reader rebuilds its
    /// endpoint before its next read.
    #[error("fabric connection lost: {0}")]
    ConnectionLost(FabricError),
    /// The gateway does not know this reader's address (on EFA: the `efa-direct` fabric,
    /// which Rasa does not ask for): a configuration problem, not a network one.
    #[error("the gateway does not know this reader (check the fabric: rasa fabric check): {0}")]
    UnknownPeer(FabricError),
    /// The read did not complete in time; the endpoint is rebuilt before the next read.
    #[error("one-sided read timed out after {0:?}")]
    Timeout(Duration),
    /// The bytes read are not the frame the descriptor promised (torn, reused or corrupt).
    #[error("frame rejected: {0}")]
    Frame(#[from] FrameError),
    /// Any other libfabric failure.
    #[error(transparent)]
    Fabric(FabricError),
}

/// What a failed read means, by [`plan::classify`] (on `efa`, by the provider's own error
/// number; elsewhere by the generic errno).
fn classify(efa: bool, e: FabricError) -> ReadError {
    let prov_errno = match &e {
        FabricError::Completion { prov_errno, .. } => Some(*prov_errno),
        _ => None,
    };
    match plan::classify(efa, e.errno(), prov_errno) {
        ReadFailure::KeyRevoked => ReadError::KeyRevoked(e),
        ReadFailure::ConnectionLost => ReadError::ConnectionLost(e),
        ReadFailure::UnknownPeer => ReadError::UnknownPeer(e),
        ReadFailure::Other => ReadError::Fabric(e),
    }
}

/// A failed batch: the error, and whether the endpoint is quiet (no read of the batch still
/// in flight), so that it may be kept.
struct Failed {
    error: ReadError,
    quiet: bool,
}

impl From<FrameError> for Failed {
    fn from(e: FrameError) -> Self {
        ReadError::Frame(e).into()
    }
}

impl From<ReadError> for Failed {
    fn from(error: ReadError) -> Self {
        Failed {
            error,
            quiet: false,
        }
    }
}

/// A local endpoint connected to one gateway, with a registered scratch buffer.
struct Conn {
    // Fields drop in order: the node's endpoint is closed (cancelling reads in flight)
    // before the scratch region and its buffer, so no read can target freed memory.
    node: Node,
    peer: sys::fi_addr_t,
    scratch: Option<(WriteSlot, MemoryRegion)>,
}

/// One-sided reader of a gateway's frames.
///
/// Not shareable across threads (`&mut self` per read): an SDK keeps one per worker or
/// behind a lock. After a failure that may leave the connection unusable (key revoked on
/// `tcp;ofi_rxm`, connection lost, timeout) the endpoint is rebuilt before the next read.
pub struct Reader {
    config: FabricConfig,
    target: Vec<u8>,
    conn: Option<Conn>,
    rebuilds: u64,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("provider", &self.config.provider)
            .field("connected", &self.conn.is_some())
            .field("rebuilds", &self.rebuilds)
            .finish()
    }
}

impl Reader {
    /// Opens an endpoint for `config` aimed at the gateway endpoint address `target`.
    pub fn connect(config: FabricConfig, target: Vec<u8>) -> Result<Self, FabricError> {
        let mut r = Self {
            config,
            target,
            conn: None,
            rebuilds: 0,
        };
        r.conn = Some(r.open()?);
        Ok(r)
    }

    fn open(&self) -> Result<Conn, FabricError> {
        let node = Node::open(&self.config)?;
        let peer = node.insert_peer(&self.target)?;
        Ok(Conn {
            node,
            peer,
            scratch: None,
        })
    }

    /// The gateway endpoint address this reader reads from.
    pub fn target(&self) -> &[u8] {
        &self.target
    }

    /// Aims the reader at another gateway endpoint address (a restarted gateway has a new
    /// one): the current endpoint is dropped and the next [`Reader::reconnect`] or read opens
    /// one towards `target`.
    pub fn retarget(&mut self, target: Vec<u8>) {
        if target != self.target {
            self.target = target;
            self.conn = None;
        }
    }

    /// How many times the endpoint was rebuilt after a failure.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Whether an endpoint is open now (false after a failure, until the next read).
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Rebuilds the endpoint now if a failure dropped it (otherwise the next read does).
    pub fn reconnect(&mut self) -> Result<(), FabricError> {
        if self.conn.is_none() {
            self.conn = Some(self.open()?);
            self.rebuilds += 1;
        }
        Ok(())
    }

    /// Reads the frame `f` one-sided, validates it against what `f` promises, and returns
    /// its payload. Never blocks longer than `timeout` (plus endpoint set-up after a
    /// failure), never returns bytes that fail validation.
    pub fn read(&mut self, f: &RemoteFrame, timeout: Duration) -> Result<Vec<u8>, ReadError> {
        let mut out = self.read_many(std::slice::from_ref(f), timeout)?;
        out.pop()
            .expect("one result per frame")
            .map_err(ReadError::Frame)
    }

    /// Reads several frames one-sided with all their pieces in flight together, and
    /// validates each. A fabric failure fails the whole batch (and drops the endpoint); a
    /// frame that does not match its promise fails only its own entry.
    pub fn read_many(
        &mut self,
        frames: &[RemoteFrame],
        timeout: Duration,
    ) -> Result<Vec<Result<Vec<u8>, FrameError>>, ReadError> {
        match self.try_read_many(frames, timeout) {
            Ok(r) => Ok(r),
            // A revoked key on a provider whose endpoint survives it, with every read of the
            // batch completed: keep the endpoint (a rebuild costs a new domain, handshake
            // and scratch registration; on EFA this is a per-request error).
            Err(Failed {
                error: e @ ReadError::KeyRevoked(_),
                quiet: true,
            }) if plan::survives_revoked_key(&self.config.provider) => Err(e),
            Err(Failed { error, .. }) => {
                // The provider may have torn the connection down (tcp;ofi_rxm does after a
                // revoked key) or reads may still be in flight: drop the endpoint, which
                // cancels them, and build a new one next time.
                self.conn = None;
                Err(error)
            }
        }
    }

    fn try_read_many(
        &mut self,
        frames: &[RemoteFrame],
        timeout: Duration,
    ) -> Result<Vec<Result<Vec<u8>, FrameError>>, Failed> {
        // Lay the frames out one after another (64-byte aligned) in the scratch buffer.
        let mut layout = Vec::with_capacity(frames.len());
        let mut total = 0usize;
        for f in frames {
            let len = usize::try_from(f.identity.payload_len)
                .ok()
                .and_then(|n| n.checked_add(HEADER_LEN))
                .ok_or(FrameError::Truncated {
                    got: 0,
                    expected: usize::MAX,
                })?;
            layout.push((total, len));
            total = (total + len).next_multiple_of(64);
        }
        let efa = plan::is_efa(&self.config.provider);
        self.reconnect().map_err(|e| classify(efa, e))?;
        let conn = self.conn.as_mut().expect("connected above");
        let need_new = conn
            .scratch
            .as_ref()
            .is_none_or(|(slot, _)| slot.len() < total);
        if need_new {
            conn.scratch = None;
            let size = total.next_power_of_two().max(64 << 10);
            let buffer = ArenaBuffer::new(size).map_err(|e| {
                ReadError::Fabric(FabricError::Call {
                    call: "allocate scratch buffer",
                    errno: libc::ENOMEM,
                    text: e.to_string(),
                })
            })?;
            let mr = conn
                .node
                .register(Arc::clone(&buffer), crate::fabric::ACCESS_READ, 0)
                .map_err(|e| classify(efa, e))?;
            let slot = buffer
                .try_reserve(buffer.capacity(), 1)
                .expect("a fresh buffer has room for itself");
            conn.scratch = Some((slot, mr));
        }
        let mut pieces = Vec::new();
        for (f, &(at, len)) in frames.iter().zip(&layout) {
            let mut off = 0;
            while off < len {
                let n = CHUNK.min(len - off);
                pieces.push(Piece {
                    local: at + off,
                    remote: f.addr + off as u64,
                    rkey: f.rkey,
                    len: n,
                });
                off += n;
            }
        }
        let deadline = Instant::now() + timeout;
        read_pieces(conn, &pieces, deadline).map_err(|f| match f.error {
            ReadError::Timeout(_) => ReadError::Timeout(timeout).into(),
            _ => f,
        })?;
        let (slot, _) = conn.scratch.as_mut().expect("scratch set above");
        let bytes = slot.as_mut_slice();
        Ok(frames
            .iter()
            .zip(&layout)
            .map(|(f, &(at, len))| {
                frame::validate(&bytes[at..at + len], f.identity, f.checksum).map(<[u8]>::to_vec)
            })
            .collect())
    }
}

/// One read: `len` bytes from `remote` (under `rkey`) into the scratch buffer at `local`.
struct Piece {
    local: usize,
    remote: u64,
    rkey: u64,
    len: usize,
}

/// Issues `pieces` (up to [`MAX_IN_FLIGHT`] at once) and waits for all of them.
///
/// When one fails with a revoked key, no further piece is issued and the rest of those in
/// flight are reaped (until the deadline), so the failure can be reported with the endpoint
/// quiet — which lets a provider whose endpoint survives a revoked key keep it.
fn read_pieces(conn: &mut Conn, pieces: &[Piece], deadline: Instant) -> Result<(), Failed> {
    let (slot, mr) = conn.scratch.as_mut().expect("scratch registered");
    let base = slot.as_mut_slice().as_mut_ptr();
    let desc = mr.desc();
    // One context per piece; the provider may write into it while the read is in flight.
    let mut contexts: Vec<sys::fi_context2> = vec![sys::fi_context2::default(); pieces.len()];
    let ctx_base = contexts.as_mut_ptr();
    let mut next = 0usize;
    let mut in_flight = 0usize;
    let mut entries = [sys::fi_cq_entry::default(); MAX_IN_FLIGHT];
    let mut idle_polls = 0u32;
    let efa = plan::is_efa(conn.node.provider());
    let classify = |e| classify(efa, e);
    // The first failure; once set, nothing more is issued and the rest is reaped.
    let mut failed: Option<ReadError> = None;
    while (failed.is_none() && next < pieces.len()) || in_flight > 0 {
        while failed.is_none() && next < pieces.len() && in_flight < MAX_IN_FLIGHT {
            let p = &pieces[next];
            // SAFETY: `base + p.local .. + p.len` lies in the registered scratch slot, which
            // we hold exclusively (&mut) and which outlives the read: on any early return
            // the caller drops the endpoint (cancelling reads) before the buffer, unless
            // every issued read has completed. The context stays at a fixed address
            // (`contexts` is not resized) until completion or endpoint close.
            let ret = unsafe {
                sys::rasa_fi_read(
                    conn.node.ep_raw(),
                    base.add(p.local).cast(),
                    p.len,
                    desc,
                    conn.peer,
                    p.remote,
                    p.rkey,
                    ctx_base.add(next).cast(),
                )
            };
            if ret == -(sys::FI_EAGAIN as isize) {
                break; // queue full: reap completions (which also drives progress)
            }
            crate::fabric::check("fi_read", ret).map_err(classify)?;
            next += 1;
            in_flight += 1;
        }
        // SAFETY: entries has room for MAX_IN_FLIGHT context entries; the queue is open.
        let mut ret = unsafe {
            sys::rasa_fi_cq_read(
                conn.node.cq_raw(),
                entries.as_mut_ptr().cast(),
                entries.len(),
            )
        };
        if ret == 0 || ret == -(sys::FI_EAGAIN as isize) {
            if Instant::now() >= deadline {
                return Err(failed.unwrap_or(ReadError::Timeout(Duration::ZERO)).into());
            }
            idle_polls += 1;
            if idle_polls < SPIN_POLLS || !conn.node.waitable() {
                std::hint::spin_loop();
                continue;
            }
            if idle_polls < YIELD_POLLS {
                // Give the core to whoever serves the read (on loopback, the gateway's
                // progress thread) without sleeping through the completion.
                std::thread::yield_now();
                continue;
            }
            // Still nothing: sleep on the queue's wait object (which also drives progress)
            // instead of burning a core. Providers do not always signal it for RMA
            // completions, so sleep 1 ms at a time; its other failures count as "nothing".
            // SAFETY: as for fi_cq_read above; blocks at most 1 ms.
            ret = unsafe {
                sys::rasa_fi_cq_sread(
                    conn.node.cq_raw(),
                    entries.as_mut_ptr().cast(),
                    entries.len(),
                    std::ptr::null(),
                    1,
                )
            };
            if ret <= 0 && ret != -(sys::FI_EAVAIL as isize) {
                continue;
            }
        }
        if ret > 0 {
            in_flight -= ret as usize;
            idle_polls = 0;
            continue;
        }
        if ret == -(sys::FI_EAVAIL as isize) {
            // The error entry is one of ours: it completes that read.
            in_flight -= 1;
            let e = classify(conn.node.cq_error("fi_read"));
            match (&failed, &e) {
                (None, ReadError::KeyRevoked(_)) => failed = Some(e),
                (None, _) => return Err(e.into()),
                (Some(_), _) => {} // reaping after a revoked key: later errors say no more
            }
            continue;
        }
        let e = classify(crate::fabric::check("fi_cq_read", ret).expect_err("negative"));
        return Err(failed.unwrap_or(e).into());
    }
    match failed {
        None => Ok(()),
        Some(error) => Err(Failed { error, quiet: true }),
    }
}
#[cfg(test)]
mod tests;
