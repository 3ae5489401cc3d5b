//! `/v1/_test/*`: hooks for the fast-path test suite, served only with `--test-hooks`.
//! They exercise failure paths a healthy gateway never produces on its own.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::resolve::{descriptor, key_from_uri, lookup, VersionQuery};
use super::{json_response, ApiError, AppState};
use crate::store::StoredVersion;

/// What the hooks keep between requests; part of the state only with `--test-hooks`.
#[derive(Default)]
pub(crate) struct TestHooks {
    /// Corrupt frame copies, kept alive while a test reads them.
    frames: Mutex<Vec<Arc<StoredVersion>>>,
    /// Keys whose descriptors point at a corrupt copy.
    served: Mutex<HashMap<String, Arc<StoredVersion>>>,
}

/// The hooks' state (the routes exist only with `--test-hooks`, and so does it).
fn hooks(st: &AppState) -> Result<&Arc<TestHooks>, ApiError> {
    st.test_hooks
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("/v1/_test".into()))
}

/// Revokes the remote key of the arena holding the key's current version (key rotation).
pub async fn revoke(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let objects = st.objects_in(req.extensions())?;
    let key = key_from_uri(req.uri().path(), "/v1/_test/revoke/")?;
    let v = lookup(&objects, &key, &VersionQuery::default()).await?;
    objects.store().testing().rotate_key(&v)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The memory region the key's current version lives in, as its descriptors open it:
/// `{"addr", "len", "rkey"}` (404 when the version is not registered), for tests that read
/// every byte a descriptor exposes.
pub async fn region(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let objects = st.objects_in(req.extensions())?;
    let key = key_from_uri(req.uri().path(), "/v1/_test/region/")?;
    let v = lookup(&objects, &key, &VersionQuery::default()).await?;
    let Some((addr, len, rkey)) = objects.store().testing().region_of(&v) else {
        return Err(ApiError::NotFound(key));
    };
    let body = serde_json::json!({ "addr": addr, "len": len, "rkey": rkey });
    Ok(json_response(StatusCode::OK, &body))
}

/// Answers a descriptor with the current version's identity and checksum but pointing at a
/// copy of its frame with one byte flipped (payload byte `?at=N`, by default the last), as
/// if the arena memory had been corrupted.
/// With `?serve=true`, `GET /v1/descriptors/{key}` (and a batch naming the key) answers
/// that descriptor from then on
/// (HTTP reads still serve the good bytes), so a client's own reads meet the corruption.
pub async fn corrupt(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let key = key_from_uri(req.uri().path(), "/v1/_test/corrupt/")?;
    let query = req.uri().query().unwrap_or_default();
    let serve = query.split('&').any(|p| p == "serve=true");
    let at = query
        .split('&')
        .find_map(|p| p.strip_prefix("at=")?.parse::<u64>().ok());
    let objects = st.objects_in(req.extensions())?;
    let v = lookup(&objects, &key, &VersionQuery::default()).await?;
    let bad = objects.store().testing().corrupt_copy(&v, at)?;
    let d = descriptor(&st, objects.store(), &bad);
    let hooks = hooks(&st)?;
    if serve {
        hooks
            .served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, Arc::clone(&bad));
    }
    hooks
        .frames
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(bad);
    Ok(json_response(StatusCode::OK, &d))
}

/// The corrupt copy `corrupt?serve=true` made `key`'s descriptors point at, if any.
pub(crate) fn served_corrupt(st: &AppState, key: &str) -> Option<Arc<StoredVersion>> {
    st.test_hooks
        .as_ref()?
        .served
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(key)
        .cloned()
}

/// Panics on a background thread of the gateway (as a bug in the fabric progress thread
/// would), so a test can check that the panic is logged with its cause.
pub async fn panic() -> Response {
    let died = std::thread::Builder::new()
        .name("rasa-test-panic".into())
        .spawn(|| panic!("test hook: a background thread panicked"))
        .map(|t| t.join().is_err())
        .unwrap_or(false);
    if died {
        StatusCode::NO_CONTENT.into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}
