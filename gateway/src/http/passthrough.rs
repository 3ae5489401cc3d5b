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

use crate::origin::filling::Filling;
use crate::origin::{OriginHead, OriginObject};

/// An origin object streamed through, never stored (see [`crate::objects::read`]).
pub(crate) fn serve(method: &Method, obj: OriginObject) -> Response {
    let partial = obj.content_range.is_some();
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        let bytes = obj
            .body
            .map(|chunk| chunk.map_err(|e| std::io::Error::other(e.to_string())));
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
    resp
}

/// Bytes `first..=last` of a cold object, streamed as it fills from the origin.
pub(crate) fn filling_range(f: std::sync::Arc<Filling>, first: u64, last: u64) -> Response {
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
pub(crate) fn filling(f: std::sync::Arc<Filling>) -> Response {
    let (length, ctype) = (f.length, f.content_type.clone());
    let mut resp = Response::new(Body::from_stream(f.stream()));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    filling_headers(h, &ctype);
    resp
}

/// The answer to a HEAD that missed: what the origin said, without fetching the object
/// (no version or `ETag` here yet; the origin's entity tag in `Rasa-Origin-ETag`).
pub(crate) fn head(head: &OriginHead) -> Response {
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
