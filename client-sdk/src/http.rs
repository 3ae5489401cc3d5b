//! Everything that goes over HTTP: writes, metadata, listing, and reads that do not take the
//! fast path; `503` with `Retry-After` is waited out here.

use std::time::Duration;

use rasa_openapi::{Descriptor, FabricInfo, ObjectList, Problem, ProblemCode};

use crate::{Client, Error, Meta, Object, ReadPath};

/// Longest `Retry-After` the SDK waits out by itself; a longer one is returned as the
/// `503` it is.
pub const MAX_BUSY_WAIT: Duration = Duration::from_secs(5);

pub(crate) async fn problem(resp: reqwest::Response) -> Error {
    let status = resp.status();
    match resp.json::<Problem>().await {
        Ok(p) => Error::Problem(p),
        Err(_) => Error::Protocol(format!("HTTP {status} without a problem document")),
    }
}

/// A response header as text ("" when absent or not text).
fn header_str(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

pub(crate) async fn problem_or<T: serde::de::DeserializeOwned>(
    resp: reqwest::Response,
) -> Result<T, Error> {
    if resp.status().is_success() {
        return Ok(resp.json().await?);
    }
    Err(problem(resp).await)
}

impl Client {
    /// Sends `req`; when the gateway answers `503` (overloaded, or memory full of leased
    /// values — nothing was done either way) and the request can be sent again, waits
    /// `Retry-After` (at most [`MAX_BUSY_WAIT`]) and retries, up to the builder's
    /// `retries_when_busy` times.
    pub(crate) async fn send(
        &self,
        mut req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Error> {
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

    pub(crate) fn url(&self, route: &str, key: &str) -> String {
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

    /// Reads `key` over HTTP.
    pub async fn get_http(&self, key: &str) -> Result<Object, Error> {
        self.http_get(key, None).await
    }

    pub(crate) async fn http_get(&self, key: &str, range: Option<String>) -> Result<Object, Error> {
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
}
