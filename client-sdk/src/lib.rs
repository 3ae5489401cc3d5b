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

/// Builds a [`Client`].
#[derive(Debug)]
pub struct ClientBuilder {
    endpoint: String,
    fast_path: FastPath,
    fabric_addr: Option<String>,
    verify_sha256: bool,
    read_timeout: Duration,
}

impl ClientBuilder {
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
        Ok(Client {
            inner: Arc::new(Inner {
                http: reqwest::Client::builder().build()?,
                endpoint,
                fast_path: self.fast_path,
                fabric_addr,
                verify_sha256: self.verify_sha256,
                read_timeout: self.read_timeout,
                fabric: Arc::new(Mutex::new(FabricState::Unknown)),
            }),
        })
    }
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
    fabric: Arc<Mutex<FabricState>>,
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

/// Part of the lease kept in reserve: no read starts later than `lease - margin` after the
/// resolve request was sent.
fn lease_margin(lease: Duration) -> Duration {
    (lease / 4).min(Duration::from_secs(1))
}

async fn problem_or<T: serde::de::DeserializeOwned>(resp: reqwest::Response) -> Result<T, Error> {
    if resp.status().is_success() {
        return Ok(resp.json().await?);
    }
    Err(problem(resp).await)
}

async fn problem(resp: reqwest::Response) -> Error {
    let status = resp.status();
    match resp.json::<Problem>().await {
        Ok(p) => Error::Problem(p),
        Err(_) => Error::Protocol(format!("HTTP {status} without a problem document")),
    }
}

impl Client {
    /// A builder for a client of the gateway at `endpoint` (e.g. `http://127.0.0.1:8080`).
    pub fn builder(endpoint: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            endpoint: endpoint.into(),
            fast_path: FastPath::Auto,
            fabric_addr: None,
            verify_sha256: false,
            read_timeout: Duration::from_secs(5),
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
        problem_or(req.send().await?).await
    }

    /// Deletes `key` (succeeds when absent too).
    pub async fn delete(&self, key: &str) -> Result<(), Error> {
        let resp = self
            .inner
            .http
            .delete(self.url("objects", key))
            .send()
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
            .inner
            .http
            .get(self.url("descriptors", key))
            .send()
            .await?;
        problem_or(resp).await
    }

    /// How this gateway serves one-sided reads.
    pub async fn fabric_info(&self) -> Result<FabricInfo, Error> {
        let resp = self
            .inner
            .http
            .get(format!("{}/v1/fabric", self.inner.endpoint))
            .send()
            .await?;
        problem_or(resp).await
    }

    /// Reads `key`'s current version: one-sided when the policy allows and it works, else
    /// over HTTP.
    pub async fn get(&self, key: &str) -> Result<Object, Error> {
        match self.inner.fast_path {
            FastPath::Off => self.get_http(key).await,
            FastPath::Required => self.get_fabric(key).await,
            FastPath::Auto => match self.get_fabric(key).await {
                Ok(obj) => Ok(obj),
                // The key itself is missing or invalid: HTTP would say the same.
                Err(e @ Error::Problem(_)) => Err(e),
                Err(e) => {
                    tracing::debug!(key, error = %e, "fast path failed; reading over HTTP");
                    self.get_http(key).await
                }
            },
        }
    }

    /// Reads `key` over HTTP.
    pub async fn get_http(&self, key: &str) -> Result<Object, Error> {
        let resp = self.inner.http.get(self.url("objects", key)).send().await?;
        if !resp.status().is_success() {
            return Err(problem(resp).await);
        }
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let version = header(rasa_openapi::VERSION_HEADER);
        let sha256 = header("etag").trim_matches('"').to_owned();
        let content_type = header("content-type");
        let bytes = resp.bytes().await?;
        Ok(Object {
            bytes,
            version,
            sha256,
            content_type,
            path: ReadPath::Http,
        })
    }

    /// Reads `key` one-sided, or fails (never falls back to HTTP).
    pub async fn get_fabric(&self, key: &str) -> Result<Object, Error> {
        let mut last = None;
        // A stale, revoked or torn read gets one more try with a fresh descriptor.
        for _ in 0..2 {
            let sent = Instant::now();
            let d = self.resolve(key).await?;
            match self.read_descriptor(&d, sent).await {
                Ok(obj) => return Ok(obj),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// Reads the version `d` names one-sided. `sent` is when the request that returned `d`
    /// was sent: the lease is counted from then.
    pub async fn read_descriptor(&self, d: &Descriptor, sent: Instant) -> Result<Object, Error> {
        let (Some(addr), Some(rkey)) = (d.addr, d.rkey) else {
            return Err(Error::FastPath("the gateway serves HTTP only".into()));
        };
        let checksum = u64::from_str_radix(&d.checksum, 16)
            .map_err(|_| Error::Protocol(format!("bad checksum {:?}", d.checksum)))?;
        let version = u64::from_str_radix(&d.version, 16)
            .map_err(|_| Error::Protocol(format!("bad version {:?}", d.version)))?;
        let lease = Duration::from_millis(d.lease_ms);
        let deadline = sent + lease.saturating_sub(lease_margin(lease));
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(Error::FastPath(
                "the descriptor's lease ended before the read".into(),
            ));
        }
        let frame = RemoteFrame {
            addr,
            rkey,
            identity: FrameIdentity {
                key_hash: key_hash(&d.key),
                version,
                payload_len: d.length,
            },
            checksum,
        };
        let timeout = remaining.min(self.inner.read_timeout);
        let mut state = Arc::clone(&self.inner.fabric).lock_owned().await;
        self.connect(&mut state).await?;
        let result = tokio::task::spawn_blocking(move || match &mut *state {
            FabricState::Ready(reader) => reader.read(&frame, timeout),
            _ => unreachable!("connected above"),
        })
        .await
        .map_err(|e| Error::FastPath(format!("read task failed: {e}")))?;
        let payload = result.map_err(|e: ReadError| Error::FastPath(e.to_string()))?;
        if self.inner.verify_sha256 && hex::encode(Sha256::digest(&payload)) != d.sha256 {
            return Err(Error::FastPath(
                "SHA-256 mismatch on a one-sided read".into(),
            ));
        }
        Ok(Object {
            bytes: Bytes::from(payload),
            version: d.version.clone(),
            sha256: d.sha256.clone(),
            content_type: d.content_type.clone(),
            path: ReadPath::Fabric,
        })
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
