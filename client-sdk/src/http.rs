//! Everything that goes over HTTP: writes, metadata, listing, and reads that do not take the
//! fast path; `503` with `Retry-After` is waited out here.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use rasa_openapi::{Descriptor, FabricInfo, ObjectList, Problem, ProblemCode};

use crate::stats::Counters;
use crate::timeouts::{timed_out, until_idle, Progress, TimeoutKind, TrackedBytes, TrackedStream};
use crate::{Error, Meta, Object, ReadPath};

/// Longest `Retry-After` the SDK waits out by itself; a longer one is returned as the
/// `503` it is.
pub const MAX_BUSY_WAIT: Duration = Duration::from_secs(5);

/// A response header as text ("" when absent or not text).
fn header_str(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// A request body as the SDK sends it: in memory (sent again after a `503`), or a stream
/// (sent once).
pub(crate) enum Payload {
    /// Bytes in memory.
    Bytes(Bytes),
    /// A stream, until it is sent.
    Once(Option<reqwest::Body>),
}

impl Payload {
    /// Takes `body` apart without copying: a body built from bytes stays bytes.
    pub(crate) async fn of(body: reqwest::Body) -> Result<Self, Error> {
        if body.as_bytes().is_none() {
            return Ok(Self::Once(Some(body)));
        }
        let bytes = body
            .collect()
            .await
            .map_err(|e| Error::Protocol(format!("reading an in-memory body: {e}")))?
            .to_bytes();
        Ok(Self::Bytes(bytes))
    }

    /// The body for one attempt, reporting progress as the connection takes it; `None`
    /// when a stream was already sent.
    pub(crate) fn body(&mut self, progress: &Arc<Progress>) -> Option<reqwest::Body> {
        match self {
            Self::Bytes(b) => Some(reqwest::Body::wrap(TrackedBytes::new(
                b.clone(),
                Arc::clone(progress),
            ))),
            Self::Once(b) => b
                .take()
                .map(|b| reqwest::Body::wrap(TrackedStream::new(b, Arc::clone(progress)))),
        }
    }
}

/// One gateway's HTTP API: the connection pool, its endpoint and timeouts, and every
/// exchange with it (writes, metadata, listing, descriptors, reads over HTTP).
#[derive(Debug)]
pub(crate) struct Transport {
    pub(crate) http: reqwest::Client,
    pub(crate) endpoint: String,
    /// What keyed paths have after `/v1`: `/ns/{namespace}`, or nothing (the default one).
    pub(crate) space: String,
    /// Longest wait for a connection.
    pub(crate) connect_timeout: Duration,
    /// Longest an HTTP exchange may go without progress.
    pub(crate) request_timeout: Duration,
    pub(crate) retries_when_busy: u32,
    /// Whether a PUT asks for a descriptor it can read one-sided (`?lease=true`): when the
    /// fast path is not off; the new version is then leased for the gateway's `--lease`.
    pub(crate) lease_puts: bool,
    /// Check bodies against their SHA-256 as they arrive.
    pub(crate) verify_sha256: bool,
    pub(crate) counters: Counters,
    /// The descriptors this client's reads hold (shared with its `FabricPool`): a write
    /// or delete through this client drops the key's, so the client reads its own writes
    /// (other clients may still read the version they hold until its lease ends).
    pub(crate) descriptors: Arc<crate::cache::DescriptorCache>,
}

impl Transport {
    /// The SDK error for a failed reqwest exchange: timeouts name the endpoint and the
    /// setting that fired.
    pub(crate) fn http_error(&self, e: reqwest::Error) -> Error {
        if e.is_timeout() {
            let (kind, after) = if e.is_connect() {
                (TimeoutKind::Connect, self.connect_timeout)
            } else {
                (TimeoutKind::Request, self.request_timeout)
            };
            return timed_out(&self.endpoint, kind, after);
        }
        Error::Http(e)
    }

    /// The whole body of `resp`, a value's bytes; each chunk must arrive within the request
    /// timeout. One copy at most, into a buffer sized from `Content-Length` (none for a
    /// single chunk), counted in `bytes_copied`.
    pub(crate) async fn body_bytes(&self, resp: reqwest::Response) -> Result<Bytes, Error> {
        gather(self, resp, true).await
    }

    /// The problem document of a failed answer.
    pub(crate) async fn problem(&self, resp: reqwest::Response) -> Error {
        let status = resp.status();
        match gather(self, resp, false).await {
            Ok(body) => match serde_json::from_slice::<Problem>(&body) {
                Ok(p) => Error::Problem(p),
                Err(_) => Error::Protocol(format!("HTTP {status} without a problem document")),
            },
            Err(e) => e,
        }
    }

    /// The JSON answer of a successful exchange, or the problem of a failed one.
    pub(crate) async fn decode<T: serde::de::DeserializeOwned>(
        &self,
        resp: reqwest::Response,
    ) -> Result<T, Error> {
        if !resp.status().is_success() {
            return Err(self.problem(resp).await);
        }
        let body = gather(self, resp, false).await?;
        serde_json::from_slice(&body)
            .map_err(|e| Error::Protocol(format!("an answer that is not the expected JSON: {e}")))
    }

    /// Sends `req` (whose body, if any, is in memory); see [`Transport::exchange`].
    pub(crate) async fn send(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Error> {
        let mut first = Some(req);
        self.exchange(|_| {
            let req = first.take()?;
            let again = req.try_clone();
            first = again;
            Some(req)
        })
        .await
    }

    /// Sends the request `next` builds (given the progress tracker of the attempt); fails
    /// when the gateway makes no progress for the request timeout. When the gateway answers
    /// `503` (overloaded, or memory full of leased values — nothing was done either way)
    /// and `next` can build the request again, waits `Retry-After` (at most
    /// [`MAX_BUSY_WAIT`]) and retries, up to the builder's `retries_when_busy` times.
    pub(crate) async fn exchange(
        &self,
        mut next: impl FnMut(&Arc<Progress>) -> Option<reqwest::RequestBuilder>,
    ) -> Result<reqwest::Response, Error> {
        // This call already waited out a timeout on this gateway: not a second time.
        if let Some((kind, after)) = crate::timeouts::stalled(&self.endpoint) {
            return Err(timed_out(&self.endpoint, kind, after));
        }
        let mut retries = 0;
        let mut progress = Progress::new();
        let mut req = next(&progress)
            .ok_or_else(|| Error::Protocol("a request body that cannot be sent".into()))?;
        req = with_time_left(req, self.request_timeout);
        loop {
            let idle = self.request_timeout;
            let resp = match until_idle(req.send(), &progress, idle).await {
                None => return Err(timed_out(&self.endpoint, TimeoutKind::Request, idle)),
                Some(r) => r.map_err(|e| self.http_error(e))?,
            };
            if resp.status() != reqwest::StatusCode::SERVICE_UNAVAILABLE
                || retries >= self.retries_when_busy
            {
                return Ok(resp);
            }
            let wait =
                Duration::from_secs(header_str(&resp, "retry-after").parse::<u64>().unwrap_or(1));
            // A wait longer than the call has left is not waited: the busy answer is it.
            let left = crate::timeouts::within_call(wait, self.request_timeout);
            if wait > MAX_BUSY_WAIT || left < wait {
                return Ok(resp);
            }
            progress = Progress::new();
            let Some(again) = next(&progress) else {
                return Ok(resp);
            };
            retries += 1;
            let again = with_time_left(again, self.request_timeout);
            self.counters.busy_retry();
            tokio::time::sleep(wait).await;
            progress.restart(); // the idle clock starts when the request is sent
            req = again;
        }
    }

    /// The URL of `key` under `route`, its bytes sent exactly: every character the URL
    /// layer would interpret is percent-encoded, and keys it would rewrite whatever the
    /// encoding (`.`/`..` segments, which it resolves even as `%2E`) are refused as the
    /// gateway refuses them, before anything is sent.
    pub(crate) fn url(&self, route: &str, key: &str) -> Result<String, Error> {
        rasa_openapi::key::validate(key).map_err(|why| Error::invalid_key(key, &why))?;
        Ok(format!(
            "{}/v1{}/{route}/{}",
            self.endpoint,
            self.space,
            rasa_openapi::key_to_path(key)
        ))
    }

    /// Stores `body` with a media type.
    pub(crate) async fn put_typed(
        &self,
        key: &str,
        body: impl Into<reqwest::Body>,
        content_type: Option<&str>,
    ) -> Result<Descriptor, Error> {
        self.put_body(
            key,
            Payload::of(body.into()).await?,
            None,
            content_type,
            None,
        )
        .await
    }

    /// Stores `body` only if `condition` holds (`412 precondition_failed` otherwise).
    pub(crate) async fn put_if(
        &self,
        key: &str,
        body: Bytes,
        content_type: Option<&str>,
        condition: &crate::Condition,
    ) -> Result<Descriptor, Error> {
        let payload = Payload::of(body.into()).await?;
        self.put_body(key, payload, None, content_type, Some(condition))
            .await
    }

    /// Version `version` of `key` over HTTP (`?version=`).
    pub(crate) async fn get_version(&self, key: &str, version: &str) -> Result<Object, Error> {
        self.get_url(
            format!("{}?version={version}", self.url("objects", key)?),
            None,
        )
        .await
    }

    /// Stores the file at `path`, read a MiB at a time and sent with its length (so the
    /// gateway streams it into memory too); `on` told the bytes read so far.
    pub(crate) async fn put_file(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: Option<&str>,
        on: Option<&crate::files::OnProgress>,
    ) -> Result<Descriptor, Error> {
        use tokio::io::AsyncReadExt;
        let input = |e: std::io::Error| Error::Input(format!("reading {}: {e}", path.display()));
        let file = tokio::fs::File::open(path).await.map_err(input)?;
        let length = file.metadata().await.map_err(input)?.len();
        // Read a MiB at a time, each chunk reported once read.
        let start = (file, 0u64, on.cloned());
        let chunks = futures_util::stream::unfold(Some(start), |state| async move {
            let (mut file, sent, on) = state?;
            let mut buf = vec![0u8; 1 << 20];
            match file.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    let sent = sent + n as u64;
                    if let Some(f) = &on {
                        f(sent);
                    }
                    Some((Ok(Bytes::from(buf)), Some((file, sent, on))))
                }
                Err(e) => Some((Err(e), None)),
            }
        });
        let body = Payload::Once(Some(reqwest::Body::wrap_stream(chunks)));
        self.put_body(key, body, Some(length), content_type, None)
            .await
    }

    async fn put_body(
        &self,
        key: &str,
        mut payload: Payload,
        length: Option<u64>,
        content_type: Option<&str>,
        condition: Option<&crate::Condition>,
    ) -> Result<Descriptor, Error> {
        let mut url = self.url("objects", key)?;
        if self.lease_puts {
            url.push_str("?lease=true");
        }
        let resp = self
            .exchange(|progress| {
                let mut req = self.http.put(&url).body(payload.body(progress)?);
                if let Some(ct) = content_type {
                    req = req.header(reqwest::header::CONTENT_TYPE, ct);
                }
                if let Some(n) = length {
                    req = req.header(reqwest::header::CONTENT_LENGTH, n);
                }
                match condition {
                    Some(crate::Condition::IfMatch(etag)) => {
                        req = req.header(reqwest::header::IF_MATCH, quoted(etag));
                    }
                    Some(crate::Condition::IfAbsent) => {
                        req = req.header(reqwest::header::IF_NONE_MATCH, "*");
                    }
                    None => {}
                }
                Some(req)
            })
            .await;
        self.descriptors.forget(key);
        self.decode(resp?).await
    }

    /// Deletes `key` (succeeds when absent too).
    pub(crate) async fn delete(&self, key: &str) -> Result<(), Error> {
        let resp = self.send(self.http.delete(self.url("objects", key)?)).await;
        self.descriptors.forget(key);
        let resp = resp?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(self.problem(resp).await)
        }
    }

    /// How this gateway serves one-sided reads.
    pub(crate) async fn fabric_info(&self) -> Result<FabricInfo, Error> {
        let resp = self
            .send(self.http.get(format!("{}/v1/fabric", self.endpoint)))
            .await?;
        self.decode(resp).await
    }

    /// The metadata of `key`'s current version.
    pub(crate) async fn head(&self, key: &str) -> Result<Meta, Error> {
        let resp = self.send(self.http.head(self.url("objects", key)?)).await?;
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
    pub(crate) async fn list(
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
                self.http
                    .get(format!("{}/v1{}/objects", self.endpoint, self.space))
                    .query(&q),
            )
            .await?;
        self.decode(resp).await
    }

    /// Reads `key` (or its `range`, an HTTP `Range` value) over HTTP.
    pub(crate) async fn get(&self, key: &str, range: Option<String>) -> Result<Object, Error> {
        self.get_url(self.url("objects", key)?, range).await
    }

    async fn get_url(&self, url: String, range: Option<String>) -> Result<Object, Error> {
        let mut req = self.http.get(url);
        if let Some(r) = range {
            req = req.header(reqwest::header::RANGE, r);
        }
        let resp = self.send(req).await?;
        if !resp.status().is_success() {
            return Err(self.problem(resp).await);
        }
        let header = |name: &str| header_str(&resp, name);
        let version = header(rasa_openapi::VERSION_HEADER);
        let sha256 = header("etag").trim_matches('"').to_owned();
        let content_type = header("content-type");
        let bytes = self.body_bytes(resp).await?;
        self.counters.read(ReadPath::Http);
        Ok(Object {
            bytes,
            version,
            sha256,
            content_type,
            path: ReadPath::Http,
        })
    }
}

/// An entity tag as `If-Match` wants it: in double quotes (added when missing).
fn quoted(etag: &str) -> String {
    if etag.starts_with('"') || etag.starts_with("W/\"") {
        etag.to_owned()
    } else {
        format!("\"{etag}\"")
    }
}

/// [`Transport::body_bytes`], its copy counted only when `value` (an answer's JSON is not a
/// value on its way to the caller). A free function: `Transport` has methods enough.
async fn gather(t: &Transport, mut resp: reqwest::Response, value: bool) -> Result<Bytes, Error> {
    let idle = t.request_timeout;
    let expected = resp.content_length().unwrap_or(0) as usize;
    let mut first: Option<Bytes> = None;
    let mut rest = bytes::BytesMut::new();
    loop {
        let chunk = match tokio::time::timeout(idle, resp.chunk()).await {
            Err(_) => return Err(timed_out(&t.endpoint, TimeoutKind::Request, idle)),
            Ok(Err(e)) => return Err(t.http_error(e)),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(c))) => c,
        };
        match first.take() {
            None if rest.is_empty() => first = Some(chunk),
            held => {
                if let Some(h) = held {
                    rest.reserve(expected.max(h.len() + chunk.len()));
                    rest.extend_from_slice(&h);
                    if value {
                        t.counters.copied(h.len());
                    }
                }
                rest.extend_from_slice(&chunk);
                if value {
                    t.counters.copied(chunk.len());
                }
            }
        }
    }
    Ok(first.unwrap_or_else(|| rest.freeze()))
}

/// `req` with the time its call has left (`Rasa-Timeout-Ms`): a member that passes it on
/// to an owner that does not answer gives up on it in time to ask the key's next choice.
fn with_time_left(req: reqwest::RequestBuilder, timeout: Duration) -> reqwest::RequestBuilder {
    match crate::timeouts::call_deadline(timeout) {
        Some(deadline) => {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            req.header(
                rasa_openapi::TIMEOUT_HEADER,
                left.as_millis().max(1).to_string(),
            )
        }
        None => req,
    }
}
