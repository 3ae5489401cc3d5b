//! `/v1/batch/put` and `/v1/batch/delete`: many values stored, or many keys deleted, in
//! one request (and `/v1/batch/exists`: many keys checked). Each value is its own version with its own result: a value refused (a bad
//! key, too large, no memory) is named in its result and the others are stored. The body
//! is streamed into memory value by value; the values are published only once the whole
//! body has arrived, so a batch cut short stores nothing. In a cluster, values other
//! members own go to them in one sub-batch per owner; until then they are held in memory
//! outside the store's budget, within `--chunked-upload-memory` (shared with bodies sent
//! without a length): a value past it is refused on its own, `503` with `Retry-After`.

mod body;
pub mod delete;
pub mod exists;
mod place;
pub mod upload;

pub use delete::delete_batch;
pub use exists::exists_batch;
pub use upload::{commit_upload, reserve_upload};

use crate::catalog;
use std::sync::Arc;

use axum::body::BodyDataStream;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use rasa_openapi::{
    ClusterMember, Descriptor, DescriptorResult, Problem, PutBatchItem, PutBatchResponse,
    HOP_HEADER,
};

use super::limits::with_linger;
use super::objects::content_length;
use super::resolve::{wants_lease, Tally};
use super::{fanout, json_response, ApiError, AppState, NamespaceName};
use crate::objects::Objects;
use crate::store::{Sealed, Store};
use body::Framed;
use place::place;

/// Where one value of a batch stands once its bytes have arrived.
enum Slot {
    /// Sealed here, published when the whole body has arrived.
    Here(Box<Sealed>),
    /// For another member (index into the owners), with its bytes.
    Away(usize, PutBatchItem, Held),
    /// Refused.
    Failed(ApiError),
}

/// Store many values in one request.
///
/// The body is one line of JSON, the manifest (`{"items":[{"key":"a","length":5,
/// "content_type":"text/plain"},…]}`), a newline, then the values back to back in
/// manifest order, each exactly `length` bytes. Each value becomes its own version, as
/// `PUT /v1/objects/{key}` would store it; one result per value, in order: a descriptor,
/// or the problem that kept that value alone from being stored (`invalid_key`,
/// `payload_too_large`, `insufficient_storage`, `unavailable`, …). Values are published
/// once the whole body has arrived: a body cut short stores nothing.
#[utoipa::path(
    post, path = "/v1/batch/put", tag = "objects", operation_id = "put_batch",
    params(
        ("lease" = Option<bool>, Query, description = "`true`: each descriptor carries the remote address and key, leased for `--lease`, as with `PUT ?lease=true`."),
    ),
    request_body(content = rasa_openapi::Binary, content_type = "application/vnd.rasa.batch", description = "The manifest line (`PutBatchManifest` as JSON), `\\n`, then the values back to back."),
    responses(
        (status = 200, description = "One result per value, in manifest order.", body = PutBatchResponse),
        (status = 400, description = "No manifest line, a malformed one, more values than `--max-batch-keys` (`too_many_keys`), a body that ends early (`incomplete_body`) or goes on after the last value. Nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 408, description = "The body stalled longer than the body timeout; nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "The values add up to more than `--max-batch-size`; nothing stored.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn put_batch(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let mut stream = body.into_data_stream();
    let answer = put_all(&st, &parts, &mut stream).await;
    with_linger(answer, &mut stream).await
}

async fn put_all(
    st: &AppState,
    parts: &http::request::Parts,
    stream: &mut BodyDataStream,
) -> Result<Response, ApiError> {
    let objects = st.objects_in(&parts.extensions)?;
    let lease = wants_lease(&parts.uri)?;
    let pace = st.config.limits.pace();
    let mut body = Framed::new(stream, pace);
    let items = body.manifest(st.config.max_batch_keys).await?.items;
    check_limits(st, &parts.headers, body.consumed(), &items)?;
    let keys: Vec<String> = items.iter().map(|i| i.key.clone()).collect();
    let hopped = parts.headers.contains_key(HOP_HEADER);
    let mut owners: Vec<ClusterMember> = Vec::new();
    let mut slots = Vec::with_capacity(items.len());
    // The values share one wait for room, as long as reclamation may free some (leases
    // out, and their grace): those that do not fit then are refused at once. (A wait per
    // value, for room the batch's own unpublished values hold, kept a batch larger than
    // its memory busy for a lease per value.)
    let until = crate::store::room_deadline(objects.store());
    // Bytes of this batch's values held here, unpublished: no wait makes room for more
    // than the budget less these.
    let mut held = 0u64;
    for item in items {
        // A value stored here must fit beside the batch's others.
        let placed = place(st, &item, hopped).and_then(|at| match at {
            None => fits(objects.store(), held, &item).map(|()| None),
            away => Ok(away),
        });
        let slot = match placed {
            Err(e) => {
                body.skip(item.length, &item.key).await?;
                Slot::Failed(e)
            }
            Ok(None) => match receive(objects.store(), &item, &mut body, until).await? {
                Ok(sealed) => {
                    held += item.length;
                    Slot::Here(Box::new(sealed))
                }
                Err(e) => Slot::Failed(e),
            },
            Ok(Some(owner)) => {
                let at = match owners.iter().position(|o| o.node_id == owner.node_id) {
                    Some(at) => at,
                    None => {
                        owners.push(owner);
                        owners.len() - 1
                    }
                };
                match hold(st, &item, &owners[at]) {
                    Ok(room) => {
                        let bytes = gather(&mut body, &item).await?;
                        Slot::Away(at, item, Held { bytes, room })
                    }
                    Err(e) => {
                        body.skip(item.length, &item.key).await?;
                        Slot::Failed(e)
                    }
                }
            }
        };
        slots.push(slot);
    }
    body.end().await?;
    let remote = lease && super::auth::Caller::reads(parts);
    let results = publish(st, parts, &objects, (keys, slots), &owners, remote).await;
    let counted = |ok: bool| results.iter().filter(|r| r.error.is_none() == ok).count();
    catalog::HTTP_BATCH_ITEMS
        .counter_by(&[("op", "put"), ("result", "done")])
        .increment(counted(true) as u64);
    catalog::HTTP_BATCH_ITEMS
        .counter_by(&[("op", "put"), ("result", "refused")])
        .increment(counted(false) as u64);
    Ok(json_response(StatusCode::OK, &PutBatchResponse { results }))
}

/// The whole batch's limits, before any value is read: the count, the values' total, and
/// the body's declared length when there is one (`manifest` bytes and the values').
fn check_limits(
    st: &AppState,
    h: &HeaderMap,
    manifest: u64,
    items: &[PutBatchItem],
) -> Result<(), ApiError> {
    st.config.check_batch_keys(items.len())?;
    let total = items
        .iter()
        .try_fold(0u64, |t, i| t.checked_add(i.length))
        .unwrap_or(u64::MAX);
    if total > st.config.max_batch_size {
        return Err(ApiError::BatchTooLarge {
            total,
            limit: st.config.max_batch_size,
        });
    }
    match content_length(h)? {
        Some(declared) if Some(declared) != total.checked_add(manifest) => {
            Err(ApiError::InvalidRequest(format!(
                "Content-Length is {declared} bytes, but the manifest line ({manifest} bytes) and the values it names ({total} bytes) add up to {}; nothing was stored",
                manifest.saturating_add(total)
            )))
        }
        _ => Ok(()),
    }
}

/// Whether `item` can fit in `store` beside the `held` bytes of its batch (values stored
/// only when the batch ends, so never evicted for it): if not, it is refused at once.
fn fits(store: &Store, held: u64, item: &PutBatchItem) -> Result<(), ApiError> {
    let budget = store.memory().budget();
    if held.saturating_add(item.length) <= budget {
        return Ok(());
    }
    Err(crate::store::StoreError::InsufficientStorage {
        needed: item.length,
        allocated: held,
        budget,
    }
    .into())
}

/// Streams `item`'s bytes into a new upload, sealed. A value the store refuses (no
/// memory) is its own failure, the rest of its bytes dropped; a body that breaks fails
/// the batch.
async fn receive(
    store: &Store,
    item: &PutBatchItem,
    body: &mut Framed<'_>,
    until: std::time::Instant,
) -> Result<Result<Sealed, ApiError>, ApiError> {
    let ctype = item
        .content_type
        .as_deref()
        .unwrap_or(crate::media::DEFAULT_CONTENT_TYPE);
    let mut upload = match store
        .writes()
        .begin_streaming(&item.key, ctype, item.length, Some(until))
        .await
    {
        Ok(u) => u,
        Err(e) => {
            body.skip(item.length, &item.key).await?;
            return Ok(Err(no_room(store, item, e)));
        }
    };
    let mut left = item.length;
    while left > 0 {
        let piece = body.piece(left, &item.key).await?;
        left -= piece.len() as u64;
        if let Err(e) = store.writes().write(&mut upload, &piece).await {
            body.skip(left, &item.key).await?;
            return Ok(Err(e.into()));
        }
    }
    Ok(store.writes().seal(upload).map_err(ApiError::from))
}

/// Why `item` found no room: busy while leases hold memory (a retry can succeed), else
/// out of memory — what is not leased is being written (this batch's values among it).
fn no_room(store: &Store, item: &PutBatchItem, e: crate::store::StoreError) -> ApiError {
    use crate::store::StoreError;
    let m = store.memory();
    match e {
        StoreError::Busy { .. } if m.leases_end() <= std::time::SystemTime::now() => {
            StoreError::InsufficientStorage {
                needed: item.length,
                allocated: m.allocated(),
                budget: m.budget(),
            }
            .into()
        }
        e => e.into(),
    }
}

/// A value's bytes held for another member, and the room they take in
/// `--chunked-upload-memory` (given back when the value has been sent).
struct Held {
    bytes: Vec<Bytes>,
    room: tokio::sync::OwnedSemaphorePermit,
}

/// Room for `item`'s bytes, held here until the batch ends and they go to `owner`: taken
/// from `--chunked-upload-memory` (in KiB) at once, or the value is refused — `503` with
/// `Retry-After` while other held bodies fill it, `507` when it could never fit.
fn hold(
    st: &AppState,
    item: &PutBatchItem,
    owner: &ClusterMember,
) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    let limit = st.config.chunked_upload_memory;
    let kib = item.length.div_ceil(1024).max(1);
    let refused = |why: String| {
        catalog::HTTP_BATCH_ITEMS
            .counter_by(&[("op", "put"), ("result", "no_room_to_hold")])
            .increment(1);
        why
    };
    if kib > limit.div_ceil(1024) {
        return Err(ApiError::InsufficientStorage(refused(format!(
            "'{}' ({} bytes) is for member {}, and values for other members are held here until the batch ends, within --chunked-upload-memory ({limit} bytes): it can never fit; send it to its owner",
            item.key, item.length, owner.node_id
        ))));
    }
    let permits = u32::try_from(kib).unwrap_or(u32::MAX);
    Arc::clone(&st.chunked_budget)
        .try_acquire_many_owned(permits)
        .map_err(|_| ApiError::Unavailable {
            detail: refused(format!(
                "'{}' is for member {}, and the memory that holds values for other members (--chunked-upload-memory, {limit} bytes) is in use; nothing of it was stored, retry it",
                item.key, owner.node_id
            )),
            retry_after: 1,
        })
}

/// `item`'s bytes, as they arrived, for another member.
async fn gather(body: &mut Framed<'_>, item: &PutBatchItem) -> Result<Vec<Bytes>, ApiError> {
    let (mut left, mut out) = (item.length, Vec::new());
    while left > 0 {
        let piece = body.piece(left, &item.key).await?;
        left -= piece.len() as u64;
        out.push(piece);
    }
    Ok(out)
}

/// Publishes the values sealed here, in order, while the other members store theirs; one
/// result per value.
async fn publish(
    st: &AppState,
    parts: &http::request::Parts,
    objects: &Objects,
    (keys, slots): (Vec<String>, Vec<Slot>),
    owners: &[ClusterMember],
    remote: bool,
) -> Vec<DescriptorResult> {
    let mut here = Vec::new();
    let mut away: Vec<Vec<(usize, PutBatchItem, Held)>> = Vec::new();
    away.resize_with(owners.len(), Vec::new);
    let mut results: Vec<Option<Result<Descriptor, Problem>>> = Vec::with_capacity(slots.len());
    for (i, slot) in slots.into_iter().enumerate() {
        results.push(None);
        match slot {
            Slot::Here(sealed) => here.push((i, sealed)),
            Slot::Away(at, item, bytes) => away[at].push((i, item, bytes)),
            Slot::Failed(e) => results[i] = Some(Err(e.problem())),
        }
    }
    let root = NamespaceName::api_root(&parts.extensions);
    let query = if remote { "?lease=true" } else { "" };
    let asks = owners
        .iter()
        .zip(away)
        .filter(|(_, part)| !part.is_empty())
        .map(|(owner, part)| {
            let (root, headers) = (&root, &parts.headers);
            async move {
                let idx: Vec<usize> = part.iter().map(|(i, ..)| *i).collect();
                // The room the values take is given back once they have been sent.
                let (values, _rooms): (Vec<_>, Vec<_>) = part
                    .into_iter()
                    .map(|(_, item, held)| ((item, held.bytes), held.room))
                    .unzip();
                let peers = st
                    .peers
                    .as_deref()
                    .expect("values go away only in a cluster");
                let answer = fanout::put_at_owner(peers, headers, root, query, owner, values).await;
                (idx, owner, answer)
            }
        });
    let stored_here = async {
        let (mut out, mut tally) = (Vec::with_capacity(here.len()), Tally::default());
        for (i, sealed) in here {
            let stored = objects.put(*sealed, |_| Ok(())).await;
            out.push((
                i,
                stored.map(|v| tally.descriptor_of(st, objects.store(), &v, remote)),
            ));
        }
        tally.count();
        out
    };
    let (away, here) =
        futures_util::future::join(futures_util::future::join_all(asks), stored_here).await;
    for (i, r) in here {
        results[i] = Some(r.map_err(|e| ApiError::from(e).problem()));
    }
    for (idx, owner, answer) in away {
        match answer {
            Some(rs) => idx
                .iter()
                .zip(rs)
                .for_each(|(&i, r)| results[i] = Some(r.into_result())),
            None => idx
                .iter()
                .for_each(|&i| results[i] = Some(Err(fanout::unreachable(owner).problem()))),
        }
    }
    keys.into_iter()
        .zip(results)
        .map(|(key, r)| DescriptorResult::of(key, r.expect("every value answered")))
        .collect()
}
