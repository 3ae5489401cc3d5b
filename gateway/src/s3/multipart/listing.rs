//! Listing uploads in progress (`ListMultipartUploads`, a page of at most 1,000 as S3
//! does, and only the caller's own: upload ids and the keys being written are not for
//! every reader) and their parts (`ListParts`).

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::{check_owner, who};
use crate::s3::cluster::peers::{self, Upload};
use crate::s3::S3Front;

/// Most uploads in one page of `ListMultipartUploads` (S3's limit and default).
pub const MAX_UPLOADS_PAGE: usize = 1000;

pub(crate) async fn list_parts(
    front: &S3Front,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let owner = who(&req);
    let i = req.input;
    let st = front.uploads.state();
    check_owner(&st, &i.upload_id, &i.bucket, &i.key, owner.as_deref())?;
    let u = &st.uploads[&i.upload_id];
    let max = i.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
    let after = i.part_number_marker.unwrap_or(0);
    let mut parts: Vec<s3s::dto::Part> = u
        .parts
        .range(after + 1..)
        .take(max + 1)
        .map(|(n, p)| s3s::dto::Part {
            part_number: Some(*n),
            e_tag: Some(ETag::Strong(hex::encode(p.md5))),
            size: Some(p.data.len() as i64),
            last_modified: Some(Timestamp::from(p.at)),
            ..Default::default()
        })
        .collect();
    let truncated = parts.len() > max;
    parts.truncate(max);
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(i.bucket),
        key: Some(i.key),
        upload_id: Some(i.upload_id),
        is_truncated: Some(truncated),
        next_part_number_marker: truncated
            .then(|| parts.last().and_then(|p| p.part_number))
            .flatten(),
        part_number_marker: i.part_number_marker,
        max_parts: Some(max as i32),
        parts: Some(parts),
        ..Default::default()
    }))
}

pub(crate) async fn list_uploads(
    front: &S3Front,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let owner = who(&req);
    let (i, caller) = front.take(req);
    front.bucket(&i.bucket)?;
    let prefix = i.prefix.clone().unwrap_or_default();
    let max = usize::try_from(i.max_uploads.unwrap_or(MAX_UPLOADS_PAGE as i32))
        .unwrap_or(0)
        .min(MAX_UPLOADS_PAGE);
    // Resume after (key-marker, upload-id-marker); a key marker alone skips that key.
    let after_key = i.key_marker.clone().unwrap_or_default();
    let after_id = i.upload_id_marker.clone();
    let past_marker = |key: &str, id: &str| match &after_id {
        _ if after_key.is_empty() => true,
        Some(after_id) => (key, id) > (after_key.as_str(), after_id.as_str()),
        None => key > after_key.as_str(),
    };
    let mut uploads: Vec<Upload> = front
        .uploads
        .state()
        .uploads
        .iter()
        .filter(|(id, u)| {
            u.bucket == i.bucket
                && u.s3_key.starts_with(&prefix)
                // With keys, a caller sees its own uploads only.
                && (owner.is_none() || u.owner == owner)
                && past_marker(&u.s3_key, id)
        })
        .map(|(id, u)| (u.s3_key.clone(), id.clone(), u.initiated))
        .collect();
    let mut truncated = false;
    if let Some(caller) = &caller {
        // In a cluster each upload is staged at its key's owner: every member's page.
        for (page, cut) in peers::uploads(
            caller,
            &i.bucket,
            &prefix,
            i.key_marker.as_deref(),
            i.upload_id_marker.as_deref(),
            max,
        )
        .await?
        {
            truncated |= cut;
            uploads.extend(page);
        }
    }
    uploads.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    uploads.dedup_by(|a, b| a.1 == b.1);
    truncated |= uploads.len() > max;
    uploads.truncate(max);
    let next = truncated
        .then(|| uploads.last().map(|(k, id, _)| (k.clone(), id.clone())))
        .flatten();
    let list = uploads
        .into_iter()
        .map(|(key, id, initiated)| MultipartUpload {
            key: Some(key),
            upload_id: Some(id),
            initiated: Some(Timestamp::from(initiated)),
            ..Default::default()
        })
        .collect();
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(i.bucket),
        prefix: i.prefix,
        key_marker: i.key_marker,
        upload_id_marker: i.upload_id_marker,
        max_uploads: Some(max as i32),
        next_key_marker: next.as_ref().map(|(k, _)| k.clone()),
        next_upload_id_marker: next.map(|(_, id)| id),
        uploads: Some(list),
        is_truncated: Some(truncated),
        ..Default::default()
    }))
}
