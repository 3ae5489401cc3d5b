//! Replicas of another member's versions (`crate::cluster::replicas`): the owner's frame
//! adopted whole — same version id, checksum and SHA-256 — into this store's memory,
//! with a remote key of its own, and dropped again when its owner revokes it.

use std::sync::Arc;

use rasa_fastpath::frame::{self, FrameIdentity};

use super::upload::reserve_frame;
use super::{OriginMeta, StoreError, StoredVersion, VersionId, Writes};

/// The owner tag a replica is tied to in its holder's index: even, so no member's tag
/// (always odd) ever matches it, and nothing but a replica read serves it as current.
/// Never written to the disk tier.
pub const REPLICA_TIE: u64 = 2;

impl Writes<'_> {
    /// Adopts `bytes`, the frame of version `version` of `key` (`payload_len` bytes,
    /// frame checksum `checksum`) another member sent, as `key`'s current version here,
    /// tied to [`REPLICA_TIE`]. The frame is checked against the version it claims first.
    /// Waits for no room: when memory is full after making room and reclaiming,
    /// [`StoreError::Busy`].
    pub async fn adopt(
        &self,
        key: &str,
        bytes: &[u8],
        (version, payload_len, checksum): (u64, u64, u64),
    ) -> Result<Arc<StoredVersion>, StoreError> {
        let expected = FrameIdentity {
            key_hash: frame::key_hash(key),
            version,
            payload_len,
        };
        let corrupt =
            |why: String| StoreError::Fabric(format!("a replica's frame of {key}: {why}"));
        frame::validate(bytes, expected, checksum).map_err(|e| corrupt(e.to_string()))?;
        let store = self.store;
        // What a PUT does before it waits: make room, reclaim, try again.
        let attempt = || reserve_frame(&store.arenas, bytes.len(), false);
        let (arena, mut slot) = store.with_room(attempt, std::time::Duration::ZERO).await?;
        slot.as_mut_slice().copy_from_slice(bytes);
        if let (true, Some(fabric)) = (arena.dedicated, &store.fabric) {
            if let Err(e) = arena.register_sealed(fabric) {
                arena.finish_pending();
                return Err(StoreError::Fabric(e.to_string()));
            }
        }
        let copy = Arc::new(StoredVersion {
            frame: slot.freeze(),
            arena: Arc::clone(&arena),
            origin: OriginMeta::default(),
        });
        if copy.key() != key || copy.len() != payload_len {
            arena.finish_pending();
            return Err(corrupt("its trailer names another key or length".into()));
        }
        copy.origin.tie(REPLICA_TIE, 0);
        let mut shard = store.index.write(copy.key_bytes());
        arena.add_live(&copy, bytes.len() as u64);
        if let Some(old) = shard.replace(Arc::clone(&copy)) {
            old.arena.sub_live(old.frame.len() as u64);
        }
        drop(shard);
        arena.finish_pending();
        Ok(copy)
    }

    /// Drops `key`'s current version here when it is the replica `version` (revoked, or
    /// no longer wanted): new requests no longer find it; its memory is reclaimed once its
    /// leases end.
    pub fn drop_replica(&self, key: &str, version: u64) {
        let mut shard = self.store.index.write(key.as_bytes());
        let held = shard
            .current(key.as_bytes())
            .is_some_and(|c| c.version() == VersionId(version) && c.origin.tied() == REPLICA_TIE);
        if held {
            if let Some(old) = shard.remove(key.as_bytes()) {
                old.arena.sub_live(old.frame.len() as u64);
            }
        }
    }
}
