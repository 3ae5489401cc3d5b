//! The client side: one-sided reads of a gateway's frames, validated before they are
//! returned, and one-sided writes of values into its upload regions (`write.rs`).

use std::sync::Arc;
use std::time::Duration;

use crate::buffer::{ArenaBuffer, WriteSlot};
use crate::fabric::plan::{self, ReadFailure};
use crate::fabric::{FabricConfig, FabricError, MemoryRegion, Node};
use crate::frame::{self, FrameError, FrameIdentity, HEADER_LEN};

pub use contact::{
    abandoned as abandoned_shm_endpoints, abandoned_in_flight as abandoned_rxm_endpoints,
    MAX_ABANDONED, MAX_ABANDONED_RXM, MAX_ABANDONED_RXM_PER_GATEWAY,
};
pub use landing::{Direct, LandingBuffer};
pub use write::{RemoteWrite, Seen};

mod cma;
mod contact;
mod engine;
mod landing;
mod range;
mod stream;
mod write;

/// Reads are split into pieces of this size, kept in flight together.
pub const CHUNK: usize = 1 << 20;
/// Pieces of a batch read into a landing buffer, or of a write, by cross-memory attach:
/// smaller than [`CHUNK`] so that what one call copied is still in that core's cache when
/// its frames are hashed (16 × 16 MiB read in 34 ms against 40 with 1 MiB pieces here; a
/// fabric provider pays for each piece: 1 MiB there, where 256 KiB made tcp reads of
/// 16 MiB values a third slower).
pub const CMA_CHUNK: usize = 256 << 10;
/// The pieces a batch read into a landing buffer is cut into by a reader configured
/// so: [`CMA_CHUNK`] when it copies by cross-memory attach, else [`CHUNK`]. (A free
/// function: `Reader` has methods enough.)
fn piece_len(config: &FabricConfig) -> usize {
    if config.cma_pid.is_some() && plan::is_shm(&config.provider) {
        CMA_CHUNK
    } else {
        CHUNK
    }
}

/// Most reads in flight at once.
pub const MAX_IN_FLIGHT: usize = 16;

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
    /// The frame's block table, if it has one (ranges can then be read one-sided).
    pub blocks: Option<BlockTable>,
}

/// Where a frame's block table is and what blocks it covers: what a descriptor promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockTable {
    /// Bytes of one block (the last may be shorter); never 0.
    pub block_size: u32,
    /// Where the table starts, in bytes from the frame's start.
    pub at: u64,
}

impl RemoteFrame {
    /// Bytes of the whole frame (header and payload); an error when they could not be
    /// addressed here.
    fn len(&self) -> Result<usize, FrameError> {
        usize::try_from(self.identity.payload_len)
            .ok()
            .and_then(|n| n.checked_add(HEADER_LEN))
            .ok_or(FrameError::Truncated {
                got: 0,
                expected: usize::MAX,
            })
    }
}

/// Why a one-sided read returned no bytes (or, for a streaming read, did not complete). In
/// every case no unvalidated bytes were returned as final, so a caller can fall back
/// (fresh descriptor, then HTTP) without ever seeing wrong data.
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
    /// The read's time (its lease, or the call's) was over before anything was issued:
    /// nothing went to the gateway, and the endpoint is kept.
    #[error("the read's time was over before it began")]
    Expired,
    /// The bytes read are not the frame the descriptor promised (torn, reused or corrupt).
    #[error("frame rejected: {0}")]
    Frame(#[from] FrameError),
    /// Any other libfabric failure.
    #[error(transparent)]
    Fabric(FabricError),
    /// A range read asked for bytes the value does not have.
    #[error("range {start}..{end} is outside the {len}-byte value")]
    OutOfRange {
        /// First byte asked for.
        start: u64,
        /// One past the last byte asked for.
        end: u64,
        /// The value's length.
        len: u64,
    },
    /// A streaming read's output refused the bytes ([`Reader::read_to`]).
    #[error("the output refused the bytes: {0}")]
    Output(String),
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

impl Failed {
    /// A timeout said as the time the caller allowed (the engine only knows its deadline);
    /// any other failure as it is.
    fn timed_out_after(self, allowed: Duration) -> Self {
        match self.error {
            ReadError::Timeout(_) => Failed {
                error: ReadError::Timeout(allowed),
                quiet: self.quiet,
            },
            _ => self,
        }
    }
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
    peer: crate::fabric::queue::PeerAddr,
    scratch: Option<(WriteSlot, MemoryRegion)>,
    /// Whether a read of this endpoint has completed (so the gateway has answered its
    /// first contact): an `shm` endpoint without one is never closed ([`contact`]).
    contacted: bool,
    /// Reads copy from this process with `process_vm_readv` ([`FabricConfig::cma_pid`]).
    cma_pid: Option<u32>,
}

impl Conn {
    /// Makes sure the registered scratch buffer holds at least `len` bytes (a new one is
    /// a power of two, at least 64 KiB; no read is in flight when this is called).
    fn ensure_scratch(&mut self, len: usize, efa: bool) -> Result<(), ReadError> {
        if self
            .scratch
            .as_ref()
            .is_some_and(|(slot, _)| slot.len() >= len)
        {
            return Ok(());
        }
        self.scratch = None;
        let size = len.next_power_of_two().max(64 << 10);
        let buffer = ArenaBuffer::new(size).map_err(|e| {
            ReadError::Fabric(FabricError::Call {
                call: "allocate scratch buffer",
                errno: libc::ENOMEM,
                text: e.to_string(),
            })
        })?;
        let mr = self
            .node
            .register_local(Arc::clone(&buffer))
            .map_err(|e| classify(efa, e))?;
        let slot = buffer
            .try_reserve(buffer.capacity(), 1)
            .expect("a fresh buffer has room for itself");
        self.scratch = Some((slot, mr));
        Ok(())
    }
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
        if plan::is_shm(&self.config.provider) && !contact::may_open() {
            return Err(FabricError::Call {
                call: "open an shm endpoint",
                errno: libc::EAGAIN,
                text: format!(
                    "the gateway never answered the first contact of {} shm endpoints of this process; no more are opened",
                    contact::MAX_ABANDONED
                ),
            });
        }
        if plan::is_rxm(&self.config.provider) {
            if let Some(text) = contact::may_not_open_rxm(&self.target) {
                return Err(FabricError::Call {
                    call: "open a tcp;ofi_rxm endpoint",
                    errno: libc::EAGAIN,
                    text,
                });
            }
        }
        let node = Node::open(&self.config)?;
        let peer = node.insert_peer(&self.target)?;
        let cma_pid = self
            .config
            .cma_pid
            .filter(|_| plan::is_shm(&self.config.provider));
        Ok(Conn {
            node,
            peer,
            scratch: None,
            // Reads by cross-memory attach never post to the provider, so no first contact
            // is ever sent: the endpoint may be closed at any time.
            contacted: cma_pid.is_some(),
            cma_pid,
        })
    }

    /// Closes the endpoint, unless it is an `shm` one whose first contact was never
    /// answered: that one is kept open for good ([`contact`]).
    fn close(&mut self) {
        self.close_after(true);
    }

    /// [`Reader::close`] after a failure; `quiet`: every read issued has completed. A
    /// `tcp;ofi_rxm` endpoint with reads in flight is kept open, unused ([`contact`]).
    fn close_after(&mut self, quiet: bool) {
        if let Some(conn) = self.conn.take() {
            if !conn.contacted && plan::is_shm(&self.config.provider) {
                contact::abandon(conn);
            } else if !quiet && plan::is_rxm(&self.config.provider) {
                contact::abandon_in_flight(&self.target, conn);
            }
        }
    }

    /// The provider this reader reads over.
    pub fn provider(&self) -> &str {
        &self.config.provider
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
            self.close();
        }
    }

    /// What a failed read leaves of the endpoint: it is kept when every read issued has
    /// completed (`quiet`) — unless it timed out, or a revoked key killed the connection on
    /// this provider — and dropped otherwise, so reads still in flight are cancelled and
    /// the next read builds a new one. A read that expired before it began issued nothing:
    /// the endpoint is kept.
    fn settle<T>(&mut self, r: Result<T, Failed>) -> Result<T, ReadError> {
        match r {
            Ok(v) => Ok(v),
            Err(failed) if failed.quiet && !matches!(failed.error, ReadError::Timeout(_)) => {
                if matches!(failed.error, ReadError::KeyRevoked(_))
                    && !plan::survives_revoked_key(&self.config.provider)
                {
                    self.close();
                }
                Err(failed.error)
            }
            Err(failed) => {
                self.close_after(failed.quiet);
                Err(failed.error)
            }
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
    /// validates each. A fabric failure fails the whole batch (and drops the endpoint, as
    /// any read's failure does); a frame that does not match its promise fails only its own
    /// entry.
    pub fn read_many(
        &mut self,
        frames: &[RemoteFrame],
        timeout: Duration,
    ) -> Result<Vec<Result<Vec<u8>, FrameError>>, ReadError> {
        let result = try_read_many(self, frames, timeout);
        self.settle(result)
    }
}

/// [`Reader::read_many`], its failure not yet settled.
fn try_read_many(
    reader: &mut Reader,
    frames: &[RemoteFrame],
    timeout: Duration,
) -> Result<Vec<Result<Vec<u8>, FrameError>>, Failed> {
    // Lay the frames out one after another (64-byte aligned) in the scratch buffer.
    let mut layout = Vec::with_capacity(frames.len());
    let mut total = 0usize;
    for f in frames {
        let len = f.len()?;
        layout.push((total, len));
        total = (total + len).next_multiple_of(64);
    }
    let efa = plan::is_efa(&reader.config.provider);
    reader.reconnect().map_err(|e| classify(efa, e))?;
    let conn = reader.conn.as_mut().expect("connected above");
    conn.ensure_scratch(total, efa)?;
    let mut pieces = Vec::new();
    for (f, &(at, len)) in frames.iter().zip(&layout) {
        engine::split(&mut pieces, at, f.addr, f.rkey, len, false);
    }
    engine::run_all(conn, &pieces, None, timeout)?;
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

impl Drop for Reader {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod landing_tests;
#[cfg(test)]
mod tests;
