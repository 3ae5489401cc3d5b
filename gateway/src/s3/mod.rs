//! The S3-compatible listener (`--s3-listen`): aws-cli, boto3, s5cmd, Arrow and other S3
//! tools use Rasa unchanged. Built on `s3s` (routing, XML, S3 error codes, SigV4 headers
//! and presigned URLs, aws-chunked bodies); this module supplies the storage, over the
//! same store and origin as the native API.
//!
//! - Each S3 object is a Rasa version: a PutObject streams into arena memory and becomes a
//!   new immutable version (`x-amz-version-id` is its version id); values written here
//!   are readable over the native API and one-sided, and the other way round.
//! - Buckets map to key prefixes ([`Bucket`]); keys outside a bucket's part are refused.
//! - Multipart uploads are staged in memory under their own budget and expiry
//!   ([`multipart`]), then written as one contiguous version.
//! - Access: SigV4 with keys from `--s3-credentials-file` ([`keys`]), scopes per
//!   operation; without the file the listener is open, like the native API without tokens.
//!
//! Layering: like `http`, this module sits above `origin` and `store`, and uses neither
//! `http` nor anything above it.

pub mod args;
mod backend;
mod batch;
mod buckets;
pub mod cluster;
mod conditions;
mod copy;
pub mod digest;
mod drain;
pub mod edge;
mod headers;
pub mod keys;
pub mod listener;
mod listing;
pub mod multipart;
mod objects;
mod paging;
mod streamed;
mod versions;

use crate::catalog;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use s3s::service::S3ServiceBuilder;

use crate::objects::namespaces::{Namespace, Namespaces};
use crate::objects::Objects;
use crate::store::{Store, StoredVersion};

/// How a bucket's object keys map to Rasa keys: an S3 key must start with `s3_prefix`;
/// the rest, after `rasa_prefix`, is the Rasa key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// The bucket's name.
    pub name: String,
    /// The part of the bucket served (an S3 key prefix; empty: all of it).
    pub s3_prefix: String,
    /// What Rasa keys of this bucket start with.
    pub rasa_prefix: String,
}

impl Bucket {
    /// `--s3-bucket NAME[=PREFIX]`: S3 key `k` of bucket NAME is Rasa key `PREFIX` + `k`.
    pub fn parse(s: &str) -> Result<Self, crate::setting::SettingError> {
        let (name, prefix) = s.split_once('=').unwrap_or((s, ""));
        let valid = (3..=63).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !name.starts_with(['-', '.'])
            && !name.ends_with(['-', '.']);
        if !valid {
            return Err(crate::setting::SettingError::said(format!(
                "{name:?} is not an S3 bucket name (3 to 63 characters: a-z, 0-9, '-', '.')"
            )));
        }
        Ok(Self {
            name: name.to_owned(),
            s3_prefix: String::new(),
            rasa_prefix: prefix.to_owned(),
        })
    }

    /// The bucket an origin `s3://B/P` implies: bucket `B`, whose keys under `P` are the
    /// gateway's keys (which the origin stores under `P`), so S3 tools keep their URLs and
    /// change only the endpoint.
    pub fn of_origin(bucket: &str, prefix: &str) -> Self {
        Self {
            name: bucket.to_owned(),
            s3_prefix: prefix.to_owned(),
            rasa_prefix: String::new(),
        }
    }

    /// The Rasa key of S3 key `key`, or `None` when it lies outside the served part.
    pub fn rasa_key(&self, key: &str) -> Option<String> {
        let rest = key.strip_prefix(&self.s3_prefix)?;
        Some(format!("{}{rest}", self.rasa_prefix))
    }

    /// The S3 key of Rasa key `key`, when it belongs to this bucket.
    pub fn s3_key(&self, key: &str) -> Option<String> {
        let rest = key.strip_prefix(&self.rasa_prefix)?;
        Some(format!("{}{rest}", self.s3_prefix))
    }
}

/// Which entity tag objects get when neither the origin nor a `Content-MD5` gave one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EtagMode {
    /// The quoted SHA-256 (computed anyway; accepted by boto3, aws-cli, rclone, s5cmd,
    /// DuckDB and Arrow).
    #[default]
    Sha256,
    /// The MD5 of every upload (costs an MD5 pass, about 600 MB/s a core).
    Md5,
}

/// Everything the S3 front needs.
#[derive(Debug)]
pub struct S3Front {
    /// The object service of the default namespace (the `--s3-bucket` buckets'): the
    /// versions, and the origin behind them.
    pub objects: Arc<Objects>,
    /// Every namespace: each but the default one is also the bucket of its name.
    pub namespaces: Arc<Namespaces>,
    /// The buckets served in the default namespace.
    pub buckets: Vec<Bucket>,
    /// ETags of uploads without an MD5.
    pub etag: EtagMode,
    /// What both fronts enforce: the largest object accepted, the body's pace.
    pub limits: crate::front::Limits,
    /// Multipart uploads in progress.
    pub uploads: Arc<multipart::Uploads>,
    /// When the listener was started (the buckets' creation date).
    pub started: std::time::SystemTime,
    /// `--s3-create-buckets`: the quota of a bucket CreateBucket makes (`None`: buckets are
    /// the operator's).
    pub bucket_quota: Option<u64>,
    /// The cluster this member is in (`--cluster`): keyed requests go to
    /// their key's owner, listings and batch deletes span the members ([`cluster`]).
    pub wide: Option<cluster::Wide>,
}

/// A Rasa key and the object service (the namespace) it is in.
#[derive(Debug, Clone)]
pub struct Located {
    /// The namespace's object service.
    pub objects: Arc<Objects>,
    /// The Rasa key.
    pub key: String,
}

impl Located {
    /// The namespace's store.
    pub fn store(&self) -> &Arc<Store> {
        self.objects.store()
    }

    /// Whether `other` is the same key in the same namespace.
    pub fn same_as(&self, other: &Located) -> bool {
        self.key == other.key && Arc::ptr_eq(&self.objects, &other.objects)
    }
}

/// The length of an upload's payload: `Content-Length` (which `s3s` sets to the decoded
/// length for aws-chunked bodies), else `x-amz-decoded-content-length` (aws-chunked bodies
/// sent with `Transfer-Encoding: chunked`, as botocore does over HTTPS and the AWS C++ SDK
/// does for parts).
pub fn payload_length(declared: Option<i64>, headers: &http::HeaderMap) -> s3s::S3Result<u64> {
    let decoded = headers
        .get("x-amz-decoded-content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok());
    let len = declared.or(decoded).ok_or_else(|| {
        s3s::s3_error!(
            MissingContentLength,
            "an upload needs Content-Length (or x-amz-decoded-content-length with aws-chunked)"
        )
    })?;
    u64::try_from(len).map_err(|_| s3s::s3_error!(InvalidArgument, "a negative length"))
}

impl S3Front {
    /// The pace an upload starting now must keep.
    pub fn pace(&self) -> crate::pace::Pace {
        self.limits.pace()
    }

    /// The next chunk of an upload's body: `None` at its end; `RequestTimeout` when it
    /// stalls longer than `--body-timeout` (a tower layer would hide the body's length
    /// from `s3s`, which needs it).
    /// It must also keep `pace` (`--min-upload-rate`) with `received` bytes in.
    pub async fn next_chunk(
        &self,
        body: &mut s3s::dto::StreamingBlob,
        pace: &crate::pace::Pace,
        received: u64,
    ) -> s3s::S3Result<Option<bytes::Bytes>> {
        use futures_util::StreamExt;
        let next = tokio::time::timeout(self.limits.body_timeout, body.next());
        let Some(next) = pace.within(received, next).await else {
            catalog::S3_UPLOADS_TOO_SLOW.counter().increment(1);
            return Err(s3s::s3_error!(
                RequestTimeout,
                "the body arrived slower than --min-upload-rate ({} bytes a second) after a grace of --body-timeout; nothing was stored",
                pace.min_rate()
            ));
        };
        match next {
            Err(_) => Err(s3s::s3_error!(
                RequestTimeout,
                "the body stalled for {:?} (--body-timeout); nothing was stored",
                self.limits.body_timeout
            )),
            Ok(None) => Ok(None),
            Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
            Ok(Some(Err(e))) => Err(s3s::s3_error!(IncompleteBody, "reading the body: {e}")),
        }
    }
}

impl S3Front {
    /// The bucket named `name` (a `--s3-bucket`, or a namespace's, which maps keys as they
    /// are), or `NoSuchBucket`.
    pub fn bucket(&self, name: &str) -> s3s::S3Result<std::borrow::Cow<'_, Bucket>> {
        if let Some(b) = self.buckets.iter().find(|b| b.name == name) {
            return Ok(std::borrow::Cow::Borrowed(b));
        }
        self.namespace_of(name).map(|_| {
            std::borrow::Cow::Owned(Bucket {
                name: name.to_owned(),
                s3_prefix: String::new(),
                rasa_prefix: String::new(),
            })
        })
    }

    /// The object service bucket `name` is in, or `NoSuchBucket`.
    pub fn objects_of(&self, name: &str) -> s3s::S3Result<Arc<Objects>> {
        if self.buckets.iter().any(|b| b.name == name) {
            return Ok(Arc::clone(&self.objects));
        }
        self.namespace_of(name).map(|ns| Arc::clone(&ns.objects))
    }

    fn namespace_of(&self, name: &str) -> s3s::S3Result<Arc<Namespace>> {
        self.namespaces
            .get(name)
            .filter(|ns| ns.name != crate::objects::namespaces::DEFAULT)
            .ok_or_else(|| s3s::s3_error!(NoSuchBucket, "this gateway serves no bucket {name:?}"))
    }

    /// `bucket`/`key` as a Rasa key in its namespace's object service, or an error naming
    /// why it cannot be one.
    pub fn key(&self, bucket: &str, key: &str) -> s3s::S3Result<Located> {
        let b = self.bucket(bucket)?;
        let k = b.rasa_key(key).ok_or_else(|| {
            s3s::s3_error!(
                AccessDenied,
                "this gateway serves only the keys of {bucket} under {:?}",
                b.s3_prefix
            )
        })?;
        crate::key::validate(&k).map_err(|e| s3s::s3_error!(KeyTooLongError, "{e}"))?;
        Ok(Located {
            objects: self.objects_of(bucket)?,
            key: k,
        })
    }

    /// The entity tag S3 clients see for `v` (unquoted).
    pub fn etag(&self, v: &StoredVersion) -> String {
        s3_etag(v)
    }
}

/// Serves S3 on top of `front`, with access control by `keys` (`None`: open) and, with
/// `domains`, virtual-host-style buckets as well as path-style.
pub fn router(
    front: Arc<S3Front>,
    keys: Option<Arc<keys::S3Keys>>,
    domains: &[String],
    edge: edge::Edge,
) -> Result<axum::Router, crate::setting::SettingError> {
    let mut b = S3ServiceBuilder::new(backend::Rasa(Arc::clone(&front)));
    match keys.clone() {
        Some(k) => {
            let buckets: Arc<Vec<String>> =
                Arc::new(front.buckets.iter().map(|b| b.name.clone()).collect());
            b.set_auth(keys::Access(Arc::clone(&k), Arc::clone(&buckets)));
            b.set_access(keys::Access(k, buckets));
        }
        None => b.set_access(keys::Open),
    }
    if !domains.is_empty() {
        b.set_host(Domains(s3s::host::MultiDomain::new(domains).map_err(
            |e| crate::setting::SettingError::said(format!("--s3-domain: {e}")),
        )?));
    }
    let service = b.build();
    let open = keys.is_none();
    let domains: Arc<[String]> = domains.into();
    let s3 = tower::service_fn(move |req: axum::extract::Request| {
        let mut service = service.clone();
        let edge = edge.clone();
        let front = Arc::clone(&front);
        let domains = Arc::clone(&domains);
        async move {
            let mut req = match edge.admit(req).await {
                Ok(req) => req,
                Err(refusal) => return Ok(refusal),
            };
            if let Some(wide) = &front.wide {
                req = wide.peers.admit(req);
            }
            if open && signed(&req) {
                return Ok(edge::xml_error(
                    http::StatusCode::FORBIDDEN,
                    "AccessDenied",
                    "this gateway's S3 listener has no --s3-credentials-file, so it cannot check signatures: send unsigned requests (aws --no-sign-request; boto3 Config(signature_version=UNSIGNED)), or ask for an access key",
                ));
            }
            // An unsigned request to a listener with keys is refused here: forwarding it
            // would only carry it further.
            let (req, owned_read) = if open || signed(&req) {
                match cluster::forward::to_owner(&front, &domains, req).await {
                    Ok(here) => here,
                    Err(answer) => return Ok(answer),
                }
            } else {
                (req, None)
            };
            let get = matches!(*req.method(), http::Method::GET | http::Method::HEAD);
            let resp = tower::Service::call(&mut service, req).await;
            Ok::<_, Infallible>(match resp {
                Ok(r) => {
                    if let (Some((ns, key)), Some(wide), true) =
                        (&owned_read, &front.wide, r.status().is_success())
                    {
                        crate::cluster::replicate::read_at_owner(&wide.peers, ns.as_deref(), key);
                    }
                    let mut r = r.map(Body::new);
                    if get {
                        crate::browser::stored_value_headers(r.headers_mut());
                    }
                    r
                }
                Err(e) => {
                    tracing::warn!(error = ?e, "S3 request failed");
                    let mut r = axum::response::Response::new(Body::from(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InternalError</Code><Message>the request failed</Message></Error>",
                    ));
                    *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                    r
                }
            })
        }
    });
    Ok(axum::Router::new()
        .fallback_service(s3)
        .layer(axum::middleware::from_fn(edge::close_unasked))
        .layer(axum::middleware::from_fn(drain::unread_bodies)))
}

/// Whether a request carries a signature (header or presigned URL).
fn signed(req: &axum::extract::Request) -> bool {
    req.headers().contains_key(http::header::AUTHORIZATION)
        || req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|p| p.starts_with("X-Amz-Signature=") || p.starts_with("Signature="))
        })
}

/// `--s3-domain`: `BUCKET.DOMAIN` hosts name the bucket. Clients send the port too when it
/// is not the scheme's default (`BUCKET.DOMAIN:9000`), which `s3s` does not expect.
struct Domains(s3s::host::MultiDomain);

impl s3s::host::S3Host for Domains {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> s3s::S3Result<s3s::host::VirtualHost<'a>> {
        let bare = match host.rsplit_once(':') {
            Some((name, port))
                if !name.ends_with(']') && port.bytes().all(|b| b.is_ascii_digit()) =>
            {
                name
            }
            _ => host,
        };
        self.0.parse_host_header(bare)
    }
}

/// The ETag S3 clients see for `v` (unquoted): the one its upload set (an MD5, or a
/// multipart MD5 of MD5s), else the origin's, else its SHA-256.
pub(crate) fn s3_etag(v: &StoredVersion) -> String {
    if let Some(e) = v.s3_etag() {
        return e.to_string();
    }
    if let Some(e) = v.origin.etag() {
        return e.trim_matches('"').to_owned();
    }
    v.sha256_hex()
}

#[cfg(test)]
mod tests {
    use super::Bucket;

    #[test]
    fn buckets_map_keys_both_ways() {
        let b = Bucket::parse("data=ml/").unwrap();
        assert_eq!(b.rasa_key("x/y").as_deref(), Some("ml/x/y"));
        assert_eq!(b.s3_key("ml/x/y").as_deref(), Some("x/y"));
        assert_eq!(b.s3_key("other/x"), None);
        let o = Bucket::of_origin("lake", "cache/");
        assert_eq!(o.rasa_key("cache/a").as_deref(), Some("a"));
        assert_eq!(o.rasa_key("elsewhere/a"), None);
        assert_eq!(o.s3_key("a").as_deref(), Some("cache/a"));
        for bad in ["ab", "Upper", "-lead", "trail.", "under_score"] {
            assert!(Bucket::parse(bad).is_err(), "{bad}");
        }
    }
}
