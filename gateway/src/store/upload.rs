//! Uploads: reserve a frame ([`Writes::begin`]), stream the body into it
//! ([`Upload::write`]), seal the header ([`Writes::seal`]) and publish ([`Writes::publish`]).
//! Nothing is visible before the publish; a dropped upload publishes nothing.
//!
//! Nothing unpublished is readable one-sided either: a value for a shared arena is
//! written into staging memory and copied into the arena at the seal (a memcpy, a few
//! percent of the SHA-256 already computed over the same bytes); a value with an arena of
//! its own is written in place, and that arena is registered — given a remote key — only
//! at the seal. An upload that fails leaves no byte in advertised memory.

use crate::catalog;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rasa_fastpath::buffer::WriteSlot;
use rasa_fastpath::frame::{self, FrameHasher, FrameIdentity, HEADER_LEN};
use sha2::{Digest, Sha256};
use tokio::sync::OwnedSemaphorePermit;

use super::arena::{Arena, Arenas, ReserveError};
use super::{OriginMeta, Store, StoreError, StoredVersion};

impl Store {
    /// The write path: uploads begun, written, sealed and published.
    pub fn writes(&self) -> super::Writes<'_> {
        super::Writes::new(self)
    }

    /// Runs `attempt` until it gives a result: when memory is full (it answers `None`),
    /// makes room (compacting a sparse arena or evicting the least recently used one; see
    /// [`super::Memory::make_room`]) and waits for reclamation, at most `within` (a write
    /// waits [`room_wait`]; zero: make room and reclaim, never wait); then
    /// [`StoreError::Busy`].
    pub(super) async fn with_room<T>(
        &self,
        mut attempt: impl FnMut() -> Result<Option<T>, StoreError>,
        within: Duration,
    ) -> Result<T, StoreError> {
        let started = std::time::Instant::now();
        let give_up = started + within;
        let mut waited = false;
        loop {
            let wake = self.room.notified();
            if let Some(got) = attempt()? {
                if waited {
                    room_waited("room", started);
                }
                return Ok(got);
            }
            self.memory().make_room();
            if super::memory::off_worker(|| self.memory().reclaim()) > 0 {
                continue;
            }
            let now = std::time::Instant::now();
            if now >= give_up {
                if !within.is_zero() {
                    room_waited("busy", started);
                }
                return Err(StoreError::Busy {
                    retry_after: self.config.lease + self.config.grace,
                });
            }
            waited = true;
            // Woken by the reclaimer; the timeout only bounds the wait.
            let _ =
                tokio::time::timeout((give_up - now).min(Duration::from_millis(100)), wake).await;
        }
    }
}

/// Counts a write that waited for room since `started` (`outcome`: `room` or `busy`), and
/// says so in the log: a writer outrunning the leases it asked for sees why it slowed.
fn room_waited(outcome: &'static str, started: std::time::Instant) {
    let waited = started.elapsed();
    catalog::ROOM_WAITS
        .counter_by(&[("outcome", outcome)])
        .increment(1);
    catalog::ROOM_WAIT_SECONDS
        .histogram()
        .record(waited.as_secs_f64());
    let what = "a write waited for memory held by leases or uploads (rasa_room_waits_total)";
    match outcome {
        "busy" => tracing::info!(?waited, outcome, "{what}"),
        _ => tracing::debug!(?waited, outcome, "{what}"),
    }
}

/// A slot for a frame of `frame_len` bytes from memory the budget allows (allocating
/// and registering a new arena off the async worker when one is needed); `None` when
/// memory is full. See [`super::arena::Arenas::reserve_upload`] for `growing`.
pub(super) fn reserve_frame(
    arenas: &Arenas,
    frame_len: usize,
    growing: bool,
) -> Result<Option<(Arc<Arena>, WriteSlot)>, StoreError> {
    allocating(|may_allocate| arenas.reserve_upload(frame_len, may_allocate, growing))
}

/// What `reserve` gives: tried without allocating, then — when a new arena must be
/// allocated and registered — again off the async worker; `None` when memory is full.
pub(super) fn allocating<T>(
    reserve: impl Fn(bool) -> Result<T, ReserveError>,
) -> Result<Option<T>, StoreError> {
    let reserved = match reserve(false) {
        Err(ReserveError::NeedAllocation) => super::memory::off_worker(|| reserve(true)),
        other => other,
    };
    match reserved {
        Ok(got) => Ok(Some(got)),
        Err(ReserveError::Never(e)) => Err(e),
        Err(ReserveError::NeedRoom | ReserveError::NeedAllocation) => Ok(None),
    }
}

/// How long a write waits for memory to be reclaimed when the budget is full: a lease plus
/// twice the grace period.
pub(super) fn room_wait(config: &super::StoreConfig) -> Duration {
    config.lease + config.grace * 2
}

/// Until when a wait for room in `store`'s memory can still be rewarded: the last lease
/// handed out ends and its grace passes, twice (what reclamation waits for), but at most
/// a lease plus twice the grace from now, as any write waits.
pub fn room_deadline(store: &Store) -> Instant {
    let leased = store
        .memory()
        .leases_end()
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    Instant::now() + (leased + store.config.grace * 2).min(room_wait(&store.config))
}

/// A value being written. Dropping it unfinished publishes nothing.
#[derive(Debug)]
pub struct Upload {
    pub(super) key: String,
    pub(super) content_type: String,
    /// Key hash, version id and declared length.
    pub(super) id: FrameIdentity,
    /// Block size of the frame's table (0: none).
    pub(super) block_size: u32,
    /// Blocks whose table entries are written.
    pub(super) blocks_done: u64,
    pub(super) written: u64,
    pub(super) sha256: Sha256,
    pub(super) frame: FrameHasher,
    pub(super) arena: Arc<Arena>,
    pub(super) slot: Option<WriteSlot>,
    /// The frame being written, outside advertised memory (values for a shared arena),
    /// and the staging memory it holds.
    pub(super) staged: Option<(Vec<u8>, OwnedSemaphorePermit)>,
    /// When its writes stop waiting for room.
    pub(super) until: Instant,
    pub(super) origin: OriginMeta,
    pub(super) s3_etag: Option<Box<str>>,
    pub(super) headers: Option<Box<super::ObjectHeaders>>,
}

/// A finished, immutable version that is not visible yet (see [`Writes::seal`]). Dropping it
/// publishes nothing; its space is reclaimed with its arena.
#[derive(Debug)]
pub struct Sealed {
    pub(super) version: Arc<StoredVersion>,
    pub(super) _upload: Keep,
}

/// What keeps a sealed version's arena pending until it is published or dropped: its
/// upload, or (one-sided) its slot's share of the upload region.
#[derive(Debug)]
pub(super) enum Keep {
    /// A value that arrived through the gateway.
    Upload(#[allow(dead_code)] Box<Upload>),
    /// A value written one-sided.
    Pending(#[allow(dead_code)] PendingSlot),
}

/// A slot of a one-sided upload region, holding its arena pending (the arena is not
/// reclaimed while an upload may still seal into it) until dropped.
#[derive(Debug)]
pub(super) struct PendingSlot {
    arena: Arc<Arena>,
    slot: Option<WriteSlot>,
}

impl PendingSlot {
    /// `slot` of `arena`, which counted it pending when it was reserved.
    pub(super) fn new(arena: Arc<Arena>, slot: WriteSlot) -> Self {
        Self {
            arena,
            slot: Some(slot),
        }
    }

    /// The slot's bytes, immutable from now on, and what keeps the arena pending until
    /// the version is published.
    pub(super) fn freeze(mut self) -> (rasa_fastpath::buffer::Frozen, Self) {
        let frozen = self.slot.take().expect("frozen once").freeze();
        (frozen, self)
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.arena.finish_pending();
    }
}

impl Sealed {
    /// The version as it will be published.
    pub fn version(&self) -> &Arc<StoredVersion> {
        &self.version
    }
}

impl Upload {
    /// Marks the value as a copy of an origin object with entity tag `etag`, confirmed now.
    pub fn from_origin(&mut self, etag: Option<String>) {
        self.origin = OriginMeta::confirmed(etag);
    }

    /// Sets the entity tag S3 clients will see (see [`StoredVersion::s3_etag`]).
    pub fn set_s3_etag(&mut self, etag: Option<String>) {
        self.s3_etag = etag.map(String::into_boxed_str);
    }

    /// Sets the user metadata and stored headers the version will carry.
    pub fn set_headers(&mut self, headers: super::ObjectHeaders) {
        self.headers = (!headers.is_empty()).then(|| Box::new(headers));
    }

    /// Appends the next body chunk: copies it into its frame (staged, or in its own
    /// unregistered arena), feeds both digests and
    /// writes the table entries of the blocks it completes (hashed while in cache).
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), StoreError> {
        let declared = self.id.payload_len;
        let end = self.written + chunk.len() as u64;
        if end > declared {
            return Err(StoreError::LengthMismatch { declared, got: end });
        }
        if self.charge_needed(chunk.len() as u64).is_some() {
            // A growing upload written past its charge without [`Writes::write`].
            return Err(StoreError::InsufficientStorage {
                needed: HEADER_LEN as u64 + end,
                allocated: self.arena.charged(),
                budget: self.arena.buffer.capacity() as u64,
            });
        }
        let frame = match (&mut self.staged, &mut self.slot) {
            (Some((staged, _)), _) => &mut staged[..],
            (None, Some(slot)) => slot.as_mut_slice(),
            (None, None) => unreachable!("writing a sealed upload"),
        };
        let (_, rest) = frame.split_at_mut(HEADER_LEN);
        let (payload, after) = rest.split_at_mut(declared as usize);
        payload[self.written as usize..end as usize].copy_from_slice(chunk);
        self.sha256.update(chunk);
        self.frame.update(chunk);
        self.written = end;
        catalog::UPLOAD_BYTES_IN_PROGRESS
            .gauge()
            .increment(chunk.len() as f64);
        self.blocks_done = frame::fill_table(
            &self.id,
            self.block_size,
            &payload[..end as usize],
            self.blocks_done,
            after,
        );
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Bytes of the memory budget its arena is charged now.
    pub fn charged(&self) -> u64 {
        self.arena.charged()
    }

    /// The charge a growing upload's arena (one charged less than its capacity) needs
    /// before `more` bytes are written (one step ahead of them, the whole arena with the
    /// last byte), if it is not there yet.
    pub(super) fn charge_needed(&self, more: u64) -> Option<u64> {
        let capacity = self.arena.buffer.capacity() as u64;
        if self.arena.charged() >= capacity {
            return None;
        }
        let end = self.written + more;
        let upto = if end >= self.id.payload_len {
            capacity
        } else {
            (HEADER_LEN as u64 + end + super::arena::CHARGE_STEP).min(capacity)
        };
        (upto > self.arena.charged()).then_some(upto)
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        // Committed or not, this upload no longer holds its arena open.
        self.arena.finish_pending();
        catalog::UPLOAD_BYTES_IN_PROGRESS
            .gauge()
            .decrement(self.written as f64);
        if let Some(slot) = &self.slot {
            catalog::UPLOADS_ABANDONED.counter().increment(1);
            tracing::debug!(
                key = %self.key,
                written = self.written,
                declared = self.id.payload_len,
                wasted = slot.len(),
                "upload abandoned; nothing published"
            );
        }
    }
}

/// Memory that uploads for shared arenas are written into before they are sealed (outside
/// every remote key), bounded by [`super::StoreConfig::staging_memory`] in KiB permits.
#[derive(Clone, Debug)]
pub(super) struct Staging {
    permits: Arc<tokio::sync::Semaphore>,
    kib: u64,
}

impl Staging {
    /// `bytes` of staging memory (at least `floor`: one arena's worth must fit).
    pub(super) fn new(bytes: u64, floor: u64) -> Self {
        let kib = bytes
            .max(floor)
            .div_ceil(1024)
            .min(tokio::sync::Semaphore::MAX_PERMITS as u64);
        Self {
            permits: Arc::new(tokio::sync::Semaphore::new(kib as usize)),
            kib,
        }
    }

    /// Waits up to `within` for room for a frame of `frame_len` bytes; `None` after that.
    pub(super) async fn take(
        &self,
        frame_len: usize,
        within: Duration,
    ) -> Option<OwnedSemaphorePermit> {
        let kib = (frame_len.div_ceil(1024) as u64).min(self.kib) as u32;
        let permit = Arc::clone(&self.permits).acquire_many_owned(kib);
        tokio::time::timeout(within, permit).await.ok()?.ok()
    }
}
