//! Object operations: GetObject, HeadObject, PutObject, DeleteObject(s), CopyObject, over
//! the store (and the origin: misses read through, writes follow `--write-policy`).

use crate::catalog;
use std::sync::Arc;

use bytes::Bytes;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};

use super::conditions::{not_modified, not_modified_error, DeleteIf, WriteIf};
use super::digest::Integrity;
use super::{headers, EtagMode, Located, S3Front};
use crate::objects::read::{Read, ReadIntent};
use crate::objects::ObjectError;
use crate::origin::readthrough::FetchError;
use crate::origin::OriginError;
use crate::store::{ObjectHeaders, Sealed, StoreError, StoredVersion, VersionId};

/// A store failure as S3 names it.
pub(super) fn store_error(e: StoreError) -> S3Error {
    match e {
        StoreError::InsufficientStorage { .. } => {
            s3_error!(EntityTooLarge, "{e}")
        }
        StoreError::Busy { .. } => s3_error!(SlowDown, "{e}"),
        StoreError::LengthMismatch { .. } => s3_error!(IncompleteBody, "{e}"),
        StoreError::PreconditionFailed(why) => s3_error!(PreconditionFailed, "{why}"),
        StoreError::NoCurrentVersion(why) => s3_error!(NoSuchKey, "{why}"),
        StoreError::ChecksumMismatch { .. } => s3_error!(BadDigest, "{e}"),
        StoreError::Fabric(_) | StoreError::Upload(_) => s3_error!(InternalError, "{e}"),
    }
}

/// An origin failure as S3 names it.
pub(super) fn origin_error(e: OriginError) -> S3Error {
    match e {
        OriginError::Timeout(_) => s3_error!(ServiceUnavailable, "the origin: {e}"),
        OriginError::Denied(_) => s3_error!(AccessDenied, "the origin: {e}"),
        OriginError::Failed(_) => s3_error!(ServiceUnavailable, "the origin: {e}"),
    }
}

fn fetch_error(e: FetchError) -> S3Error {
    match e {
        FetchError::Origin(o) => origin_error(o),
        FetchError::TooLarge { .. } => s3_error!(
            NotImplemented,
            "{e}; read it through the native API (which streams it from the origin)"
        ),
        FetchError::Busy(_) => s3_error!(SlowDown, "{e}"),
        FetchError::Store(_) => s3_error!(InternalError, "{e}"),
    }
}

/// An object-service failure as S3 names it.
pub(super) fn object_error(e: ObjectError) -> S3Error {
    match e {
        ObjectError::NotFound(_) => s3_error!(NoSuchKey),
        ObjectError::VersionNotFound { version, .. } => {
            s3_error!(NoSuchVersion, "version {version} is not retained")
        }
        ObjectError::Store(e) => store_error(e),
        ObjectError::Origin(e) => origin_error(e),
        ObjectError::Fetch(e) => fetch_error(e),
        e @ ObjectError::Moved(_) => s3_error!(SlowDown, "{e}"),
    }
}

/// The version `version_id` names (`None`: the current one; `null` is S3's name for it).
fn version_of(version_id: Option<&str>) -> S3Result<Option<VersionId>> {
    match version_id.filter(|v| *v != "null") {
        Some(raw) => raw
            .parse::<VersionId>()
            .map(Some)
            .map_err(|_| s3_error!(InvalidArgument, "{raw:?} is not a version id")),
        None => Ok(None),
    }
}

/// The version a read asks for: `version_id`, else the current one (through the origin on
/// a miss).
pub(super) async fn lookup(at: &Located, version_id: Option<&str>) -> S3Result<Arc<StoredVersion>> {
    let version = version_of(version_id)?;
    at.objects
        .lookup(&at.key, version)
        .await
        .map_err(object_error)
}

pub(super) async fn get_object(
    front: &S3Front,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let i = req.input;
    if i.part_number.is_some() {
        return Err(s3_error!(
            NotImplemented,
            "partNumber reads are not supported"
        ));
    }
    let at = front.key(&i.bucket, &i.key)?;
    let range = i.range.as_ref().map(Range::to_header_string);
    let conditional = i.if_match.is_some()
        || i.if_none_match.is_some()
        || i.if_modified_since.is_some()
        || i.if_unmodified_since.is_some();
    // `x-amz-checksum-mode: ENABLED` (which aws-sdk-s3 sends on every GET) does not hold a
    // cold object back until stored: a stream carries no checksum, as an S3 object
    // uploaded without one; a stored version answers with its SHA-256.
    let intent = ReadIntent {
        version: version_of(i.version_id.as_deref())?,
        range: range.as_deref(),
        conditional,
        ..ReadIntent::get(&at.key)
    };
    // Through the object service, as the HTTP front's GET: a cold object streams as it
    // fills, one too large to cache passes through from the origin.
    let mut output = match at.objects.read(&intent).await.map_err(object_error)? {
        Read::Stored(v) => stored(front, &i, &v)?,
        cold => super::streamed::output(cold)?,
    };
    // The headers the request asks for (response-*), over the stored ones.
    let o = &mut output;
    override_with(&mut o.content_type, i.response_content_type);
    override_with(&mut o.cache_control, i.response_cache_control);
    override_with(&mut o.content_disposition, i.response_content_disposition);
    override_with(&mut o.content_encoding, i.response_content_encoding);
    override_with(&mut o.content_language, i.response_content_language);
    override_with(&mut o.expires, i.response_expires);
    Ok(S3Response::new(output))
}

fn override_with<T>(field: &mut Option<T>, asked: Option<T>) {
    if asked.is_some() {
        *field = asked;
    }
}

/// A GET of the stored version `v`: its preconditions, its range, its stored headers.
fn stored(front: &S3Front, i: &GetObjectInput, v: &StoredVersion) -> S3Result<GetObjectOutput> {
    let etag = front.etag(v);
    if not_modified(
        &etag,
        v.created(),
        i.if_match.as_ref(),
        i.if_none_match.as_ref(),
        i.if_modified_since.as_ref(),
        i.if_unmodified_since.as_ref(),
    )? {
        return Err(not_modified_error(&etag, v.created()));
    }
    let len = v.len();
    let (range, content_range) = match &i.range {
        None => (0..len, None),
        Some(r) => {
            let r = r.check(len)?;
            let cr = format!("bytes {}-{}/{len}", r.start, r.end - 1);
            (r, Some(cr))
        }
    };
    let whole = content_range.is_none();
    // Asked for (x-amz-checksum-mode: ENABLED), and of the whole object only: S3 omits
    // them on a part.
    let sums = if whole && checksum_asked(i.checksum_mode.as_ref()) {
        super::digest::answered(v.headers(), &v.sha256())
    } else {
        Checksum::default()
    };
    let kept = |f: fn(&ObjectHeaders) -> &Option<String>| v.headers().and_then(|h| f(h).clone());
    let body = Bytes::from_owner(v.payload().slice(range.start as usize, range.end as usize));
    catalog::S3_BYTES_SERVED
        .counter()
        .increment(range.end - range.start);
    Ok(GetObjectOutput {
        body: Some(StreamingBlob::from(s3s::Body::from(body))),
        content_length: Some((range.end - range.start) as i64),
        content_range,
        accept_ranges: Some("bytes".into()),
        last_modified: Some(Timestamp::from(v.created())),
        e_tag: Some(ETag::Strong(etag)),
        version_id: Some(v.version().to_string()),
        checksum_sha256: sums.checksum_sha256,
        checksum_crc32: sums.checksum_crc32,
        checksum_crc32c: sums.checksum_crc32c,
        checksum_sha1: sums.checksum_sha1,
        checksum_crc64nvme: sums.checksum_crc64nvme,
        content_type: Some(v.content_type().to_owned()),
        metadata: headers::metadata(v.headers()),
        cache_control: kept(|h| &h.cache_control),
        content_disposition: kept(|h| &h.content_disposition),
        content_encoding: kept(|h| &h.content_encoding),
        content_language: kept(|h| &h.content_language),
        expires: headers::expires(v.headers()),
        ..Default::default()
    })
}

pub(super) async fn head_object(
    front: &S3Front,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let i = req.input;
    let at = front.key(&i.bucket, &i.key)?;
    let conditional = i.if_match.is_some()
        || i.if_none_match.is_some()
        || i.if_modified_since.is_some()
        || i.if_unmodified_since.is_some()
        // A checksum is known only of a stored version.
        || checksum_asked(i.checksum_mode.as_ref());
    let intent = ReadIntent {
        version: version_of(i.version_id.as_deref())?,
        body: false,
        conditional,
        ..ReadIntent::get(&at.key)
    };
    // Through the object service, as the HTTP front's HEAD: a key not held here is
    // answered from the origin's HEAD, without fetching the object.
    let v = match at.objects.read(&intent).await.map_err(object_error)? {
        Read::Stored(v) => v,
        Read::OriginHead(head) => return Ok(S3Response::new(origin_head(&head))),
        other => {
            return Err(s3_error!(
                InternalError,
                "a HEAD resolved to a body: {other:?}"
            ))
        }
    };
    let etag = front.etag(&v);
    if not_modified(
        &etag,
        v.created(),
        i.if_match.as_ref(),
        i.if_none_match.as_ref(),
        i.if_modified_since.as_ref(),
        i.if_unmodified_since.as_ref(),
    )? {
        return Err(not_modified_error(&etag, v.created()));
    }
    let sums = if checksum_asked(i.checksum_mode.as_ref()) {
        super::digest::answered(v.headers(), &v.sha256())
    } else {
        Checksum::default()
    };
    Ok(S3Response::new(HeadObjectOutput {
        content_length: Some(v.len() as i64),
        content_type: Some(v.content_type().to_owned()),
        accept_ranges: Some("bytes".into()),
        last_modified: Some(Timestamp::from(v.created())),
        e_tag: Some(ETag::Strong(etag)),
        version_id: Some(v.version().to_string()),
        checksum_sha256: sums.checksum_sha256,
        checksum_crc32: sums.checksum_crc32,
        checksum_crc32c: sums.checksum_crc32c,
        checksum_sha1: sums.checksum_sha1,
        checksum_crc64nvme: sums.checksum_crc64nvme,
        metadata: headers::metadata(v.headers()),
        cache_control: v.headers().and_then(|h| h.cache_control.clone()),
        content_disposition: v.headers().and_then(|h| h.content_disposition.clone()),
        content_encoding: v.headers().and_then(|h| h.content_encoding.clone()),
        content_language: v.headers().and_then(|h| h.content_language.clone()),
        expires: headers::expires(v.headers()),
        ..Default::default()
    }))
}

/// What the origin said of a key not held here: its length, type, entity tag (the one the
/// object gets once stored from it) and modification time; no version yet.
fn origin_head(head: &crate::origin::OriginHead) -> HeadObjectOutput {
    HeadObjectOutput {
        content_length: Some(head.length as i64),
        content_type: Some(
            head.content_type
                .clone()
                .unwrap_or_else(|| crate::media::DEFAULT_CONTENT_TYPE.to_owned()),
        ),
        accept_ranges: Some("bytes".into()),
        e_tag: head
            .etag
            .as_deref()
            .map(|e| ETag::Strong(e.trim_matches('"').to_owned())),
        last_modified: head.modified.map(Timestamp::from),
        ..Default::default()
    }
}

/// Whether a read asked for the object's checksum (`x-amz-checksum-mode: ENABLED`); S3
/// returns it only then.
fn checksum_asked(mode: Option<&s3s::dto::ChecksumMode>) -> bool {
    mode.is_some_and(|m| {
        m.as_str()
            .eq_ignore_ascii_case(s3s::dto::ChecksumMode::ENABLED)
    })
}

/// The ETag a new upload gets: its MD5 when the client sent `Content-MD5` (or with
/// `--s3-etag md5`), else none (the SHA-256 serves).
fn upload_etag(front: &S3Front, md5: Option<[u8; 16]>, asked: bool) -> Option<String> {
    md5.filter(|_| asked || front.etag == EtagMode::Md5)
        .map(hex::encode)
}

/// Publishes `sealed` through the object service (write-through first, when configured),
/// if the key's current version (or its absence) meets `cond` at that moment.
pub(super) async fn publish(
    at: &Located,
    sealed: Sealed,
    cond: &WriteIf,
) -> S3Result<Arc<StoredVersion>> {
    let stored = at
        .objects
        .put(sealed, |cur| cond.check(cur))
        .await
        .map_err(object_error)?;
    catalog::S3_OBJECTS_STORED.counter().increment(1);
    Ok(stored)
}

pub(super) async fn put_object(
    front: &S3Front,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let trailers = req.trailing_headers;
    let headers = req.headers;
    let i = req.input;
    let at = front.key(&i.bucket, &i.key)?;
    let keep = headers::headers_of!(i)?;
    let cond = WriteIf::new(i.if_match.as_ref(), i.if_none_match.as_ref());
    at.objects
        .precheck(&at.key, |cur| cond.check(cur))
        .await
        .map_err(object_error)?;
    let len = super::payload_length(i.content_length, &headers)?;
    if len > front.limits.max_object_size {
        return Err(s3_error!(
            EntityTooLarge,
            "{len} bytes is over the gateway's maximum object size ({} bytes)",
            front.limits.max_object_size
        ));
    }
    let mut integrity = Integrity::new(super::digest::claims!(i), front.etag == EtagMode::Md5)?;
    let ctype = i
        .content_type
        .clone()
        .unwrap_or_else(|| crate::media::DEFAULT_CONTENT_TYPE.to_owned());
    let pace = front.pace();
    let mut upload = at
        .store()
        .writes()
        .begin_streaming(&at.key, &ctype, len, None)
        .await
        .map_err(store_error)?;
    if let Some(mut body) = i.body {
        while let Some(chunk) = front.next_chunk(&mut body, &pace, upload.written()).await? {
            integrity.update(&chunk);
            at.store()
                .writes()
                .write(&mut upload, &chunk)
                .await
                .map_err(store_error)?;
        }
    }
    let trailers = trailers.and_then(|t| t.take());
    let verified = integrity.verify(trailers.as_ref())?;
    upload.set_s3_etag(upload_etag(front, verified.md5, i.content_md5.is_some()));
    let mut keep = keep;
    keep.checksums = verified.to_keep();
    upload.set_headers(keep);
    let sealed = at.store().writes().seal(upload).map_err(store_error)?;
    let v = publish(&at, sealed, &cond).await?;
    // The checksums the request named, verified, and the SHA-256 (as S3 answers).
    let sums = super::digest::answered(v.headers(), &v.sha256());
    Ok(S3Response::new(PutObjectOutput {
        e_tag: Some(ETag::Strong(front.etag(&v))),
        version_id: Some(v.version().to_string()),
        checksum_sha256: sums.checksum_sha256,
        checksum_crc32: sums.checksum_crc32,
        checksum_crc32c: sums.checksum_crc32c,
        checksum_sha1: sums.checksum_sha1,
        checksum_crc64nvme: sums.checksum_crc64nvme,
        ..Default::default()
    }))
}

/// Deletes `key` if `cond` holds (write-through: at the origin first). Absent keys are
/// not an error.
pub(super) async fn delete_key(at: &Located, cond: &DeleteIf) -> S3Result<()> {
    at.objects
        .delete(&at.key, |cur| cond.check(cur))
        .await
        .map_err(object_error)?;
    Ok(())
}

pub(super) async fn delete_object(
    front: &S3Front,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let i = req.input;
    if i.version_id.is_some() {
        return Err(s3_error!(
            NotImplemented,
            "deleting one version is not supported (old versions go when reclaimed)"
        ));
    }
    let cond = DeleteIf::new(
        i.if_match.clone(),
        i.if_match_last_modified_time.as_ref(),
        i.if_match_size,
    );
    delete_key(&front.key(&i.bucket, &i.key)?, &cond).await?;
    Ok(S3Response::new(DeleteObjectOutput::default()))
}
