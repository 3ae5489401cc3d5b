//! `/v1/objects`: store, read, delete and list values.

use crate::catalog;
use axum::body::{Body, BodyDataStream};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use rasa_openapi::{ObjectList, ObjectSummary};
use serde::Deserialize;
use std::sync::Arc;
use utoipa::IntoParams;

use super::preconditions::{self, hv, validators, Outcome, Preconditions, RangeOutcome};
use super::resolve::{descriptor_of, key_from_uri, parse_version, wants_lease, VersionQuery};
use super::{json_response, ApiError, AppState};
use crate::key::{self, KeyError};
use crate::media::DEFAULT_CONTENT_TYPE;
use crate::objects::read::{Read, ReadIntent};
use crate::store::Store;
use crate::store::Upload;

const MAX_CONTENT_TYPE_LEN: usize = 256;

/// A member filling its cache from this one (see [`ReadIntent::peer_fill`]).
const PEER_FILL: HeaderName = HeaderName::from_static(rasa_openapi::cluster::PEER_FILL_HEADER);
/// Largest page of a listing, and the default.
pub const MAX_LIST_LIMIT: usize = 1000;

fn content_type(h: &HeaderMap) -> Result<String, ApiError> {
    let Some(v) = h.get(header::CONTENT_TYPE) else {
        return Ok(DEFAULT_CONTENT_TYPE.to_owned());
    };
    v.to_str()
        .map_err(|_| bad_content_type())
        .and_then(check_content_type)
}

/// A media type to store with a value: visible ASCII, 1 to 256 bytes once trimmed.
pub(super) fn check_content_type(v: &str) -> Result<String, ApiError> {
    let s = v.trim();
    let fits = !s.is_empty() && s.len() <= MAX_CONTENT_TYPE_LEN;
    match fits && s.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        true => Ok(s.to_owned()),
        false => Err(bad_content_type()),
    }
}

fn bad_content_type() -> ApiError {
    ApiError::InvalidRequest(format!(
        "Content-Type must be visible ASCII of at most {MAX_CONTENT_TYPE_LEN} bytes"
    ))
}

pub(super) fn content_length(h: &HeaderMap) -> Result<Option<u64>, ApiError> {
    h.get(header::CONTENT_LENGTH)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| ApiError::InvalidRequest("malformed Content-Length".into()))
        })
        .transpose()
}

pub(super) fn body_error(e: axum::Error) -> ApiError {
    if super::limits::is_body_timeout(&e) {
        return ApiError::BodyTimeout;
    }
    ApiError::IncompleteBody(format!(
        "the request body could not be read to its end: {e}"
    ))
}

/// Reads the body into a new upload: straight into arena memory when the length is
/// declared, else gathered first (as received, without copying) and then copied once.
async fn receive(
    st: &AppState,
    store: &Store,
    key: &str,
    ctype: &str,
    h: &HeaderMap,
    stream: &mut BodyDataStream,
) -> Result<Upload, ApiError> {
    let limit = st.config.limits.max_object_size;
    let too_large = ApiError::PayloadTooLarge { limit };
    let pace = st.config.limits.pace();
    let too_slow = || {
        catalog::HTTP_UPLOADS_TOO_SLOW.counter().increment(1);
        ApiError::TooSlow {
            rate: pace.min_rate(),
        }
    };
    if let Some(declared) = content_length(h)? {
        if declared > limit {
            return Err(too_large);
        }
        // Charged to the budget as the body arrives (a stalled upload holds little).
        let mut upload = store
            .writes()
            .begin_streaming(key, ctype, declared, None)
            .await?;
        while let Some(chunk) = pace
            .within(upload.written(), stream.next())
            .await
            .ok_or_else(too_slow)?
        {
            store
                .writes()
                .write(&mut upload, &chunk.map_err(body_error)?)
                .await?;
        }
        return Ok(upload);
    }
    // Without a declared length the body is gathered before it is stored, in memory
    // outside the store's budget: all such bodies together stay under
    // --chunked-upload-memory (reserved as they arrive, in KiB).
    let mut parts: Vec<Bytes> = Vec::new();
    let mut total = 0u64;
    let mut reserved_kib = 0u64;
    let mut reservation: Option<tokio::sync::OwnedSemaphorePermit> = None;
    while let Some(chunk) = pace
        .within(total, stream.next())
        .await
        .ok_or_else(too_slow)?
    {
        let chunk = chunk.map_err(body_error)?;
        total += chunk.len() as u64;
        if total > limit {
            return Err(too_large);
        }
        let need = total.div_ceil(1024);
        if need > reserved_kib {
            let more = u32::try_from(need - reserved_kib).unwrap_or(u32::MAX);
            match Arc::clone(&st.chunked_budget).try_acquire_many_owned(more) {
                Ok(p) => match reservation.as_mut() {
                    Some(r) => r.merge(p),
                    None => reservation = Some(p),
                },
                Err(_) if need > st.config.chunked_upload_memory.div_ceil(1024) => {
                    return Err(ApiError::ChunkedTooLarge {
                        limit: st.config.chunked_upload_memory,
                    })
                }
                Err(_) => {
                    return Err(ApiError::Unavailable {
                        detail: "too many bodies without Content-Length are being gathered at once (--chunked-upload-memory); retry, or send Content-Length to stream straight into memory".into(),
                        retry_after: 1,
                    })
                }
            }
            reserved_kib = need;
        }
        parts.push(chunk);
    }
    let mut upload = store.writes().begin(key, ctype, total).await?;
    for part in &parts {
        upload.write(part)?;
    }
    Ok(upload)
}

/// Store a value as a new immutable version.
///
/// The body is streamed into arena memory; SHA-256 (the ETag) and the frame checksum are
/// computed on the way. The key's current version moves to the new one only when the
/// whole body has arrived: a failed or interrupted upload stores nothing. Readers holding
/// a descriptor of an older version may keep reading it until their lease ends.
///
/// Conditional writes: `If-None-Match: *` stores only if the key has no current version;
/// `If-Match: "<etag>"` only if the current version has that ETag.
#[utoipa::path(
    put, path = "/v1/objects/{key}", tag = "objects", operation_id = "put_object",
    params(
        ("key" = String, Path, description = "Object key: 1 to 1024 bytes of UTF-8, may contain `/`; no control characters, no `.` or `..` segments."),
        ("Content-Type" = Option<String>, Header, description = "Stored and served back; default `application/octet-stream`."),
        ("If-Match" = Option<String>, Header, description = "Store only if the current version has one of these ETags."),
        ("If-None-Match" = Option<String>, Header, description = "`*`: store only if the key has no current version."),
        ("lease" = Option<bool>, Query, description = "`true`: answer with the remote address and key to read the new version one-sided, leased for `--lease` (as `GET /v1/descriptors` does). Without it the descriptor has neither (`addr`, `rkey` null, `lease_ms` 0) and the version is not leased: its memory can be reused as soon as it is replaced or evicted."),
    ),
    request_body(content = rasa_openapi::Binary, content_type = "application/octet-stream", description = "The value (any media type)."),
    responses(
        (status = 201, description = "Stored as a new version.", body = rasa_openapi::Descriptor,
            headers(
                ("ETag" = String, description = "Quoted SHA-256 hex of the value."),
                ("Location" = String, description = "URL of exactly this version."),
                ("Rasa-Version" = String, description = "The new version id."),
            )),
        (status = 400, description = "Invalid key, malformed header, or incomplete body.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 412, description = "A precondition failed; nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 408, description = "The body stalled longer than the body timeout; nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Larger than the maximum object size; nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Memory is full of values under lease; retry after `Retry-After` seconds. Nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64))),
        (status = 502, description = "Write-through: the origin failed; nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 504, description = "Write-through: the origin timed out; nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 507, description = "The value is larger than the memory budget can ever hold; nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn put_object(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let mut stream = body.into_data_stream();
    let answer = store_body(&st, &parts, &mut stream).await;
    super::limits::with_linger(answer, &mut stream).await
}

async fn store_body(
    st: &AppState,
    parts: &http::request::Parts,
    stream: &mut BodyDataStream,
) -> Result<Response, ApiError> {
    let objects = st.objects_in(&parts.extensions)?;
    let key = key_from_uri(parts.uri.path(), "/v1/objects/")?;
    let ctype = content_type(&parts.headers)?;
    let lease = wants_lease(&parts.uri)?;
    let pre = Preconditions::from_headers(&parts.headers)?;
    if !pre.is_empty() {
        // Fail fast, before the body is read; checked again atomically at commit.
        objects
            .precheck(&key, |cur| pre.evaluate(cur, false).map(drop))
            .await?;
    }
    let store = objects.store();
    let upload = receive(st, store, &key, &ctype, &parts.headers, stream).await?;
    let sealed = store.writes().seal(upload)?;
    let stored = objects
        .put(sealed, |cur| pre.evaluate(cur, false).map(drop))
        .await?;
    // A remote key opens memory: only for a caller that may read (not a write-only token)
    // and that asked for it (`?lease=true`): only then is the new version leased.
    let remote = lease && super::auth::Caller::reads(parts);
    let d = descriptor_of(st, store, &stored, remote);
    let mut resp = json_response(StatusCode::CREATED, &d);
    let h = resp.headers_mut();
    let location = format!(
        "{}/objects/{}?version={}",
        super::NamespaceName::api_root(&parts.extensions),
        key::to_path(&key),
        stored.version()
    );
    h.insert(header::LOCATION, hv(&location));
    h.insert(header::ETAG, hv(&stored.etag()));
    h.insert(preconditions::VERSION, hv(&stored.version().to_string()));
    Ok(resp)
}

async fn read_object(st: AppState, method: Method, req: Request) -> Result<Response, ApiError> {
    let objects = st.objects_in(req.extensions())?;
    let key = key_from_uri(req.uri().path(), "/v1/objects/")?;
    let Query(q) = Query::<VersionQuery>::try_from_uri(req.uri())
        .map_err(|e| ApiError::InvalidRequest(e.body_text()))?;
    let h = req.headers();
    let pre = Preconditions::from_headers(h)?;
    let intent = ReadIntent {
        key: &key,
        // A replica serves the version it holds ([`super::replica`]).
        version: parse_version(&q)?.or_else(|| {
            req.extensions()
                .get::<super::replica::ReplicaRead>()
                .map(|r| crate::store::VersionId(r.0))
        }),
        body: method == Method::GET,
        range: h.get(header::RANGE).map(|r| r.to_str().unwrap_or_default()),
        if_range: h.contains_key(header::IF_RANGE),
        conditional: !pre.is_empty(),
        // Another member filling its cache from this one: memory only, never the origin.
        // Only on a hop in a cluster (under a secret, a proven one): a client's marker
        // alone is ignored.
        peer_fill: st.peers.is_some()
            && h.contains_key(PEER_FILL)
            && h.contains_key(rasa_openapi::HOP_HEADER),
    };
    let v = match objects.read(&intent).await? {
        Read::Stored(v) => v,
        Read::Filling(fill) => return Ok(super::passthrough::filling(fill)),
        Read::FillingRange { fill, first, last } => {
            return Ok(super::passthrough::filling_range(fill, first, last))
        }
        Read::OriginHead(head) => return Ok(super::passthrough::head(&head)),
        Read::PassThrough(obj) => return Ok(super::passthrough::serve(&method, obj)),
    };
    let peer_fill = intent.peer_fill;
    let pinned = q.version.is_some();
    if pre.evaluate(Some(&v), true)? == Outcome::NotModified {
        let mut resp = StatusCode::NOT_MODIFIED.into_response();
        validators(resp.headers_mut(), &v, pinned);
        return Ok(resp);
    }
    let len = v.len();
    let range = if method == Method::GET {
        preconditions::resolve_range(h, &v)
    } else {
        RangeOutcome::Full
    };
    let (status, start, end) = match range {
        RangeOutcome::Full => (StatusCode::OK, 0, len),
        RangeOutcome::Partial(s, e) => (StatusCode::PARTIAL_CONTENT, s, e + 1),
        RangeOutcome::Unsatisfiable => return Err(ApiError::RangeNotSatisfiable { length: len }),
    };
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        let bytes = v.payload().slice(start as usize, end as usize);
        catalog::HTTP_BYTES_SERVED.counter().increment(end - start);
        // Zero-copy: the body shares the arena and keeps it alive until sent.
        Body::from(Bytes::from_owner(bytes))
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let rh = resp.headers_mut();
    // Room for every header a read answers with (the edge adds two), grown once.
    rh.reserve(12);
    validators(rh, &v, pinned);
    rh.insert(header::CONTENT_TYPE, hv(v.content_type()));
    rh.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    rh.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if peer_fill {
        if let Some(etag) = v.origin.etag() {
            rh.insert(rasa_openapi::cluster::ORIGIN_ETAG_HEADER, hv(etag));
        }
        if let Some(age) = v.origin.age() {
            rh.insert(header::AGE, HeaderValue::from(age.as_secs()));
        }
    }
    if status == StatusCode::PARTIAL_CONTENT {
        rh.insert(
            header::CONTENT_RANGE,
            hv(&format!("bytes {start}-{}/{len}", end - 1)),
        );
    }
    Ok(resp)
}

/// Read a value.
///
/// Serves the current version, or the version named by `?version=`. Supports a single
/// byte `Range` (206; several ranges are answered with the whole value), `If-Range`,
/// `If-None-Match`/`If-Modified-Since` (304) and `If-Match`/`If-Unmodified-Since` (412).
#[utoipa::path(
    get, path = "/v1/objects/{key}", tag = "objects", operation_id = "get_object",
    params(
        ("key" = String, Path, description = "Object key."),
        VersionQuery,
        ("Range" = Option<String>, Header, description = "One byte range: `bytes=0-99`, `bytes=100-`, `bytes=-100`."),
        ("If-None-Match" = Option<String>, Header, description = "304 when the ETag matches."),
        ("If-Match" = Option<String>, Header, description = "412 unless the ETag matches."),
    ),
    responses(
        (status = 200, description = "The value.", body = rasa_openapi::Binary, content_type = "application/octet-stream",
            headers(
                ("ETag" = String), ("Last-Modified" = String), ("Rasa-Version" = String),
                ("Accept-Ranges" = String), ("Content-Length" = u64),
                ("Rasa-Frame-Checksum" = String, description = "The version's frame checksum (XXH3-64, 16 hex digits) over the payload and a header rebuilt from the key, version and length: a reader can check the body at memory speed."),
                ("Rasa-Frame-Format" = u16, description = "The frame format the checksum is of."),
            )),
        (status = 206, description = "The requested range.", body = rasa_openapi::Binary, content_type = "application/octet-stream",
            headers(("Content-Range" = String), ("ETag" = String), ("Rasa-Version" = String))),
        (status = 304, description = "Not modified."),
        (status = 400, description = "Invalid key, version or header.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such key or version.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 412, description = "A precondition failed.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 416, description = "The range does not overlap the value.", body = rasa_openapi::Problem, content_type = "application/problem+json",
            headers(("Content-Range" = String, description = "`bytes */<length>`"))),
        (status = 502, description = "Read-through miss: the origin failed.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Read-through miss: no reusable memory for now.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 504, description = "Read-through miss: the origin timed out.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_object(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    read_object(st, Method::GET, req).await
}

/// Read a value's metadata: the headers a GET would send, without the body.
#[utoipa::path(
    head, path = "/v1/objects/{key}", tag = "objects", operation_id = "head_object",
    params(("key" = String, Path, description = "Object key."), VersionQuery),
    responses(
        (status = 200, description = "The value exists.",
            headers(("ETag" = String), ("Last-Modified" = String), ("Rasa-Version" = String), ("Content-Length" = u64))),
        (status = 304, description = "Not modified."),
        (status = 400, description = "Invalid key or version."),
        (status = 404, description = "No such key or version."),
        (status = 412, description = "A precondition failed."),
        (status = 502, description = "Read-through miss: the origin failed."),
        (status = 503, description = "Read-through miss: no reusable memory for now."),
        (status = 504, description = "Read-through miss: the origin timed out."),
    )
)]
pub async fn head_object(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    read_object(st, Method::HEAD, req).await
}

/// Delete a key.
///
/// Every version of the key becomes unreachable for new requests at once; deleting an
/// absent key also answers 204 (idempotent, like S3). Deletes are lazy for one-sided
/// readers: a reader holding a descriptor may still read the bytes until its lease ends.
#[utoipa::path(
    delete, path = "/v1/objects/{key}", tag = "objects", operation_id = "delete_object",
    params(
        ("key" = String, Path, description = "Object key."),
        ("If-Match" = Option<String>, Header, description = "Delete only if the current version has this ETag."),
    ),
    responses(
        (status = 204, description = "Deleted (or was absent)."),
        (status = 400, description = "Invalid key or header.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 412, description = "A precondition failed; nothing deleted.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 502, description = "Write-through: the origin failed; nothing deleted.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 504, description = "Write-through: the origin timed out; nothing deleted.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_object(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let objects = st.objects_in(req.extensions())?;
    let key = key_from_uri(req.uri().path(), "/v1/objects/")?;
    let pre = Preconditions::from_headers(req.headers())?;
    objects
        .delete(&key, |cur| pre.evaluate(cur, false).map(drop))
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Query parameters of a listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only keys starting with this.
    pub prefix: Option<String>,
    /// Most items to return, 1 to 1000 (default 1000).
    pub limit: Option<usize>,
    /// Continue after this key (the `next_after` of the previous page).
    pub after: Option<String>,
}

/// List keys and their current versions, in key order, a page at a time.
///
/// In a cluster, the answer covers every member (each asked for the same page).
#[utoipa::path(
    get, path = "/v1/objects", tag = "objects", operation_id = "list_objects",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of objects.", body = ObjectList),
        (status = 400, description = "Invalid parameter.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_objects(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let objects = st.objects_in(req.extensions())?;
    let Query(q) = Query::<ListQuery>::try_from_uri(req.uri())
        .map_err(|e| ApiError::InvalidRequest(e.body_text()))?;
    let limit = q.limit.unwrap_or(MAX_LIST_LIMIT);
    if !(1..=MAX_LIST_LIMIT).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit must be between 1 and {MAX_LIST_LIMIT}"
        )));
    }
    let prefix = q.prefix.unwrap_or_default();
    let (page, more) = objects.store().list(&prefix, q.after.as_deref(), limit);
    let next_after = if more {
        page.last().map(|v| v.key().to_string())
    } else {
        None
    };
    let items = page
        .iter()
        .map(|v| ObjectSummary {
            key: v.key().to_string(),
            version: v.version().to_string(),
            length: v.len(),
            etag: v.etag(),
        })
        .collect();
    let mut list = ObjectList { items, next_after };
    if let Some(peers) = super::fanout::cluster_wide(&st, req.headers()) {
        let query = req.uri().query().unwrap_or_default();
        let root = super::NamespaceName::api_root(req.extensions());
        list = super::fanout::merge_lists(peers, req.headers(), &root, query, limit, list).await?;
    }
    Ok(json_response(StatusCode::OK, &list))
}

/// Any request for an empty key.
pub async fn empty_key() -> ApiError {
    ApiError::InvalidKey(KeyError::Empty)
}
