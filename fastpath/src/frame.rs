//! The value frame: how one stored version is laid out in arena memory.
//!
//! A one-sided reader gets raw bytes with nobody on the server side to vouch for them, so
//! every stored value carries a header that lets the reader prove it got exactly the
//! version its descriptor names, whole — or, for a range, exactly the blocks it covers:
//!
//! ```text
//! offset  size  field
//!      0     4  magic "RASA"
//!      4     2  frame format version (2), little-endian
//!      6     2  header length (64)
//!      8     8  key hash: XXH3-64 of the key's UTF-8 bytes
//!     16     8  object version id
//!     24     8  payload length
//!     32     4  block size in bytes (0: no block table)
//!     36    20  reserved, zero
//!     56     8  frame checksum: XXH3-64 over payload ‖ header[0..32]
//!     64     …  payload
//!   64+len  8n  block table: n = ⌈len / block size⌉ entries, entry i the XXH3-64 of
//!               block i seeded with (key hash, version, i)
//! ```
//!
//! All integers are little-endian. The checksum covers the payload first and the identity
//! part of the header last, so a writer can hash the payload while it streams in and write
//! the header when the length is known; an HTTP reader rebuilds that part from the key, the
//! version and the length. XXH3-64 was chosen over SHA-256 for this job because it runs at
//! memory speed (~24 GB/s a core on our machines versus ~1.6 GB/s for SHA-256), so
//! validating costs a few percent of a read; SHA-256 stays the content identity (the ETag)
//! and an opt-in strong check.
//!
//! The block table lets a reader validate a range without reading the whole value: it
//! reads the header, the blocks covering the range and their entries. Each entry is seeded
//! with the identity and the block's index, so an entry only vouches for its own block of
//! its own version: a table entry and a block torn from different versions, or a block read
//! at the wrong place, do not match. A whole read checks the whole-value checksum instead
//! (one sequential hash, no table to read; `cargo bench -p rasa-fastpath --bench
//! checksums` measures both).

use std::hash::Hasher as _;

// XXH3 by twox-hash, which uses AVX2 where the CPU has it (chosen at run time): 1.2-1.8x
// the speed of a portable build's SSE2 code on every byte a frame carries.
use twox_hash::XxHash3_64 as Xxh3;

/// Magic bytes at the start of every frame.
pub const MAGIC: [u8; 4] = *b"RASA";
/// Frame format version written by this crate.
pub const FRAME_FORMAT: u16 = 2;
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
/// Where the header holds the payload length.
pub const LENGTH_AT: usize = 24;
/// Where the header holds the block size.
pub const BLOCK_SIZE_AT: usize = 32;
/// How much of the header (from its start) the frame checksum covers: the identity.
pub const CHECKED_HEADER: usize = 32;
/// Bytes of one block-table entry.
pub const ENTRY_LEN: usize = 8;
/// The block size a gateway writes unless told otherwise (see `bench/results.md`: small
/// enough that a 64 KiB range reads at most two blocks, large enough that the table is
/// 1/8192 of the payload).
pub const DEFAULT_BLOCK_SIZE: u32 = 64 << 10;

/// Number of blocks (and table entries) of a payload of `payload_len` bytes.
pub fn block_count(payload_len: u64, block_size: u32) -> u64 {
    if block_size == 0 {
        0
    } else {
        payload_len.div_ceil(u64::from(block_size))
    }
}

/// Bytes of a frame in memory: header, payload and block table; `None` when that does not
/// fit this machine's address space.
pub fn frame_len(payload_len: u64, block_size: u32) -> Option<usize> {
    let table = block_count(payload_len, block_size).checked_mul(ENTRY_LEN as u64)?;
    let len = payload_len
        .checked_add(table)?
        .checked_add(HEADER_LEN as u64)?;
    usize::try_from(len).ok()
}

/// Where the block table starts, from the start of the frame.
pub fn table_at(payload_len: u64) -> u64 {
    HEADER_LEN as u64 + payload_len
}

/// The table entry for block `index` (bytes `block`) of version `id`.
pub fn block_entry(id: &FrameIdentity, index: u64, block: &[u8]) -> u64 {
    let mut seed = [0u8; 24];
    seed[..8].copy_from_slice(&id.key_hash.to_le_bytes());
    seed[8..16].copy_from_slice(&id.version.to_le_bytes());
    seed[16..].copy_from_slice(&index.to_le_bytes());
    Xxh3::oneshot_with_seed(Xxh3::oneshot(&seed), block)
}

/// Hash of a key as stored in frame headers.
pub fn key_hash(key: &str) -> u64 {
    Xxh3::oneshot(key.as_bytes())
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
        self.0.write(payload_part);
    }

    /// Finishes the frame: returns the complete header (checksum included) for `id` and a
    /// table of `block_size` blocks (0: none), and the checksum. `id.payload_len` must
    /// equal the number of payload bytes fed.
    pub fn seal(mut self, id: FrameIdentity, block_size: u32) -> ([u8; HEADER_LEN], u64) {
        let mut header = header_prefix(id);
        self.0.write(&header[..CHECKED_HEADER]);
        header[BLOCK_SIZE_AT..BLOCK_SIZE_AT + 4].copy_from_slice(&block_size.to_le_bytes());
        let checksum = self.0.finish();
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
    h[LENGTH_AT..LENGTH_AT + 8].copy_from_slice(&id.payload_len.to_le_bytes());
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
    /// The header's block size is not the one promised (no table to check a range by).
    #[error("frame block size {found}, expected {expected}")]
    BlockSize {
        /// What the descriptor promised.
        expected: u32,
        /// What the header says.
        found: u32,
    },
    /// A block does not hash to its table entry (torn or corrupted read).
    #[error("block {index} does not match its table entry")]
    BlockMismatch {
        /// Index of the block.
        index: u64,
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
        check_header(header, expected)?;
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
        self.hasher.write(part);
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
        self.hasher.write(&self.header[..CHECKED_HEADER]);
        let computed = self.hasher.finish();
        if computed != self.checksum || u64_at(&self.header, CHECKSUM_AT) != self.checksum {
            return Err(FrameError::ChecksumMismatch {
                expected: self.checksum,
                computed,
            });
        }
        Ok(())
    }
}

/// Writes the table entries of the blocks of `payload` — the first `payload.len()` bytes
/// of the payload of `id`, in place — that are complete, from block `from` on, into
/// `table` (the frame's block table); returns the number of blocks done. A writer calls it
/// after each part of the body, so each block is hashed once, while it is still in cache.
pub fn fill_table(
    id: &FrameIdentity,
    block_size: u32,
    payload: &[u8],
    from: u64,
    table: &mut [u8],
) -> u64 {
    if block_size == 0 {
        return 0;
    }
    let bs = u64::from(block_size);
    let done = if payload.len() as u64 >= id.payload_len {
        block_count(id.payload_len, block_size)
    } else {
        payload.len() as u64 / bs
    };
    for i in from..done {
        let start = (i * bs) as usize;
        let end = ((i + 1) * bs).min(id.payload_len) as usize;
        let entry = block_entry(id, i, &payload[start..end]);
        let at = i as usize * ENTRY_LEN;
        table[at..at + ENTRY_LEN].copy_from_slice(&entry.to_le_bytes());
    }
    done.max(from)
}

/// Checks a frame header: magic, format and the identity `expected`; returns the block
/// size it records.
pub fn check_header(header: &[u8], expected: FrameIdentity) -> Result<u32, FrameError> {
    if header.len() < HEADER_LEN {
        return Err(FrameError::Truncated {
            got: header.len(),
            expected: HEADER_LEN,
        });
    }
    if header[0..4] != MAGIC || u16::from_le_bytes([header[6], header[7]]) as usize != HEADER_LEN {
        return Err(FrameError::BadMagic);
    }
    let format = u16::from_le_bytes([header[4], header[5]]);
    if format != FRAME_FORMAT {
        return Err(FrameError::UnsupportedFormat(format));
    }
    let found = FrameIdentity {
        key_hash: u64_at(header, 8),
        version: u64_at(header, VERSION_AT),
        payload_len: u64_at(header, LENGTH_AT),
    };
    if found != expected {
        return Err(FrameError::IdentityMismatch { expected, found });
    }
    if header[BLOCK_SIZE_AT + 4..CHECKSUM_AT]
        .iter()
        .any(|&b| b != 0)
    {
        return Err(FrameError::BadMagic);
    }
    let mut bs = [0u8; 4];
    bs.copy_from_slice(&header[BLOCK_SIZE_AT..BLOCK_SIZE_AT + 4]);
    Ok(u32::from_le_bytes(bs))
}

/// The blocks covering bytes `range` of a payload of `payload_len` bytes: the first block's
/// index and how many (none for an empty range). `block_size` must not be 0.
pub fn covering_blocks(range: &std::ops::Range<u64>, block_size: u32) -> (u64, u64) {
    let bs = u64::from(block_size.max(1));
    if range.start >= range.end {
        return (range.start / bs, 0);
    }
    let first = range.start / bs;
    (first, (range.end - 1) / bs + 1 - first)
}

/// Checks blocks `first..` of the version `expected` read one-sided: `header` is the
/// frame header, `entries` their table entries and `blocks` the blocks themselves, one
/// after another (the last may be short, at the end of the payload). Every block must hash
/// to its entry; any that does not fails the whole.
pub fn validate_blocks(
    header: &[u8],
    expected: FrameIdentity,
    block_size: u32,
    first: u64,
    entries: &[u8],
    blocks: &[u8],
) -> Result<(), FrameError> {
    let found = check_header(header, expected)?;
    if found != block_size || block_size == 0 {
        return Err(FrameError::BlockSize {
            expected: block_size,
            found,
        });
    }
    let n = (entries.len() / ENTRY_LEN) as u64;
    let bs = u64::from(block_size);
    let end = ((first + n) * bs).min(expected.payload_len);
    let want = usize::try_from(end.saturating_sub(first * bs)).unwrap_or(usize::MAX);
    if n == 0 || first + n > block_count(expected.payload_len, block_size) || blocks.len() != want {
        return Err(FrameError::Truncated {
            got: blocks.len(),
            expected: want,
        });
    }
    for (i, block) in blocks.chunks(block_size as usize).enumerate() {
        let index = first + i as u64;
        if block_entry(&expected, index, block) != u64_at(entries, i * ENTRY_LEN) {
            return Err(FrameError::BlockMismatch { index });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
