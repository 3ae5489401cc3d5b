//! Limits that keep a hostile or broken client from exhausting the gateway, and the
//! problem documents they answer with.
//!
//! | limit | enforced by | answer |
//! | --- | --- | --- |
//! | `--max-concurrent-requests` | [`crate::slots::Slots`] on `/v1` routes | `503 overloaded`, `Retry-After: 1` |
//! | `--max-header-size` | `refuse_oversized_head`, in the outermost middleware (hyper's read buffer is the backstop) | `431 headers_too_large` |
//! | `--body-timeout` | tower-http `RequestBodyTimeout` (idle time between body chunks) | `408 request_timeout` |
//! | `--header-timeout` | hyper's `header_read_timeout` (see [`crate::server`]) | connection closed |
//! | `--send-timeout` | `tokio-io-timeout` around the socket (see [`crate::server`]) | connection closed |
//! | `--max-batch-keys` | the batch handlers | `400 too_many_keys` |
//! | `--max-batch-size` | the put batch handler, before the values are read | `413 payload_too_large` |
//! | `--max-object-size` | the PUT handler (and each value of a put batch) | `413 payload_too_large` |
//!
//! A refused upload's body is read for a moment before the answer goes out
//! ([`with_linger`]), so the client reads the answer rather than a reset.

use crate::catalog;
use axum::body::BodyDataStream;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};

use super::error::caused_by;
use super::ApiError;

/// The native API's answer to a request that found no slot free
/// (`--max-concurrent-requests`, [`crate::slots`]), counted.
pub(crate) fn overloaded() -> Response {
    catalog::HTTP_REQUESTS_SHED.counter().increment(1);
    ApiError::Overloaded.into_response()
}

/// The `431` answer for a request whose head is larger than `max`, if it is.
pub(crate) fn refuse_oversized_head(req: &Request, max: usize) -> Option<Response> {
    let size = crate::net::head_size(req);
    if size <= max {
        return None;
    }
    catalog::HTTP_REQUESTS_REFUSED
        .counter_by(&[("reason", "headers_too_large")])
        .increment(1);
    Some(ApiError::HeadersTooLarge { size, limit: max }.into_response())
}

/// Whether a body read failed because the body stalled past `--body-timeout`.
pub(crate) fn is_body_timeout(e: &axum::Error) -> bool {
    caused_by(e, |c| c.is::<tower_http::timeout::TimeoutError>())
}

/// `answer` to an upload, once what is left of a refused body has been read
/// ([`linger`]); not for a body that stalled, crawled or broke: nothing more is coming
/// (or it must not be waited for).
pub(crate) async fn with_linger(
    answer: Result<Response, ApiError>,
    stream: &mut BodyDataStream,
) -> Result<Response, ApiError> {
    let cut_short = matches!(
        answer,
        Err(ApiError::TooSlow { .. } | ApiError::BodyTimeout | ApiError::IncompleteBody(_))
    );
    if answer.is_err() && !cut_short {
        linger(stream).await;
    }
    answer
}

/// Most bytes of a refused upload's body read and dropped before the answer goes out.
const LINGER_BYTES: u64 = 64 << 20;
/// Longest wait for the rest of a refused upload's body.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads and drops what is left of a refused upload's body (at most [`LINGER_BYTES`],
/// for at most [`LINGER`]) before it is answered, as nginx's lingering close does: a
/// client still sending would otherwise meet a connection reset, which discards the
/// answer it had not read yet (a broken pipe where `413` or `507` was said).
async fn linger(stream: &mut BodyDataStream) {
    crate::front::discard(stream, LINGER_BYTES, tokio::time::Instant::now() + LINGER).await;
}

impl super::HttpConfig {
    /// `n` keys or values in one batch request: within `--max-batch-keys`, or
    /// `too_many_keys`.
    pub(crate) fn check_batch_keys(&self, n: usize) -> Result<(), ApiError> {
        match n > self.max_batch_keys {
            true => Err(ApiError::TooManyKeys {
                got: n,
                limit: self.max_batch_keys,
            }),
            false => Ok(()),
        }
    }
}
