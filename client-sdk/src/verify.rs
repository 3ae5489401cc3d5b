//! Checking that an HTTP body is the version the gateway named, while it streams.
//!
//! By the frame checksum (XXH3-64, inline, ~20 GB/s a core) when the answer carries one
//! of a frame format this SDK knows: the checksum covers the payload and a header rebuilt
//! from the key, the version id and the length, exactly as a one-sided read checks the
//! frame. Otherwise — or with [`crate::ClientBuilder::verify_sha256`] — by the SHA-256
//! the `ETag` names (~2 GB/s), on a thread of its own beside the transfer.

use bytes::Bytes;
use rasa_fastpath::frame::{key_hash, FrameHasher, FrameIdentity, FRAME_FORMAT};
use reqwest::header::HeaderMap;
use sha2::{Digest, Sha256};

use crate::Error;

/// The check running over a body.
pub(crate) enum BodyCheck {
    /// Streamed from the gateway's origin (uncached, or while it fills): nothing is named
    /// to check against.
    Nothing,
    /// The frame checksum.
    Frame {
        hasher: FrameHasher,
        key_hash: u64,
        version: u64,
        checksum: u64,
    },
    /// The SHA-256, hashed on a blocking thread fed through a channel.
    Sha256 {
        feed: tokio::sync::mpsc::Sender<Bytes>,
        hashed: tokio::task::JoinHandle<String>,
        want: String,
    },
}

fn header<'h>(h: &'h HeaderMap, name: &str) -> Option<&'h str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

impl BodyCheck {
    /// The check for the answer to a GET of `key` with headers `h`; `strong` insists on
    /// SHA-256.
    pub(crate) fn new(h: &HeaderMap, key: &str, strong: bool) -> Self {
        let uncached = header(h, rasa_openapi::PASS_THROUGH_HEADER).is_some()
            || header(h, rasa_openapi::FILLING_HEADER).is_some();
        if uncached {
            return Self::Nothing;
        }
        let frame = || {
            let format: u16 = header(h, rasa_openapi::FRAME_FORMAT_HEADER)?.parse().ok()?;
            let checksum = header(h, rasa_openapi::FRAME_CHECKSUM_HEADER)?;
            let version = header(h, rasa_openapi::VERSION_HEADER)?;
            (format == FRAME_FORMAT).then_some(())?;
            Some(Self::Frame {
                hasher: FrameHasher::new(),
                key_hash: key_hash(key),
                version: u64::from_str_radix(version, 16).ok()?,
                checksum: u64::from_str_radix(checksum, 16).ok()?,
            })
        };
        if let Some(check) = frame().filter(|_| !strong) {
            return check;
        }
        let want = header(h, "etag")
            .unwrap_or_default()
            .trim_matches('"')
            .to_owned();
        let (feed, mut chunks) = tokio::sync::mpsc::channel::<Bytes>(16);
        let hashed = tokio::task::spawn_blocking(move || {
            let mut hasher = Sha256::new();
            while let Some(c) = chunks.blocking_recv() {
                hasher.update(&c);
            }
            hex::encode(hasher.finalize())
        });
        Self::Sha256 { feed, hashed, want }
    }

    /// The next part of the body.
    pub(crate) async fn feed(&mut self, chunk: &Bytes) {
        match self {
            Self::Nothing => {}
            Self::Frame { hasher, .. } => hasher.update(chunk),
            // The hashing thread lives until the channel closes; it cannot go first.
            Self::Sha256 { feed, .. } => {
                let _ = feed.send(chunk.clone()).await;
            }
        }
    }

    /// Whether the `len` bytes fed were the version named.
    pub(crate) async fn finish(self, len: u64) -> Result<(), Error> {
        match self {
            Self::Nothing => Ok(()),
            Self::Frame {
                hasher,
                key_hash,
                version,
                checksum,
            } => {
                let id = FrameIdentity {
                    key_hash,
                    version,
                    payload_len: len,
                };
                let (_, computed) = hasher.seal(id, 0); // the checksum does not cover the block size
                if computed == checksum {
                    Ok(())
                } else {
                    Err(Error::Protocol(format!(
                        "the body's frame checksum is {computed:016x}, not the {checksum:016x} the gateway named: not the value"
                    )))
                }
            }
            Self::Sha256 { feed, hashed, want } => {
                drop(feed);
                let computed = hashed
                    .await
                    .map_err(|e| Error::Protocol(format!("hashing task failed: {e}")))?;
                if computed == want {
                    Ok(())
                } else {
                    Err(Error::Protocol(format!(
                        "the body's SHA-256 is {computed}, not the {want} the gateway named: not the value"
                    )))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderMap, HeaderValue};

    use super::*;

    /// Headers as the gateway sends them for `payload` stored as `key` version `version`.
    fn answer(key: &str, version: u64, payload: &[u8]) -> HeaderMap {
        let mut hasher = FrameHasher::new();
        hasher.update(payload);
        let (_, checksum) = hasher.seal(
            FrameIdentity {
                key_hash: key_hash(key),
                version,
                payload_len: payload.len() as u64,
            },
            0,
        );
        let mut h = HeaderMap::new();
        let mut set = |k: &'static str, v: String| {
            h.insert(k, HeaderValue::from_str(&v).unwrap());
        };
        set(rasa_openapi::VERSION_HEADER, format!("{version:016x}"));
        set(
            rasa_openapi::FRAME_CHECKSUM_HEADER,
            format!("{checksum:016x}"),
        );
        set(rasa_openapi::FRAME_FORMAT_HEADER, FRAME_FORMAT.to_string());
        set(
            "etag",
            format!("\"{}\"", hex::encode(Sha256::digest(payload))),
        );
        h
    }

    async fn check(h: &HeaderMap, key: &str, strong: bool, body: &[u8]) -> Result<(), Error> {
        let mut c = BodyCheck::new(h, key, strong);
        for part in body.chunks(5) {
            c.feed(&Bytes::copy_from_slice(part)).await;
        }
        c.finish(body.len() as u64).await
    }

    #[tokio::test]
    async fn the_frame_checksum_accepts_the_version_and_nothing_else() {
        let body = b"the bytes of version 7 of k".to_vec();
        let h = answer("k", 7, &body);
        assert!(matches!(
            BodyCheck::new(&h, "k", false),
            BodyCheck::Frame { .. }
        ));
        check(&h, "k", false, &body).await.unwrap();
        let mut flipped = body.clone();
        flipped[3] ^= 1;
        let e = check(&h, "k", false, &flipped).await.unwrap_err();
        assert!(e.to_string().contains("frame checksum"), "{e}");
        // The same bytes under another key, or cut short, are not the version either.
        assert!(check(&h, "other", false, &body).await.is_err());
        assert!(check(&h, "k", false, &body[..10]).await.is_err());
    }

    #[tokio::test]
    async fn sha256_when_asked_for_or_when_the_format_is_unknown() {
        let body = b"payload".to_vec();
        let mut h = answer("k", 1, &body);
        assert!(matches!(
            BodyCheck::new(&h, "k", true),
            BodyCheck::Sha256 { .. }
        ));
        check(&h, "k", true, &body).await.unwrap();
        h.insert(rasa_openapi::FRAME_FORMAT_HEADER, HeaderValue::from(99));
        assert!(matches!(
            BodyCheck::new(&h, "k", false),
            BodyCheck::Sha256 { .. }
        ));
        let e = check(&h, "k", false, b"payloaD").await.unwrap_err();
        assert!(e.to_string().contains("SHA-256"), "{e}");
        h.insert(
            rasa_openapi::PASS_THROUGH_HEADER,
            HeaderValue::from_static("true"),
        );
        assert!(matches!(BodyCheck::new(&h, "k", false), BodyCheck::Nothing));
    }
}
