//! The write path of a store ([`Store::writes`]): a value's frame reserved, its body
//! streamed in, sealed, published. The upload in progress is `upload.rs`'s [`Upload`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use rasa_fastpath::frame::{self, FrameHasher, FrameIdentity, HEADER_LEN};
use sha2::{Digest, Sha256};

use super::upload::{reserve_frame, room_wait, Keep, Sealed, Upload};
use super::version::{MediaType, Trailer};
use super::{OriginMeta, Store, StoreError, StoredVersion, VersionId};
use crate::catalog;

/// The write path of a [`Store`] ([`Store::writes`]): reserve a frame for a value
/// ([`Writes::begin`]), stream its body in ([`Writes::write`]), seal it ([`Writes::seal`])
/// and make it the key's current version ([`Writes::publish`]).
#[derive(Clone, Copy)]
pub struct Writes<'a> {
    pub(super) store: &'a Store,
}

impl<'a> Writes<'a> {
    pub(super) fn new(store: &'a Store) -> Self {
        Self { store }
    }

    /// A fresh version id.
    pub(super) fn next_version(&self) -> VersionId {
        VersionId(
            self.store
                .incarnation
                .wrapping_add(self.store.counter.fetch_add(1, Ordering::Relaxed)),
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
        let until = Instant::now() + room_wait(&self.store.config);
        self.begin_with(key, content_type, len, false, until).await
    }

    /// [`Writes::begin`] for a body that is still arriving, written with [`Writes::write`]:
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
        let until = until.unwrap_or_else(|| Instant::now() + room_wait(&self.store.config));
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
            allocated: self.store.memory().allocated(),
            budget: self.store.arenas.budget(),
        };
        let block_size = self.store.config.block_size;
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
        let staging = match frame_len <= self.store.config.arena_size {
            true => Some(
                // Staging frees as other uploads seal: always worth its whole wait.
                self.store
                    .staging
                    .take(frame_len, room_wait(&self.store.config))
                    .await
                    .ok_or(StoreError::Busy {
                        retry_after: self.store.config.lease + self.store.config.grace,
                    })?,
            ),
            false => None,
        };
        let (arena, slot) = self
            .store
            .with_room(
                || reserve_frame(&self.store.arenas, frame_len, growing),
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

    /// Appends the next body chunk of an upload begun with [`Writes::begin_streaming`] (or
    /// [`Writes::begin`]), first charging its arena for it when the arena grows with its
    /// value. When the budget is full, makes room and waits as [`Writes::begin`] does (until
    /// the upload's deadline), then answers [`StoreError::Busy`].
    pub async fn write(&self, upload: &mut Upload, chunk: &[u8]) -> Result<(), StoreError> {
        if let Some(upto) = upload.charge_needed(chunk.len() as u64) {
            let arena = &upload.arena;
            self.store
                .with_room(
                    || Ok(self.store.arenas.charge(arena, upto).then_some(())),
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

    /// [`Writes::commit`] for a read-through fill holding `ticket`: it also fails when the
    /// key was deleted after the ticket was taken (the fill's object may be what the
    /// delete removed at the origin).
    pub fn commit_fill(
        &self,
        upload: Upload,
        ticket: &super::FillTicket,
        check: impl FnOnce(Option<&StoredVersion>) -> Result<(), StoreError>,
    ) -> Result<Arc<StoredVersion>, StoreError> {
        self.publish_since(self.seal(upload)?, Some(ticket.since()), check)
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
                budget: self.store.arenas.budget(),
            });
        }
        let mut slot = upload.slot.take().expect("an upload is sealed once");
        if let Some((staged, _permit)) = upload.staged.take() {
            slot.as_mut_slice().copy_from_slice(&staged);
        } else if let Some(fabric) = &self.store.fabric {
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
        let now = super::origin_meta::now_ms();
        Trailer::write(bytes, &upload.key, &sha256, now, media_type);
        let stored = Arc::new(StoredVersion {
            frame: slot.freeze(),
            arena: Arc::clone(&upload.arena),
            origin,
        });
        Ok(Sealed {
            version: stored,
            _upload: Keep::Upload(Box::new(upload)),
        })
    }

    /// Makes a sealed version the key's current version, if `check` accepts the current
    /// version (or its absence) at that moment.
    pub fn publish(
        &self,
        sealed: Sealed,
        check: impl FnOnce(Option<&StoredVersion>) -> Result<(), StoreError>,
    ) -> Result<Arc<StoredVersion>, StoreError> {
        self.publish_since(sealed, None, check)
    }

    /// [`Writes::publish`], failing too when the key was deleted after delete sequence
    /// number `since` (a fill's ticket).
    fn publish_since(
        &self,
        sealed: Sealed,
        since: Option<u64>,
        check: impl FnOnce(Option<&StoredVersion>) -> Result<(), StoreError>,
    ) -> Result<Arc<StoredVersion>, StoreError> {
        let stored = Arc::clone(&sealed.version);
        let mut shard = self.store.index.write(stored.key_bytes());
        check(shard.current(stored.key_bytes()))?;
        if since.is_some_and(|s| shard.deleted_since(stored.key_bytes(), s)) {
            return Err(StoreError::PreconditionFailed(
                "deleted while it was fetched".into(),
            ));
        }
        stored.arena.add_live(&stored, stored.frame.len() as u64);
        if let Some(old) = shard.replace(Arc::clone(&stored)) {
            old.arena.sub_live(old.frame.len() as u64);
        }
        if let Some(disk) = self.store.disk.as_ref() {
            disk.forget(stored.key_bytes());
        }
        drop(shard);
        drop(sealed);
        catalog::VERSIONS_STORED.counter().increment(1);
        catalog::BYTES_STORED.counter().increment(stored.len());
        Ok(stored)
    }
}
