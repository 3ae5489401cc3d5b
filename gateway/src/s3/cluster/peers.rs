//! The other members' parts of a request that spans members, asked of their S3 listeners
//! as the caller: signed with the caller's own access key and secret (the same
//! credentials file on every member; unsigned on an open listener), with the hop marker so
//! that each answers for itself alone.

use crate::catalog;
use std::time::SystemTime;

use aws_sdk_s3 as sdk;
use aws_sdk_s3::error::ProvideErrorMetadata;
use rasa_openapi::ClusterMember;
use s3s::{s3_error, S3Error, S3Result};

use super::super::paging::{Listed, Page};
use super::Caller;
use crate::cluster::peers::PART_WITHIN;
use crate::cluster::Wire;
use crate::store::ObjectHeaders;

/// An S3 client of `member`'s listener that acts as `caller`.
fn client(caller: &Caller<'_>, member: &ClusterMember) -> sdk::Client {
    let mut b = sdk::config::Builder::new()
        .behavior_version(sdk::config::BehaviorVersion::latest())
        .region(sdk::config::Region::new("us-east-1"))
        .endpoint_url(member.s3_url.clone().unwrap_or_default())
        .force_path_style(true)
        .http_client(caller.wide.s3_http.clone())
        .retry_config(sdk::config::retry::RetryConfig::disabled());
    b = match &caller.credentials {
        Some(c) => b.credentials_provider(sdk::config::Credentials::new(
            c.access_key.clone(),
            c.secret_key.expose().to_owned(),
            None,
            None,
            "rasa-member",
        )),
        None => b.allow_no_auth(),
    };
    sdk::Client::from_conf(b.build())
}

/// Marks a request to `member` as a hop, with its proof under a secret (covering the
/// request's body, which the SDK holds in memory for these calls): it answers for itself.
fn hop(
    caller: &Caller<'_>,
    member: &ClusterMember,
) -> impl Fn(&mut sdk::config::http::HttpRequest) + Send + Sync {
    let peers = std::sync::Arc::clone(&caller.wide.peers);
    let to = member.node_id.clone();
    move |req| {
        let method = http::Method::from_bytes(req.method().as_bytes()).unwrap_or_default();
        let body = match req.body().bytes() {
            Some(b) if !b.is_empty() => crate::cluster::secret::HopBody::of(&[b]),
            // A body not in memory is not covered: the member refuses it.
            _ => crate::cluster::secret::HopBody::Empty,
        };
        let marks = match reqwest::Url::parse(req.uri()) {
            Ok(url) => peers.hop_headers(&to, &method, &url, &body),
            Err(_) => return,
        };
        for (name, value) in &marks {
            if let Ok(v) = value.to_str() {
                req.headers_mut()
                    .insert(name.as_str().to_owned(), v.to_owned());
            }
        }
    }
}

/// Runs one call to `member` within [`PART_WITHIN`]; a failure as the S3 error the caller
/// gets: the member's own refusal as it said it, else `503 SlowDown` naming the member.
async fn within<T, E, R>(
    member: &ClusterMember,
    call: impl std::future::Future<Output = Result<T, sdk::error::SdkError<E, R>>>,
) -> S3Result<T>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let unreachable = |why: String| {
        catalog::S3_MEMBER_PARTS
            .counter_by(&[("result", "unreachable")])
            .increment(1);
        s3_error!(
            SlowDown,
            "member {} at {} did not answer its part ({why}); retry shortly",
            member.node_id,
            member.s3_url.as_deref().unwrap_or_default()
        )
    };
    match tokio::time::timeout(PART_WITHIN, call).await {
        Err(_) => Err(unreachable(format!("no answer within {PART_WITHIN:?}"))),
        Ok(Ok(v)) => {
            catalog::S3_MEMBER_PARTS
                .counter_by(&[("result", "ok")])
                .increment(1);
            Ok(v)
        }
        Ok(Err(sdk::error::SdkError::ServiceError(e))) => {
            let e = e.into_err();
            let code = e.code().unwrap_or("InternalError").to_owned();
            let message = e.message().unwrap_or_default().to_owned();
            let mut err = S3Error::new(
                s3s::S3ErrorCode::from_bytes(code.as_bytes())
                    .unwrap_or(s3s::S3ErrorCode::InternalError),
            );
            err.set_message(format!("member {}: {message}", member.node_id));
            Err(err)
        }
        Ok(Err(e)) => Err(unreachable(sdk::error::DisplayErrorContext(&e).to_string())),
    }
}

/// `ask` of every other member (with an S3 client of its listener acting as `caller`), all
/// at once ([`crate::cluster::Peers::each_other`]); the first failure fails the whole.
async fn each_member<'c, T, F, Fut>(caller: &'c Caller<'_>, ask: F) -> S3Result<Vec<T>>
where
    F: Fn(sdk::Client, ClusterMember) -> Fut,
    Fut: std::future::Future<Output = S3Result<T>> + 'c,
{
    let late = |m: &ClusterMember| {
        s3_error!(
            SlowDown,
            "member {} at {} did not answer its part within {PART_WITHIN:?}; retry shortly",
            m.node_id,
            m.s3_url.as_deref().unwrap_or_default()
        )
    };
    caller
        .wide
        .peers
        .each_other(Wire::S3, |m| ask(client(caller, &m), m), late)
        .await
}

/// The other members' pages of `bucket`'s keys under `prefix` after `after` (at most `max`
/// entries each), as `listing::page` makes this member's: each member's
/// `ListObjectVersions` (which carries version ids) of its own keys.
pub(crate) async fn pages(
    caller: &Caller<'_>,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max: usize,
) -> S3Result<Vec<Page>> {
    each_member(caller, |c, m| async move {
        let call = c
            .list_object_versions()
            .bucket(bucket)
            .prefix(prefix)
            .set_delimiter(delimiter.map(str::to_owned))
            .set_key_marker(after.map(str::to_owned))
            .max_keys(max as i32)
            .customize()
            .mutate_request(hop(caller, &m))
            .send();
        let out = within(&m, call).await?;
        let contents = out
            .versions()
            .iter()
            .map(|v| Listed {
                key: v.key().unwrap_or_default().to_owned(),
                size: v.size().unwrap_or(0).max(0) as u64,
                etag: v.e_tag().unwrap_or_default().trim_matches('"').to_owned(),
                modified: v
                    .last_modified()
                    .and_then(|t| SystemTime::try_from(*t).ok())
                    .unwrap_or(SystemTime::UNIX_EPOCH),
                version: v.version_id().map(str::to_owned),
            })
            .collect();
        let prefixes = out
            .common_prefixes()
            .iter()
            .filter_map(|p| p.prefix().map(str::to_owned))
            .collect();
        let truncated = out.is_truncated().unwrap_or(false);
        Ok(Page {
            contents,
            prefixes,
            next: truncated.then(String::new),
        })
    })
    .await
}

/// An upload in progress: its S3 key, id and start.
pub(crate) type Upload = (String, String, SystemTime);

/// The other members' pages of the caller's uploads in progress in `bucket` (each with
/// whether it was cut short), as `ListMultipartUploads` on each.
pub(crate) async fn uploads(
    caller: &Caller<'_>,
    bucket: &str,
    prefix: &str,
    key_marker: Option<&str>,
    id_marker: Option<&str>,
    max: usize,
) -> S3Result<Vec<(Vec<Upload>, bool)>> {
    each_member(caller, |c, m| async move {
        let call = c
            .list_multipart_uploads()
            .bucket(bucket)
            .prefix(prefix)
            .set_key_marker(key_marker.map(str::to_owned))
            .set_upload_id_marker(id_marker.map(str::to_owned))
            .max_uploads(max as i32)
            .customize()
            .mutate_request(hop(caller, &m))
            .send();
        let out = within(&m, call).await?;
        let page = out
            .uploads()
            .iter()
            .map(|u| {
                (
                    u.key().unwrap_or_default().to_owned(),
                    u.upload_id().unwrap_or_default().to_owned(),
                    u.initiated()
                        .and_then(|t| SystemTime::try_from(*t).ok())
                        .unwrap_or(SystemTime::UNIX_EPOCH),
                )
            })
            .collect();
        Ok((page, out.is_truncated().unwrap_or(false)))
    })
    .await
}

/// One key of a `DeleteObjects` that another member owns, and its conditions.
pub(crate) struct ToDelete {
    pub(crate) key: String,
    pub(crate) etag: Option<String>,
    pub(crate) last_modified: Option<SystemTime>,
    pub(crate) size: Option<i64>,
}

/// What a member answered for one key of a `DeleteObjects`: deleted, or the error.
pub(crate) type Deleted = (String, Result<(), S3Error>);

/// Deletes `keys` of `bucket` at `member` (which owns them) with one `DeleteObjects`;
/// every key answered: a member that fails fails each of its keys with its reason.
pub(crate) async fn delete(
    caller: &Caller<'_>,
    member: &ClusterMember,
    bucket: &str,
    keys: &[ToDelete],
) -> Vec<Deleted> {
    let names: Vec<String> = keys.iter().map(|k| k.key.clone()).collect();
    let objects: Vec<sdk::types::ObjectIdentifier> = keys
        .iter()
        .filter_map(|k| {
            sdk::types::ObjectIdentifier::builder()
                .key(k.key.clone())
                .set_e_tag(k.etag.clone())
                .set_last_modified_time(k.last_modified.map(sdk::primitives::DateTime::from))
                .set_size(k.size)
                .build()
                .ok()
        })
        .collect();
    let delete = sdk::types::Delete::builder()
        .set_objects(Some(objects))
        .quiet(false)
        .build();
    let c = client(caller, member);
    let call = match delete {
        Ok(d) => c
            .delete_objects()
            .bucket(bucket)
            .delete(d)
            .customize()
            .mutate_request(hop(caller, member))
            .send(),
        Err(e) => {
            let why = s3_error!(InternalError, "{e}");
            return names.into_iter().map(|k| (k, Err(again(&why)))).collect();
        }
    };
    let out = match within(member, call).await {
        Ok(out) => out,
        Err(e) => return names.into_iter().map(|k| (k, Err(again(&e)))).collect(),
    };
    let mut answered: Vec<Deleted> = out
        .deleted()
        .iter()
        .filter_map(|d| d.key().map(|k| (k.to_owned(), Ok(()))))
        .collect();
    for e in out.errors() {
        let code = e.code().unwrap_or("InternalError");
        let mut err = S3Error::new(
            s3s::S3ErrorCode::from_bytes(code.as_bytes())
                .unwrap_or(s3s::S3ErrorCode::InternalError),
        );
        err.set_message(e.message().unwrap_or_default().to_owned());
        answered.push((e.key().unwrap_or_default().to_owned(), Err(err)));
    }
    // A key the member did not mention (its view differs): not known to be deleted.
    for k in names {
        if !answered.iter().any(|(a, _)| *a == k) {
            let why = s3_error!(
                SlowDown,
                "member {} did not answer for this key; retry",
                member.node_id
            );
            answered.push((k, Err(why)));
        }
    }
    answered
}

/// The same error once more (one per key of a member that failed).
fn again(e: &S3Error) -> S3Error {
    let mut out = S3Error::new(e.code().clone());
    if let Some(m) = e.message() {
        out.set_message(m.to_owned());
    }
    out
}

/// A copy's source, read from the member that owns it.
pub(crate) struct Fetched {
    pub(crate) bytes: bytes::Bytes,
    pub(crate) content_type: String,
    pub(crate) headers: ObjectHeaders,
    /// The S3 entity tag (unquoted).
    pub(crate) etag: String,
    pub(crate) modified: SystemTime,
    pub(crate) version: String,
}

/// `bucket`/`key` (at `version`, else the current one) from `member`, which owns it.
pub(crate) async fn fetch(
    caller: &Caller<'_>,
    member: &ClusterMember,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> S3Result<Fetched> {
    let c = client(caller, member);
    let call = c
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_owned))
        .checksum_mode(sdk::types::ChecksumMode::Enabled)
        .customize()
        .mutate_request(hop(caller, member))
        .send();
    let out = within(member, call).await?;
    let metadata: Vec<(String, String)> = out
        .metadata()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let checksums = [
        ("crc32", out.checksum_crc32()),
        ("crc32c", out.checksum_crc32_c()),
        ("sha1", out.checksum_sha1()),
        ("crc64nvme", out.checksum_crc64_nvme()),
    ]
    .into_iter()
    .filter_map(|(alg, v)| v.map(|v| (alg.to_owned(), v.to_owned())))
    .collect();
    let headers = ObjectHeaders {
        checksums,
        cache_control: out.cache_control().map(str::to_owned),
        content_disposition: out.content_disposition().map(str::to_owned),
        content_encoding: out.content_encoding().map(str::to_owned),
        content_language: out.content_language().map(str::to_owned),
        expires: out.expires_string().map(str::to_owned),
        ..Default::default()
    }
    .with_metadata(metadata)
    .map_err(|why| s3_error!(MetadataTooLarge, "{why}"))?;
    let etag = out.e_tag().unwrap_or_default().trim_matches('"').to_owned();
    let content_type = out
        .content_type()
        .unwrap_or(crate::media::DEFAULT_CONTENT_TYPE)
        .to_owned();
    let modified = out
        .last_modified()
        .and_then(|t| SystemTime::try_from(*t).ok())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let version = out.version_id().unwrap_or("null").to_owned();
    let bytes = tokio::time::timeout(PART_WITHIN, out.body.collect())
        .await
        .map_err(|_| {
            s3_error!(
                SlowDown,
                "member {} sent the copy source too slowly",
                member.node_id
            )
        })?
        .map_err(|e| {
            s3_error!(
                SlowDown,
                "reading the copy source from member {}: {e}",
                member.node_id
            )
        })?
        .into_bytes();
    Ok(Fetched {
        bytes,
        content_type,
        headers,
        etag,
        modified,
        version,
    })
}
