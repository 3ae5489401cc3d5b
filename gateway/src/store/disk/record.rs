//! One record of a segment file: a spilled version or a tombstone.
//!
//! ```text
//! magic "RSD1" (u32) | kind (u8) | 0 0 0 | body length (u32) | frame length (u32)
//! | key hash (u64) | XXH3-64 of the 24 bytes before it and of the body (u64) | body
//! ```
//!
//! A value's body is its frame exactly as it was in arena memory (header, payload, block
//! table, the gateway's trailer with key and SHA-256) followed by its heap extras as JSON
//! ([`Extras`]: media type, origin entity tag and confirmation time, S3 entity tag, user
//! metadata and stored headers). A tombstone has no body: the key's earlier records are
//! void. The hash covers every byte, so a record cut short by a crash, or any bit changed
//! since, fails validation and ends the scan of its file.

use std::hash::Hasher;

use xxhash_rust::xxh3::Xxh3;

use crate::store::version::{MediaType, Trailer};
use crate::store::{ObjectHeaders, OriginMeta, StoredVersion};

/// "RSD1", little-endian.
pub(super) const MAGIC: u32 = u32::from_le_bytes(*b"RSD1");
/// Bytes of a record's head.
pub(super) const HEAD: usize = 32;
/// A spilled version.
pub(super) const VALUE: u8 = 1;
/// A key whose earlier records are void.
pub(super) const TOMB: u8 = 2;

/// A record's head, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    pub kind: u8,
    pub body_len: u32,
    pub frame_len: u32,
    pub key_hash: u64,
    pub hash: u64,
}

impl Head {
    /// The head of a record of `kind` whose body is `parts`, concatenated.
    pub fn of(kind: u8, frame_len: u32, key_hash: u64, parts: &[&[u8]]) -> Option<Self> {
        let body_len = parts.iter().map(|p| p.len()).sum::<usize>();
        let mut head = Self {
            kind,
            body_len: u32::try_from(body_len).ok()?,
            frame_len,
            key_hash,
            hash: 0,
        };
        head.hash = head.digest(parts);
        Some(head)
    }

    /// The record's length on disk.
    pub fn record_len(&self) -> u64 {
        HEAD as u64 + u64::from(self.body_len)
    }

    fn prefix(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = self.kind;
        b[8..12].copy_from_slice(&self.body_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.frame_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.key_hash.to_le_bytes());
        b
    }

    fn digest(&self, parts: &[&[u8]]) -> u64 {
        let mut h = Xxh3::new();
        h.write(&self.prefix());
        for p in parts {
            h.write(p);
        }
        h.finish()
    }

    /// The head's bytes.
    pub fn encode(&self) -> [u8; HEAD] {
        let mut b = [0u8; HEAD];
        b[..24].copy_from_slice(&self.prefix());
        b[24..].copy_from_slice(&self.hash.to_le_bytes());
        b
    }

    /// A head as read, when it can be one (magic, kind and lengths; not yet the hash).
    pub fn parse(b: &[u8; HEAD]) -> Option<Self> {
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let head = Self {
            kind: b[4],
            body_len: u32_at(8),
            frame_len: u32_at(12),
            key_hash: u64_at(16),
            hash: u64_at(24),
        };
        let sane = match head.kind {
            VALUE => head.frame_len > 0 && head.frame_len <= head.body_len,
            TOMB => head.body_len == 0 && head.frame_len == 0,
            _ => false,
        };
        (u32_at(0) == MAGIC && b[5..8] == [0, 0, 0] && sane).then_some(head)
    }

    /// Whether `body` is this head's, unchanged.
    pub fn holds(&self, body: &[u8]) -> bool {
        body.len() == self.body_len as usize && self.digest(&[body]) == self.hash
    }
}

/// What a version carries on the heap, kept with its frame on disk.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Extras {
    /// The media type (the frame's trailer holds an index into this process's table).
    media_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etag: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    validated_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s3_etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    headers: Option<ObjectHeaders>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Extras {
    /// What `v` holds beyond its frame.
    pub fn of(v: &StoredVersion) -> Self {
        Self {
            media_type: v.content_type().to_owned(),
            etag: v.origin.etag().map(str::to_owned),
            validated_ms: v.origin.validated_ms(),
            s3_etag: v.s3_etag().map(str::to_owned),
            headers: v.headers().cloned(),
        }
    }

    /// As written in a record.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("extras serialize")
    }

    /// The extras of a record's body after its frame.
    pub fn decode(b: &[u8]) -> Option<Self> {
        serde_json::from_slice(b).ok()
    }

    /// The version's heap state again, with `frame`'s media type re-interned in this
    /// process's table.
    pub fn restore(self, frame: &mut [u8]) -> OriginMeta {
        let meta = OriginMeta::default();
        if let Some(e) = self.etag {
            meta.set_etag(e);
        }
        meta.set_validated_ms(self.validated_ms);
        if let Some(e) = self.s3_etag {
            meta.set_s3_etag(e);
        }
        if let Some(h) = self.headers {
            meta.set_headers(h);
        }
        let media = MediaType::intern(&self.media_type, &meta);
        Trailer::set_media(frame, media);
        meta
    }
}

/// The key in a frame's trailer (its last two bytes are the key's length).
pub(super) fn frame_key(frame: &[u8]) -> Option<&[u8]> {
    let n = frame.len();
    let key_len = u16::from_le_bytes([*frame.get(n.checked_sub(2)?)?, frame[n - 1]]) as usize;
    let start = n.checked_sub(2 + key_len)?;
    // The trailer's fixed part and a frame header come before the key.
    (start >= Trailer::FIXED + rasa_fastpath::frame::HEADER_LEN).then(|| &frame[start..n - 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_round_trips_and_any_changed_byte_fails() {
        let body = b"frame bytes and extras".to_vec();
        let head = Head::of(VALUE, 11, 42, &[&body[..11], &body[11..]]).unwrap();
        let parsed = Head::parse(&head.encode()).unwrap();
        assert_eq!(parsed, head);
        assert!(parsed.holds(&body));
        for i in 0..body.len() {
            let mut bad = body.clone();
            bad[i] ^= 1;
            assert!(!parsed.holds(&bad), "byte {i} changed");
        }
        assert!(!parsed.holds(&body[..body.len() - 1]), "a short body");
        let mut raw = head.encode();
        raw[0] ^= 1;
        assert_eq!(Head::parse(&raw), None, "a bad magic");
        let zeros = [0u8; HEAD];
        assert_eq!(Head::parse(&zeros), None, "zeros (a hole) are no record");
    }
}
