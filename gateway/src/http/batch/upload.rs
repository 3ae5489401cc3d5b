//! One-sided writes over HTTP's control plane: `POST /v1/batch/reserve` opens an upload
//! region the client writes values into over the fabric, `POST /v1/batch/commit/{upload}`
//! seals and publishes them (the store's half is `store/onesided.rs`).

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use rasa_openapi::{
    DescriptorResult, Problem, PutBatchItem, PutBatchManifest, PutBatchResponse, RemoteRegion,
    UploadCommit, UploadRegion, UploadSlot, HOP_HEADER,
};

use crate::catalog;
use crate::http::resolve::{wants_lease, Tally};
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
/// checked as a put batch's is (key, media type, size, the batch's total); a refused one
/// has the problem in its slot's `error` and no room (in a cluster, a key another member
/// owns: send it there, or use `/v1/batch/put`). A manifest with nothing to write gets a
/// region of no values (`upload` 0, nothing held).
#[utoipa::path(
    post, path = "/v1/batch/reserve", tag = "objects", operation_id = "reserve_upload",
    request_body = PutBatchManifest,
    responses(
        (status = 201, description = "The region: where each value goes.", body = UploadRegion),
        (status = 400, description = "A malformed manifest, more values than `--max-batch-keys`, or a gateway without a fast path.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
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
    let hopped = parts.headers.contains_key(HOP_HEADER);
    let refusals = refusals(&st, &items, hopped);
    let wanted: Vec<Wanted<'_>> = items
        .iter()
        .zip(&refusals)
        .filter(|(_, r)| r.is_none())
        .map(|(i, _)| Wanted {
            key: &i.key,
            content_type: i
                .content_type
                .as_deref()
                .unwrap_or(crate::media::DEFAULT_CONTENT_TYPE),
            len: i.length,
        })
        .collect();
    let store = objects.store();
    let lease_ms = store.config().lease.as_millis() as u64;
    // Nothing to write: a region of no values (id 0), no memory.
    let (upload, lease_ms, endpoints, mut placed) = if wanted.is_empty() {
        (0, lease_ms, Vec::new(), Vec::new())
    } else {
        let until = crate::store::room_deadline(store);
        let r = store.one_sided().reserve(&wanted, until).await?;
        let left = r
            .expires
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default()
            .as_millis() as u64;
        let endpoints = r
            .remotes
            .iter()
            .map(|&(addr, rkey)| RemoteRegion { addr, rkey })
            .collect();
        (r.id, left, endpoints, r.values)
    };
    placed.reverse();
    let slots = items
        .iter()
        .zip(refusals)
        .map(|(i, error)| {
            let (version, offset) = match &error {
                Some(_) => (String::new(), 0),
                None => {
                    let (v, o) = placed.pop().expect("a place for each value reserved");
                    (v.to_string(), o)
                }
            };
            UploadSlot {
                key: i.key.clone(),
                version,
                offset,
                length: i.length,
                error,
            }
        })
        .collect();
    let region = UploadRegion {
        upload: format!("{upload:016x}"),
        lease_ms,
        endpoints,
        items: slots,
    };
    catalog::HTTP_BATCH_ITEMS
        .counter_by(&[("op", "reserve"), ("result", "done")])
        .increment(items.len() as u64);
    Ok(json_response(StatusCode::CREATED, &region))
}

/// Each value checked alone, as a put batch's (key, media type, size, the batch's total,
/// its owner): a refused one is named in its slot and gets no room.
fn refusals(st: &AppState, items: &[PutBatchItem], hopped: bool) -> Vec<Option<Problem>> {
    let mut total = 0u64;
    items
        .iter()
        .map(|item| {
            let refused = match super::place::place(st, item, hopped) {
                Err(e) => Some(e),
                Ok(Some(owner)) => Some(ApiError::Misdirected(format!(
                    "'{}' is owned by member {}: write it there, or through /v1/batch/put",
                    item.key, owner.node_id
                ))),
                Ok(None) if total.saturating_add(item.length) > st.config.max_batch_size => {
                    Some(ApiError::BatchTooLarge {
                        total: total.saturating_add(item.length),
                        limit: st.config.max_batch_size,
                    })
                }
                Ok(None) => None,
            };
            if refused.is_none() {
                total += item.length;
            }
            refused.map(|e| e.problem())
        })
        .collect()
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
        (status = 400, description = "A body that is not the commit's JSON.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A checksum that is not 16 hexadecimal digits (the upload stays open), or not one per value with room (nothing stored).", body = rasa_openapi::Problem, content_type = "application/problem+json"),
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
        .ok_or_else(|| ApiError::NoSuchUpload {
            detail: format!("no upload '{upload}' (an upload id is 16 hexadecimal digits)"),
            gone: false,
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
                ApiError::UploadMismatch(format!(
                    "'{c}' is not a frame checksum (16 hexadecimal digits); nothing was committed"
                ))
            })
        })
        .collect::<Result<Vec<u64>, _>>()?;
    if id == 0 && checksums.is_empty() {
        // The region of no values: nothing to commit.
        return Ok(json_response(
            StatusCode::OK,
            &PutBatchResponse {
                results: Vec::new(),
            },
        ));
    }
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
    let (mut results, mut tally) = (Vec::with_capacity(sealed.len()), Tally::default());
    for (key, s) in sealed {
        let r = match s {
            Err(e) => Err(ApiError::from(e).problem()),
            Ok(sealed) => objects
                .put(sealed, |_| Ok(()))
                .await
                .map(|v| tally.descriptor_of(&st, objects.store(), &v, remote))
                .map_err(|e| ApiError::from(e).problem()),
        };
        results.push(DescriptorResult::of(key, r));
    }
    tally.count();
    let stored = results.iter().filter(|r| r.error.is_none()).count();
    catalog::HTTP_BATCH_ITEMS
        .counter_by(&[("op", "commit"), ("result", "done")])
        .increment(stored as u64);
    catalog::HTTP_BATCH_ITEMS
        .counter_by(&[("op", "commit"), ("result", "refused")])
        .increment((results.len() - stored) as u64);
    Ok(json_response(StatusCode::OK, &PutBatchResponse { results }))
}
