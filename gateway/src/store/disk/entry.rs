//! The disk tier's index entries: where a spilled version's record is, keyed by the key's
//! hash (already XXH3, so used as it is).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Where a spilled version's record is. 16 bytes.
#[derive(Debug, Clone, Copy)]
pub(in crate::store) struct Entry {
    pub(super) seg: u32,
    pub(super) off: u32,
    pub(super) len: u32,
    /// 31 bits of the version id's hash, and whether it was read since it came to disk.
    pub(super) tag: u32,
}

/// The tag's bit for "read since it came to disk".
pub(super) const HIT: u32 = 1 << 31;

impl Entry {
    pub(super) fn new(seg: u32, off: u64, len: u64, version: u64) -> Option<Self> {
        Some(Self {
            seg,
            off: u32::try_from(off).ok()?,
            len: u32::try_from(len).ok()?,
            tag: Self::tag_of(version),
        })
    }

    fn tag_of(version: u64) -> u32 {
        (xxhash_rust::xxh3::xxh3_64(&version.to_le_bytes()) as u32) & !HIT
    }

    pub(super) fn is(&self, version: u64) -> bool {
        self.tag & !HIT == Self::tag_of(version)
    }
}

/// Key hashes are xxh3 already: used as they are.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub(super) type ByHash<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;
