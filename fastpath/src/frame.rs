//! The value frame: how one stored version is laid out in arena memory.
//!
//! A one-sided reader gets raw bytes with nobody on the server side to vouch for them, so
//! every stored value carries a header that lets the reader prove it got exactly the
//! version its descriptor names, whole:
//!
//! ```text
//! offset  size  field
//!      0     4  magic "RASA"
//!      4     2  frame format version (1), little-endian
//!      6     2  header length (64)
//!      8     8  key hash: XXH3-64 of the key's UTF-8 bytes
//!     16     8  object version id
//!     24     8  payload length
//!     32    24  reserved, zero
//!     56     8  frame checksum: XXH3-64 over payload ‖ header[0..56]
//!     64     …  payload
//! ```
//!
//! All integers are little-endian. The checksum covers the payload first and the header
//! (without the checksum field) last, so a writer can hash the payload while it streams in
//! and write the header when the length is known. XXH3-64 was chosen over SHA-256 for
//! this job because it runs at memory speed (~24 GB/s a core on our machines versus ~1.6
//! GB/s for SHA-256), so validating costs a few percent of a read; SHA-256 stays the
//! content identity (the ETag) and an opt-in strong check.

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// Magic bytes at the start of every frame.
pub const MAGIC: [u8; 4] = *b"RASA";
/// Frame format version written by this crate.
pub const FRAME_FORMAT: u16 = 1;
/// Length of the frame header; the payload follows it.
pub const HEADER_LEN: usize = 64;
/// Frames start at multiples of this many bytes within an arena.
pub const FRAME_ALIGN: usize = 64;
/// Name of the frame checksum algorithm, as advertised in descriptors.
pub const CHECKSUM_ALGORITHM: &str = "xxh3-64";

/// Where the header holds the frame checksum.
pub const CHECKSUM_AT: usize = 56;
/// Where the header holds the version id.
pub const VERSION_AT: usize = 16;

/// Hash of a key as stored in frame headers.
pub fn key_hash(key: &str) -> u64 {
    xxh3_64(key.as_bytes())
}

/// The identity a frame must carry: what a descriptor promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameIdentity {
    /// [`key_hash`] of the key.
    pub key_hash: u64,
    /// Object version id.
    pub version: u64,
    /// Payload length in bytes.
    pub payload_len: u64,
}

/// Computes a frame checksum while the payload streams in.
pub struct FrameHasher(Box<Xxh3>);

impl std::fmt::Debug for FrameHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameHasher")
    }
}

impl Default for FrameHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameHasher {
    /// A hasher with no payload fed yet.
    pub fn new() -> Self {
        Self(Box::new(Xxh3::new()))
    }

    /// Feeds the next part of the payload.
    pub fn update(&mut self, payload_part: &[u8]) {
        self.0.update(payload_part);
    }

    /// Finishes the frame: returns the complete header (checksum included) for `id`, and
    /// the checksum. `id.payload_len` must equal the number of payload bytes fed.
    pub fn seal(mut self, id: FrameIdentity) -> ([u8; HEADER_LEN], u64) {
        let mut header = header_prefix(id);
        self.0.update(&header[..CHECKSUM_AT]);
        let checksum = self.0.digest();
        header[CHECKSUM_AT..].copy_from_slice(&checksum.to_le_bytes());
        (header, checksum)
    }
}

fn header_prefix(id: FrameIdentity) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC);
    h[4..6].copy_from_slice(&FRAME_FORMAT.to_le_bytes());
    h[6..8].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    h[8..16].copy_from_slice(&id.key_hash.to_le_bytes());
    h[VERSION_AT..VERSION_AT + 8].copy_from_slice(&id.version.to_le_bytes());
    h[24..32].copy_from_slice(&id.payload_len.to_le_bytes());
    h
}

/// Why a frame was rejected. Every variant means "these are not the promised bytes": the
/// reader must treat it as a miss, never deliver the payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than header plus promised payload.
    #[error("frame truncated: {got} bytes, expected {expected}")]
    Truncated {
        /// Bytes available.
        got: usize,
        /// Bytes the identity requires.
        expected: usize,
    },
    /// The magic bytes or header length are wrong: not a frame at all (or memory reused).
    #[error("not a Rasa frame (bad magic or header)")]
    BadMagic,
    /// A frame format this reader does not know.
    #[error("unsupported frame format {0}")]
    UnsupportedFormat(u16),
    /// The frame belongs to another key, version or length than promised.
    #[error("frame identity mismatch: expected {expected:?}, found {found:?}")]
    IdentityMismatch {
        /// What the descriptor promised.
        expected: FrameIdentity,
        /// What the header says.
        found: FrameIdentity,
    },
    /// The bytes do not hash to the checksum (torn or corrupted read).
    #[error("frame checksum mismatch: expected {expected:016x}, computed {computed:016x}")]
    ChecksumMismatch {
        /// Checksum promised by the descriptor.
        expected: u64,
        /// Checksum of the bytes read.
        computed: u64,
    },
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Checks that `frame` (header followed by payload) is exactly the version `expected`
/// names with checksum `checksum`, and returns its payload.
pub fn validate(frame: &[u8], expected: FrameIdentity, checksum: u64) -> Result<&[u8], FrameError> {
    let want = usize::try_from(expected.payload_len)
        .ok()
        .and_then(|n| n.checked_add(HEADER_LEN))
        .unwrap_or(usize::MAX);
    if frame.len() < want {
        return Err(FrameError::Truncated {
            got: frame.len(),
            expected: want,
        });
    }
    let (header, rest) = frame.split_at(HEADER_LEN);
    let payload = &rest[..expected.payload_len as usize];
    let mut check = FrameCheck::new(header, expected, checksum)?;
    check.payload(payload);
    check.finish()?;
    Ok(payload)
}

/// [`validate`] for a frame that arrives in pieces: the header first, then the payload in
/// order; [`FrameCheck::finish`] says whether the whole was the promised version. Bytes
/// fed before `finish` succeeds are not yet known to be right.
pub struct FrameCheck {
    header: [u8; HEADER_LEN],
    expected: FrameIdentity,
    checksum: u64,
    hasher: Box<Xxh3>,
    fed: u64,
}

impl std::fmt::Debug for FrameCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameCheck")
            .field("expected", &self.expected)
            .field("fed", &self.fed)
            .finish_non_exhaustive()
    }
}

impl FrameCheck {
    /// Checks the header (magic, format, identity) and starts hashing.
    pub fn new(header: &[u8], expected: FrameIdentity, checksum: u64) -> Result<Self, FrameError> {
        if header.len() < HEADER_LEN {
            return Err(FrameError::Truncated {
                got: header.len(),
                expected: HEADER_LEN,
            });
        }
        if header[0..4] != MAGIC
            || u16::from_le_bytes([header[6], header[7]]) as usize != HEADER_LEN
        {
            return Err(FrameError::BadMagic);
        }
        let format = u16::from_le_bytes([header[4], header[5]]);
        if format != FRAME_FORMAT {
            return Err(FrameError::UnsupportedFormat(format));
        }
        let found = FrameIdentity {
            key_hash: u64_at(header, 8),
            version: u64_at(header, 16),
            payload_len: u64_at(header, 24),
        };
        if found != expected {
            return Err(FrameError::IdentityMismatch { expected, found });
        }
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&header[..HEADER_LEN]);
        Ok(Self {
            header: h,
            expected,
            checksum,
            hasher: Box::new(Xxh3::new()),
            fed: 0,
        })
    }

    /// Feeds the next part of the payload.
    pub fn payload(&mut self, part: &[u8]) {
        self.hasher.update(part);
        self.fed += part.len() as u64;
    }

    /// Whether the payload fed, with the header, is the promised frame.
    pub fn finish(mut self) -> Result<(), FrameError> {
        if self.fed != self.expected.payload_len {
            return Err(FrameError::Truncated {
                got: usize::try_from(self.fed).unwrap_or(usize::MAX),
                expected: usize::try_from(self.expected.payload_len).unwrap_or(usize::MAX),
            });
        }
        self.hasher.update(&self.header[..CHECKSUM_AT]);
        let computed = self.hasher.digest();
        if computed != self.checksum || u64_at(&self.header, CHECKSUM_AT) != self.checksum {
            return Err(FrameError::ChecksumMismatch {
                expected: self.checksum,
                computed,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(key: &str, version: u64, payload: &[u8]) -> (Vec<u8>, FrameIdentity, u64) {
        let id = FrameIdentity {
            key_hash: key_hash(key),
            version,
            payload_len: payload.len() as u64,
        };
        let mut h = FrameHasher::new();
        // Feed in uneven parts, as a streaming body would.
        for part in payload.chunks(7) {
            h.update(part);
        }
        let (header, sum) = h.seal(id);
        let mut f = header.to_vec();
        f.extend_from_slice(payload);
        (f, id, sum)
    }

    #[test]
    fn round_trip_including_empty_payload() {
        for payload in [&b""[..], b"x", &[42u8; 1000]] {
            let (f, id, sum) = frame("photos/cat.jpg", 7, payload);
            assert_eq!(validate(&f, id, sum).unwrap(), payload);
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let (f, id, sum) = frame("k", 1, b"some payload bytes");
        for i in 0..f.len() * 8 {
            let mut g = f.clone();
            g[i / 8] ^= 1 << (i % 8);
            assert!(
                validate(&g, id, sum).is_err(),
                "flip of bit {i} went unnoticed"
            );
        }
    }

    #[test]
    fn wrong_identity_or_truncation_is_a_miss() {
        let (f, id, sum) = frame("k", 1, b"abc");
        let other = FrameIdentity { version: 2, ..id };
        assert!(matches!(
            validate(&f, other, sum),
            Err(FrameError::IdentityMismatch { .. })
        ));
        assert!(matches!(
            validate(&f[..f.len() - 1], id, sum),
            Err(FrameError::Truncated { .. })
        ));
        assert!(matches!(
            validate(&f, id, sum ^ 1),
            Err(FrameError::ChecksumMismatch { .. })
        ));
        assert!(matches!(
            validate(&[0u8; 80], id, sum),
            Err(FrameError::Truncated { .. }) | Err(FrameError::BadMagic)
        ));
    }
}
