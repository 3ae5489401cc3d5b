//! One-sided writes over HTTP's control plane: `POST /v1/batch/reserve` opens an upload
//! region the client writes values into over the fabric, `POST /v1/batch/commit/{upload}`
//! seals and publishes them (the store's half is `store/onesided.rs`).

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use rasa_openapi::{
    DescriptorResult, PutBatchManifest, PutBatchResponse, RemoteRegion, UploadCommit, UploadRegion,
    UploadSlot, HOP_HEADER,
};

use crate::catalog;
use crate::http::resolve::{descriptor_of, wants_lease};
use crate::http::{json_response, ApiError, AppState};
use crate::store::Wanted;

/// Open an upload region for values written one-sided.
///
/// The body is the manifest of a put batch (`{"items":[{"key":…,"length":…}]}`) as JSON.
/// The answer names, for each fabric endpoint, the region's start and a key that allows
/// remote **writes** only, and for each value its version id and where its bytes go.
/// Write each value's bytes there (`fi_write`; on the gateway's host, cross-memory
/// attach), then commit within `lease_ms`. No descriptor exposes the region while it is
/// open; an upload never committed is reclaimed when its lease ends. Every value is
/// checked as a put batch's is (key, media type, size); one refused refuses the region.
/// In a cluster every key must be owned by this member (`421` otherwise: send them to
/// their owner, or use `/v1/batch/put`).
#[utoipa::path(
    post, path = "/v1/batch/reserve", tag = "objects", operation_id = "reserve_upload",
    request_body = PutBatchManifest,
    responses(
        (status = 201, description = "The region: where each value goes.", body = UploadRegion),
        (status = 400, description = "A bad key, media type or manifest, more values than `--max-batch-keys`, or a gateway without a fast path.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "A value over `--max-object-size`, or values over `--max-batch-size`.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 421, description = "A key another member owns.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Memory is full of leased values; retry after `Retry-After`.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 507, description = "The values can never fit in memory.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn reserve_upload(
    State(st): State<AppState>,
    req: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let objects = st.objects_in(&parts.extensions)?;
    let bytes = axum::body::to_bytes(body, 16 << 20)
        .await
        .map_err(|e| ApiError::InvalidRequest(format!("the manifest could not be read: {e}")))?;
    let manifest: PutBatchManifest = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::InvalidRequest(format!("the manifest is not valid: {e}")))?;
    let items = manifest.items;
    st.config.check_batch_keys(items.len())?;
    if items.is_empty() {
        return Err(ApiError::InvalidRequest(
            "the manifest names no value".into(),
        ));
    }
    let hopped = parts.headers.contains_key(HOP_HEADER);
    let mut total = 0u64;
    for item in &items {
        if let Some(owner) = super::place::place(&st, item, hopped)? {
            return Err(ApiError::Misdirected(format!(
                "'{}' is owned by member {}: write it there, or through /v1/batch/put",
                item.key, owner.node_id
            )));
        }
        total = total.saturating_add(item.length);
    }
    if total > st.config.max_batch_size {
        return Err(ApiError::BatchTooLarge {
            total,
            limit: st.config.max_batch_size,
        });
    }
    let wanted: Vec<Wanted<'_>> = items
        .iter()
        .map(|i| Wanted {
            key: &i.key,
            content_type: i
                .content_type
                .as_deref()
                .unwrap_or(crate::media::DEFAULT_CONTENT_TYPE),
            len: i.length,
        })
        .collect();
    let store = objects.store();
    let until = crate::store::room_deadline(store);
    let r = store.one_sided().reserve(&wanted, until).await?;
    let region = UploadRegion {
        upload: format!("{:016x}", r.id),
        lease_ms: r
            .expires
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default()
            .as_millis() as u64,
        endpoints: r
            .remotes
            .iter()
            .map(|&(addr, rkey)| RemoteRegion { addr, rkey })
            .collect(),
        items: items
            .iter()
            .zip(&r.values)
            .map(|(i, (version, offset))| UploadSlot {
                key: i.key.clone(),
                version: version.to_string(),
                offset: *offset,
                length: i.length,
            })
            .collect(),
    };
    catalog::HTTP_BATCH_ITEMS
        .counter_by(&[("op", "reserve"), ("result", "done")])
        .increment(items.len() as u64);
    Ok(json_response(StatusCode::CREATED, &region))
}

/// Commit an upload region: seal and publish what was written one-sided.
///
/// The body gives each value's frame checksum as the client computed it before writing
/// (XXH3-64, as a descriptor's `checksum`). The region's write key is revoked first; then
/// each value's checksum and block table are computed from the bytes in memory, and a
/// value whose checksum differs is refused alone (`digest_mismatch`, nothing stored for
/// it). One result per value, as a put batch's (a descriptor, with the remote address
/// and a lease only with `?lease=true`; its `sha256` is empty, computed when a reader
/// first needs it, unless the commit asks for it with `"sha256": true`).
#[utoipa::path(
    post, path = "/v1/batch/commit/{upload}", tag = "objects", operation_id = "commit_upload",
    params(
        ("upload" = String, Path, description = "The upload's id, from its reservation."),
        ("lease" = Option<bool>, Query, description = "`true`: each descriptor carries the remote address and key, leased for `--lease`."),
    ),
    request_body = UploadCommit,
    responses(
        (status = 200, description = "One result per value, in order.", body = PutBatchResponse),
        (status = 400, description = "Malformed checksums, or not one per value (nothing stored).", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such upload open: committed already, or never reserved.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 410, description = "The upload's lease ended before its commit: it was reclaimed, nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn commit_upload(
    State(st): State<AppState>,
    Path(params): Path<std::collections::HashMap<String, String>>,
    req: Request,
) -> Result<Response, ApiError> {
    // `{ns}` too, under /v1/ns/{ns}.
    let upload = params.get("upload").cloned().unwrap_or_default();
    let (parts, body) = req.into_parts();
    let objects = st.objects_in(&parts.extensions)?;
    let lease = wants_lease(&parts.uri)?;
    let id = u64::from_str_radix(&upload, 16)
        .ok()
        .filter(|_| upload.len() == 16)
        .ok_or_else(|| {
            ApiError::InvalidRequest(format!(
                "'{upload}' is not an upload id (16 hexadecimal digits)"
            ))
        })?;
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .map_err(|e| ApiError::InvalidRequest(format!("the commit could not be read: {e}")))?;
    let Json(commit): Json<UploadCommit> = Json::from_bytes(&bytes)
        .map_err(|e| ApiError::InvalidRequest(format!("the commit is not valid: {e}")))?;
    let checksums = commit
        .checksums
        .iter()
        .map(|c| {
            u64::from_str_radix(c, 16).map_err(|_| {
                ApiError::InvalidRequest(format!("'{c}' is not a checksum (16 hexadecimal digits)"))
            })
        })
        .collect::<Result<Vec<u64>, _>>()?;
    let verifying = std::sync::Arc::clone(&objects);
    let digest = commit.sha256;
    let sealed = tokio::task::spawn_blocking(move || {
        let sealed = verifying.store().one_sided().commit(id, &checksums)?;
        if digest {
            for s in sealed.iter().filter_map(|(_, s)| s.as_ref().ok()) {
                s.version().sha256();
            }
        }
        Ok::<_, crate::store::UploadError>(sealed)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the commit's check failed: {e}")))??;
    let remote = lease && crate::http::auth::Caller::reads(&parts);
    let mut results = Vec::with_capacity(sealed.len());
    for (key, s) in sealed {
        let r = match s {
            Err(e) => Err(ApiError::from(e).problem()),
            Ok(sealed) => objects
                .put(sealed, |_| Ok(()))
                .await
                .map(|v| descriptor_of(&st, objects.store(), &v, remote))
                .map_err(|e| ApiError::from(e).problem()),
        };
        results.push(DescriptorResult::of(key, r));
    }
    let stored = results.iter().filter(|r| r.error.is_none()).count();
    catalog::HTTP_BATCH_ITEMS
        .counter_by(&[("op", "commit"), ("result", "done")])
        .increment(stored as u64);
    catalog::HTTP_BATCH_ITEMS
        .counter_by(&[("op", "commit"), ("result", "refused")])
        .increment((results.len() - stored) as u64);
    Ok(json_response(StatusCode::OK, &PutBatchResponse { results }))
}
