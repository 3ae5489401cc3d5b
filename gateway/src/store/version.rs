//! Version ids and the stored, immutable version they name.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rasa_fastpath::buffer::Frozen;
use rasa_fastpath::frame::{BLOCK_SIZE_AT, CHECKSUM_AT, HEADER_LEN, LENGTH_AT, VERSION_AT};

use super::arena::Arena;
use super::OriginMeta;

/// Identity of one immutable version: unique across the keys and the restarts of a gateway.
///
/// A version id is the gateway's random 64-bit incarnation (drawn at start) plus a counter,
/// so two processes collide only if their ranges overlap: about `n / 2^64` for `n` writes.
/// Ids are opaque: compare them for equality only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionId(pub u64);

impl fmt::Display for VersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A version id as a regular expression, for the OpenAPI document ([`VersionId`]'s
/// `FromStr` is the rule).
pub const VERSION_PATTERN: &str = "^[0-9a-fA-F]{16}$";

/// A version id that is not 16 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a version id is 16 hexadecimal digits")]
pub struct BadVersionId;

impl FromStr for VersionId {
    type Err = BadVersionId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BadVersionId);
        }
        u64::from_str_radix(s, 16)
            .map(VersionId)
            .map_err(|_| BadVersionId)
    }
}

/// One stored, immutable version of a key.
///
/// Everything fixed about it lives in arena memory, in its frame: the version id, length,
/// block size and frame checksum in the header; the key, the SHA-256, the creation time
/// and the media type in the gateway's trailer after the block table ([`Trailer`]). The
/// heap holds only this record: where the frame is, its arena, and the rare extras.
#[derive(Debug)]
pub struct StoredVersion {
    /// Header, payload, block table and the gateway's trailer, in arena memory.
    pub frame: Frozen,
    /// The arena holding the frame.
    pub arena: Arc<Arena>,
    /// Facts only some versions have: freshness against the origin, for versions the
    /// origin also holds, and the entity tag S3 clients see when it is not the SHA-256.
    pub origin: OriginMeta,
}

/// The gateway's part of a frame, after the block table (one-sided readers never read it):
///
/// ```text
/// SHA-256 (32 B) | created, ms since the epoch (u64) | media type (u16) | key (n B) | n (u16)
/// ```
///
/// It is found from the frame's end; the key sits right before its length, so that the
/// index, which compares keys, mostly touches one cache line of each frame.
#[derive(Debug)]
pub struct Trailer;

impl Trailer {
    /// Bytes of the fixed part.
    pub const FIXED: usize = 32 + 8 + 2 + 2;

    /// Bytes of the trailer of a key of `key_len` bytes.
    pub fn len(key_len: usize) -> usize {
        key_len + Self::FIXED
    }

    /// Writes the trailer at the end of `frame`.
    pub(super) fn write(
        frame: &mut [u8],
        key: &str,
        sha256: &[u8; 32],
        created_ms: u64,
        media: MediaType,
    ) {
        let end = frame.len();
        let at = end - Self::len(key.len());
        frame[at..at + 32].copy_from_slice(sha256);
        frame[at + 32..at + 40].copy_from_slice(&created_ms.to_le_bytes());
        frame[at + 40..at + 42].copy_from_slice(&media.0.to_le_bytes());
        frame[at + 42..end - 2].copy_from_slice(key.as_bytes());
        frame[end - 2..].copy_from_slice(&(key.len() as u16).to_le_bytes());
    }

    /// Rewrites the media type of the trailer at the end of `frame` (a frame read back from
    /// the disk tier: interned entries are this process's own).
    pub(super) fn set_media(frame: &mut [u8], media: MediaType) {
        let end = frame.len();
        let key_len = u16::from_le_bytes([frame[end - 2], frame[end - 1]]) as usize;
        let at = end - Self::len(key_len) + 40;
        frame[at..at + 2].copy_from_slice(&media.0.to_le_bytes());
    }
}

/// The trailer's SHA-256 of a version written one-sided: not computed at the write (a cost
/// no fast-path reader needs), but the first time a reader asks ([`StoredVersion::sha256`]).
pub(super) const SHA256_LATER: [u8; 32] = [0; 32];

/// A media type, interned: a version holds two bytes for it (in its frame's trailer). The first [`MAX_INTERNED`]
/// distinct types are kept for good in a table read without a lock; rarer ones (a client
/// sending a new type with every PUT must not grow the table without bound) are held by
/// the version itself, in its [`OriginMeta`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaType(u16);

/// Distinct media types kept in the table.
const MAX_INTERNED: usize = 1024;
static MEDIA_TYPES: [std::sync::OnceLock<Box<str>>; MAX_INTERNED] =
    [const { std::sync::OnceLock::new() }; MAX_INTERNED];
/// Serializes additions to [`MEDIA_TYPES`] (lookups need no lock).
static ADDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl MediaType {
    /// Not in the table: the version holds its type itself.
    const RARE: u16 = u16::MAX;

    /// `media_type`'s entry, adding it while there is room; for a type that finds none,
    /// [`MediaType::RARE`] with the type recorded in `meta`.
    pub fn intern(media_type: &str, meta: &OriginMeta) -> Self {
        let find = || {
            MEDIA_TYPES
                .iter()
                .map_while(|t| t.get())
                .position(|t| &**t == media_type)
        };
        if let Some(i) = find() {
            return Self(i as u16);
        }
        let _adding = ADDING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = find() {
            return Self(i as u16);
        }
        if let Some((i, slot)) = MEDIA_TYPES
            .iter()
            .enumerate()
            .find(|(_, t)| t.get().is_none())
        {
            let _ = slot.set(media_type.into());
            return Self(i as u16);
        }
        let _ = meta.state().media_type.set(media_type.into());
        Self(Self::RARE)
    }
}

impl StoredVersion {
    /// The media type given at upload.
    pub fn content_type(&self) -> &str {
        match MEDIA_TYPES.get(usize::from(self.trailer().media_type().0)) {
            Some(t) => t.get().map_or("", |t| &**t),
            None => self.origin.rare_media_type().unwrap_or_default(),
        }
    }

    /// When the version was committed.
    pub fn created(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.trailer().created_ms())
    }

    /// The entity tag S3 clients see, when it is not the SHA-256 (the MD5 an S3 upload
    /// was checked against), unquoted.
    pub fn s3_etag(&self) -> Option<&str> {
        self.origin.s3_etag()
    }

    /// Its user metadata and stored headers, when it has any.
    pub fn headers(&self) -> Option<&super::ObjectHeaders> {
        self.origin.headers()
    }
}

/// A frame's trailer, read (see [`Trailer::write`]): the key, the payload's SHA-256, when
/// the version was committed and its media type, the key's length last.
struct TrailerOf<'a>(&'a [u8]);

impl<'a> TrailerOf<'a> {
    /// The key's length (the frame's last two bytes).
    fn key_len(&self) -> usize {
        let f = self.0;
        u16::from_le_bytes([f[f.len() - 2], f[f.len() - 1]]) as usize
    }

    /// Where the trailer starts in the frame.
    fn fixed_at(&self) -> usize {
        self.0.len() - Trailer::len(self.key_len())
    }

    fn key_bytes(&self) -> &'a [u8] {
        let f = self.0;
        &f[f.len() - 2 - self.key_len()..f.len() - 2]
    }

    fn sha256(&self) -> [u8; 32] {
        let at = self.fixed_at();
        let mut d = [0u8; 32];
        d.copy_from_slice(&self.0[at..at + 32]);
        d
    }

    /// Milliseconds since the epoch.
    fn created_ms(&self) -> u64 {
        u64_at(self.0, self.fixed_at() + 32)
    }

    /// Interned.
    fn media_type(&self) -> MediaType {
        let at = self.fixed_at() + 40;
        MediaType(u16::from_le_bytes([self.0[at], self.0[at + 1]]))
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl StoredVersion {
    /// Payload length.
    pub fn len(&self) -> u64 {
        u64_at(self.frame.as_slice(), LENGTH_AT)
    }

    /// Block size of the frame's table of block checksums (0: none; from the header).
    pub fn block_size(&self) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&self.frame.as_slice()[BLOCK_SIZE_AT..BLOCK_SIZE_AT + 4]);
        u32::from_le_bytes(w)
    }

    /// The version id (from the frame header).
    pub fn version(&self) -> VersionId {
        VersionId(u64_at(self.frame.as_slice(), VERSION_AT))
    }

    /// The frame checksum (XXH3-64 over payload and header; from the frame header).
    pub fn checksum(&self) -> u64 {
        u64_at(self.frame.as_slice(), CHECKSUM_AT)
    }

    /// The frame's trailer, read.
    fn trailer(&self) -> TrailerOf<'_> {
        TrailerOf(self.frame.as_slice())
    }

    /// The key's bytes (from the frame's trailer; valid UTF-8, as every key is).
    pub fn key_bytes(&self) -> &[u8] {
        self.trailer().key_bytes()
    }

    /// The key (from the frame's trailer).
    pub fn key(&self) -> &str {
        std::str::from_utf8(self.key_bytes()).expect("keys are stored as UTF-8")
    }

    /// SHA-256 of the payload: from the frame's trailer, or — a version written
    /// one-sided, whose trailer has none — computed the first time it is asked for (the
    /// caller pays one pass over the payload, once) and kept.
    pub fn sha256(&self) -> [u8; 32] {
        if let Some(d) = self.sha256_known() {
            return d;
        }
        *self.origin.state().sha256.get_or_init(|| {
            use sha2::{Digest, Sha256};
            crate::catalog::SHA256_DEFERRED.counter().increment(1);
            Sha256::digest(self.payload().as_slice()).into()
        })
    }

    /// SHA-256 of the payload if it is known without hashing it now.
    pub fn sha256_known(&self) -> Option<[u8; 32]> {
        let d = self.trailer().sha256();
        if d != SHA256_LATER {
            return Some(d);
        }
        self.origin.0.get()?.sha256.get().copied()
    }

    /// Whether the version lives in arena memory (else it was read back from the disk tier
    /// for one response, and one-sided readers cannot reach it).
    pub fn in_memory(&self) -> bool {
        !self.arena.detached
    }

    /// The header and payload: the bytes a whole one-sided read fetches.
    pub fn header_and_payload(&self) -> Frozen {
        self.frame.slice(0, HEADER_LEN + self.len() as usize)
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload bytes (shares the arena; no copy).
    pub fn payload(&self) -> Frozen {
        self.frame
            .slice(HEADER_LEN, HEADER_LEN + self.len() as usize)
    }

    /// SHA-256 as lowercase hex.
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256())
    }

    /// The strong entity tag, quotes included.
    pub fn etag(&self) -> String {
        format!("\"{}\"", self.sha256_hex())
    }
}
