//! Objects too large to cache (over `--max-object-size`) are streamed from the origin to
//! the client as they arrive, never stored: a range is forwarded to the origin as it is.
//! The answer carries `Rasa-Pass-Through: true` and no `ETag` or version (there is no
//! version here to name); the SDK then reads it without a SHA-256 to check against.
//!
//! A cold object that can be cached streams the same way while it fills ([`filling`]):
//! `Rasa-Filling: true`, and the version exists once the fill completes.

use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use rasa_openapi::PASS_THROUGH_HEADER;

use super::preconditions::{resolve_range_for, RangeOutcome};
use super::{ApiError, AppState};
use crate::origin::Fetch;

/// `key` (or the range the request names) straight from the origin.
pub(crate) async fn serve(
    st: &AppState,
    method: &Method,
    key: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let Some(rt) = &st.origin else {
        return Err(ApiError::NotFound(key.to_owned()));
    };
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .filter(|r| r.starts_with("bytes="));
    let fetched = match range {
        Some(r) => rt.origin().get_range(key, r).await,
        None => rt.origin().get(key, None).await,
    }?;
    let obj = match fetched {
        Fetch::Found(obj) => obj,
        Fetch::NotFound => return Err(ApiError::NotFound(key.to_owned())),
        Fetch::NotModified => {
            return Err(ApiError::OriginUnavailable(
                "the origin answered 304 to an unconditional request".into(),
            ))
        }
    };
    metrics::counter!("rasa_origin_pass_through_total").increment(1);
    let partial = obj.content_range.is_some();
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        let bytes = obj.body.map(|chunk| {
            chunk
                .inspect(|c| {
                    metrics::counter!("rasa_origin_pass_through_bytes_total")
                        .increment(c.len() as u64);
                })
                .map_err(|e| std::io::Error::other(e.to_string()))
        });
        Body::from_stream(bytes)
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = if partial {
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(obj.length));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(PASS_THROUGH_HEADER, HeaderValue::from_static("true"));
    let ctype = obj
        .content_type
        .unwrap_or_else(|| crate::media::DEFAULT_CONTENT_TYPE.to_owned());
    if let Ok(v) = HeaderValue::from_str(&ctype) {
        h.insert(header::CONTENT_TYPE, v);
    }
    if let Some(v) = obj
        .content_range
        .and_then(|r| HeaderValue::from_str(&r).ok())
    {
        h.insert(header::CONTENT_RANGE, v);
    }
    Ok(resp)
}

/// A ranged GET of `key`, which is not stored: from the fill under way when it has
/// reached the range's first byte (the rest follows as it arrives, no second request to
/// the origin), else the origin's range (starting a whole-object fill with
/// `--origin-fill whole`).
pub(crate) async fn cold_range(
    st: &AppState,
    rt: &std::sync::Arc<crate::origin::readthrough::ReadThrough>,
    method: &Method,
    key: &str,
    h: &HeaderMap,
) -> Result<Response, ApiError> {
    let fill = rt
        .filling(key)
        .filter(|_| !h.contains_key(header::IF_RANGE));
    if let Some(f) = fill {
        if let RangeOutcome::Partial(first, last) = resolve_range_for(h, f.length) {
            if first <= f.received() {
                return Ok(filling_range(f, first, last));
            }
        }
    }
    rt.range_missed(key);
    serve(st, method, key, h).await
}

fn filling_range(
    f: std::sync::Arc<crate::origin::filling::Filling>,
    first: u64,
    last: u64,
) -> Response {
    metrics::counter!("rasa_cold_streams_total").increment(1);
    let (length, ctype) = (f.length, f.content_type.clone());
    let mut resp = Response::new(Body::from_stream(f.stream_range(first, last + 1)));
    *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(last + 1 - first));
    if let Ok(v) = HeaderValue::from_str(&format!("bytes {first}-{last}/{length}")) {
        h.insert(header::CONTENT_RANGE, v);
    }
    filling_headers(h, &ctype);
    resp
}

fn filling_headers(h: &mut HeaderMap, ctype: &str) {
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(ctype)
            .unwrap_or_else(|_| HeaderValue::from_static(crate::media::DEFAULT_CONTENT_TYPE)),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        rasa_openapi::FILLING_HEADER,
        HeaderValue::from_static("true"),
    );
}

/// A cold object streamed to the client as it fills from the origin: the whole object,
/// `Content-Length` known up front; if the fetch fails midway the body ends early.
pub(crate) fn filling(f: std::sync::Arc<crate::origin::filling::Filling>) -> Response {
    metrics::counter!("rasa_cold_streams_total").increment(1);
    let (length, ctype) = (f.length, f.content_type.clone());
    let mut resp = Response::new(Body::from_stream(f.stream()));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    filling_headers(h, &ctype);
    resp
}

/// The answer to a HEAD that missed: what the origin said, without fetching the object
/// (no version or `ETag` here yet; the origin's entity tag in `Rasa-Origin-ETag`).
pub(crate) fn head(head: &crate::origin::OriginHead) -> Response {
    let mut resp = Response::new(Body::empty());
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(head.length));
    let ctype = head
        .content_type
        .as_deref()
        .unwrap_or(crate::media::DEFAULT_CONTENT_TYPE);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(ctype)
            .unwrap_or_else(|_| HeaderValue::from_static(crate::media::DEFAULT_CONTENT_TYPE)),
    );
    if let Some(etag) = head
        .etag
        .as_deref()
        .and_then(|e| HeaderValue::from_str(e).ok())
    {
        h.insert(rasa_openapi::cluster::ORIGIN_ETAG_HEADER, etag);
    }
    h.insert(PASS_THROUGH_HEADER, HeaderValue::from_static("true"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
