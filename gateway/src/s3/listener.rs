//! Starting the S3 listener: its router (the `s3s` service behind the same kinds of
//! limits as the native API: a concurrency limit that answers `503 SlowDown`, a body
//! timeout, panics caught, credentials redacted from traces), its socket, the multipart
//! reaper, and the credentials file reloaded on SIGHUP.

use crate::catalog;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use http::{header, StatusCode};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

use super::args::S3Args;
use super::edge::xml_error;
use super::keys::S3Keys;
use super::multipart::Uploads;
use super::{router, S3Front};
use crate::objects::Objects;
use crate::slots::Slots;

/// What a connection past `--max-connections` gets on the S3 listener: `503 SlowDown` (it
/// has no health routes; those are on the native listener).
pub fn connection_limit_refusal() -> Response {
    let mut r = xml_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "SlowDown",
        "the S3 listener holds as many connections as --max-connections allows; retry",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
    r
}

/// The S3 answer to a request that found no slot free (`--max-concurrent-requests`,
/// [`crate::slots`]), counted.
fn overloaded() -> Response {
    catalog::S3_REQUESTS_SHED.counter().increment(1);
    let mut r = xml_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "SlowDown",
        "too many requests at once (--max-concurrent-requests); retry",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
    r
}

fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    catalog::S3_PANICS.counter().increment(1);
    xml_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        "internal error; the gateway's log has details",
    )
}

/// Everything the S3 listener shares with the rest of the gateway.
pub struct Shared {
    /// The object service.
    pub objects: Arc<Objects>,
    /// Every namespace (each but the default one is the bucket of its name).
    pub namespaces: Arc<crate::objects::namespaces::Namespaces>,
    /// Its location (the default bucket).
    pub origin_location: Option<crate::origin::s3::S3Location>,
    /// What both fronts enforce (the S3 listener has as many request slots of its own).
    pub limits: crate::front::Limits,
    /// The names an open listener answers to.
    pub hosts: crate::browser::HostPolicy,
    /// In a cluster, the other members as this listener reaches them.
    pub wide: Option<super::cluster::Wide>,
}

/// A bound S3 listener and the router to serve on it.
pub struct Prepared {
    /// The socket.
    pub listener: tokio::net::TcpListener,
    /// Its address (the port chosen when `--s3-listen` gave 0).
    pub addr: std::net::SocketAddr,
    /// The S3 API.
    pub app: axum::Router,
    /// Whether anyone may use it (no credentials file).
    pub open: bool,
    /// What it serves.
    pub front: Arc<S3Front>,
}

/// Binds `--s3-listen`, when given: its socket and address (the port chosen when it gave
/// 0). Bound before the rest is built, so a cluster member can advertise the address.
pub fn bind(args: &S3Args) -> Result<Option<tokio::net::TcpListener>, ListenerError> {
    let Some(addr) = args.s3_listen else {
        return Ok(None);
    };
    crate::net::bind(addr)
        .map(Some)
        .map_err(|source| ListenerError::Bind { addr, source })
}

/// Why the S3 listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    /// Its settings.
    #[error(transparent)]
    Setting(#[from] crate::setting::SettingError),
    /// Its credentials file.
    #[error(transparent)]
    Credentials(#[from] crate::credfile::FileError),
    /// Its address could not be bound.
    #[error("cannot listen for S3 on {addr}: {source}")]
    Bind {
        /// `--s3-listen`.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The bound socket's address could not be read.
    #[error("cannot read the S3 address: {0}")]
    Address(#[source] std::io::Error),
    /// Its credentials' reload on SIGHUP could not be set up.
    #[error("cannot install a SIGHUP handler: {0}")]
    Signal(#[source] std::io::Error),
}

/// Builds the router of the S3 listener bound on `listener` ([`bind`]); starts the
/// multipart reaper and, with a credentials file, its reload on SIGHUP.
pub async fn prepare(
    args: &S3Args,
    shared: Shared,
    listener: tokio::net::TcpListener,
) -> Result<Prepared, ListenerError> {
    let buckets = args.buckets(shared.origin_location.as_ref())?;
    let keys = match &args.s3_credentials_file {
        Some(path) => {
            let keys = Arc::new(S3Keys::load(path)?);
            {
                let keys = Arc::clone(&keys);
                crate::reload::reload_on_sighup(
                    "S3 credentials file",
                    |_| {},
                    move || keys.reload(),
                )
                .map_err(ListenerError::Signal)?;
            }
            Some(keys)
        }
        None => None,
    };
    let uploads = Arc::new(Uploads::new(
        args.multipart_memory,
        args.multipart_expiry,
        args.multipart_max_uploads,
    ));
    tokio::spawn(Arc::clone(&uploads).run_reaper());
    let front = Arc::new(S3Front {
        objects: shared.objects,
        namespaces: shared.namespaces,
        buckets,
        etag: args.s3_etag,
        limits: shared.limits,
        uploads,
        started: std::time::SystemTime::now(),
        bucket_quota: args.s3_create_buckets.then_some(args.s3_bucket_quota),
        wide: shared.wide,
    });
    let open = keys.is_none();
    let slots = Arc::new(tokio::sync::Semaphore::new(
        shared.limits.max_concurrent_requests,
    ));
    let edge = super::edge::Edge {
        open_hosts: open.then_some(shared.hosts),
        limits: shared.limits,
    };
    let app = router(Arc::clone(&front), keys, &args.s3_domains, edge)?
        .layer(Slots::new(slots, overloaded))
        .layer(axum::middleware::map_response(count))
        .layer(axum::middleware::from_fn(request_id))
        .layer(CatchPanicLayer::custom(panicked))
        .layer(TraceLayer::new_for_http())
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
        ]));
    let addr = listener.local_addr().map_err(ListenerError::Address)?;
    Ok(Prepared {
        listener,
        addr,
        app,
        open,
        front,
    })
}

/// Largest error body [`request_id`] rewrites (S3 errors are a few hundred bytes).
const ERROR_BODY_LIMIT: usize = 64 << 10;

/// Names every answer with a request id, as S3 does: the `x-amz-request-id` header and,
/// in an error's XML, `<RequestId>` (what clients print and users quote in reports; it
/// is also logged with the error).
async fn request_id(req: axum::extract::Request, next: axum::middleware::Next) -> Response<Body> {
    let id = format!("{:016X}", rand::random::<u64>());
    let resp = next.run(req).await;
    let (mut parts, body) = resp.into_parts();
    if parts.headers.contains_key("x-amz-request-id") {
        // Answered by the key's owner, which named (and logged) it: keep its id.
        return Response::from_parts(parts, body);
    }
    if let Ok(v) = http::HeaderValue::from_str(&id) {
        parts.headers.insert("x-amz-request-id", v);
    }
    let xml = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/xml"));
    if !(parts.status.is_client_error() || parts.status.is_server_error()) || !xml {
        return Response::from_parts(parts, body);
    }
    let Ok(bytes) = axum::body::to_bytes(body, ERROR_BODY_LIMIT).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let text = String::from_utf8_lossy(&bytes);
    let Some(at) = text
        .rfind("</Error>")
        .filter(|_| !text.contains("<RequestId>"))
    else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    tracing::debug!(request_id = %id, status = %parts.status, "S3 error answered");
    let stamped = format!("{}<RequestId>{id}</RequestId>{}", &text[..at], &text[at..]);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, stamped.len().into());
    Response::from_parts(parts, Body::from(stamped))
}

async fn count(resp: Response<Body>) -> Response<Body> {
    catalog::S3_REQUESTS
        .counter_by(&[("status", resp.status().as_str().to_owned())])
        .increment(1);
    resp
}
