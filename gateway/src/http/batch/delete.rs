//! `POST /v1/batch/delete`: many keys deleted in one request.

use crate::catalog;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use rasa_openapi::{
    ClusterMember, DeleteBatchRequest, DeleteBatchResponse, DeleteResult, Problem, HOP_HEADER,
};

use crate::http::{fanout, json_response, ApiError, AppState, NamespaceName};
use crate::key;

/// Delete many keys in one request.
///
/// Each key is deleted as `DELETE /v1/objects/{key}` would (an absent key is deleted
/// too), in order; one result per key, with the problem when that key alone was not
/// deleted. In a cluster, keys other members own are deleted by them.
#[utoipa::path(
    post, path = "/v1/batch/delete", tag = "objects", operation_id = "delete_batch",
    request_body = DeleteBatchRequest,
    responses(
        (status = 200, description = "One result per key, in order.", body = DeleteBatchResponse),
        (status = 400, description = "Malformed body or more keys than `--max-batch-keys`.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not JSON.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The JSON does not match the schema.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_batch(
    State(st): State<AppState>,
    ns: Option<axum::Extension<NamespaceName>>,
    headers: HeaderMap,
    Json(req): Json<DeleteBatchRequest>,
) -> Result<Response, ApiError> {
    let ns = ns.map(|axum::Extension(n)| n);
    let objects = st.objects_of(ns.as_ref())?;
    st.config.check_batch_keys(req.keys.len())?;
    let hopped = headers.contains_key(HOP_HEADER);
    // Each key's problem (`None`: deleted); keys other members own are filled in below.
    let mut errors: Vec<Option<Problem>> = Vec::with_capacity(req.keys.len());
    let mut owners: Vec<(ClusterMember, Vec<usize>)> = Vec::new();
    for (i, k) in req.keys.iter().enumerate() {
        let owner = key::validate(k)
            .map_err(ApiError::from)
            .and_then(|()| fanout::write_owner(&st, k, hopped));
        let error = match owner {
            Err(e) => Some(e),
            Ok(None) => objects
                .delete(k, |_| Ok(()))
                .await
                .err()
                .map(ApiError::from),
            Ok(Some(owner)) => {
                match owners.iter_mut().find(|(o, _)| o.node_id == owner.node_id) {
                    Some((_, idx)) => idx.push(i),
                    None => owners.push((owner, vec![i])),
                }
                None
            }
        };
        errors.push(error.map(|e| e.problem()));
    }
    let root = NamespaceName::api_root_of(ns.as_ref());
    let asks = owners.iter().map(|(owner, idx)| {
        let keys: Vec<String> = idx.iter().map(|&i| req.keys[i].clone()).collect();
        let (root, headers) = (&root, &headers);
        let peers = st.peers.as_deref().expect("keys go away only in a cluster");
        async move { fanout::delete_at_owner(peers, headers, root, owner, keys).await }
    });
    let answers = futures_util::future::join_all(asks).await;
    for ((owner, idx), answer) in owners.iter().zip(answers) {
        for (n, &i) in idx.iter().enumerate() {
            errors[i] = match &answer {
                Some(rs) => rs[n].error.clone(),
                None => Some(fanout::unreachable(owner).problem()),
            };
        }
    }
    let results: Vec<DeleteResult> = req
        .keys
        .into_iter()
        .zip(errors)
        .map(|(key, error)| DeleteResult { key, error })
        .collect();
    let refused = results.iter().filter(|r| r.error.is_some()).count() as u64;
    catalog::HTTP_BATCH_ITEMS
        .counter_by(&[("op", "delete"), ("result", "done")])
        .increment(results.len() as u64 - refused);
    catalog::HTTP_BATCH_ITEMS
        .counter_by(&[("op", "delete"), ("result", "refused")])
        .increment(refused);
    Ok(json_response(
        StatusCode::OK,
        &DeleteBatchResponse { results },
    ))
}
