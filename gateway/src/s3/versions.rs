//! ListObjectVersions: the current version of every key, as S3 lists a bucket's versions
//! (`IsLatest`, no delete markers), so tools that clean up or inspect with it work. Older
//! versions the gateway still retains for readers holding descriptors are not listed:
//! they are not addressable through S3 once replaced (they vanish when reclaimed).

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::listing::{common_prefixes, echoed, encode, max_keys, page, wants_url};
use super::S3Front;

pub(super) async fn list_object_versions(
    front: &S3Front,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let (i, caller) = front.take(req);
    let bucket = front.bucket(&i.bucket)?;
    let url = wants_url(i.encoding_type.as_ref())?;
    let max = max_keys(i.max_keys)?;
    let prefix = i.prefix.clone().unwrap_or_default();
    // One version a key: a page goes on after the key of the marker.
    let mut page = page(
        front,
        caller.as_ref(),
        &bucket,
        &prefix,
        i.delimiter.as_deref(),
        i.key_marker.as_deref(),
        max,
    )
    .await?;
    let truncated = page.next.is_some();
    let last = page
        .contents
        .last()
        .map(|l| (l.key.clone(), l.version.clone()));
    let last_prefix = page.prefixes.last().cloned();
    let next_key = truncated
        .then(|| last.as_ref().map(|(k, _)| k.clone()).max(last_prefix))
        .flatten();
    let next_version = next_key
        .as_ref()
        .and_then(|k| last.as_ref().filter(|(lk, _)| lk == k))
        .map(|(_, v)| v.clone().unwrap_or_else(|| "null".into()));
    let versions = page
        .contents
        .drain(..)
        .map(|l| ObjectVersion {
            key: Some(encode(l.key, url)),
            version_id: Some(l.version.unwrap_or_else(|| "null".into())),
            is_latest: Some(true),
            size: Some(l.size as i64),
            e_tag: Some(ETag::Strong(l.etag)),
            last_modified: Some(Timestamp::from(l.modified)),
            storage_class: Some(ObjectVersionStorageClass::from_static(
                ObjectVersionStorageClass::STANDARD,
            )),
            ..Default::default()
        })
        .collect();
    let prefixes = common_prefixes(&mut page, url);
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(i.bucket),
        prefix: Some(encode(prefix, url)),
        key_marker: Some(i.key_marker.map_or_else(String::new, |m| encode(m, url))),
        version_id_marker: Some(i.version_id_marker.unwrap_or_default()),
        next_key_marker: next_key.map(|k| encode(k, url)),
        next_version_id_marker: next_version,
        is_truncated: Some(truncated),
        max_keys: Some(max as i32),
        delimiter: echoed(i.delimiter, url),
        versions: Some(versions),
        common_prefixes: Some(prefixes),
        encoding_type: i.encoding_type,
        ..Default::default()
    }))
}
