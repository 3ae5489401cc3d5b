//! `/v1/descriptors`: what a fast-path client needs to read a version one-sided.

use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use rasa_openapi::{Descriptor, DescriptorBatchRequest, DescriptorBatchResponse, DescriptorResult};

use super::resolve::{descriptor, key_from_uri, lookup, Tally, VersionQuery};
use super::{fanout, json_response, ApiError, AppState};
use crate::key;
use crate::objects::Objects;

/// Resolve a key to a descriptor of its current version (or of `?version=`).
///
/// Each call grants a new lease: the bytes named stay unchanged at least until
/// `lease_expires_at`, even if the key is overwritten or deleted meanwhile.
#[utoipa::path(
    get, path = "/v1/descriptors/{key}", tag = "descriptors", operation_id = "get_descriptor",
    params(("key" = String, Path, description = "Object key."), VersionQuery),
    responses(
        (status = 200, description = "The descriptor.", body = Descriptor),
        (status = 400, description = "Invalid key or version.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such key or version.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Read-through: the origin's object is over the maximum object size; it is streamed by GET /v1/objects/{key} and has no descriptor.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 502, description = "Read-through miss: the origin failed.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Read-through miss: no reusable memory for now.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 504, description = "Read-through miss: the origin timed out.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_descriptor(
    State(st): State<AppState>,
    req: Request,
) -> Result<Response, ApiError> {
    let objects = st.objects_in(req.extensions())?;
    let key = key_from_uri(req.uri().path(), "/v1/descriptors/")?;
    let Query(mut q) = Query::<VersionQuery>::try_from_uri(req.uri())
        .map_err(|e| ApiError::InvalidRequest(e.body_text()))?;
    // A replica serves the version it holds ([`super::replica`]).
    if let Some(r) = req.extensions().get::<super::replica::ReplicaRead>() {
        q.version = Some(crate::store::VersionId(r.0).to_string());
    }
    let v = match super::test_hooks::served_corrupt(&st, &key) {
        Some(bad) if q.version.is_none() => bad,
        _ => lookup(&objects, &key, &q).await?,
    };
    Ok(json_response(
        StatusCode::OK,
        &descriptor(&st, objects.store(), &v),
    ))
}

/// Resolve many keys in one round trip.
///
/// Answers one result per requested key, in request order: a descriptor, or a problem
/// (`not_found`, `invalid_key`) for that key alone. In a cluster, keys other members own
/// are resolved by their owners (their descriptors name those nodes).
#[utoipa::path(
    post, path = "/v1/descriptors", tag = "descriptors", operation_id = "batch_descriptors",
    request_body = DescriptorBatchRequest,
    responses(
        (status = 200, description = "One result per key, in order.", body = DescriptorBatchResponse),
        (status = 400, description = "Malformed body or too many keys.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not JSON.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The JSON does not match the schema.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn batch_descriptors(
    State(st): State<AppState>,
    ns: Option<axum::Extension<super::NamespaceName>>,
    headers: HeaderMap,
    Json(req): Json<DescriptorBatchRequest>,
) -> Result<Response, ApiError> {
    let ns = ns.map(|axum::Extension(n)| n);
    let objects = st.objects_of(ns.as_ref())?;
    st.config.check_batch_keys(req.keys.len())?;
    let mut results: Vec<Option<DescriptorResult>> = req.keys.iter().map(|_| None).collect();
    // Keys this member holds replicas of are resolved here, from the replicas.
    let replicas = match (fanout::cluster_wide(&st, &headers), &st.peers) {
        (Some(_), Some(peers)) => {
            super::replica::held_here(&st, peers, ns.as_ref(), &req.keys).await
        }
        _ => Vec::new(),
    };
    let replica = |i: usize| replicas.get(i).copied().flatten();
    if let Some(peers) = fanout::cluster_wide(&st, &headers) {
        // Keys other members own go to their owners, one sub-batch each, concurrently.
        let asks = fanout::remote_groups(peers, &req.keys, |i| replica(i).is_some())
            .into_iter()
            .map(|(owner, idx)| {
                let headers = &headers;
                let root = super::NamespaceName::api_root_of(ns.as_ref());
                let keys: Vec<String> = idx.iter().map(|&i| req.keys[i].clone()).collect();
                async move {
                    let answer = fanout::ask_owner(peers, headers, &root, &owner, keys).await;
                    (idx, answer)
                }
            });
        for (idx, answer) in futures_util::future::join_all(asks).await {
            for (i, r) in idx.into_iter().zip(answer.into_iter().flatten()) {
                results[i] = Some(r);
            }
        }
    }
    let here: Vec<(usize, String)> = req
        .keys
        .into_iter()
        .enumerate()
        .filter(|(i, _)| results[*i].is_none())
        .collect();
    for (i, r) in resolve_here(&st, &objects, ns.as_ref(), &replicas, here).await {
        results[i] = Some(r);
    }
    let results = results
        .into_iter()
        .map(|r| r.expect("every key answered"))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &DescriptorBatchResponse { results },
    ))
}

/// The results of the keys this member answers (`here`: each with its index in the
/// batch): first those [`Objects::resident_now`] answers at once, then the others each
/// through [`lookup`] — read-through misses of one batch fetched concurrently — a replica's
/// at the version it holds (`replicas`, by index).
async fn resolve_here(
    st: &AppState,
    objects: &Arc<Objects>,
    ns: Option<&super::NamespaceName>,
    replicas: &[Option<u64>],
    here: Vec<(usize, String)>,
) -> Vec<(usize, DescriptorResult)> {
    let replica = |i: usize| replicas.get(i).copied().flatten();
    // Plain keys (valid, no replica, no test hook) held in memory: no future a key.
    let plain = |i: usize, k: &str| {
        replica(i).is_none()
            && key::validate(k).is_ok()
            && super::test_hooks::served_corrupt(st, k).is_none()
    };
    let (quick, mut later): (Vec<_>, Vec<_>) = here.into_iter().partition(|(i, k)| plain(*i, k));
    let found = objects.resident_now(quick.iter().map(|(_, k)| k.as_str()));
    let (mut out, mut tally) = (
        Vec::with_capacity(quick.len() + later.len()),
        Tally::default(),
    );
    for ((i, k), v) in quick.into_iter().zip(found) {
        match v {
            Some(v) => {
                let d = tally.descriptor(st, objects.store(), &v);
                out.push((i, DescriptorResult::of(k, Ok(d))));
            }
            None => later.push((i, k)),
        }
    }
    tally.count();
    let lookups = later.into_iter().map(|(i, k)| {
        let (st, objects) = (st.clone(), Arc::clone(objects));
        let ns = ns.map(|n| Arc::clone(&n.0));
        async move {
            let found = match key::validate(&k) {
                Ok(()) => match super::test_hooks::served_corrupt(&st, &k) {
                    Some(bad) => Ok(bad),
                    None => {
                        let version = replica(i).map(|v| crate::store::VersionId(v).to_string());
                        let found = lookup(&objects, &k, &VersionQuery { version }).await;
                        // A replica's read was counted as it was copied (held_here).
                        if let (Some(peers), None, Ok(_)) = (&st.peers, replica(i), &found) {
                            crate::cluster::replicate::read_at_owner(peers, ns.as_deref(), &k);
                        }
                        found
                    }
                },
                Err(e) => Err(ApiError::from(e)),
            };
            let found = found.map(|v| descriptor(&st, objects.store(), &v));
            (i, DescriptorResult::of(k, found.map_err(|e| e.problem())))
        }
    });
    out.extend(futures_util::future::join_all(lookups).await);
    out
}
