//! S3 GETs answered without a stored version, as the native API answers them (both fronts
//! read through `Objects::read`): a cold object streamed as it fills from the origin, a
//! range of one the fill has reached, and an object too large to cache (or a cold range)
//! passed through from the origin. No version id yet; the ETag only when the origin gave
//! one.

use crate::catalog;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use s3s::dto::{ETag, GetObjectOutput, StreamingBlob};
use s3s::{s3_error, S3Result};

use crate::objects::read::Read;

/// The answer to a GET that resolved to something other than a stored version.
pub(super) fn output(read: Read) -> S3Result<GetObjectOutput> {
    let out = match read {
        Read::Filling(fill) => GetObjectOutput {
            content_length: Some(fill.length as i64),
            content_type: Some(fill.content_type.clone()),
            body: Some(blob(fill.stream())),
            ..Default::default()
        },
        Read::FillingRange { fill, first, last } => GetObjectOutput {
            content_length: Some((last + 1 - first) as i64),
            content_range: Some(format!("bytes {first}-{last}/{}", fill.length)),
            content_type: Some(fill.content_type.clone()),
            body: Some(blob(fill.stream_range(first, last + 1))),
            ..Default::default()
        },
        Read::PassThrough(obj) => GetObjectOutput {
            content_length: Some(obj.length as i64),
            content_range: obj.content_range,
            content_type: obj.content_type,
            e_tag: obj
                .etag
                .map(|e| ETag::Strong(e.trim_matches('"').to_owned())),
            body: Some(blob(obj.body)),
            ..Default::default()
        },
        other => {
            return Err(s3_error!(
                InternalError,
                "a GET resolved to no body: {other:?}"
            ))
        }
    };
    let served = out.content_length.unwrap_or(0).max(0) as u64;
    catalog::S3_BYTES_SERVED.counter().increment(served);
    Ok(GetObjectOutput {
        accept_ranges: Some("bytes".into()),
        ..out
    })
}

/// A body of `stream`'s chunks (which need not be `Sync`: s3s holds them behind a lock).
fn blob<S, E>(stream: S) -> StreamingBlob
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let frames = stream.map(|chunk| chunk.map(http_body::Frame::data));
    StreamingBlob::from(s3s::Body::http_body_unsync(
        http_body_util::StreamBody::new(frames),
    ))
}
