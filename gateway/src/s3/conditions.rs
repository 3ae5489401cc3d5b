//! The conditions of S3 requests in s3s's types, evaluated by the object service
//! (`objects::conditions`, as the native API's): a read's `If-Match` / `If-None-Match` /
//! `If-(Un)Modified-Since` (`304`, `412`), a write's `If-Match` / `If-None-Match` against the
//! key's current version ([`WriteIf`]); and a delete's S3-only conditions ([`DeleteIf`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use s3s::dto::{ETagCondition, Timestamp};
use s3s::{s3_error, S3Error, S3Result};

use crate::objects::conditions::{Conditions, Outcome, Tag, Tags, Validators};
use crate::store::{StoreError, StoredVersion};

/// An S3 entity-tag condition as the object service's.
fn tags(c: &ETagCondition) -> Tags {
    match c {
        ETagCondition::Any => Tags::Any,
        ETagCondition::ETag(e) => Tags::List(vec![Tag {
            opaque: e.value().to_owned(),
            weak: matches!(e, s3s::dto::ETag::Weak(_)),
        }]),
    }
}

fn date(t: &Timestamp) -> SystemTime {
    let t: time::OffsetDateTime = t.clone().into();
    UNIX_EPOCH + Duration::from_secs(u64::try_from(t.unix_timestamp()).unwrap_or(0))
}

/// `If-Match` / `If-None-Match` / `If-(Un)Modified-Since` of a read, evaluated by the object
/// service against the version's `etag` and time: `Ok(true)` to answer 304 (Not Modified).
pub(super) fn not_modified(
    etag: &str,
    modified: SystemTime,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<bool> {
    let conditions = Conditions {
        if_match: if_match.map(tags),
        if_none_match: if_none_match.map(tags),
        if_modified_since: if_modified_since.map(date),
        if_unmodified_since: if_unmodified_since.map(date),
    };
    match conditions.evaluate(Some(Validators { etag, modified }), true) {
        Ok(outcome) => Ok(outcome == Outcome::NotModified),
        Err(e) => Err(s3_error!(PreconditionFailed, "{e}")),
    }
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
pub(super) struct WriteIf(Conditions);

impl WriteIf {
    /// The conditions a request carries.
    pub(super) fn new(
        if_match: Option<&ETagCondition>,
        if_none_match: Option<&ETagCondition>,
    ) -> Self {
        Self(Conditions {
            if_match: if_match.map(tags),
            if_none_match: if_none_match.map(tags),
            ..Conditions::default()
        })
    }

    /// Whether `cur`, the key's current version, meets the conditions (evaluated by the
    /// object service: an `If-Match` on an absent key is `NoCurrentVersion`, S3's
    /// `NoSuchKey`).
    pub(super) fn check(&self, cur: Option<&StoredVersion>) -> Result<(), StoreError> {
        let etag = cur.map(super::s3_etag);
        let validators = cur.zip(etag.as_deref()).map(|(v, etag)| Validators {
            etag,
            modified: v.created(),
        });
        self.0.evaluate(validators, false).map(drop)
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
