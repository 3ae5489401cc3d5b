//! One-sided uploads ([`Store::one_sided`]): a client with the fast path writes values'
//! bytes straight into gateway memory, then commits.
//!
//! ```text
//!  reserve ──► open (region registered for remote writes only) ──► commit ──► sealed
//!                 │                                                  (write key revoked,
//!                 └── lease ends: reclaimed, its key revoked          frames verified and
//!                     (a late commit is refused)                      written, read key)
//! ```
//!
//! The region is an arena of its own ([`super::arena::Arenas::reserve_region`]), charged
//! to the budget when reserved. While the upload is open no read key covers it, so no
//! descriptor ever exposes bytes in flight; its write key is closed before the gateway
//! looks at what was written, so sealed bytes cannot change afterwards (on providers that
//! check keys: `shm`'s cross-memory attach checks none, and a local process that may
//! attach to the gateway may write its memory anyway). The commit recomputes each frame's
//! checksum and block table from the bytes in memory and stores a value only when the
//! checksum is the one the client computed before it wrote.
//!
//! The region's memory is not held past its commit for the upload's sake: once its write
//! key is revoked no provider that checks keys lets a write in. A client writing by
//! cross-memory attach is trusted (as on any `shm` read) not to write after its own
//! deadline; the SDK never does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use rasa_fastpath::buffer::WriteSlot;
use rasa_fastpath::fabrics::Regions;
use rasa_fastpath::frame::{self, FrameHasher, FrameIdentity, ENTRY_LEN, HEADER_LEN};

use super::arena::Arena;
use super::upload::{Keep, PendingSlot, Sealed};
use super::version::{MediaType, Trailer};
use super::{OriginMeta, Store, StoreError, StoredVersion, VersionId};
use crate::catalog;

/// One value a client will write: its key (valid), media type and length.
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    /// The key.
    pub key: &'a str,
    /// The media type.
    pub content_type: &'a str,
    /// Bytes of the value.
    pub len: u64,
}

/// An open upload region, as its client is told: where each value's bytes go.
#[derive(Debug)]
pub struct Reservation {
    /// The upload's id (random: the commit names it).
    pub id: u64,
    /// When the upload is reclaimed if not committed.
    pub expires: SystemTime,
    /// The region's start on each fabric endpoint, the primary first: (address, key).
    pub remotes: Vec<(u64, u64)>,
    /// Each value's version id and where its payload starts, from the region's start.
    pub values: Vec<(VersionId, u64)>,
    /// Block size of the frames' tables (the client's checksum does not depend on it).
    pub block_size: u32,
}

/// One value of a commit: its key, and its sealed version or why it was refused.
pub type Committed = (String, Result<Sealed, StoreError>);

/// Why an upload's commit was refused as a whole.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// No upload of this id is open: never reserved, committed already, or reclaimed
    /// when its lease ended.
    #[error("no upload {0:016x} is open: it was committed already, never reserved, or reclaimed when its lease ended")]
    Unknown(u64),
    /// The lease ended before the commit: the upload was reclaimed.
    #[error("upload {id:016x} expired {late_ms} ms before its commit and was reclaimed; nothing was stored")]
    Expired {
        /// The upload.
        id: u64,
        /// How late the commit came.
        late_ms: u64,
    },
    /// The commit named another number of values than the upload holds.
    #[error("upload {id:016x} holds {holds} values but the commit gave {got} checksums; nothing was stored")]
    Count {
        /// The upload.
        id: u64,
        /// Values reserved.
        holds: usize,
        /// Checksums given.
        got: usize,
    },
    /// This gateway has no fast path to write over.
    #[error("this gateway has no fast path: store values with PUT or POST /v1/batch/put")]
    NoFastPath,
}

/// An upload open for writes, kept until its commit or its lease's end.
struct Open {
    /// Dropping it revokes the write key on every endpoint.
    regions: Regions,
    arena: Arc<Arena>,
    values: Vec<OpenValue>,
    until: Instant,
}

struct OpenValue {
    key: String,
    content_type: String,
    id: FrameIdentity,
    slot: WriteSlot,
}

/// The uploads of a store that are open for writes.
#[derive(Default)]
pub(super) struct Uploads(Mutex<HashMap<u64, Open>>);

impl std::fmt::Debug for Uploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uploads")
            .field("open", &self.lock().len())
            .finish()
    }
}

impl Uploads {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Open>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The one-sided write path of a [`Store`] ([`Store::one_sided`]).
#[derive(Clone, Copy)]
pub struct OneSided<'a> {
    store: &'a Store,
}

impl Store {
    /// One-sided uploads: regions reserved, committed, reclaimed.
    pub fn one_sided(&self) -> OneSided<'_> {
        OneSided { store: self }
    }
}

impl OneSided<'_> {
    /// Opens an upload region for `values` (valid keys), registered for remote writes
    /// only, until a lease from now. Waits for room as a batch does (until `until`).
    pub async fn reserve(
        &self,
        values: &[Wanted<'_>],
        until: Instant,
    ) -> Result<Reservation, StoreError> {
        let store = self.store;
        let fabric = store.fabric.as_ref().ok_or(UploadError::NoFastPath)?;
        let block_size = store.config.block_size;
        let mut lens = Vec::with_capacity(values.len());
        for v in values {
            let len = frame::frame_len(v.len, block_size)
                .and_then(|n| n.checked_add(Trailer::len(v.key.len())))
                .ok_or(StoreError::InsufficientStorage {
                    needed: v.len,
                    allocated: store.memory().allocated(),
                    budget: store.arenas.budget(),
                })?;
            lens.push(len);
        }
        let (arena, slots) = store
            .with_room(
                || super::upload::allocating(|may| store.arenas.reserve_region(&lens, may)),
                until.saturating_duration_since(Instant::now()),
            )
            .await?;
        let regions =
            super::memory::off_worker(|| fabric.register_writable(Arc::clone(&arena.buffer)))
                .map_err(|e| StoreError::Fabric(e.to_string()))?;
        let lease = store.config.lease;
        let expires = SystemTime::now() + lease;
        let mut open_values = Vec::with_capacity(values.len());
        let mut placed = Vec::with_capacity(values.len());
        for (v, slot) in values.iter().zip(slots) {
            let version = store.writes().next_version();
            placed.push((version, (slot.offset() + HEADER_LEN) as u64));
            open_values.push(OpenValue {
                key: v.key.to_owned(),
                content_type: v.content_type.to_owned(),
                id: FrameIdentity {
                    key_hash: frame::key_hash(v.key),
                    version: version.0,
                    payload_len: v.len,
                },
                slot,
            });
        }
        let remotes = fabric.remotes(&regions, 0).collect();
        let id = rand::random::<u64>();
        let open = Open {
            regions,
            arena,
            values: open_values,
            until: Instant::now() + lease,
        };
        store.uploads.lock().insert(id, open);
        catalog::ONE_SIDED_UPLOADS
            .counter_by(&[("outcome", "reserved")])
            .increment(1);
        Ok(Reservation {
            id,
            expires,
            remotes,
            values: placed,
            block_size,
        })
    }

    /// Commits upload `id`: revokes its write key, then seals each value whose frame
    /// checksum over the bytes in memory is the client's (`checksums`, in order); a value
    /// whose checksum differs is refused alone ([`StoreError::ChecksumMismatch`]); each
    /// outcome comes with its key, in the reservation's order. The
    /// sealed versions are readable one-sided once published. CPU-bound (every byte is
    /// hashed): call it off the async workers.
    pub fn commit(&self, id: u64, checksums: &[u64]) -> Result<Vec<Committed>, UploadError> {
        let store = self.store;
        let open = store
            .uploads
            .lock()
            .remove(&id)
            .ok_or(UploadError::Unknown(id))?;
        let Open {
            regions,
            arena,
            values,
            until,
        } = open;
        // The write key is gone before a byte is looked at.
        drop(regions);
        let now = Instant::now();
        if now > until {
            catalog::ONE_SIDED_UPLOADS
                .counter_by(&[("outcome", "expired")])
                .increment(1);
            return Err(UploadError::Expired {
                id,
                late_ms: (now - until).as_millis() as u64,
            });
        }
        if checksums.len() != values.len() {
            return Err(UploadError::Count {
                id,
                holds: values.len(),
                got: checksums.len(),
            });
        }
        let sealed = seal_all(&arena, values, checksums, store.config.block_size);
        if sealed.iter().any(|(_, s)| s.is_ok()) {
            if let Some(fabric) = &store.fabric {
                arena
                    .register_sealed(fabric)
                    .map_err(|_| UploadError::NoFastPath)?;
            }
        }
        catalog::ONE_SIDED_UPLOADS
            .counter_by(&[("outcome", "committed")])
            .increment(1);
        Ok(sealed)
    }

    /// Reclaims the uploads whose lease ended uncommitted: their write keys are revoked
    /// and their memory drains as any unreachable arena's. Returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        let gone: Vec<Open> = {
            let mut open = self.store.uploads.lock();
            let ids: Vec<u64> = open
                .iter()
                .filter(|(_, o)| o.until < now)
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| open.remove(id)).collect()
        };
        if !gone.is_empty() {
            catalog::ONE_SIDED_UPLOADS
                .counter_by(&[("outcome", "expired")])
                .increment(gone.len() as u64);
            tracing::info!(
                uploads = gone.len(),
                "one-sided uploads reclaimed uncommitted at their lease's end"
            );
        }
        let n = gone.len();
        for o in gone {
            for v in o.values {
                drop(PendingSlot::new(Arc::clone(&o.arena), v.slot));
            }
        }
        n
    }

    /// Uploads open now.
    pub fn open(&self) -> usize {
        self.store.uploads.lock().len()
    }
}

/// Seals every written value ([`seal_one`]), in order: on two threads when
/// `helper::two_threads_for` says so ([`rasa_fastpath::helper::each_on_two`]: the hashing
/// is most of a commit: 256 MiB took ~26 ms on one core here).
fn seal_all(
    arena: &Arc<Arena>,
    values: Vec<OpenValue>,
    checksums: &[u64],
    block_size: u32,
) -> Vec<Committed> {
    let jobs: Vec<(OpenValue, u64)> = values.into_iter().zip(checksums.iter().copied()).collect();
    rasa_fastpath::helper::each_on_two(
        jobs,
        |(v, _)| v.id.payload_len,
        |(v, said)| (v.key.clone(), seal_one(arena, v, said, block_size)),
    )
}

/// Seals one written value: its table and header computed from the bytes in memory, the
/// checksum compared with the client's, the trailer written (its SHA-256 left to be
/// computed when a reader first needs it).
fn seal_one(
    arena: &Arc<Arena>,
    v: OpenValue,
    said: u64,
    block_size: u32,
) -> Result<Sealed, StoreError> {
    let OpenValue {
        key,
        content_type,
        id,
        mut slot,
    } = v;
    let bytes = slot.as_mut_slice();
    let len = id.payload_len as usize;
    let (head, rest) = bytes.split_at_mut(HEADER_LEN);
    let (payload, after) = rest.split_at_mut(len);
    // One pass: each block hashed into the frame checksum and its table entry while it
    // is in cache.
    let mut hasher = FrameHasher::new();
    match block_size as usize {
        0 => hasher.update(payload),
        bs => {
            for (i, block) in payload.chunks(bs).enumerate() {
                hasher.update(block);
                let entry = frame::block_entry(&id, i as u64, block);
                after[i * ENTRY_LEN..(i + 1) * ENTRY_LEN].copy_from_slice(&entry.to_le_bytes());
            }
        }
    }
    let (header, got) = hasher.seal(id, block_size);
    if got != said {
        drop(PendingSlot::new(Arc::clone(arena), slot));
        catalog::ONE_SIDED_VALUES
            .counter_by(&[("outcome", "checksum_mismatch")])
            .increment(1);
        return Err(StoreError::ChecksumMismatch { key, said, got });
    }
    head.copy_from_slice(&header);
    let origin = OriginMeta::default();
    let media_type = MediaType::intern(&content_type, &origin);
    Trailer::write(
        bytes,
        &key,
        &super::version::SHA256_LATER,
        super::origin_meta::now_ms(),
        media_type,
    );
    catalog::ONE_SIDED_VALUES
        .counter_by(&[("outcome", "sealed")])
        .increment(1);
    let held = PendingSlot::new(Arc::clone(arena), slot);
    let (frame, keep) = held.freeze();
    Ok(Sealed {
        version: Arc::new(StoredVersion {
            frame,
            arena: Arc::clone(arena),
            origin,
        }),
        _upload: Keep::Pending(keep),
    })
}
