//! Integrity of S3 uploads: `Content-MD5` and the flexible checksums
//! (`x-amz-checksum-{crc32,crc32c,crc64nvme,sha1,sha256}`, as headers or aws-chunked
//! trailers) are computed over the body as it streams and compared at its end; a mismatch
//! is `BadDigest` and nothing is published. `s3s` parses the trailers but checks nothing.

use base64::Engine;
use md5::{Digest, Md5};
use s3s::checksum::ChecksumHasher;
use s3s::dto::{Checksum, ChecksumAlgorithm};
use s3s::{s3_error, S3Result};

/// What a client said its body hashes to, and the hashers that will tell.
pub struct Integrity {
    /// `Content-MD5`, decoded (checked to be 16 bytes before the body is read).
    content_md5: Option<[u8; 16]>,
    claimed: Checksum,
    md5: Option<Md5>,
    sums: ChecksumHasher,
}

/// The checksum fields an upload request carries (PutObject and UploadPart share them).
pub struct Claims<'a> {
    /// `Content-MD5` (base64).
    pub content_md5: Option<&'a String>,
    /// `x-amz-checksum-*` headers.
    pub checksum: Checksum,
    /// `x-amz-sdk-checksum-algorithm` / `x-amz-checksum-algorithm`: a trailer will carry it.
    pub algorithm: Option<&'a ChecksumAlgorithm>,
}

/// The [`Claims`] of an upload request (`PutObjectInput`, `UploadPartInput`: they name
/// the fields alike).
macro_rules! claims {
    ($i:expr) => {
        $crate::s3::digest::Claims {
            content_md5: $i.content_md5.as_ref(),
            checksum: s3s::dto::Checksum {
                checksum_crc32: $i.checksum_crc32.clone(),
                checksum_crc32c: $i.checksum_crc32c.clone(),
                checksum_sha1: $i.checksum_sha1.clone(),
                checksum_sha256: $i.checksum_sha256.clone(),
                checksum_crc64nvme: $i.checksum_crc64nvme.clone(),
                ..Default::default()
            },
            algorithm: $i.checksum_algorithm.as_ref(),
        }
    };
}
pub(crate) use claims;

impl Integrity {
    /// Hashers for what `claims` names; `md5` also computes the MD5 when nobody asked
    /// (`--s3-etag md5`).
    pub fn new(claims: Claims<'_>, md5: bool) -> S3Result<Self> {
        let mut sums = ChecksumHasher::default();
        let c = &claims.checksum;
        if c.checksum_crc32.is_some() {
            sums.crc32 = Some(Default::default());
        }
        if c.checksum_crc32c.is_some() {
            sums.crc32c = Some(Default::default());
        }
        if c.checksum_sha1.is_some() {
            sums.sha1 = Some(Default::default());
        }
        if c.checksum_sha256.is_some() {
            sums.sha256 = Some(Default::default());
        }
        if c.checksum_crc64nvme.is_some() {
            sums.crc64nvme = Some(Default::default());
        }
        if let Some(alg) = claims.algorithm {
            match alg.as_str() {
                ChecksumAlgorithm::CRC32 => sums.crc32 = Some(Default::default()),
                ChecksumAlgorithm::CRC32C => sums.crc32c = Some(Default::default()),
                ChecksumAlgorithm::SHA1 => sums.sha1 = Some(Default::default()),
                ChecksumAlgorithm::SHA256 => sums.sha256 = Some(Default::default()),
                ChecksumAlgorithm::CRC64NVME => sums.crc64nvme = Some(Default::default()),
                other => {
                    return Err(s3_error!(
                        InvalidArgument,
                        "unsupported checksum algorithm {other}"
                    ))
                }
            }
        }
        let content_md5 = match claims.content_md5 {
            None => None,
            Some(text) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .ok()
                    .and_then(|b| <[u8; 16]>::try_from(b).ok())
                    .ok_or_else(|| {
                        s3_error!(
                            InvalidDigest,
                            "Content-MD5 must be the base64 of a 16-byte MD5 digest"
                        )
                    })?,
            ),
        };
        Ok(Self {
            md5: (md5 || content_md5.is_some()).then(Md5::new),
            content_md5,
            claimed: claims.checksum,
            sums,
        })
    }

    /// Feeds the next body chunk.
    pub fn update(&mut self, chunk: &[u8]) {
        if let Some(m) = &mut self.md5 {
            m.update(chunk);
        }
        self.sums.update(chunk);
    }

    /// Compares what was computed with what was claimed (in headers, or in `trailers`);
    /// returns the MD5 when it was computed, and the checksums that were claimed (and so
    /// verified).
    pub fn verify(self, trailers: Option<&http::HeaderMap>) -> S3Result<Verified> {
        let md5: Option<[u8; 16]> = self.md5.map(|m| m.finalize().into());
        if let Some(claimed) = &self.content_md5 {
            if md5.as_ref() != Some(claimed) {
                return Err(s3_error!(
                    BadDigest,
                    "the body's MD5 does not match Content-MD5; nothing was stored"
                ));
            }
        }
        let mut claimed = self.claimed;
        if let Some(t) = trailers {
            let get = |name: &str| -> S3Result<Option<String>> {
                t.get(name)
                    .map(|v| {
                        v.to_str()
                            .map(str::to_owned)
                            .map_err(|_| s3_error!(InvalidArgument, "{name} is not text"))
                    })
                    .transpose()
            };
            claimed.checksum_crc32 = get("x-amz-checksum-crc32")?.or(claimed.checksum_crc32);
            claimed.checksum_crc32c = get("x-amz-checksum-crc32c")?.or(claimed.checksum_crc32c);
            claimed.checksum_sha1 = get("x-amz-checksum-sha1")?.or(claimed.checksum_sha1);
            claimed.checksum_sha256 = get("x-amz-checksum-sha256")?.or(claimed.checksum_sha256);
            claimed.checksum_crc64nvme =
                get("x-amz-checksum-crc64nvme")?.or(claimed.checksum_crc64nvme);
        }
        let got = self.sums.finalize();
        let pairs = [
            ("CRC32", &claimed.checksum_crc32, &got.checksum_crc32),
            ("CRC32C", &claimed.checksum_crc32c, &got.checksum_crc32c),
            ("SHA1", &claimed.checksum_sha1, &got.checksum_sha1),
            ("SHA256", &claimed.checksum_sha256, &got.checksum_sha256),
            (
                "CRC64NVME",
                &claimed.checksum_crc64nvme,
                &got.checksum_crc64nvme,
            ),
        ];
        for (name, claimed, got) in pairs {
            match (claimed, got) {
                (Some(c), Some(g)) if c != g => {
                    return Err(s3_error!(
                        BadDigest,
                        "the body's {name} checksum is {g}, not the {c} the request named; nothing was stored"
                    ))
                }
                (Some(_), None) => {
                    return Err(s3_error!(
                        InvalidRequest,
                        "a {name} checksum arrived in a trailer that was not announced"
                    ))
                }
                (None, Some(_)) => {
                    return Err(s3_error!(
                        InvalidRequest,
                        "the {name} checksum the request announced never arrived"
                    ))
                }
                _ => {}
            }
        }
        Ok(Verified { md5, claimed })
    }
}

/// What [`Integrity::verify`] found true of an upload.
pub struct Verified {
    /// Its MD5, when computed.
    pub md5: Option<[u8; 16]>,
    /// The checksums the request named, each matching the body.
    pub claimed: Checksum,
}

impl Verified {
    /// The claimed checksums other than SHA-256 (every version has that one), as a version
    /// keeps them.
    pub fn to_keep(&self) -> Vec<(String, String)> {
        let c = &self.claimed;
        [
            ("crc32", &c.checksum_crc32),
            ("crc32c", &c.checksum_crc32c),
            ("sha1", &c.checksum_sha1),
            ("crc64nvme", &c.checksum_crc64nvme),
        ]
        .into_iter()
        .filter_map(|(alg, v)| v.clone().map(|v| (alg.to_owned(), v)))
        .collect()
    }
}

/// The checksums a version keeps (and its SHA-256), as S3 answers them.
pub fn answered(kept: Option<&crate::store::ObjectHeaders>, sha256: &[u8; 32]) -> Checksum {
    let find = |alg: &str| {
        kept.and_then(|h| h.checksums.iter().find(|(a, _)| a == alg))
            .map(|(_, v)| v.clone())
    };
    Checksum {
        checksum_crc32: find("crc32"),
        checksum_crc32c: find("crc32c"),
        checksum_sha1: find("sha1"),
        checksum_crc64nvme: find("crc64nvme"),
        checksum_sha256: Some(sha256_b64(sha256)),
        ..Default::default()
    }
}

/// `x-amz-checksum-sha256` of a value, from the SHA-256 the store keeps.
pub fn sha256_b64(sha256: &[u8; 32]) -> String {
    base64::engine::general_purpose::STANDARD.encode(sha256)
}
