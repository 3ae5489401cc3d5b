//! CopyObject: a new version of the destination made of the source's bytes, with its
//! metadata and stored headers (`COPY`, the default) or the request's (`REPLACE`). In a
//! cluster the request is at the destination's owner (forwarded there like any keyed
//! request); a source another member owns is read from that member, as the caller.

use std::time::SystemTime;

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::cluster::peers::{self, Fetched};
use super::conditions::{not_modified, WriteIf};
use super::digest::sha256_b64;
use super::objects::{lookup, publish, store_error};
use super::{headers, S3Front};
use crate::store::{ObjectHeaders, StoredVersion};

/// The version a copy reads: held here, or fetched from the member that owns it.
enum Source {
    /// A version held here, and its payload.
    Here(std::sync::Arc<StoredVersion>, rasa_fastpath::buffer::Frozen),
    There(Box<Fetched>),
}

impl Source {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Here(_, payload) => payload.as_slice(),
            Self::There(f) => &f.bytes,
        }
    }

    fn etag(&self, front: &S3Front) -> String {
        match self {
            Self::Here(v, _) => front.etag(v),
            Self::There(f) => f.etag.clone(),
        }
    }

    fn modified(&self) -> SystemTime {
        match self {
            Self::Here(v, _) => v.created(),
            Self::There(f) => f.modified,
        }
    }

    fn content_type(&self) -> &str {
        match self {
            Self::Here(v, _) => v.content_type(),
            Self::There(f) => &f.content_type,
        }
    }

    fn headers(&self) -> ObjectHeaders {
        match self {
            Self::Here(v, _) => v.headers().cloned().unwrap_or_default(),
            Self::There(f) => f.headers.clone(),
        }
    }

    /// The entity tag its upload set (an MD5), which a copy keeps.
    fn upload_etag(&self) -> Option<String> {
        match self {
            Self::Here(v, _) => v.s3_etag().map(str::to_owned),
            // The member's ETag is the one S3 clients saw: keep it when it is not the
            // SHA-256 this member would compute anyway.
            Self::There(f) => (f.etag.len() != 64).then(|| f.etag.clone()),
        }
    }

    fn version(&self) -> String {
        match self {
            Self::Here(v, _) => v.version().to_string(),
            Self::There(f) => f.version.clone(),
        }
    }
}

pub(super) async fn copy_object(
    front: &S3Front,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let (i, caller) = front.take_for_source(req);
    let CopySource::Bucket {
        bucket,
        key: src_key,
        version_id,
    } = &i.copy_source
    else {
        return Err(s3_error!(NotImplemented, "copying from an access point"));
    };
    let src = front.key(bucket, src_key)?;
    let dst = front.key(&i.bucket, &i.key)?;
    let elsewhere = caller
        .as_ref()
        .and_then(|c| c.wide.remote_owner(&src.key).map(|m| (c, m)));
    let v = match elsewhere {
        Some((c, owner)) => Source::There(Box::new(
            peers::fetch(c, &owner, bucket, src_key, version_id.as_deref()).await?,
        )),
        None => {
            let v = lookup(&src, version_id.as_deref()).await?;
            let payload = v.payload();
            Source::Here(v, payload)
        }
    };
    let etag = v.etag(front);
    not_modified(
        &etag,
        v.modified(),
        i.copy_source_if_match.as_ref(),
        None,
        None,
        i.copy_source_if_unmodified_since.as_ref(),
    )?;
    if let Some(c) = &i.copy_source_if_none_match {
        if matches!(c, ETagCondition::Any)
            || matches!(c, ETagCondition::ETag(e) if e.value() == etag)
        {
            return Err(s3_error!(
                PreconditionFailed,
                "x-amz-copy-source-if-none-match"
            ));
        }
    }
    let replace = i
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    if src.same_as(&dst) && !replace {
        // S3's rule: a copy onto itself must change something; it would only churn memory.
        return Err(s3_error!(
            InvalidRequest,
            "this copy request is illegal because it is trying to copy an object to itself without changing its metadata (x-amz-metadata-directive: REPLACE)"
        ));
    }
    let ctype = match (&i.content_type, replace) {
        (Some(t), true) => t.clone(),
        _ => v.content_type().to_owned(),
    };
    // COPY (the default) keeps the source's metadata and headers; REPLACE takes the
    // request's.
    // The checksums describe the bytes, which the copy keeps either way.
    let keep = match replace {
        true => ObjectHeaders {
            checksums: v.headers().checksums,
            ..headers::headers_of!(i)?
        },
        false => v.headers(),
    };
    let mut upload = dst
        .store()
        .writes()
        .begin(&dst.key, &ctype, v.bytes().len() as u64)
        .await
        .map_err(store_error)?;
    upload.write(v.bytes()).map_err(store_error)?;
    upload.set_s3_etag(v.upload_etag());
    upload.set_headers(keep);
    let sealed = dst.store().writes().seal(upload).map_err(store_error)?;
    let stored = publish(&dst, sealed, &WriteIf::default()).await?;
    Ok(S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(ETag::Strong(front.etag(&stored))),
            last_modified: Some(Timestamp::from(stored.created())),
            checksum_sha256: Some(sha256_b64(&stored.sha256())),
            ..Default::default()
        }),
        version_id: Some(stored.version().to_string()),
        copy_source_version_id: Some(v.version()),
        ..Default::default()
    }))
}
