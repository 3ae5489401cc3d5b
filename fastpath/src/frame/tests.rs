//! Tests of [`super`].

use super::*;

const BS: u32 = 16;

/// A whole frame with a table of `BS`-byte blocks, written as a gateway does.
fn frame(key: &str, version: u64, payload: &[u8]) -> (Vec<u8>, FrameIdentity, u64) {
    let id = FrameIdentity {
        key_hash: key_hash(key),
        version,
        payload_len: payload.len() as u64,
    };
    let mut f = vec![0u8; frame_len(id.payload_len, BS).unwrap()];
    let (head, rest) = f.split_at_mut(HEADER_LEN);
    let (body, table) = rest.split_at_mut(payload.len());
    let mut h = FrameHasher::new();
    let (mut written, mut done) = (0, 0);
    // Feed in uneven parts, as a streaming body would.
    for part in payload.chunks(7) {
        body[written..written + part.len()].copy_from_slice(part);
        written += part.len();
        h.update(part);
        done = fill_table(&id, BS, &body[..written], done, table);
    }
    assert_eq!(done, block_count(id.payload_len, BS));
    let (header, sum) = h.seal(id, BS);
    head.copy_from_slice(&header);
    (f, id, sum)
}

/// Validates `range` of frame `f` as a one-sided range read does.
fn range(f: &[u8], id: FrameIdentity, r: std::ops::Range<u64>) -> Result<(), FrameError> {
    let (first, n) = covering_blocks(&r, BS);
    let t = table_at(id.payload_len) as usize + first as usize * ENTRY_LEN;
    let start = HEADER_LEN + (first * BS as u64) as usize;
    let end = HEADER_LEN + (((first + n) * BS as u64).min(id.payload_len)) as usize;
    validate_blocks(
        &f[..HEADER_LEN],
        id,
        BS,
        first,
        &f[t..t + n as usize * ENTRY_LEN],
        &f[start..end],
    )
}

#[test]
fn ranges_validate_by_their_blocks_only() {
    let payload: Vec<u8> = (0..100u8).collect();
    let (mut f, id, _) = frame("k", 3, &payload);
    for r in [0..1, 0..16, 15..17, 16..32, 3..100, 99..100, 0..100] {
        range(&f, id, r.clone()).unwrap_or_else(|e| panic!("{r:?}: {e}"));
    }
    // One byte of block 2 (bytes 32..48) flipped: only ranges covering it fail.
    f[HEADER_LEN + 40] ^= 1;
    for r in [0..32, 48..100, 48..49, 31..32] {
        assert!(range(&f, id, r.clone()).is_ok(), "{r:?}");
    }
    for r in [32..33, 40..41, 0..100, 31..49] {
        assert_eq!(
            range(&f, id, r.clone()),
            Err(FrameError::BlockMismatch { index: 2 }),
            "{r:?}"
        );
    }
}

#[test]
fn a_table_entry_vouches_only_for_its_own_block_and_version() {
    let payload = [7u8; 64]; // four identical blocks
    let (f, id, _) = frame("k", 3, &payload);
    let (g, _, _) = frame("k", 4, &payload);
    // Entries of identical blocks differ (seeded by index), and by version.
    let t = table_at(64) as usize;
    assert_ne!(f[t..t + 8], f[t + 8..t + 16]);
    assert_ne!(f[t..t + 8], g[t..t + 8]);
    // Block 1 checked against entry 0 (a read at the wrong place) fails.
    let err = validate_blocks(
        &f[..HEADER_LEN],
        id,
        BS,
        1,
        &f[t..t + 8],
        &f[64 + 16..64 + 32],
    );
    assert_eq!(err, Err(FrameError::BlockMismatch { index: 1 }));
    // A header promising another block size, or none, fails.
    assert!(matches!(
        validate_blocks(&f[..HEADER_LEN], id, 32, 0, &f[t..t + 8], &f[64..96]),
        Err(FrameError::BlockSize { .. })
    ));
    let (h, _, _) = {
        let mut hh = FrameHasher::new();
        hh.update(&payload);
        (hh.seal(id, 0).0, 0, 0)
    };
    assert!(matches!(
        validate_blocks(&h, id, BS, 0, &f[t..t + 8], &f[64..80]),
        Err(FrameError::BlockSize { found: 0, .. })
    ));
    // Too few bytes for the entries given, or entries beyond the table, fail.
    assert!(matches!(
        validate_blocks(&f[..HEADER_LEN], id, BS, 0, &f[t..t + 16], &f[64..90]),
        Err(FrameError::Truncated { .. })
    ));
    assert!(matches!(
        validate_blocks(&f[..HEADER_LEN], id, BS, 4, &f[t..t + 8], &[]),
        Err(FrameError::Truncated { .. })
    ));
}

#[test]
fn covering_blocks_of_ranges() {
    assert_eq!(covering_blocks(&(0..16), 16), (0, 1));
    assert_eq!(covering_blocks(&(15..17), 16), (0, 2));
    assert_eq!(covering_blocks(&(16..16), 16), (1, 0));
    assert_eq!(covering_blocks(&(33..64), 16), (2, 2));
    assert_eq!(block_count(0, 16), 0);
    assert_eq!(block_count(17, 16), 2);
    assert_eq!(block_count(17, 0), 0);
    assert_eq!(frame_len(17, 16), Some(HEADER_LEN + 17 + 16));
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
    // Header and payload; the block-size field (bits 256..288) is what a whole read
    // does not use, and ranges check it against the descriptor (test above).
    for i in (0..(HEADER_LEN + 18) * 8).filter(|i| !(256..288).contains(i)) {
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
        validate(&f[..HEADER_LEN + 2], id, sum),
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

/// The checksums are XXH3's, whichever crate computes them: frames written to the disk
/// tier by an earlier build (whose XXH3 was xxhash-rust's), and readers built with
/// another XXH3, must find the same values. Lengths around XXH3's internal limits (16,
/// 128, 240 bytes, a 1 KiB stripe block, a 256-byte streaming buffer), streamed in uneven
/// parts.
#[test]
fn checksums_are_xxh3_as_xxhash_rust_computes_it() {
    use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed, Xxh3 as Reference};
    let data: Vec<u8> = (0..(1usize << 20) + 4097)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
        .collect();
    for len in [
        0,
        1,
        3,
        16,
        17,
        128,
        129,
        240,
        241,
        255,
        256,
        257,
        1024,
        1025,
        65_536,
        65_539,
        data.len(),
    ] {
        let bytes = &data[..len];
        let key = "k".repeat(len.min(300));
        assert_eq!(
            key_hash(&key),
            xxh3_64(key.as_bytes()),
            "key hash of {len} bytes"
        );
        let id = FrameIdentity {
            key_hash: 7,
            version: len as u64,
            payload_len: len as u64,
        };
        let mut seed = [0u8; 24];
        seed[..8].copy_from_slice(&7u64.to_le_bytes());
        seed[8..16].copy_from_slice(&(len as u64).to_le_bytes());
        seed[16..].copy_from_slice(&3u64.to_le_bytes());
        assert_eq!(
            block_entry(&id, 3, bytes),
            xxh3_64_with_seed(bytes, xxh3_64(&seed)),
            "block entry of {len} bytes"
        );
        let mut ours = FrameHasher::new();
        let mut reference = Reference::new();
        for part in bytes.chunks(997) {
            ours.update(part);
            reference.update(part);
        }
        let (header, checksum) = ours.seal(id, 0);
        reference.update(&header[..CHECKED_HEADER]);
        assert_eq!(
            checksum,
            reference.digest(),
            "frame checksum of {len} bytes"
        );
    }
}
