//! Unit tests of the router: the route table, access declarations, path handling.

use super::*;
use crate::store::{Store, StoreConfig};
use axum::body::Body;
use axum::http::header;
use proptest::prelude::*;
use rasa_openapi::PROBLEM_JSON;
use tower::ServiceExt;

/// State over a small in-memory store with `config`.
pub(super) fn test_state(config: HttpConfig) -> AppState {
    let store = Arc::new(Store::new(
        StoreConfig {
            memory_budget: 1 << 20,
            arena_size: 64 << 10,
            lease: std::time::Duration::from_secs(1),
            grace: std::time::Duration::from_millis(10),
            key_lifetime: None,
            block_size: rasa_fastpath::frame::DEFAULT_BLOCK_SIZE,
            staging_memory: 256 << 20,
            warm_memory: 0,
        },
        None,
        None,
    ));
    let objects =
        crate::objects::Objects::new(store, None, crate::origin::WritePolicy::CacheOnly, None);
    AppState::new(objects, config)
}

fn test_app() -> App {
    app(test_state(HttpConfig::new(1024, 10)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever path, method and headers arrive, the router answers without panicking
    /// and without a server error, and every error is a problem document.
    #[test]
    fn arbitrary_requests_never_fail_the_server(
        method in prop::sample::select(vec!["GET", "HEAD", "PUT", "DELETE", "POST", "PATCH"]),
        prefix in prop::sample::select(vec!["/v1/objects/", "/v1/descriptors/", "/v1/objects", "/", "/docs/"]),
        path in "[ -~]{0,40}|(%[0-9A-Fa-f]{2}){0,20}",
        query in "[ -~]{0,20}",
        range in "[ -~]{0,20}",
        cond in "[ -~]{0,20}",
        body in prop::collection::vec(proptest::arbitrary::any::<u8>(), 0..64),
    ) {
        let uri = format!("{prefix}{path}?{query}");
        let Ok(req) = axum::http::Request::builder()
            .method(method)
            .uri(&uri)
            .header("range", range.as_str())
            .header("if-none-match", cond.as_str())
            .body(Body::from(body))
        else {
            return Ok(()); // not a request hyper would have let through
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let resp = rt.block_on(test_app().oneshot(req)).unwrap();
        prop_assert!(!resp.status().is_server_error(), "{method} {uri}: {}", resp.status());
        if resp.status().is_client_error() {
            prop_assert_eq!(&resp.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        }
    }
}
