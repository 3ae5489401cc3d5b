//! Listing: ListObjectsV2 and ListObjects (v1). Keys come from the store in key order, a
//! page at a time, grouped by delimiter into common prefixes (in a cluster, every member's
//! page merged); with an origin the origin answers (the cache holds only part of the
//! bucket).

use base64::Engine;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::cluster::{peers, Caller};
pub(super) use super::paging::{Listed, Page};
use super::{Bucket, S3Front};

/// Largest page, and the default.
const MAX_KEYS: usize = 1000;
/// Keys read from the store at a time while a page is gathered.
const BATCH: usize = 1000;
/// What `encoding-type=url` leaves as it is.
const URL_SAFE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// The largest string that starts with `p`, as an exclusive bound: every key under `p`
/// sorts before it.
pub(super) fn past(p: &str) -> String {
    format!("{p}\u{10FFFF}")
}

/// The Rasa keys to walk for S3 keys under `prefix`: those of the bucket whose S3 keys
/// can start with it (`None`: no key of the bucket can).
fn rasa_prefix(bucket: &Bucket, prefix: &str) -> Option<String> {
    if let Some(rest) = prefix.strip_prefix(bucket.s3_prefix.as_str()) {
        Some(format!("{}{rest}", bucket.rasa_prefix))
    } else if bucket.s3_prefix.starts_with(prefix) {
        Some(bucket.rasa_prefix.clone())
    } else {
        None
    }
}

/// The page of `bucket`'s keys under `prefix` after `after`, at most `max` entries (keys
/// and common prefixes): from the origin when there is one (the cache holds only part of
/// the bucket), else from the store.
pub(super) async fn page(
    front: &S3Front,
    caller: Option<&Caller<'_>>,
    bucket: &Bucket,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max: usize,
) -> S3Result<Page> {
    let delimiter = delimiter.filter(|d| !d.is_empty());
    let Some(walk) = rasa_prefix(bucket, prefix) else {
        return Ok(Page::default());
    };
    let objects = front.objects_of(&bucket.name)?;
    if let Some(rt) = objects.read_through() {
        // The origin holds the whole bucket, whichever member asks it.
        return origin_page(rt, bucket, &walk, delimiter, after, max).await;
    }
    let local = store_page(
        objects.store(),
        bucket,
        prefix,
        &walk,
        delimiter,
        after,
        max,
    );
    let Some(caller) = caller else {
        return Ok(local);
    };
    // In a cluster each member holds the keys it owns: every member's page, merged.
    let mut pages = peers::pages(caller, &bucket.name, prefix, delimiter, after, max).await?;
    pages.push(local);
    Ok(merge(pages, max))
}

/// Pages of the same listing from several members as one: the first `max` entries (keys
/// and common prefixes, each once) in order. A page cut short had `max` entries, all before
/// the ones it left out, so the merged page's first `max` miss none of them; it ends early
/// (`next`) when any page did or more than `max` entries remain.
fn merge(pages: Vec<Page>, max: usize) -> Page {
    enum Entry {
        Key(Listed),
        Prefix(String),
    }
    let mut more = false;
    let mut all: std::collections::BTreeMap<String, Entry> = Default::default();
    for p in pages {
        more |= p.next.is_some();
        for l in p.contents {
            all.entry(l.key.clone()).or_insert(Entry::Key(l));
        }
        for cp in p.prefixes {
            all.entry(cp.clone()).or_insert(Entry::Prefix(cp));
        }
    }
    more |= all.len() > max;
    let mut out = Page::default();
    for (_, e) in all.into_iter().take(max) {
        match e {
            Entry::Key(l) => {
                out.next = Some(l.key.clone());
                out.contents.push(l);
            }
            Entry::Prefix(cp) => {
                out.next = Some(past(&cp));
                out.prefixes.push(cp);
            }
        }
    }
    if !more {
        out.next = None;
    }
    out
}

async fn origin_page(
    rt: &crate::origin::readthrough::ReadThrough,
    bucket: &Bucket,
    walk: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max: usize,
) -> S3Result<Page> {
    let start = after.and_then(|a| bucket.rasa_key(a));
    let listed = rt
        .origin()
        .list(walk, delimiter, start.as_deref(), max)
        .await
        .map_err(super::objects::origin_error)?;
    let mut out = Page::default();
    for o in listed.objects {
        if let Some(key) = bucket.s3_key(&o.key) {
            out.contents.push(Listed {
                key,
                size: o.size,
                etag: o.etag,
                modified: o.modified,
                version: None,
            });
        }
    }
    out.prefixes = listed
        .prefixes
        .iter()
        .filter_map(|p| bucket.s3_key(p))
        .collect();
    if listed.truncated {
        let last_key = out.contents.last().map(|l| l.key.clone());
        let last_prefix = out.prefixes.last().map(|p| past(p));
        out.next = last_key.max(last_prefix);
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn store_page(
    store: &crate::store::Store,
    bucket: &Bucket,
    prefix: &str,
    rasa_prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max: usize,
) -> Page {
    let mut out = Page::default();
    let mut cursor: Option<String> = after.and_then(|a| {
        if a < bucket.s3_prefix.as_str() {
            None
        } else {
            bucket.rasa_key(a)
        }
    });
    let mut taken = 0usize;
    loop {
        let (batch, more) = store.list(rasa_prefix, cursor.as_deref(), BATCH);
        let mut jumped = false;
        for v in &batch {
            cursor = Some(v.key().to_string());
            let Some(s3_key) = bucket.s3_key(v.key()) else {
                continue;
            };
            if !s3_key.starts_with(prefix) || after.is_some_and(|a| s3_key.as_str() <= a) {
                continue;
            }
            if taken == max {
                return out; // one more exists: `next` says where the page ended
            }
            taken += 1;
            let rest = &s3_key[prefix.len()..];
            let grouped = delimiter.and_then(|d| {
                rest.find(d)
                    .map(|at| format!("{prefix}{}", &rest[..at + d.len()]))
            });
            let Some(cp) = grouped else {
                out.next = Some(s3_key.clone());
                out.contents.push(Listed {
                    key: s3_key,
                    size: v.len(),
                    etag: super::s3_etag(v),
                    modified: v.created(),
                    version: Some(v.version().to_string()),
                });
                continue;
            };
            out.next = Some(past(&cp));
            out.prefixes.push(cp.clone());
            // Walk on from past every key under the common prefix. When that lies beyond
            // the bucket's keys, all of them are under it: the listing is complete.
            match bucket.rasa_key(&past(&cp)) {
                Some(k) => cursor = Some(k),
                None => {
                    out.next = None;
                    return out;
                }
            }
            jumped = true;
            break;
        }
        if !jumped && !more {
            out.next = None;
            return out;
        }
    }
}

pub(super) fn encode(s: String, url: bool) -> String {
    if url {
        utf8_percent_encode(&s, URL_SAFE).to_string()
    } else {
        s
    }
}

/// The delimiter as a listing answer echoes it: absent when none (or an empty one) was
/// given, URL-encoded with `encoding-type=url` like the other key fields.
pub(super) fn echoed(delimiter: Option<String>, url: bool) -> Option<String> {
    delimiter.filter(|d| !d.is_empty()).map(|d| encode(d, url))
}

fn objects(page: &mut Page, url: bool) -> (Vec<Object>, Vec<CommonPrefix>) {
    let contents = page
        .contents
        .drain(..)
        .map(|l| Object {
            key: Some(encode(l.key, url)),
            size: Some(l.size as i64),
            e_tag: Some(ETag::Strong(l.etag)),
            last_modified: Some(Timestamp::from(l.modified)),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            ..Default::default()
        })
        .collect();
    (contents, common_prefixes(page, url))
}

/// The page's common prefixes, as S3 lists them.
pub(super) fn common_prefixes(page: &mut Page, url: bool) -> Vec<CommonPrefix> {
    page.prefixes
        .drain(..)
        .map(|p| CommonPrefix {
            prefix: Some(encode(p, url)),
        })
        .collect()
}

pub(super) fn max_keys(asked: Option<i32>) -> S3Result<usize> {
    match asked {
        None => Ok(MAX_KEYS),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "max-keys must not be negative")),
        Some(n) => Ok((n as usize).min(MAX_KEYS)),
    }
}

pub(super) fn wants_url(e: Option<&EncodingType>) -> S3Result<bool> {
    match e.map(|e| e.as_str()) {
        None => Ok(false),
        Some(EncodingType::URL) => Ok(true),
        Some(other) => Err(s3_error!(
            InvalidArgument,
            "unknown encoding-type {other:?}"
        )),
    }
}

pub(super) async fn list_objects_v2(
    front: &S3Front,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let (i, caller) = front.take(req);
    let bucket = front.bucket(&i.bucket)?;
    let url = wants_url(i.encoding_type.as_ref())?;
    let max = max_keys(i.max_keys)?;
    let after = match &i.continuation_token {
        Some(t) => Some(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(t)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    s3_error!(InvalidArgument, "not a continuation token of this gateway")
                })?,
        ),
        None => i.start_after.clone(),
    };
    let prefix = i.prefix.clone().unwrap_or_default();
    let mut page = page(
        front,
        caller.as_ref(),
        &bucket,
        &prefix,
        i.delimiter.as_deref(),
        after.as_deref(),
        max,
    )
    .await?;
    let next = page
        .next
        .take()
        .map(|n| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(n));
    let (mut contents, prefixes) = objects(&mut page, url);
    if i.fetch_owner == Some(true) {
        for o in &mut contents {
            o.owner = Some(owner());
        }
    }
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(i.bucket),
        key_count: Some((contents.len() + prefixes.len()) as i32),
        contents: Some(contents),
        common_prefixes: Some(prefixes),
        is_truncated: Some(next.is_some()),
        next_continuation_token: next,
        continuation_token: i.continuation_token,
        start_after: i.start_after.map(|s| encode(s, url)),
        prefix: Some(encode(prefix, url)),
        delimiter: echoed(i.delimiter, url),
        max_keys: Some(max as i32),
        encoding_type: i.encoding_type,
        ..Default::default()
    }))
}

pub(super) async fn list_objects(
    front: &S3Front,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let (i, caller) = front.take(req);
    let bucket = front.bucket(&i.bucket)?;
    let url = wants_url(i.encoding_type.as_ref())?;
    let max = max_keys(i.max_keys)?;
    let prefix = i.prefix.clone().unwrap_or_default();
    // A marker that is a common prefix (it ends with the delimiter) skips all under it.
    let after = i.marker.as_ref().map(|m| match i.delimiter.as_deref() {
        Some(d) if !d.is_empty() && m.ends_with(d) => past(m),
        _ => m.clone(),
    });
    let mut page = page(
        front,
        caller.as_ref(),
        &bucket,
        &prefix,
        i.delimiter.as_deref(),
        after.as_deref(),
        max,
    )
    .await?;
    // v1 markers are keys: the last key or common prefix of the page.
    let truncated = page.next.is_some();
    let next_marker = truncated
        .then(|| {
            let last_key = page.contents.last().map(|l| l.key.clone());
            let last_prefix = page.prefixes.last().cloned();
            last_key.max(last_prefix)
        })
        .flatten();
    let (contents, prefixes) = objects(&mut page, url);
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(i.bucket),
        contents: Some(contents),
        common_prefixes: Some(prefixes),
        is_truncated: Some(truncated),
        next_marker: next_marker.map(|m| encode(m, url)),
        // Always there in v1, empty when none was given (as S3 answers).
        marker: Some(i.marker.map_or_else(String::new, |m| encode(m, url))),
        // As S3 answers v1 (and botocore reads it): the prefix as given, never encoded.
        prefix: Some(prefix),
        delimiter: echoed(i.delimiter, url),
        max_keys: Some(max as i32),
        encoding_type: i.encoding_type,
        ..Default::default()
    }))
}

/// The owner S3 answers for buckets and, with `fetch-owner`, objects: the gateway's.
pub(super) fn owner() -> Owner {
    Owner {
        display_name: Some("rasa".into()),
        id: Some("rasa".into()),
    }
}
