//! Uploads: reserve a frame ([`Store::begin`]), stream the body into it
//! ([`Upload::write`]), seal the header ([`Store::seal`]) and publish ([`Store::publish`]).
//! Nothing is visible before the publish; a dropped upload publishes nothing.
//!
//! Nothing unpublished is readable one-sided either: a value for a shared arena is
//! written into staging memory and copied into the arena at the seal (a memcpy, a few
//! percent of the SHA-256 already computed over the same bytes); a value with an arena of
//! its own is written in place, and that arena is registered — given a remote key — only
//! at the seal. An upload that fails leaves no byte in advertised memory.

use crate::catalog;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rasa_fastpath::buffer::WriteSlot;
use rasa_fastpath::frame::{self, FrameHasher, FrameIdentity, HEADER_LEN};
use sha2::{Digest, Sha256};
use tokio::sync::OwnedSemaphorePermit;

use super::arena::{Arena, Arenas, ReserveError};
use super::version::{MediaType, Trailer};
use super::{OriginMeta, Store, StoreError, StoredVersion, VersionId};

impl Store {
    fn next_version(&self) -> VersionId {
        VersionId(
            self.incarnation
                .wrapping_add(self.counter.fetch_add(1, Ordering::Relaxed)),
        )
    }

    /// Starts storing a value of exactly `len` bytes under `key` (a valid key: at most
    /// [`crate::key::MAX_KEY_LEN`] bytes): reserves its frame.
    ///
    /// When memory is full, makes room (compacting a sparse arena or evicting the least
    /// recently used one; see [`super::Memory::make_room`]) and waits for reclamation, at most a
    /// lease plus the grace period; then answers [`StoreError::Busy`]. A value that can
    /// never fit is refused at once.
    pub async fn begin(
        &self,
        key: &str,
        content_type: &str,
        len: u64,
    ) -> Result<Upload, StoreError> {
        let until = Instant::now() + room_wait(&self.config);
        self.begin_with(key, content_type, len, false, until).await
    }

    /// [`Store::begin`] for a body that is still arriving, written with [`Store::write`]:
    /// a value that needs a dedicated arena is charged to the budget as its bytes arrive
    /// (see [`super::arena::CHARGE_STEP`]), not all at once before the first one. It waits
    /// for room in memory (here and in its writes) until `until` — by default a lease
    /// plus twice the grace from now; the values of one batch share one deadline
    /// ([`room_deadline`]), so a batch that cannot fit is refused value by value at once
    /// rather than after a wait per value. (Staging memory, which frees as other uploads
    /// are sealed, is waited for as by any upload.)
    pub async fn begin_streaming(
        &self,
        key: &str,
        content_type: &str,
        len: u64,
        until: Option<Instant>,
    ) -> Result<Upload, StoreError> {
        let until = until.unwrap_or_else(|| Instant::now() + room_wait(&self.config));
        self.begin_with(key, content_type, len, true, until).await
    }

    async fn begin_with(
        &self,
        key: &str,
        content_type: &str,
        len: u64,
        growing: bool,
        until: Instant,
    ) -> Result<Upload, StoreError> {
        let never = || StoreError::InsufficientStorage {
            needed: len,
            allocated: self.memory().allocated(),
            budget: self.arenas.budget(),
        };
        let block_size = self.config.block_size;
        assert!(
            key.len() <= crate::key::MAX_KEY_LEN,
            "keys are validated first"
        );
        let frame_len = frame::frame_len(len, block_size)
            .and_then(|n| n.checked_add(Trailer::len(key.len())))
            .ok_or_else(never)?;
        // A value for a shared arena arrives in staging memory no remote key covers and is
        // copied into the arena when sealed: the arena's key opens published frames only.
        // (A value with an arena of its own is written in place; its arena is registered
        // when sealed.)
        let staging = match frame_len <= self.config.arena_size {
            true => Some(
                // Staging frees as other uploads seal: always worth its whole wait.
                self.staging
                    .take(frame_len, room_wait(&self.config))
                    .await
                    .ok_or(StoreError::Busy {
                        retry_after: self.config.lease + self.config.grace,
                    })?,
            ),
            false => None,
        };
        let (arena, slot) = self
            .with_room(
                || reserve_frame(&self.arenas, frame_len, growing),
                until.saturating_duration_since(Instant::now()),
            )
            .await?;
        // The id is fixed now: the block table, written as the body arrives, is seeded
        // with it.
        let id = FrameIdentity {
            key_hash: frame::key_hash(key),
            version: self.next_version().0,
            payload_len: len,
        };
        Ok(Upload {
            key: key.to_owned(),
            content_type: content_type.to_owned(),
            id,
            block_size,
            blocks_done: 0,
            written: 0,
            sha256: Sha256::new(),
            frame: FrameHasher::new(),
            arena,
            slot: Some(slot),
            staged: staging.map(|permit| (vec![0u8; frame_len], permit)),
            until,
            origin: OriginMeta::default(),
            s3_etag: None,
            headers: None,
        })
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
        let give_up = std::time::Instant::now() + within;
        loop {
            let wake = self.room.notified();
            if let Some(got) = attempt()? {
                return Ok(got);
            }
            self.memory().make_room();
            if super::memory::off_worker(|| self.memory().reclaim()) > 0 {
                continue;
            }
            let now = std::time::Instant::now();
            if now >= give_up {
                return Err(StoreError::Busy {
                    retry_after: self.config.lease + self.config.grace,
                });
            }
            // Woken by the reclaimer; the timeout only bounds the wait.
            let _ =
                tokio::time::timeout((give_up - now).min(Duration::from_millis(100)), wake).await;
        }
    }

    /// Appends the next body chunk of an upload begun with [`Store::begin_streaming`] (or
    /// [`Store::begin`]), first charging its arena for it when the arena grows with its
    /// value. When the budget is full, makes room and waits as [`Store::begin`] does (until
    /// the upload's deadline), then answers [`StoreError::Busy`].
    pub async fn write(&self, upload: &mut Upload, chunk: &[u8]) -> Result<(), StoreError> {
        if let Some(upto) = upload.charge_needed(chunk.len() as u64) {
            let arena = &upload.arena;
            self.with_room(
                || Ok(self.arenas.charge(arena, upto).then_some(())),
                upload.until.saturating_duration_since(Instant::now()),
            )
            .await?;
        }
        upload.write(chunk)
    }

    /// Publishes a fully written upload as the key's current version, if `check` accepts
    /// the current version (or its absence) at that moment. On any error nothing is
    /// published.
    pub fn commit(
        &self,
        upload: Upload,
        check: impl FnOnce(Option<&StoredVersion>) -> Result<(), StoreError>,
    ) -> Result<Arc<StoredVersion>, StoreError> {
        self.publish(self.seal(upload)?, check)
    }

    /// Finishes a fully written upload as an immutable version (header written, digests
    /// final) without making it visible: write-through sends it to the origin first.
    pub fn seal(&self, mut upload: Upload) -> Result<Sealed, StoreError> {
        if upload.written != upload.id.payload_len {
            return Err(StoreError::LengthMismatch {
                declared: upload.id.payload_len,
                got: upload.written,
            });
        }
        // A growing arena is charged in full with its last byte; short of it, not sealed.
        if upload.arena.charged() < upload.arena.buffer.capacity() as u64 {
            return Err(StoreError::InsufficientStorage {
                needed: upload.arena.buffer.capacity() as u64,
                allocated: upload.arena.charged(),
                budget: self.arenas.budget(),
            });
        }
        let mut slot = upload.slot.take().expect("an upload is sealed once");
        if let Some((staged, _permit)) = upload.staged.take() {
            slot.as_mut_slice().copy_from_slice(&staged);
        } else if let Some(fabric) = &self.fabric {
            // Its own arena, written in place: its key opens it only from now on.
            upload
                .arena
                .register_sealed(fabric)
                .map_err(|e| StoreError::Fabric(e.to_string()))?;
        }
        let hasher = std::mem::take(&mut upload.frame);
        let (header, _) = hasher.seal(upload.id, upload.block_size);
        let sha256: [u8; 32] = std::mem::take(&mut upload.sha256).finalize().into();
        let origin = std::mem::take(&mut upload.origin);
        if let Some(headers) = upload.headers.take() {
            origin.set_headers(*headers);
        }
        if let Some(etag) = upload.s3_etag.take() {
            origin.set_s3_etag(etag.into());
        }
        let media_type = MediaType::intern(&upload.content_type, &origin);
        let bytes = slot.as_mut_slice();
        bytes[..HEADER_LEN].copy_from_slice(&header);
        let now = super::version::now_ms();
        Trailer::write(bytes, &upload.key, &sha256, now, media_type);
        let stored = Arc::new(StoredVersion {
            frame: slot.freeze(),
            arena: Arc::clone(&upload.arena),
            origin,
        });
        Ok(Sealed {
            version: stored,
            _upload: upload,
        })
    }

    /// Makes a sealed version the key's current version, if `check` accepts the current
    /// version (or its absence) at that moment.
    pub fn publish(
        &self,
        sealed: Sealed,
        check: impl FnOnce(Option<&StoredVersion>) -> Result<(), StoreError>,
    ) -> Result<Arc<StoredVersion>, StoreError> {
        let stored = Arc::clone(&sealed.version);
        let mut shard = self.index.write(stored.key_bytes());
        check(shard.current(stored.key_bytes()))?;
        stored.arena.add_live(&stored, stored.frame.len() as u64);
        if let Some(old) = shard.replace(Arc::clone(&stored)) {
            old.arena.sub_live(old.frame.len() as u64);
        }
        if let Some(disk) = self.disk.as_ref() {
            disk.forget(stored.key_bytes());
        }
        drop(shard);
        drop(sealed);
        catalog::VERSIONS_STORED.counter().increment(1);
        catalog::BYTES_STORED.counter().increment(stored.len());
        Ok(stored)
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
    let reserved = match arenas.reserve_upload(frame_len, false, growing) {
        Err(ReserveError::NeedAllocation) => {
            super::memory::off_worker(|| arenas.reserve_upload(frame_len, true, growing))
        }
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
    key: String,
    content_type: String,
    /// Key hash, version id and declared length.
    id: FrameIdentity,
    /// Block size of the frame's table (0: none).
    block_size: u32,
    /// Blocks whose table entries are written.
    blocks_done: u64,
    written: u64,
    sha256: Sha256,
    frame: FrameHasher,
    arena: Arc<Arena>,
    slot: Option<WriteSlot>,
    /// The frame being written, outside advertised memory (values for a shared arena),
    /// and the staging memory it holds.
    staged: Option<(Vec<u8>, OwnedSemaphorePermit)>,
    /// When its writes stop waiting for room.
    until: Instant,
    origin: OriginMeta,
    s3_etag: Option<Box<str>>,
    headers: Option<Box<super::ObjectHeaders>>,
}

/// A finished, immutable version that is not visible yet (see [`Store::seal`]). Dropping it
/// publishes nothing; its space is reclaimed with its arena.
#[derive(Debug)]
pub struct Sealed {
    version: Arc<StoredVersion>,
    _upload: Upload,
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
            // A growing upload written past its charge without [`Store::write`].
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
    fn charge_needed(&self, more: u64) -> Option<u64> {
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
    async fn take(&self, frame_len: usize, within: Duration) -> Option<OwnedSemaphorePermit> {
        let kib = (frame_len.div_ceil(1024) as u64).min(self.kib) as u32;
        let permit = Arc::clone(&self.permits).acquire_many_owned(kib);
        tokio::time::timeout(within, permit).await.ok()?.ok()
    }
}
