//! The one place where gateway errors become HTTP statuses and problem documents.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rasa_openapi::{Problem, ProblemCode, PROBLEM_JSON};

use crate::key::KeyError;
use crate::store::StoreError;

/// Seconds a shed request (`503 overloaded`) is told to wait before retrying.
pub const OVERLOAD_RETRY_AFTER_SECS: u64 = 1;

/// Everything an API handler can fail with. Each variant has one status and one stable
/// code; the detail says what was wrong with *this* request without leaking internals.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The key in the path or body is not acceptable.
    #[error("invalid key: {0}")]
    InvalidKey(#[from] KeyError),
    /// `?version=` is not a version id.
    #[error("invalid version '{0}': a version id is 16 hexadecimal digits")]
    InvalidVersion(String),
    /// A malformed header, query parameter or body.
    #[error("{0}")]
    InvalidRequest(String),
    /// A commit that does not match its upload (another number of values).
    #[error("{0}")]
    UploadMismatch(String),
    /// A request for keys another member owns, which this route does not forward.
    #[error("{0}")]
    Misdirected(String),
    /// Bytes that do not hash to what their sender computed (a one-sided write).
    #[error("{0}")]
    DigestMismatch(String),
    /// A one-sided upload's commit names no open upload (`gone`: it expired just now).
    #[error("{detail}")]
    NoSuchUpload {
        /// Why.
        detail: String,
        /// Whether it existed and its lease ended (`410`), rather than unknown (`404`).
        gone: bool,
    },
    /// No current version under the key.
    #[error("no object under key '{0}'")]
    NotFound(String),
    /// `/v1/ns/{ns}/…` names no namespace of this gateway.
    #[error("no namespace '{0}' (namespaces are listed in the gateway's --namespaces file)")]
    NoSuchNamespace(String),
    /// No such version (never existed, deleted, or reclaimed).
    #[error("no version {version} of key '{key}' (never stored, deleted or reclaimed)")]
    VersionNotFound {
        /// The key.
        key: String,
        /// The version asked for.
        version: String,
    },
    /// A conditional request's precondition is false.
    #[error("{0}")]
    PreconditionFailed(String),
    /// The range does not overlap the object.
    #[error("range not satisfiable: the object is {length} bytes long")]
    RangeNotSatisfiable {
        /// Object length, for `Content-Range: bytes */length`.
        length: u64,
    },
    /// The body is larger than `--max-object-size`.
    #[error("the body is larger than the maximum object size of {limit} bytes")]
    PayloadTooLarge {
        /// The limit.
        limit: u64,
    },
    /// The origin's object is larger than `--max-object-size`: it has no version here (and
    /// no descriptor); GET streams it from the origin.
    #[error("the origin's object is {length} bytes, over the maximum object size of {limit} bytes: it is not cached, so it has no descriptor and no one-sided read; GET /v1/objects/{{key}} streams it from the origin")]
    OriginTooLarge {
        /// The object's length.
        length: u64,
        /// `--max-object-size`.
        limit: u64,
    },
    /// A body without `Content-Length` larger than `--chunked-upload-memory`.
    #[error("a body without Content-Length is gathered in memory before it is stored, and this one passed --chunked-upload-memory ({limit} bytes); send Content-Length to stream it")]
    ChunkedTooLarge {
        /// The limit.
        limit: u64,
    },
    /// The memory budget cannot hold the value.
    #[error("{0}")]
    InsufficientStorage(String),
    /// The body ended early or could not be read.
    #[error("{0}")]
    IncompleteBody(String),
    /// Temporarily unable (memory full of leased values); retry after the given seconds.
    #[error("{detail}")]
    Unavailable {
        /// What is going on.
        detail: String,
        /// Seconds after which a retry makes sense.
        retry_after: u64,
    },
    /// The origin failed, refused access or could not be reached.
    #[error("{0}")]
    OriginUnavailable(String),
    /// The origin did not answer in time.
    #[error("{0}")]
    OriginTimeout(String),
    /// A write passed on to the key's owner reached it but got no answer: it may or may
    /// not have been stored.
    #[error("{0}")]
    OwnerUnreachable(String),
    /// A failure inside the gateway (e.g. memory registration).
    #[error("{0}")]
    Internal(String),
    /// No bearer token, or one the gateway does not know (`challenge` goes in
    /// `WWW-Authenticate`).
    #[error("{detail}")]
    Unauthorized {
        /// What is missing.
        detail: String,
        /// The `WWW-Authenticate` challenge.
        challenge: String,
    },
    /// The token lacks the route's scope.
    #[error("{detail}")]
    Forbidden {
        /// Which scope is missing.
        detail: String,
        /// The `WWW-Authenticate` challenge.
        challenge: String,
    },
    /// Shed by the concurrency limit.
    #[error("the gateway is handling as many requests as --max-concurrent-requests allows; retry shortly")]
    Overloaded,
    /// The request line and headers are larger than `--max-header-size`.
    #[error(
        "the request line and headers are {size} bytes; the limit is {limit} (--max-header-size)"
    )]
    HeadersTooLarge {
        /// Their size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The request body stalled longer than `--body-timeout`.
    #[error("the request body stalled longer than --body-timeout; nothing was stored")]
    BodyTimeout,
    /// The request body arrived slower than `--min-upload-rate`.
    #[error("the request body arrived slower than --min-upload-rate ({rate} bytes a second) after a grace of --body-timeout; nothing was stored")]
    TooSlow {
        /// The minimum rate, bytes a second.
        rate: u64,
    },
    /// A put batch whose values add up to more than `--max-batch-size`.
    #[error("the batch's values add up to {total} bytes; the limit is {limit} (--max-batch-size): send them in smaller batches; nothing was stored")]
    BatchTooLarge {
        /// Their total.
        total: u64,
        /// The limit.
        limit: u64,
    },
    /// A batch request with more keys than allowed.
    #[error("{got} keys in one request; the limit is {limit} (--max-batch-keys)")]
    TooManyKeys {
        /// Keys sent.
        got: usize,
        /// The limit.
        limit: usize,
    },
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidKey(_)
            | Self::InvalidVersion(_)
            | Self::InvalidRequest(_)
            | Self::IncompleteBody(_)
            | Self::TooManyKeys { .. } => StatusCode::BAD_REQUEST,
            Self::DigestMismatch(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Misdirected(_) => StatusCode::MISDIRECTED_REQUEST,
            Self::UploadMismatch(_) => StatusCode::CONFLICT,
            Self::NoSuchUpload { gone: true, .. } => StatusCode::GONE,
            Self::NoSuchUpload { gone: false, .. } => StatusCode::NOT_FOUND,
            Self::NotFound(_) | Self::VersionNotFound { .. } | Self::NoSuchNamespace(_) => {
                StatusCode::NOT_FOUND
            }
            Self::PreconditionFailed(_) => StatusCode::PRECONDITION_FAILED,
            Self::RangeNotSatisfiable { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            Self::PayloadTooLarge { .. }
            | Self::ChunkedTooLarge { .. }
            | Self::OriginTooLarge { .. }
            | Self::BatchTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::OriginUnavailable(_) => StatusCode::BAD_GATEWAY,
            Self::OriginTimeout(_) | Self::OwnerUnreachable(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::BodyTimeout | Self::TooSlow { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden { .. } => StatusCode::FORBIDDEN,
            Self::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            Self::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        }
    }

    /// The stable machine-readable code of this error.
    pub fn code(&self) -> ProblemCode {
        match self {
            Self::InvalidKey(_) => ProblemCode::InvalidKey,
            Self::InvalidVersion(_) => ProblemCode::InvalidVersion,
            Self::InvalidRequest(_) => ProblemCode::InvalidRequest,
            Self::DigestMismatch(_) => ProblemCode::DigestMismatch,
            Self::Misdirected(_) | Self::UploadMismatch(_) => ProblemCode::InvalidRequest,
            Self::NoSuchUpload { .. } => ProblemCode::NoSuchUpload,
            Self::NotFound(_) | Self::VersionNotFound { .. } => ProblemCode::NotFound,
            Self::NoSuchNamespace(_) => ProblemCode::NoSuchNamespace,
            Self::PreconditionFailed(_) => ProblemCode::PreconditionFailed,
            Self::RangeNotSatisfiable { .. } => ProblemCode::RangeNotSatisfiable,
            Self::PayloadTooLarge { .. }
            | Self::ChunkedTooLarge { .. }
            | Self::OriginTooLarge { .. }
            | Self::BatchTooLarge { .. } => ProblemCode::PayloadTooLarge,
            Self::InsufficientStorage(_) => ProblemCode::InsufficientStorage,
            Self::IncompleteBody(_) => ProblemCode::IncompleteBody,
            Self::TooManyKeys { .. } => ProblemCode::TooManyKeys,
            Self::Internal(_) => ProblemCode::Internal,
            Self::Unavailable { .. } => ProblemCode::Unavailable,
            Self::OriginUnavailable(_) => ProblemCode::OriginUnavailable,
            Self::OriginTimeout(_) => ProblemCode::OriginTimeout,
            Self::OwnerUnreachable(_) => ProblemCode::OwnerUnreachable,
            Self::BodyTimeout | Self::TooSlow { .. } => ProblemCode::RequestTimeout,
            Self::Unauthorized { .. } => ProblemCode::Unauthorized,
            Self::Forbidden { .. } => ProblemCode::Forbidden,
            Self::Overloaded => ProblemCode::Overloaded,
            Self::HeadersTooLarge { .. } => ProblemCode::HeadersTooLarge,
        }
    }

    /// The problem document for this error.
    pub fn problem(&self) -> Problem {
        problem(self.status(), self.code(), self.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::InsufficientStorage { .. } => Self::InsufficientStorage(e.to_string()),
            StoreError::LengthMismatch { .. } => Self::IncompleteBody(e.to_string()),
            StoreError::PreconditionFailed(d) | StoreError::NoCurrentVersion(d) => {
                Self::PreconditionFailed(d)
            }
            StoreError::Busy { retry_after } => Self::Unavailable {
                detail: e.to_string(),
                retry_after: retry_after.as_secs().max(1),
            },
            StoreError::ChecksumMismatch { .. } => Self::DigestMismatch(e.to_string()),
            StoreError::Upload(u) => u.into(),
            StoreError::Fabric(d) => {
                tracing::error!(detail = %d, "fabric failure");
                Self::Internal(
                    "the fast path failed to register memory; see the gateway's log".into(),
                )
            }
        }
    }
}

impl From<crate::store::UploadError> for ApiError {
    fn from(e: crate::store::UploadError) -> Self {
        use crate::store::UploadError;
        match e {
            UploadError::Unknown(_) => Self::NoSuchUpload {
                detail: e.to_string(),
                gone: false,
            },
            UploadError::Expired { .. } => Self::NoSuchUpload {
                detail: e.to_string(),
                gone: true,
            },
            UploadError::Count { .. } => Self::UploadMismatch(e.to_string()),
            UploadError::NoFastPath => Self::InvalidRequest(e.to_string()),
        }
    }
}

/// Whether `err` or anything in its chain of causes satisfies `is`.
pub(crate) fn caused_by(
    err: &(dyn std::error::Error + 'static),
    is: impl Fn(&(dyn std::error::Error + 'static)) -> bool,
) -> bool {
    let mut cause = Some(err);
    while let Some(c) = cause {
        if is(c) {
            return true;
        }
        cause = c.source();
    }
    false
}

pub(crate) use crate::net::error_chain as chain;

/// Builds a problem document.
pub fn problem(status: StatusCode, code: ProblemCode, detail: impl Into<String>) -> Problem {
    Problem {
        type_uri: format!("urn:rasa:problem:{}", code.as_str()),
        title: status.canonical_reason().unwrap_or("Error").to_owned(),
        status: status.as_u16(),
        detail: detail.into(),
        code,
        instance: None,
    }
}

/// A problem document as a response.
pub fn problem_response(p: &Problem) -> Response {
    let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::to_vec(p).expect("a problem serializes");
    (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON))],
        body,
    )
        .into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = problem_response(&self.problem());
        match self {
            Self::RangeNotSatisfiable { length } => {
                resp.headers_mut().insert(
                    header::CONTENT_RANGE,
                    HeaderValue::from_str(&format!("bytes */{length}")).expect("ascii"),
                );
            }
            Self::Unavailable { retry_after, .. } => {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
            }
            Self::Overloaded => {
                resp.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(OVERLOAD_RETRY_AFTER_SECS),
                );
            }
            Self::Unauthorized { challenge, .. } | Self::Forbidden { challenge, .. } => {
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_str(&challenge).expect("an ASCII challenge"),
                );
            }
            Self::BodyTimeout | Self::TooSlow { .. } => {
                // The rest of the body is not read; the connection cannot carry another request.
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        resp
    }
}

impl From<crate::origin::OriginError> for ApiError {
    fn from(e: crate::origin::OriginError) -> Self {
        use crate::origin::OriginError;
        match &e {
            OriginError::Timeout(_) => Self::OriginTimeout(e.to_string()),
            OriginError::Denied(_) => Self::OriginUnavailable(format!(
                "{e} (check the gateway's AWS credentials and bucket policy)"
            )),
            OriginError::Failed(_) => Self::OriginUnavailable(e.to_string()),
        }
    }
}

impl From<crate::origin::readthrough::FetchError> for ApiError {
    fn from(e: crate::origin::readthrough::FetchError) -> Self {
        use crate::origin::readthrough::FetchError;
        match e {
            FetchError::Origin(o) => o.into(),
            FetchError::TooLarge { length, limit } => Self::OriginTooLarge { length, limit },
            FetchError::Busy(d) => Self::Unavailable {
                detail: e.to_string(),
                retry_after: d.as_secs().max(1),
            },
            FetchError::Store(d) => Self::InsufficientStorage(d),
        }
    }
}

impl From<crate::objects::ObjectError> for ApiError {
    fn from(e: crate::objects::ObjectError) -> Self {
        use crate::objects::ObjectError;
        match e {
            ObjectError::NotFound(key) => Self::NotFound(key),
            ObjectError::VersionNotFound { key, version } => Self::VersionNotFound {
                key,
                version: version.to_string(),
            },
            ObjectError::Store(e) => e.into(),
            ObjectError::Origin(e) => e.into(),
            ObjectError::Fetch(e) => e.into(),
            e @ ObjectError::Moved(_) => Self::Unavailable {
                detail: e.to_string(),
                retry_after: 1,
            },
        }
    }
}
