//! [`Origin`] over any S3-compatible endpoint (AWS, MinIO, s3s-fs) with `aws-sdk-s3`.

use crate::setting::SettingError;
use std::time::Duration;

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_s3::primitives::ByteStream;
use base64::prelude::*;
use bytes::Bytes;

use super::{BoxFuture, Fetch, Origin, OriginError, OriginObject};

/// `s3://bucket[/prefix]`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    /// Bucket name.
    pub bucket: String,
    /// Key prefix, empty or ending in `/`.
    pub prefix: String,
}

impl std::str::FromStr for S3Location {
    type Err = SettingError;
    fn from_str(s: &str) -> Result<Self, SettingError> {
        let rest = s.strip_prefix("s3://").ok_or_else(|| {
            SettingError::said(format!(
                "{s:?} is not an s3:// URL (write s3://bucket or s3://bucket/prefix)"
            ))
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !bucket.starts_with(['-', '.'])
            && !bucket.ends_with(['-', '.']);
        if !valid {
            return Err(SettingError::said(format!(
                "{bucket:?} is not a valid bucket name (3-63 lowercase letters, digits, '-' or '.')"
            )));
        }
        let prefix = prefix.trim_matches('/');
        Ok(Self {
            bucket: bucket.to_owned(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        })
    }
}

impl std::fmt::Display for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

/// How to reach the bucket.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// Bucket and prefix.
    pub location: S3Location,
    /// Endpoint URL for non-AWS servers (MinIO, s3s-fs); `None` for AWS.
    pub endpoint: Option<String>,
    /// Region.
    pub region: String,
    /// Path-style addressing (`endpoint/bucket/key`), which most non-AWS servers need.
    pub path_style: bool,
    /// Longest wait for the origin's answer (and between body chunks).
    pub timeout: Duration,
    /// Send unsigned requests (public buckets).
    pub anonymous: bool,
}

/// An S3 bucket (and prefix) as the origin. Credentials come from the standard AWS chain:
/// environment, profile, web identity, container and instance metadata.
#[derive(Debug, Clone)]
pub struct S3Origin {
    client: aws_sdk_s3::Client,
    config: S3Config,
}

impl S3Origin {
    /// A client for `config`.
    pub async fn new(config: S3Config) -> Self {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(config.region.clone()));
        if let Some(ep) = &config.endpoint {
            loader = loader.endpoint_url(ep);
        }
        if config.anonymous {
            loader = loader.no_credentials();
        }
        let shared = loader.load().await;
        let s3 = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(config.path_style)
            .build();
        Self {
            client: aws_sdk_s3::Client::from_conf(s3),
            config,
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.config.location.prefix)
    }

    /// Runs an S3 call within `--origin-timeout`. A failure is one line a person can act
    /// on — the operation, the object, S3's status, code and message (e.g.
    /// `GetObject s3://bkt/k: 403 AccessDenied: Access Denied`) — and the whole error
    /// chain goes to the log.
    async fn timed<T, E>(
        &self,
        what: &str,
        key: &str,
        f: impl std::future::Future<
            Output = Result<
                T,
                aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
            >,
        >,
    ) -> Result<Result<T, (Option<u16>, String)>, OriginError>
    where
        E: std::error::Error + ProvideErrorMetadata + 'static,
    {
        match tokio::time::timeout(self.config.timeout, f).await {
            Err(_) => Err(OriginError::Timeout(self.config.timeout)),
            Ok(Ok(v)) => Ok(Ok(v)),
            Ok(Err(e)) => {
                let status = e.raw_response().map(|r| r.status().as_u16());
                let object = format!(
                    "{what} s3://{}/{}",
                    self.config.location.bucket,
                    self.key(key)
                );
                let detail = match (status, e.code()) {
                    (Some(status), code) => format!(
                        "{object}: {status} {}: {}",
                        code.unwrap_or("(no code)"),
                        e.message().unwrap_or("(no message)")
                    ),
                    (None, _) => {
                        let cause = one_line(&e);
                        let hint = if cause.contains("credentials") {
                            " (give the gateway AWS credentials — environment, profile or instance role — or --s3-anonymous for a public bucket)"
                        } else {
                            ""
                        };
                        format!("{object}: {cause}{hint}")
                    }
                };
                tracing::debug!(error = %DisplayErrorContext(&e), "{detail}");
                Ok(Err((status, detail)))
            }
        }
    }
}

/// An error without a response from S3 (no connection, a timeout inside the SDK) as one
/// line: its chain of causes, each said once.
fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cause = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = c.source();
    }
    parts.join(": ").replace('\n', " ")
}

fn failure(status: Option<u16>, detail: String) -> OriginError {
    match status {
        Some(403) => OriginError::Denied(detail),
        _ => OriginError::Failed(detail),
    }
}

impl Origin for S3Origin {
    fn get<'a>(
        &'a self,
        key: &'a str,
        if_none_match: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Fetch, OriginError>> {
        Box::pin(self.fetch(key, if_none_match, None))
    }

    fn get_range<'a>(
        &'a self,
        key: &'a str,
        range: &'a str,
    ) -> BoxFuture<'a, Result<Fetch, OriginError>> {
        Box::pin(self.fetch(key, None, Some(range)))
    }

    fn put<'a>(
        &'a self,
        key: &'a str,
        body: Bytes,
        sha256: [u8; 32],
        content_type: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, OriginError>> {
        Box::pin(async move {
            let req = self
                .client
                .put_object()
                .bucket(&self.config.location.bucket)
                .key(self.key(key))
                .content_type(content_type)
                .checksum_sha256(BASE64_STANDARD.encode(sha256))
                .body(ByteStream::from(body));
            match self.timed("PutObject", key, req.send()).await? {
                Ok(out) => Ok(out.e_tag),
                Err((status, detail)) => Err(failure(status, detail)),
            }
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), OriginError>> {
        Box::pin(async move {
            let req = self
                .client
                .delete_object()
                .bucket(&self.config.location.bucket)
                .key(self.key(key));
            match self.timed("DeleteObject", key, req.send()).await? {
                Ok(_) | Err((Some(404), _)) => Ok(()),
                Err((status, detail)) => Err(failure(status, detail)),
            }
        })
    }

    fn head<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<super::OriginHead>, OriginError>> {
        Box::pin(async move {
            let req = self
                .client
                .head_object()
                .bucket(&self.config.location.bucket)
                .key(self.key(key));
            match self.timed("HeadObject", key, req.send()).await? {
                Ok(out) => Ok(Some(super::OriginHead {
                    length: out.content_length.unwrap_or(0).max(0) as u64,
                    content_type: out.content_type,
                    etag: out.e_tag,
                    modified: out
                        .last_modified
                        .and_then(|t| std::time::SystemTime::try_from(t).ok()),
                })),
                Err((Some(404), _)) => Ok(None),
                Err((status, detail)) => Err(failure(status, detail)),
            }
        })
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        delimiter: Option<&'a str>,
        start_after: Option<&'a str>,
        max: usize,
    ) -> BoxFuture<'a, Result<super::OriginPage, OriginError>> {
        Box::pin(async move {
            let base = &self.config.location.prefix;
            let mut req = self
                .client
                .list_objects_v2()
                .bucket(&self.config.location.bucket)
                .prefix(self.key(prefix))
                .max_keys(i32::try_from(max).unwrap_or(1000));
            if let Some(d) = delimiter {
                req = req.delimiter(d);
            }
            if let Some(a) = start_after {
                req = req.start_after(self.key(a));
            }
            let out = match self.timed("ListObjectsV2", prefix, req.send()).await? {
                Ok(out) => out,
                Err((status, detail)) => return Err(failure(status, detail)),
            };
            let strip = |k: &str| k.strip_prefix(base.as_str()).map(str::to_owned);
            let objects = out
                .contents()
                .iter()
                .filter_map(|o| {
                    Some(super::OriginEntry {
                        key: strip(o.key()?)?,
                        size: o.size().unwrap_or(0).max(0) as u64,
                        etag: o.e_tag().unwrap_or_default().trim_matches('"').to_owned(),
                        modified: o
                            .last_modified()
                            .and_then(|t| std::time::SystemTime::try_from(*t).ok())
                            .unwrap_or(std::time::UNIX_EPOCH),
                    })
                })
                .collect();
            let prefixes = out
                .common_prefixes()
                .iter()
                .filter_map(|p| strip(p.prefix()?))
                .collect();
            Ok(super::OriginPage {
                objects,
                prefixes,
                truncated: out.is_truncated().unwrap_or(false),
            })
        })
    }

    fn describe(&self) -> String {
        self.config.location.to_string()
    }
}

impl S3Origin {
    /// GetObject, conditional and/or ranged.
    async fn fetch(
        &self,
        key: &str,
        if_none_match: Option<&str>,
        range: Option<&str>,
    ) -> Result<Fetch, OriginError> {
        let mut req = self
            .client
            .get_object()
            .bucket(&self.config.location.bucket)
            .key(self.key(key));
        if let Some(etag) = if_none_match {
            req = req.if_none_match(etag);
        }
        if let Some(r) = range {
            req = req.range(r);
        }
        let out = match self.timed("GetObject", key, req.send()).await? {
            Ok(out) => out,
            Err((Some(304), _)) => return Ok(Fetch::NotModified),
            Err((Some(404), _)) => return Ok(Fetch::NotFound),
            Err((status, detail)) => return Err(failure(status, detail)),
        };
        let timeout = self.config.timeout;
        let body = futures_util::stream::unfold(Some(out.body), move |body| async move {
            let mut body = body?;
            match tokio::time::timeout(timeout, body.try_next()).await {
                Err(_) => Some((Err(OriginError::Timeout(timeout)), None)),
                Ok(Ok(Some(chunk))) => Some((Ok(chunk), Some(body))),
                Ok(Ok(None)) => None,
                Ok(Err(e)) => Some((
                    Err(OriginError::Failed(format!("reading the body: {e}"))),
                    None,
                )),
            }
        });
        Ok(Fetch::Found(OriginObject {
            length: out.content_length.unwrap_or(0).max(0) as u64,
            content_type: out.content_type,
            etag: out.e_tag,
            content_range: out.content_range,
            body: Box::pin(body),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_urls_parse_or_are_refused_with_a_reason() {
        let l: S3Location = "s3://my-bucket/some/prefix/".parse().unwrap();
        assert_eq!(
            (l.bucket.as_str(), l.prefix.as_str()),
            ("my-bucket", "some/prefix/")
        );
        let l: S3Location = "s3://bucket".parse().unwrap();
        assert_eq!(l.prefix, "");
        for bad in [
            "bucket",
            "http://bucket",
            "s3://",
            "s3://AB",
            "s3://-bad",
            "s3://a",
        ] {
            assert!(bad.parse::<S3Location>().is_err(), "{bad}");
        }
    }
}
