//! User metadata (`x-amz-meta-*`) and the standard headers S3 keeps with an object
//! (`Cache-Control`, `Content-Disposition`, `Content-Encoding`, `Content-Language`,
//! `Expires`): taken from PutObject, CreateMultipartUpload and CopyObject (`REPLACE`),
//! stored with the version ([`ObjectHeaders`]), and given back on GetObject and HeadObject.

use s3s::dto::{Metadata, Timestamp, TimestampFormat};
use s3s::{s3_error, S3Result};

use crate::store::ObjectHeaders;

/// What a write asks to keep with its version (`aws-chunked`, a transfer detail of the
/// upload, is not the object's content encoding).
pub(super) fn to_keep(
    metadata: Option<&Metadata>,
    cache_control: Option<&String>,
    content_disposition: Option<&String>,
    content_encoding: Option<&String>,
    content_language: Option<&String>,
    expires: Option<&Timestamp>,
) -> S3Result<ObjectHeaders> {
    let encoding = content_encoding.and_then(|e| {
        let kept: Vec<&str> = e
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("aws-chunked"))
            .collect();
        (!kept.is_empty()).then(|| kept.join(", "))
    });
    let expires = expires.and_then(|t| {
        let mut out = Vec::new();
        t.format(TimestampFormat::HttpDate, &mut out).ok()?;
        String::from_utf8(out).ok()
    });
    ObjectHeaders {
        cache_control: cache_control.cloned(),
        content_disposition: content_disposition.cloned(),
        content_encoding: encoding,
        content_language: content_language.cloned(),
        expires,
        ..Default::default()
    }
    .with_metadata(
        metadata
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone())),
    )
    .map_err(|why| s3_error!(MetadataTooLarge, "{why}"))
}

/// The stored user metadata, as S3 answers it (none: absent).
pub(super) fn metadata(h: Option<&ObjectHeaders>) -> Option<Metadata> {
    let h = h.filter(|h| !h.metadata.is_empty())?;
    Some(h.metadata.iter().cloned().collect())
}

/// The stored `Expires`, as S3 answers it.
pub(super) fn expires(h: Option<&ObjectHeaders>) -> Option<Timestamp> {
    let raw = h?.expires.as_deref()?;
    Timestamp::parse(TimestampFormat::HttpDate, raw).ok()
}

/// `to_keep` of an S3 input with the usual field names.
macro_rules! headers_of {
    ($i:expr) => {
        super::headers::to_keep(
            $i.metadata.as_ref(),
            $i.cache_control.as_ref(),
            $i.content_disposition.as_ref(),
            $i.content_encoding.as_ref(),
            $i.content_language.as_ref(),
            $i.expires.as_ref(),
        )
    };
}
pub(super) use headers_of;
