//! Test support: what the gateway's `--test-hooks` routes do to a store (revoke a key,
//! show the memory a descriptor opens, plant a corrupt frame). [`Store::testing`].

use std::sync::Arc;

use super::{Store, StoreError, StoredVersion};

/// The test-support view of a store ([`Store::testing`]).
#[derive(Clone, Copy)]
pub struct Testing<'a>(&'a Store);

impl Store {
    /// What the test hooks may do to it.
    pub fn testing(&self) -> Testing<'_> {
        Testing(self)
    }
}

impl Testing<'_> {
    /// Rotates the remote key of the arena holding `v` (revoking the key every descriptor
    /// of that arena carried so far).
    pub fn rotate_key(&self, v: &StoredVersion) -> Result<(), StoreError> {
        match &self.0.fabric {
            Some(fabric) => v
                .arena
                .rotate_key(fabric)
                .map_err(|e| StoreError::Fabric(e.to_string())),
            None => Ok(()),
        }
    }

    /// the whole memory region `v`'s descriptors open — its remote address,
    /// length and key — when registered: what a descriptor holder can read, frame or not.
    pub fn region_of(&self, v: &StoredVersion) -> Option<(u64, u64, u64)> {
        let fabric = self.0.fabric.as_ref()?;
        let (addr, rkey) = v.arena.remote(fabric, 0)?[0];
        Some((addr, v.arena.buffer.capacity() as u64, rkey))
    }

    /// a copy of `v`'s frame, in arena memory, with one byte flipped (payload
    /// byte `at`, by default the last, or a reserved header byte of an empty value), under
    /// `v`'s identity and checksum. A whole read given it must reject it, and so must a
    /// range read covering that byte's block.
    pub fn corrupt_copy(
        &self,
        v: &StoredVersion,
        at: Option<u64>,
    ) -> Result<Arc<StoredVersion>, StoreError> {
        let (arena, mut slot) = self.0.arenas.reserve_upload(v.frame.len(), true, false)?;
        let bytes = slot.as_mut_slice();
        bytes.copy_from_slice(v.frame.as_slice());
        let header = rasa_fastpath::frame::HEADER_LEN as u64;
        let flip = match (at, v.len()) {
            (_, 0) => 40, // no payload: a reserved header byte
            (Some(at), len) => header + at.min(len - 1),
            (None, len) => header + len - 1,
        };
        bytes[flip as usize] ^= 0x01;
        Ok(Arc::new(StoredVersion {
            frame: slot.freeze(),
            arena,
            origin: v.origin.duplicate(false),
        }))
    }
}
