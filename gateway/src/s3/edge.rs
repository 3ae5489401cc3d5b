//! What the S3 listener refuses before `s3s` parses a request, with S3's error codes:
//!
//! | check | answer |
//! | --- | --- |
//! | request head over `--max-header-size` | `400 RequestHeaderSectionTooLarge` |
//! | open listener: `Host` not a name of the gateway, or a state-changing request from another site ([`crate::browser`]) | `403 AccessDenied` |
//! | `DeleteObjects` without `Content-MD5` or an `x-amz-checksum-*` (as S3 requires; a web page cannot send one without a CORS preflight) | `400 InvalidRequest` |
//! | `DeleteObjects` body over [`MAX_DELETE_BODY`] (declared or sent chunked) | `400 MalformedXML` |
//! | `DeleteObjects` body whose `Content-MD5` does not match | `400 BadDigest` |
//! | presigned URL valid for more than 7 days (`X-Amz-Expires` > 604800) | `400 AuthorizationQueryParametersError` |
//! | server-side encryption asked for (`x-amz-server-side-encryption*`, also a copy source's) | `501 NotImplemented`: nothing stored, nothing served as if decrypted |
//! | a POST (browser form) upload (`multipart/form-data`) | `501 NotImplemented` |
//! | an empty `Content-MD5` | `400 InvalidDigest` |

use crate::catalog;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{header, Method, StatusCode};

use crate::browser::HostPolicy;

/// An S3 error document with `status`.
pub(super) fn xml_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    r
}

/// Closes the connection after refusing a request that asked `Expect: 100-continue`
/// (HTTP/1.1): its body was never asked for, but a client that stopped waiting for
/// `100 Continue` may be sending it anyway (botocore does after a second), and those bytes
/// must not be read as the next request on the connection (they were: a `400` where the
/// client expected the refusal's code, under load).
pub(super) async fn close_unasked(req: Request, next: axum::middleware::Next) -> Response {
    let expects = req.version() <= http::Version::HTTP_11
        && req
            .headers()
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let mut r = next.run(req).await;
    if expects && !r.status().is_success() {
        r.headers_mut()
            .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    r
}

/// Largest `DeleteObjects` body: 1,000 keys of 1,024 bytes with their XML, and room to
/// spare (S3 itself stops at 1,000 keys, which the handler checks).
pub const MAX_DELETE_BODY: u64 = 2 << 20;

/// Longest validity of a presigned URL (SigV4's limit: 7 days).
pub const MAX_PRESIGNED_EXPIRY_SECS: u64 = 604_800;

/// The listener's checks.
#[derive(Clone, Debug)]
pub struct Edge {
    /// `Some` for an open listener (no credentials file): the names it answers to.
    pub open_hosts: Option<HostPolicy>,
    /// What both fronts enforce (its `body_timeout`: the longest wait for a
    /// `DeleteObjects` body).
    pub limits: crate::front::Limits,
}

fn query_param<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.uri().query()?.split('&').find_map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (k == name).then_some(v)
    })
}

impl Edge {
    /// `req` once it passed every check (a `DeleteObjects` body read and checked), or the
    /// answer that refuses it.
    pub async fn admit(&self, req: Request) -> Result<Request, Response> {
        if let Some(refusal) = self.refuse(&req) {
            return Err(refusal);
        }
        if req.method() == Method::POST && query_param(&req, "delete").is_some() {
            return self.delete_body(req).await;
        }
        Ok(req)
    }

    /// The error answer for `req`, if one of the checks of its head refuses it.
    fn refuse(&self, req: &Request) -> Option<Response> {
        let size = crate::net::head_size(req);
        if size > self.limits.max_header_size {
            catalog::S3_REQUESTS_REFUSED
                .counter_by(&[("reason", "headers_too_large")])
                .increment(1);
            return Some(xml_error(
                StatusCode::BAD_REQUEST,
                "RequestHeaderSectionTooLarge",
                &format!(
                    "the request line and headers are {size} bytes; this gateway accepts at most {} (--max-header-size)",
                    self.limits.max_header_size
                ),
            ));
        }
        if let Some(hosts) = &self.open_hosts {
            if let Err(why) = hosts.check(req.method(), req.uri(), req.headers()) {
                catalog::S3_REQUESTS_REFUSED
                    .counter_by(&[("reason", "foreign_origin")])
                    .increment(1);
                return Some(xml_error(
                    StatusCode::FORBIDDEN,
                    "AccessDenied",
                    &why.to_string(),
                ));
            }
        }
        if let Some(refusal) = refuse_unsupported(req) {
            return Some(refusal);
        }
        if let Some(expires) = query_param(req, "X-Amz-Expires") {
            if expires
                .parse::<u64>()
                .map_or(true, |s| s > MAX_PRESIGNED_EXPIRY_SECS)
            {
                return Some(xml_error(
                    StatusCode::BAD_REQUEST,
                    "AuthorizationQueryParametersError",
                    "X-Amz-Expires must be less than a week (in seconds) that is 604800",
                ));
            }
        }
        None
    }

    /// Reads a `DeleteObjects` body (at most [`MAX_DELETE_BODY`], within `--body-timeout`)
    /// and checks its `Content-MD5`; the request with the body read, or the refusal.
    async fn delete_body(&self, req: Request) -> Result<Request, Response> {
        if let Some(refusal) = self.refuse_delete_objects(&req) {
            return Err(refusal);
        }
        let (parts, body) = req.into_parts();
        let limited = http_body_util::Limited::new(body, MAX_DELETE_BODY as usize);
        let read = tokio::time::timeout(
            self.limits.body_timeout,
            http_body_util::BodyExt::collect(limited),
        )
        .await;
        let bytes = match read {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(too_large());
            }
            Ok(Err(e)) => {
                return Err(xml_error(
                    StatusCode::BAD_REQUEST,
                    "IncompleteBody",
                    &format!("the request body could not be read: {e}"),
                ))
            }
            Err(_) => {
                return Err(xml_error(
                    StatusCode::BAD_REQUEST,
                    "RequestTimeout",
                    "the request body did not arrive within --body-timeout",
                ))
            }
        };
        if let Some(md5) = parts.headers.get("content-md5") {
            use base64::Engine;
            use md5::Digest;
            let got = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&bytes));
            if md5.as_bytes() != got.as_bytes() {
                return Err(xml_error(
                    StatusCode::BAD_REQUEST,
                    "BadDigest",
                    "the Content-MD5 you specified did not match what was received",
                ));
            }
        }
        Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
    }

    fn refuse_delete_objects(&self, req: &Request) -> Option<Response> {
        let h = req.headers();
        let checksummed = h.contains_key("content-md5")
            || h.contains_key("x-amz-trailer")
            || h.keys().any(|k| k.as_str().starts_with("x-amz-checksum-"));
        if !checksummed {
            return Some(xml_error(
                StatusCode::BAD_REQUEST,
                "InvalidRequest",
                "Missing required header for this request: Content-MD5 (or an x-amz-checksum-* header)",
            ));
        }
        let declared = h
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_DELETE_BODY) {
            return Some(too_large());
        }
        None
    }
}

/// What the listener does not do and must not pretend to: server-side encryption (a
/// client that asked for it would believe its data encrypted) and POST form uploads
/// (their policy would go unchecked); an empty `Content-MD5` (S3: `InvalidDigest`).
fn refuse_unsupported(req: &Request) -> Option<Response> {
    let h = req.headers();
    let sse = h.keys().find(|k| {
        let k = k.as_str();
        k.starts_with("x-amz-server-side-encryption")
            || k.starts_with("x-amz-copy-source-server-side-encryption")
    });
    if let Some(name) = sse {
        catalog::S3_REQUESTS_REFUSED
            .counter_by(&[("reason", "not_implemented")])
            .increment(1);
        return Some(xml_error(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            &format!("server-side encryption ({name}) is not supported by this gateway; nothing was stored or read"),
        ));
    }
    let form = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("multipart/form-data")
        });
    if req.method() == Method::POST && form {
        catalog::S3_REQUESTS_REFUSED
            .counter_by(&[("reason", "not_implemented")])
            .increment(1);
        return Some(xml_error(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "POST (browser form) uploads are not supported by this gateway; nothing was stored",
        ));
    }
    if h.get("content-md5")
        .is_some_and(|v| v.as_bytes().trim_ascii().is_empty())
    {
        return Some(xml_error(
            StatusCode::BAD_REQUEST,
            "InvalidDigest",
            "Content-MD5 is empty: it must be the base64 of a 16-byte MD5 digest; nothing was stored",
        ));
    }
    None
}

fn too_large() -> Response {
    xml_error(
        StatusCode::BAD_REQUEST,
        "MalformedXML",
        &format!("a DeleteObjects body may be at most {MAX_DELETE_BODY} bytes"),
    )
}
