//! The conditions of S3 requests: a read's `If-Match` / `If-None-Match` /
//! `If-(Un)Modified-Since` (`304`, `412`), and a write's `If-Match` / `If-None-Match`
//! against the key's current version ([`WriteIf`]).

use s3s::dto::{ETagCondition, Timestamp};
use s3s::{s3_error, S3Error, S3Result};

use crate::store::{StoreError, StoredVersion};

/// `If-Match` / `If-None-Match` / `If-(Un)Modified-Since` of a read: `Ok(true)` to answer
/// 304 (Not Modified).
pub(super) fn not_modified(
    etag: &str,
    modified: std::time::SystemTime,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<bool> {
    let matches = |c: &ETagCondition| match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag,
    };
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    let at = |t: &Timestamp| {
        let t: time::OffsetDateTime = t.clone().into();
        u64::try_from(t.unix_timestamp()).unwrap_or(0)
    };
    if let Some(c) = if_match {
        if !matches(c) {
            return Err(s3_error!(
                PreconditionFailed,
                "If-Match: the ETag is {etag:?}"
            ));
        }
    } else if let Some(t) = if_unmodified_since {
        if secs(modified) > at(t) {
            return Err(s3_error!(
                PreconditionFailed,
                "modified since If-Unmodified-Since"
            ));
        }
    }
    if let Some(c) = if_none_match {
        return Ok(matches(c));
    }
    Ok(if_modified_since.is_some_and(|t| secs(modified) <= at(t)))
}

/// `304 Not Modified`, with the ETag and Last-Modified the full answer would carry
/// (RFC 9110 §15.4.5), so a client's cache can tell what it still holds.
pub(super) fn not_modified_error(etag: &str, modified: std::time::SystemTime) -> S3Error {
    let mut e = s3_error!(NotModified);
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(&format!("\"{etag}\"")) {
        headers.insert(http::header::ETAG, v);
    }
    if let Ok(v) = http::HeaderValue::from_str(&httpdate::fmt_http_date(modified)) {
        headers.insert(http::header::LAST_MODIFIED, v);
    }
    e.set_headers(headers);
    e
}

/// The conditions of a write (PutObject, CompleteMultipartUpload), checked against the
/// key's current version before the body is read and again when it is published:
/// `If-Match` (`*`: the key exists; an ETag: the current version has it) and
/// `If-None-Match` (`*`: the key does not exist; an ETag: the current version has
/// another). A condition not met is `412 PreconditionFailed` and writes nothing.
#[derive(Debug, Default)]
pub(super) struct WriteIf {
    if_match: Option<ETagCondition>,
    if_none_match: Option<ETagCondition>,
}

impl WriteIf {
    /// The conditions a request carries.
    pub(super) fn new(
        if_match: Option<&ETagCondition>,
        if_none_match: Option<&ETagCondition>,
    ) -> Self {
        Self {
            if_match: if_match.cloned(),
            if_none_match: if_none_match.cloned(),
        }
    }

    /// Whether `cur`, the key's current version, meets the conditions.
    pub(super) fn check(&self, cur: Option<&StoredVersion>) -> Result<(), StoreError> {
        let failed = |why: String| Err(StoreError::PreconditionFailed(why));
        let etag = cur.map(super::s3_etag);
        match (&self.if_match, &etag) {
            (Some(_), None) => {
                return Err(StoreError::NoCurrentVersion(
                    "If-Match: the key does not exist".into(),
                ))
            }
            (Some(ETagCondition::ETag(want)), Some(have)) if want.value() != have => {
                return failed(format!("If-Match: the current ETag is {have:?}"));
            }
            _ => {}
        }
        match (&self.if_none_match, &etag) {
            (Some(ETagCondition::Any), Some(_)) => {
                failed("the key exists (If-None-Match: *)".into())
            }
            (Some(ETagCondition::ETag(not)), Some(have)) if not.value() == have => {
                failed(format!("If-None-Match: the current ETag is {have:?}"))
            }
            _ => Ok(()),
        }
    }
}

/// The conditions of a DeleteObject (`If-Match`, `x-amz-if-match-last-modified-time`,
/// `x-amz-if-match-size`) or of one key of DeleteObjects (its `ETag`, `LastModifiedTime`,
/// `Size`): an existing version that does not meet them stays (412); an absent key is
/// deleted all the same (S3 answers 204).
#[derive(Debug, Default)]
pub(super) struct DeleteIf {
    etag: Option<ETagCondition>,
    modified: Option<u64>,
    size: Option<i64>,
}

impl DeleteIf {
    /// The conditions a delete carries.
    pub(super) fn new(
        etag: Option<ETagCondition>,
        modified: Option<&Timestamp>,
        size: Option<i64>,
    ) -> Self {
        let modified = modified.map(|t| {
            let t: time::OffsetDateTime = t.clone().into();
            u64::try_from(t.unix_timestamp()).unwrap_or(0)
        });
        Self {
            etag,
            modified,
            size,
        }
    }

    /// Whether `cur`, the key's current version, may be deleted.
    pub(super) fn check(&self, cur: Option<&StoredVersion>) -> Result<(), StoreError> {
        let Some(v) = cur else { return Ok(()) };
        let failed = |why: String| Err(StoreError::PreconditionFailed(why));
        let etag = super::s3_etag(v);
        if let Some(ETagCondition::ETag(want)) = &self.etag {
            if want.value() != etag {
                return failed(format!("If-Match: the current ETag is {etag:?}"));
            }
        }
        let secs = v
            .created()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if self.modified.is_some_and(|m| m != secs) {
            return failed(
                "x-amz-if-match-last-modified-time: the object was modified at another time".into(),
            );
        }
        if self
            .size
            .is_some_and(|s| u64::try_from(s).ok() != Some(v.len()))
        {
            return failed(format!(
                "x-amz-if-match-size: the object has {} bytes",
                v.len()
            ));
        }
        Ok(())
    }
}
