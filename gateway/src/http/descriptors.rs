//! `/v1/descriptors`: what a fast-path client needs to read a version one-sided.

use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use rasa_openapi::{Descriptor, DescriptorBatchRequest, DescriptorBatchResponse, DescriptorResult};

use super::resolve::{descriptor, key_from_uri, lookup, VersionQuery};
use super::{json_response, ApiError, AppState};
use crate::key;

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
        (status = 502, description = "Read-through miss: the origin failed.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Read-through miss: no reusable memory for now.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
        (status = 504, description = "Read-through miss: the origin timed out.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_descriptor(
    State(st): State<AppState>,
    req: Request,
) -> Result<Response, ApiError> {
    let key = key_from_uri(req.uri().path(), "/v1/descriptors/")?;
    let Query(q) = Query::<VersionQuery>::try_from_uri(req.uri())
        .map_err(|e| ApiError::InvalidRequest(e.body_text()))?;
    let v = lookup(&st, &key, &q).await?;
    Ok(json_response(StatusCode::OK, &descriptor(&st, &v)))
}

/// Resolve many keys in one round trip.
///
/// Answers one result per requested key, in request order: a descriptor, or a problem
/// (`not_found`, `invalid_key`) for that key alone.
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
    Json(req): Json<DescriptorBatchRequest>,
) -> Result<Response, ApiError> {
    let limit = st.config.max_batch_keys;
    if req.keys.len() > limit {
        return Err(ApiError::TooManyKeys {
            got: req.keys.len(),
            limit,
        });
    }
    let lookups = req.keys.into_iter().map(|k| {
        let st = st.clone();
        async move {
            let found = match key::validate(&k) {
                Ok(()) => lookup(&st, &k, &VersionQuery::default()).await,
                Err(e) => Err(ApiError::from(e)),
            };
            match found {
                Ok(v) => DescriptorResult {
                    descriptor: Some(descriptor(&st, &v)),
                    error: None,
                    key: k,
                },
                Err(e) => DescriptorResult {
                    descriptor: None,
                    error: Some(e.problem()),
                    key: k,
                },
            }
        }
    });
    // Read-through misses of one batch are fetched concurrently.
    let results = futures_util::future::join_all(lookups).await;
    Ok(json_response(
        StatusCode::OK,
        &DescriptorBatchResponse { results },
    ))
}
