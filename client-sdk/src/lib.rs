//! # rasa-client — the Rust SDK for Rasa
//!
//! Talks to a Rasa gateway over HTTP and, where the gateway and this machine both speak
//! libfabric, reads values **one-sided** from the gateway's registered memory.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rasa_client::Error> {
//! use rasa_client::{Client, FastPath};
//! let client = Client::builder("http://127.0.0.1:8080").fast_path(FastPath::Auto).build()?;
//! client.put("photos/cat.jpg", b"...".to_vec()).await?;
//! let obj = client.get("photos/cat.jpg").await?;
//! println!("{} bytes via {:?}", obj.bytes.len(), obj.path);
//! # Ok(()) }
//! ```
//!
//! ## Consistency contract
//!
//! Values are immutable versions. A descriptor names one version and carries a lease; the
//! SDK computes the lease deadline from the moment it **sent** the resolve request (minus a
//! safety margin) and never starts a one-sided read after it. Every one-sided read is
//! validated (frame magic, key hash, version, length, frame checksum) before bytes are
//! returned; a stale, revoked, torn or timed-out read is retried once with a fresh
//! descriptor and then served over HTTP (unless [`FastPath::Required`]). The caller gets
//! correct bytes or an error, never wrong bytes. Overwrites and deletes are lazy for
//! one-sided readers: a read may return the version that was current when it resolved the
//! key, until that descriptor's lease ends.
//!
//! ## Threads
//!
//! [`Client`] is cheap to clone and shareable; one-sided reads run on tokio's blocking
//! pool, one at a time per client (the fabric endpoint is shared behind a lock).

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::prelude::*;
use bytes::Bytes;
use rasa_fastpath::fabric::FabricConfig;
use rasa_fastpath::frame::{key_hash, FrameIdentity};
use rasa_fastpath::reader::{ReadError, Reader, RemoteFrame};
pub use rasa_openapi::{
    Descriptor, DescriptorBatchRequest, DescriptorBatchResponse, DescriptorResult, FabricInfo,
    ObjectList, ObjectSummary, Problem, ProblemCode,
};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

/// Whether `get` may, must or must not read one-sided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FastPath {
    /// One-sided when possible, HTTP otherwise.
    #[default]
    Auto,
    /// HTTP only.
    Off,
    /// One-sided or an error; never HTTP.
    Required,
}

/// Which path served a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPath {
    /// A one-sided read over the fabric.
    Fabric,
    /// An HTTP GET.
    Http,
}

impl ReadPath {
    /// `"fabric"` or `"http"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fabric => "fabric",
            Self::Http => "http",
        }
    }
}

/// Errors of the SDK.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The gateway answered with a problem document.
    #[error("{} {}: {}", .0.status, .0.code.as_str(), .0.detail)]
    Problem(Problem),
    /// The HTTP exchange failed (connection, protocol, body).
    #[error("HTTP request failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The gateway answered something this SDK does not understand.
    #[error("unexpected answer from the gateway: {0}")]
    Protocol(String),
    /// A one-sided read was required and could not be done.
    #[error("fast path unavailable: {0}")]
    FastPath(String),
    /// The client could not be built as configured (unreadable CA file, bad token).
    #[error("client configuration: {0}")]
    Config(String),
}

impl Error {
    /// The problem code, when the gateway sent one.
    pub fn code(&self) -> Option<ProblemCode> {
        match self {
            Self::Problem(p) => Some(p.code),
            _ => None,
        }
    }
}

/// A value read from the gateway.
#[derive(Clone, Debug)]
pub struct Object {
    /// The payload.
    pub bytes: Bytes,
    /// Its version id.
    pub version: String,
    /// Its SHA-256 (hex), as stored by the gateway.
    pub sha256: String,
    /// Its media type.
    pub content_type: String,
    /// Which path served it.
    pub path: ReadPath,
}

/// Why a read that could have gone one-sided went over HTTP (or failed, with
/// [`FastPath::Required`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fallback {
    /// The gateway or this machine has no fast path.
    Unavailable,
    /// The descriptor's lease ended before a read could start.
    LeaseExpired,
    /// The remote key was revoked (the version was reclaimed) or the range was out of bounds.
    KeyRevoked,
    /// The fabric connection was lost; the endpoint is being rebuilt.
    ConnectionLost,
    /// The read did not complete in time.
    Timeout,
    /// The bytes were not the promised frame (torn, stale or corrupt).
    FrameMismatch,
    /// The SHA-256 check (opt-in) failed.
    Sha256Mismatch,
    /// The endpoint is being rebuilt after a failure; reads go over HTTP meanwhile.
    Rebuilding,
    /// Another libfabric failure.
    FabricError,
}

impl Fallback {
    /// A short stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unavailable => "unavailable",
            Self::LeaseExpired => "lease_expired",
            Self::KeyRevoked => "key_revoked",
            Self::ConnectionLost => "connection_lost",
            Self::Timeout => "timeout",
            Self::FrameMismatch => "frame_mismatch",
            Self::Sha256Mismatch => "sha256_mismatch",
            Self::Rebuilding => "rebuilding",
            Self::FabricError => "fabric_error",
        }
    }

    fn of(e: &ReadError) -> Self {
        match e {
            ReadError::KeyRevoked(_) => Self::KeyRevoked,
            ReadError::ConnectionLost(_) => Self::ConnectionLost,
            ReadError::Timeout(_) => Self::Timeout,
            ReadError::Frame(_) => Self::FrameMismatch,
            ReadError::Fabric(_) => Self::FabricError,
        }
    }
}

/// Read counters of a client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Values served one-sided.
    pub fabric_reads: u64,
    /// Values served over HTTP.
    pub http_reads: u64,
    /// One-sided attempts that failed, by reason (each attempt counts once).
    pub fallbacks: std::collections::BTreeMap<&'static str, u64>,
    /// Requests sent again after a `503` with `Retry-After`.
    pub busy_retries: u64,
}

/// Metadata of a value (from `HEAD`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Version id.
    pub version: String,
    /// Payload length.
    pub length: u64,
    /// Entity tag (quoted SHA-256).
    pub etag: String,
    /// Media type.
    pub content_type: String,
}

/// Builds a [`Client`].
pub struct ClientBuilder {
    endpoint: String,
    fast_path: FastPath,
    fabric_addr: Option<String>,
    verify_sha256: bool,
    read_timeout: Duration,
    token: Option<String>,
    ca_file: Option<std::path::PathBuf>,
    retries_when_busy: u32,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("endpoint", &self.endpoint)
            .field("fast_path", &self.fast_path)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// Bearer token sent on every request (`Authorization: Bearer …`), for gateways run
    /// with `--token-file`. The token is marked sensitive and never printed.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// How many times a request answered `503` with `Retry-After` (the gateway is
    /// overloaded or its memory is full of leased values; nothing was done) is sent again
    /// after waiting as told (default 2; 0 returns the `503` at once). Requests whose body
    /// is a stream are not retried.
    pub fn retries_when_busy(mut self, n: u32) -> Self {
        self.retries_when_busy = n;
        self
    }

    /// A PEM file of extra certificate authorities to trust for `https://` endpoints, in
    /// addition to the system's (for gateways with a private or self-signed certificate).
    pub fn ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Fast-path policy (default [`FastPath::Auto`]).
    pub fn fast_path(mut self, mode: FastPath) -> Self {
        self.fast_path = mode;
        self
    }

    /// Local address for this client's fabric endpoint (default: `127.0.0.1` when the
    /// gateway is on loopback, else the provider's choice).
    pub fn fabric_addr(mut self, addr: impl Into<String>) -> Self {
        self.fabric_addr = Some(addr.into());
        self
    }

    /// Also check the SHA-256 of every one-sided read (the frame checksum is always
    /// checked; this adds the content identity at ~1.6 GB/s).
    pub fn verify_sha256(mut self, on: bool) -> Self {
        self.verify_sha256 = on;
        self
    }

    /// Longest a single one-sided read may take (default 5 s; never past the lease).
    pub fn read_timeout(mut self, t: Duration) -> Self {
        self.read_timeout = t;
        self
    }

    /// The client.
    pub fn build(self) -> Result<Client, Error> {
        let endpoint = self.endpoint.trim_end_matches('/').to_owned();
        let fabric_addr = self.fabric_addr.or_else(|| {
            let host = endpoint
                .split("://")
                .nth(1)
                .and_then(|rest| rest.split(['/', ':']).next())
                .unwrap_or_default();
            matches!(host, "127.0.0.1" | "localhost").then(|| "127.0.0.1".to_owned())
        });
        let mut http = reqwest::Client::builder()
            // Below the gateway's default --header-timeout (30 s), which also closes idle
            // keep-alive connections: the pool lets go first, so no request races a close.
            .pool_idle_timeout(Duration::from_secs(20))
            .use_preconfigured_tls(tls_config(
                endpoint.starts_with("https://"),
                self.ca_file.as_deref(),
            )?);
        if let Some(token) = &self.token {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| {
                    Error::Config("the token has characters a header cannot carry".into())
                })?;
            value.set_sensitive(true);
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::AUTHORIZATION, value);
            http = http.default_headers(headers);
        }
        Ok(Client {
            inner: Arc::new(Inner {
                http: http.build()?,
                endpoint,
                fast_path: self.fast_path,
                fabric_addr,
                verify_sha256: self.verify_sha256,
                read_timeout: self.read_timeout,
                retries_when_busy: self.retries_when_busy,
                fabric: Arc::new(Mutex::new(FabricState::Unknown)),
                rebuilding: Arc::default(),
                cache: Default::default(),
                stats: Default::default(),
            }),
        })
    }
}

/// TLS for the HTTP client: rustls with aws-lc-rs, the system's roots (for `https`
/// endpoints) and the extra CAs in `ca_file`.
fn tls_config(
    system_roots: bool,
    ca_file: Option<&std::path::Path>,
) -> Result<rustls::ClientConfig, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    if system_roots {
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
    }
    if let Some(path) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| Error::Config(format!("CA file {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(Error::Config(format!(
                "CA file {}: no certificate in it",
                path.display()
            )));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| Error::Config(format!("CA file {}: {e}", path.display())))?;
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

enum FabricState {
    /// Not asked yet.
    Unknown,
    /// The gateway or this machine has no fast path (reason).
    Unavailable(String),
    /// Connected.
    Ready(Box<Reader>),
}

struct Inner {
    http: reqwest::Client,
    endpoint: String,
    fast_path: FastPath,
    fabric_addr: Option<String>,
    verify_sha256: bool,
    read_timeout: Duration,
    retries_when_busy: u32,
    fabric: Arc<Mutex<FabricState>>,
    /// Set while the endpoint is rebuilt in the background; reads go over HTTP meanwhile.
    rebuilding: Arc<std::sync::atomic::AtomicBool>,
    /// Descriptors with the instant after which no read may start.
    cache: std::sync::Mutex<std::collections::HashMap<String, (Descriptor, Instant)>>,
    stats: std::sync::Mutex<Stats>,
}

/// A client of one gateway.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.inner.endpoint)
            .field("fast_path", &self.inner.fast_path)
            .finish()
    }
}

/// Longest `Retry-After` the SDK waits out by itself; a longer one is returned as the
/// `503` it is.
pub const MAX_BUSY_WAIT: Duration = Duration::from_secs(5);

/// Part of the lease kept in reserve: no read starts later than `lease - margin` after the
/// resolve request was sent.
fn lease_margin(lease: Duration) -> Duration {
    (lease / 4).min(Duration::from_secs(1))
}

/// What a descriptor promises, as the fast-path reader needs it: where the frame is and
/// what it must contain. `None` when the descriptor has no fabric address (HTTP only).
pub fn remote_frame(d: &Descriptor) -> Result<Option<RemoteFrame>, Error> {
    let (Some(addr), Some(rkey)) = (d.addr, d.rkey) else {
        return Ok(None);
    };
    let hex = |s: &str, what: &str| {
        u64::from_str_radix(s, 16).map_err(|_| Error::Protocol(format!("bad {what} {s:?}")))
    };
    Ok(Some(RemoteFrame {
        addr,
        rkey,
        identity: FrameIdentity {
            key_hash: key_hash(&d.key),
            version: hex(&d.version, "version")?,
            payload_len: d.length,
        },
        checksum: hex(&d.checksum, "checksum")?,
    }))
}

/// The instant after which no one-sided read of `d` may start: counted from when the
/// request was *sent* (never from when the answer arrived), minus a margin.
fn deadline_of(d: &Descriptor, sent: Instant) -> Instant {
    let lease = Duration::from_millis(d.lease_ms);
    sent + lease.saturating_sub(lease_margin(lease))
}

async fn problem_or<T: serde::de::DeserializeOwned>(resp: reqwest::Response) -> Result<T, Error> {
    if resp.status().is_success() {
        return Ok(resp.json().await?);
    }
    Err(problem(resp).await)
}

/// A response header as text ("" when absent or not text).
fn header_str(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn problem(resp: reqwest::Response) -> Error {
    let status = resp.status();
    match resp.json::<Problem>().await {
        Ok(p) => Error::Problem(p),
        Err(_) => Error::Protocol(format!("HTTP {status} without a problem document")),
    }
}

impl Client {
    /// Sends `req`; when the gateway answers `503` (overloaded, or memory full of leased
    /// values — nothing was done either way) and the request can be sent again, waits
    /// `Retry-After` (at most [`MAX_BUSY_WAIT`]) and retries, up to the builder's
    /// `retries_when_busy` times.
    async fn send(&self, mut req: reqwest::RequestBuilder) -> Result<reqwest::Response, Error> {
        let mut retries = 0;
        loop {
            let again = req.try_clone();
            let resp = req.send().await?;
            if resp.status() != reqwest::StatusCode::SERVICE_UNAVAILABLE
                || retries >= self.inner.retries_when_busy
            {
                return Ok(resp);
            }
            let wait =
                Duration::from_secs(header_str(&resp, "retry-after").parse::<u64>().unwrap_or(1));
            let Some(next) = again.filter(|_| wait <= MAX_BUSY_WAIT) else {
                return Ok(resp);
            };
            retries += 1;
            self.inner
                .stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .busy_retries += 1;
            tokio::time::sleep(wait).await;
            req = next;
        }
    }

    /// A builder for a client of the gateway at `endpoint` (e.g. `http://127.0.0.1:8080`).
    pub fn builder(endpoint: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            endpoint: endpoint.into(),
            fast_path: FastPath::Auto,
            fabric_addr: None,
            verify_sha256: false,
            read_timeout: Duration::from_secs(5),
            token: None,
            ca_file: None,
            retries_when_busy: 2,
        }
    }

    fn url(&self, route: &str, key: &str) -> String {
        format!(
            "{}/v1/{route}/{}",
            self.inner.endpoint,
            rasa_openapi::key_to_path(key)
        )
    }

    /// Stores `body` as a new version of `key`.
    pub async fn put(
        &self,
        key: &str,
        body: impl Into<reqwest::Body>,
    ) -> Result<Descriptor, Error> {
        self.put_typed(key, body, None).await
    }

    /// Stores `body` with a media type.
    pub async fn put_typed(
        &self,
        key: &str,
        body: impl Into<reqwest::Body>,
        content_type: Option<&str>,
    ) -> Result<Descriptor, Error> {
        let mut req = self.inner.http.put(self.url("objects", key)).body(body);
        if let Some(ct) = content_type {
            req = req.header(reqwest::header::CONTENT_TYPE, ct);
        }
        problem_or(self.send(req).await?).await
    }

    /// Deletes `key` (succeeds when absent too).
    pub async fn delete(&self, key: &str) -> Result<(), Error> {
        let resp = self
            .send(self.inner.http.delete(self.url("objects", key)))
            .await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(problem(resp).await)
        }
    }

    /// A descriptor of `key`'s current version (a lease on it).
    pub async fn resolve(&self, key: &str) -> Result<Descriptor, Error> {
        let resp = self
            .send(self.inner.http.get(self.url("descriptors", key)))
            .await?;
        problem_or(resp).await
    }

    /// How this gateway serves one-sided reads.
    pub async fn fabric_info(&self) -> Result<FabricInfo, Error> {
        let resp = self
            .send(
                self.inner
                    .http
                    .get(format!("{}/v1/fabric", self.inner.endpoint)),
            )
            .await?;
        problem_or(resp).await
    }

    /// Whether this client already knows the fast path cannot work here (Auto mode then
    /// goes straight to HTTP).
    fn known_unavailable(&self) -> bool {
        self.inner.fast_path == FastPath::Auto
            && self
                .inner
                .fabric
                .try_lock()
                .is_ok_and(|s| matches!(*s, FabricState::Unavailable(_)))
    }

    /// Read counters so far.
    pub fn stats(&self) -> Stats {
        self.inner
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn count_fallback(&self, why: Fallback) {
        let mut st = self.inner.stats.lock().unwrap_or_else(|e| e.into_inner());
        *st.fallbacks.entry(why.as_str()).or_default() += 1;
    }

    fn count_read(&self, path: ReadPath) {
        let mut st = self.inner.stats.lock().unwrap_or_else(|e| e.into_inner());
        match path {
            ReadPath::Fabric => st.fabric_reads += 1,
            ReadPath::Http => st.http_reads += 1,
        }
    }

    /// Resolves several keys in one round trip; one result per key, in order.
    pub async fn resolve_many(
        &self,
        keys: &[&str],
    ) -> Result<Vec<Result<Descriptor, Problem>>, Error> {
        let (list, _) = self.resolve_many_timed(keys).await?;
        Ok(list)
    }

    async fn resolve_many_timed(
        &self,
        keys: &[&str],
    ) -> Result<(Vec<Result<Descriptor, Problem>>, Instant), Error> {
        let sent = Instant::now();
        let body = DescriptorBatchRequest {
            keys: keys.iter().map(|k| k.to_string()).collect(),
        };
        let resp = self
            .send(
                self.inner
                    .http
                    .post(format!("{}/v1/descriptors", self.inner.endpoint))
                    .json(&body),
            )
            .await?;
        let batch: DescriptorBatchResponse = problem_or(resp).await?;
        let out = batch
            .results
            .into_iter()
            .map(|r| match (r.descriptor, r.error) {
                (Some(d), _) => Ok(d),
                (None, Some(p)) => Err(p),
                (None, None) => Err(Problem {
                    type_uri: "urn:rasa:problem:unknown".into(),
                    title: "Unknown".into(),
                    status: 500,
                    detail: "the gateway returned neither a descriptor nor a problem".into(),
                    code: ProblemCode::Unknown,
                    instance: None,
                }),
            })
            .collect();
        Ok((out, sent))
    }

    /// The metadata of `key`'s current version.
    pub async fn head(&self, key: &str) -> Result<Meta, Error> {
        let resp = self
            .send(self.inner.http.head(self.url("objects", key)))
            .await?;
        if !resp.status().is_success() {
            return Err(Error::Problem(Problem {
                type_uri: "urn:rasa:problem:not_found".into(),
                title: resp.status().canonical_reason().unwrap_or("Error").into(),
                status: resp.status().as_u16(),
                detail: format!("HEAD {key}: {}", resp.status()),
                code: if resp.status() == reqwest::StatusCode::NOT_FOUND {
                    ProblemCode::NotFound
                } else {
                    ProblemCode::Unknown
                },
                instance: None,
            }));
        }
        let h = |name: &str| header_str(&resp, name);
        Ok(Meta {
            version: h(rasa_openapi::VERSION_HEADER),
            length: h("content-length").parse().unwrap_or(0),
            etag: h("etag"),
            content_type: h("content-type"),
        })
    }

    /// A page of keys starting with `prefix`, after `after`, at most `limit` (1–1000).
    pub async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<ObjectList, Error> {
        let mut q = vec![("prefix", prefix.to_owned()), ("limit", limit.to_string())];
        if let Some(a) = after {
            q.push(("after", a.to_owned()));
        }
        let resp = self
            .send(
                self.inner
                    .http
                    .get(format!("{}/v1/objects", self.inner.endpoint))
                    .query(&q),
            )
            .await?;
        problem_or(resp).await
    }

    /// Reads bytes `start..end` of `key`'s current version (over HTTP: a range is cheaper to
    /// send than to validate one-sided, since the frame checksum covers the whole value).
    pub async fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> Result<Object, Error> {
        let mut obj = self
            .http_get(
                key,
                Some(format!(
                    "bytes={}-{}",
                    range.start,
                    range.end.saturating_sub(1)
                )),
            )
            .await?;
        obj.path = ReadPath::Http;
        Ok(obj)
    }

    /// Reads `key`'s current version: one-sided when the policy allows and it works, else
    /// over HTTP.
    pub async fn get(&self, key: &str) -> Result<Object, Error> {
        if self.inner.fast_path == FastPath::Off || self.known_unavailable() {
            return self.get_http(key).await;
        }
        match self.get_fabric(key).await {
            Ok(obj) => Ok(obj),
            Err(e @ Error::Problem(_)) => Err(e),
            Err(e) if self.inner.fast_path == FastPath::Required => Err(e),
            Err(e) => {
                tracing::debug!(key, error = %e, "fast path failed; reading over HTTP");
                self.get_http(key).await
            }
        }
    }

    /// Reads several keys: one descriptor round trip, then all one-sided reads in flight
    /// together; keys that cannot be read one-sided are read over HTTP (per the policy).
    /// One result per key, in order.
    pub async fn get_many(&self, keys: &[&str]) -> Result<Vec<Result<Object, Error>>, Error> {
        if self.inner.fast_path == FastPath::Off {
            let mut out = Vec::with_capacity(keys.len());
            for k in keys {
                out.push(self.get_http(k).await);
            }
            return Ok(out);
        }
        let (resolved, sent) = self.resolve_many_timed(keys).await?;
        let mut out: Vec<Option<Result<Object, Error>>> = Vec::with_capacity(keys.len());
        let mut batch = Vec::new();
        for (i, r) in resolved.into_iter().enumerate() {
            match r {
                Ok(d) => {
                    batch.push((i, d));
                    out.push(None);
                }
                Err(p) => out.push(Some(Err(Error::Problem(p)))),
            }
        }
        let descs: Vec<&Descriptor> = batch.iter().map(|(_, d)| d).collect();
        match self.read_descriptors(&descs, sent).await {
            Ok(results) => {
                for ((i, _), r) in batch.iter().zip(results) {
                    out[*i] = Some(r);
                }
            }
            Err(e) => {
                for (i, _) in &batch {
                    out[*i] = Some(Err(Error::FastPath(e.to_string())));
                }
            }
        }
        let mut done = Vec::with_capacity(keys.len());
        for (i, r) in out.into_iter().enumerate() {
            let r = r.expect("every key answered");
            done.push(match r {
                Err(Error::FastPath(_)) if self.inner.fast_path == FastPath::Auto => {
                    self.get_http(keys[i]).await
                }
                other => other,
            });
        }
        Ok(done)
    }

    /// Reads `key` over HTTP.
    pub async fn get_http(&self, key: &str) -> Result<Object, Error> {
        self.http_get(key, None).await
    }

    async fn http_get(&self, key: &str, range: Option<String>) -> Result<Object, Error> {
        let mut req = self.inner.http.get(self.url("objects", key));
        if let Some(r) = range {
            req = req.header(reqwest::header::RANGE, r);
        }
        let resp = self.send(req).await?;
        if !resp.status().is_success() {
            return Err(problem(resp).await);
        }
        let header = |name: &str| header_str(&resp, name);
        let version = header(rasa_openapi::VERSION_HEADER);
        let sha256 = header("etag").trim_matches('"').to_owned();
        let content_type = header("content-type");
        let bytes = resp.bytes().await?;
        self.count_read(ReadPath::Http);
        Ok(Object {
            bytes,
            version,
            sha256,
            content_type,
            path: ReadPath::Http,
        })
    }

    /// A descriptor of `key` that may still be read from now on: the cached one while its
    /// deadline is ahead, else a fresh one (and its deadline).
    async fn descriptor(&self, key: &str, fresh: bool) -> Result<(Descriptor, Instant), Error> {
        if !fresh {
            let cache = self.inner.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((d, deadline)) = cache.get(key) {
                if Instant::now() < *deadline {
                    return Ok((d.clone(), *deadline));
                }
            }
        }
        let sent = Instant::now();
        let d = self.resolve(key).await?;
        let deadline = deadline_of(&d, sent);
        self.inner
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_owned(), (d.clone(), deadline));
        Ok((d, deadline))
    }

    fn forget(&self, key: &str) {
        self.inner
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Reads `key` one-sided, or fails (never falls back to HTTP). A stale, revoked, torn
    /// or timed-out read drops the cached descriptor and gets one more try with a fresh one.
    pub async fn get_fabric(&self, key: &str) -> Result<Object, Error> {
        let mut last = None;
        for attempt in 0..2 {
            let (d, deadline) = self.descriptor(key, attempt > 0).await?;
            match self.read_one(&d, deadline).await {
                Ok(obj) => return Ok(obj),
                Err(e) => {
                    self.forget(key);
                    last = Some(e);
                    if self
                        .inner
                        .rebuilding
                        .load(std::sync::atomic::Ordering::Acquire)
                    {
                        break; // the endpoint is down for a while: don't wait for it
                    }
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// Reads the version `d` names one-sided. `sent` is when the request that returned `d`
    /// was sent: the lease is counted from then.
    pub async fn read_descriptor(&self, d: &Descriptor, sent: Instant) -> Result<Object, Error> {
        self.read_one(d, deadline_of(d, sent)).await
    }

    async fn read_one(&self, d: &Descriptor, deadline: Instant) -> Result<Object, Error> {
        let mut r = self.read_frames(&[(d, deadline)]).await?;
        r.pop().expect("one result")
    }

    async fn read_descriptors(
        &self,
        ds: &[&Descriptor],
        sent: Instant,
    ) -> Result<Vec<Result<Object, Error>>, Error> {
        let with: Vec<(&Descriptor, Instant)> =
            ds.iter().map(|d| (*d, deadline_of(d, sent))).collect();
        self.read_frames(&with).await
    }

    /// The core of every one-sided read: checks leases, reads all frames in one go,
    /// validates, counts, and rebuilds the endpoint in the background after a failure.
    async fn read_frames(
        &self,
        ds: &[(&Descriptor, Instant)],
    ) -> Result<Vec<Result<Object, Error>>, Error> {
        if ds.is_empty() {
            return Ok(Vec::new());
        }
        if self
            .inner
            .rebuilding
            .load(std::sync::atomic::Ordering::Acquire)
        {
            self.count_fallback(Fallback::Rebuilding);
            return Err(Error::FastPath(
                "the fabric endpoint is being rebuilt".into(),
            ));
        }
        let mut frames = Vec::with_capacity(ds.len());
        let mut earliest = None::<Instant>;
        for (d, deadline) in ds {
            let Some(frame) = remote_frame(d)? else {
                self.count_fallback(Fallback::Unavailable);
                return Err(Error::FastPath("the gateway serves HTTP only".into()));
            };
            frames.push(frame);
            earliest = Some(earliest.map_or(*deadline, |e: Instant| e.min(*deadline)));
        }
        let remaining = earliest
            .expect("non-empty")
            .saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            self.count_fallback(Fallback::LeaseExpired);
            return Err(Error::FastPath(
                "the descriptor's lease ended before the read".into(),
            ));
        }
        let timeout = remaining.min(self.inner.read_timeout);
        let mut state = Arc::clone(&self.inner.fabric).lock_owned().await;
        if let Err(e) = self.connect(&mut state).await {
            self.count_fallback(Fallback::Unavailable);
            return Err(e);
        }
        let (state, result) = tokio::task::spawn_blocking(move || {
            let r = match &mut *state {
                FabricState::Ready(reader) => reader.read_many(&frames, timeout),
                _ => unreachable!("connected above"),
            };
            (state, r)
        })
        .await
        .map_err(|e| Error::FastPath(format!("read task failed: {e}")))?;
        let results = match result {
            Ok(r) => {
                drop(state);
                r
            }
            Err(e) => {
                self.count_fallback(Fallback::of(&e));
                self.rebuild_in_background(state);
                return Err(Error::FastPath(e.to_string()));
            }
        };
        let mut out = Vec::with_capacity(ds.len());
        for ((d, _), r) in ds.iter().zip(results) {
            out.push(match r {
                Err(e) => {
                    self.count_fallback(Fallback::FrameMismatch);
                    Err(Error::FastPath(format!("frame rejected: {e}")))
                }
                Ok(payload)
                    if self.inner.verify_sha256
                        && hex::encode(Sha256::digest(&payload)) != d.sha256 =>
                {
                    self.count_fallback(Fallback::Sha256Mismatch);
                    Err(Error::FastPath(
                        "SHA-256 mismatch on a one-sided read".into(),
                    ))
                }
                Ok(payload) => {
                    self.count_read(ReadPath::Fabric);
                    Ok(Object {
                        bytes: Bytes::from(payload),
                        version: d.version.clone(),
                        sha256: d.sha256.clone(),
                        content_type: d.content_type.clone(),
                        path: ReadPath::Fabric,
                    })
                }
            });
        }
        Ok(out)
    }

    /// After a fabric failure the reader has dropped its endpoint; build a new one on the
    /// blocking pool while reads go over HTTP.
    fn rebuild_in_background(&self, mut state: tokio::sync::OwnedMutexGuard<FabricState>) {
        let flag = Arc::clone(&self.inner.rebuilding);
        flag.store(true, std::sync::atomic::Ordering::Release);
        tokio::task::spawn_blocking(move || {
            if let FabricState::Ready(reader) = &mut *state {
                if let Err(e) = reader.reconnect() {
                    tracing::warn!(error = %e, "fabric endpoint rebuild failed; will retry on the next read");
                }
            }
            drop(state);
            flag.store(false, std::sync::atomic::Ordering::Release);
        });
    }

    /// Makes sure `state` holds a connected reader (asking the gateway on first use).
    async fn connect(&self, state: &mut FabricState) -> Result<(), Error> {
        match state {
            FabricState::Ready(_) => return Ok(()),
            FabricState::Unavailable(why) => return Err(Error::FastPath(why.clone())),
            FabricState::Unknown => {}
        }
        let info = self.fabric_info().await?;
        let (Some(provider), Some(address), true) = (info.provider, info.address, info.enabled)
        else {
            let why = "the gateway's fast path is off".to_owned();
            *state = FabricState::Unavailable(why.clone());
            return Err(Error::FastPath(why));
        };
        let address = BASE64_STANDARD
            .decode(address)
            .map_err(|_| Error::Protocol("fabric address is not base64".into()))?;
        let cfg = FabricConfig::new(provider, self.inner.fabric_addr.clone());
        let connected = tokio::task::spawn_blocking(move || Reader::connect(cfg, address))
            .await
            .map_err(|e| Error::FastPath(format!("connect task failed: {e}")))?;
        match connected {
            Ok(r) => {
                *state = FabricState::Ready(Box::new(r));
                Ok(())
            }
            Err(e) => {
                let why = format!("cannot open a fabric endpoint: {e}");
                *state = FabricState::Unavailable(why.clone());
                Err(Error::FastPath(why))
            }
        }
    }
}
