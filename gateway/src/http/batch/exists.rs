//! `POST /v1/batch/exists`: which of many keys are stored, in one request, from the index.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use rasa_openapi::{ExistsBatchRequest, ExistsBatchResponse, ExistsResult};

use crate::http::{fanout, json_response, ApiError, AppState, NamespaceName};
use crate::key;

/// Check which of many keys are stored, in one request.
///
/// Answers from the gateway's index: a key exists when it has a current version in memory
/// or in the disk tier. No value is read, no lease is granted, the origin is not asked
/// (an object only the origin holds is `false`). One result per key, in order; an invalid
/// key gets its problem alone. In a cluster, keys other members own are checked by them
/// (here when the owner does not answer).
#[utoipa::path(
    post, path = "/v1/batch/exists", tag = "objects", operation_id = "exists_batch",
    request_body = ExistsBatchRequest,
    responses(
        (status = 200, description = "One result per key, in order.", body = ExistsBatchResponse),
        (status = 400, description = "Malformed body or more keys than `--max-batch-keys`.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not JSON.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The JSON does not match the schema.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn exists_batch(
    State(st): State<AppState>,
    ns: Option<axum::Extension<NamespaceName>>,
    headers: HeaderMap,
    Json(req): Json<ExistsBatchRequest>,
) -> Result<Response, ApiError> {
    let ns = ns.map(|axum::Extension(n)| n);
    let objects = st.objects_of(ns.as_ref())?;
    st.config.check_batch_keys(req.keys.len())?;
    let mut results: Vec<Option<ExistsResult>> = req.keys.iter().map(|_| None).collect();
    if let Some(peers) = fanout::cluster_wide(&st, &headers) {
        let root = NamespaceName::api_root_of(ns.as_ref());
        let asks = fanout::remote_groups(peers, &req.keys, |_| false)
            .into_iter()
            .map(|(owner, idx)| {
                let (headers, root) = (&headers, &root);
                let keys: Vec<String> = idx.iter().map(|&i| req.keys[i].clone()).collect();
                async move {
                    let answer = fanout::exists_at_owner(peers, headers, root, &owner, keys).await;
                    (idx, answer)
                }
            });
        for (idx, answer) in futures_util::future::join_all(asks).await {
            for (i, r) in idx.into_iter().zip(answer.into_iter().flatten()) {
                results[i] = Some(r);
            }
        }
    }
    let results = req
        .keys
        .into_iter()
        .zip(results)
        .map(|(k, r)| {
            r.unwrap_or_else(|| match key::validate(&k) {
                Ok(()) => ExistsResult {
                    exists: objects.holds(&k),
                    key: k,
                    error: None,
                },
                Err(e) => ExistsResult {
                    key: k,
                    exists: false,
                    error: Some(ApiError::from(e).problem()),
                },
            })
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &ExistsBatchResponse { results },
    ))
}
