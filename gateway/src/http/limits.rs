//! Limits that keep a hostile or broken client from exhausting the gateway, and the
//! problem documents they answer with.
//!
//! | limit | enforced by | answer |
//! | --- | --- | --- |
//! | `--max-concurrent-requests` | tower `GlobalConcurrencyLimit` + `LoadShed` on `/v1` routes | `503 overloaded`, `Retry-After: 1` |
//! | `--max-header-size` | `refuse_oversized_head`, in the outermost middleware (hyper's read buffer is the backstop) | `431 headers_too_large` |
//! | `--body-timeout` | tower-http `RequestBodyTimeout` (idle time between body chunks) | `408 request_timeout` |
//! | `--header-timeout` | hyper's `header_read_timeout` (see [`crate::server`]) | connection closed |
//! | `--send-timeout` | `tokio-io-timeout` around the socket (see [`crate::server`]) | connection closed |
//! | `--max-batch-keys` | the batch handler | `400 too_many_keys` |
//! | `--max-object-size` | the PUT handler | `413 payload_too_large` |

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::BoxError;

use super::error::caused_by;
use super::ApiError;

/// Answers a request that the concurrency limit shed (or any other error of the limit
/// layers) with a problem document.
pub(crate) async fn overloaded(err: BoxError) -> Response {
    if err.is::<tower::load_shed::error::Overloaded>() {
        metrics::counter!("rasa_http_requests_shed_total").increment(1);
        ApiError::Overloaded.into_response()
    } else {
        tracing::error!(error = %err, "request limit layer failed");
        ApiError::Internal("internal error; the gateway's log has details".into()).into_response()
    }
}

/// The `431` answer for a request whose head is larger than `max`, if it is.
pub(crate) fn refuse_oversized_head(req: &Request, max: usize) -> Option<Response> {
    let size = crate::net::head_size(req);
    if size <= max {
        return None;
    }
    metrics::counter!("rasa_http_requests_refused_total", "reason" => "headers_too_large")
        .increment(1);
    Some(ApiError::HeadersTooLarge { size, limit: max }.into_response())
}

/// Whether a body read failed because the body stalled past `--body-timeout`.
pub(crate) fn is_body_timeout(e: &axum::Error) -> bool {
    caused_by(e, |c| c.is::<tower_http::timeout::TimeoutError>())
}
