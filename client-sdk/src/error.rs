//! Errors of the SDK.

use rasa_openapi::{Problem, ProblemCode};

use crate::TimeoutKind;

/// Errors of the SDK.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The gateway answered with a problem document.
    #[error("{} {}: {}", .0.status, .0.code.as_str(), .0.detail)]
    Problem(Problem),
    /// The HTTP exchange failed (connection, protocol, body).
    #[error("HTTP request failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The gateway answered something this SDK does not understand.
    #[error("unexpected answer from the gateway: {0}")]
    Protocol(String),
    /// The gateway did not answer, or stopped making progress, within a timeout.
    #[error("timed out waiting for {endpoint}: nothing for {after:?} ({})", .kind.setting())]
    Timeout {
        /// The gateway's endpoint.
        endpoint: String,
        /// Which timeout fired.
        kind: TimeoutKind,
        /// Its length.
        after: std::time::Duration,
    },
    /// A one-sided read was required and could not be done.
    #[error("fast path unavailable: {0}")]
    FastPath(String),
    /// Reading what a call was to send failed (a file to store).
    #[error("reading the input failed: {0}")]
    Input(String),
    /// Writing a streaming read's output failed (the disk is full, the reader of a pipe
    /// went away).
    #[error("writing the output failed: {0}")]
    Output(String),
    /// A streaming read failed after it had written `written` bytes: the output holds a
    /// part of the value (never all of it) and must be discarded.
    #[error("{cause}; {written} bytes had been written, so the output is incomplete")]
    Incomplete {
        /// Bytes written before the failure.
        written: u64,
        /// What failed.
        cause: Box<Error>,
    },
    /// The caller's buffer cannot hold the value: it needs `needed` bytes (`None` when the
    /// gateway did not say the length up front) and has `capacity`. Nothing usable was
    /// written.
    #[error("the buffer holds {capacity} bytes; the value needs {}", .needed.map_or_else(|| "more".to_owned(), |n| n.to_string()))]
    BufferTooSmall {
        /// The value's length, when known.
        needed: Option<u64>,
        /// The buffer's length.
        capacity: u64,
    },
    /// A range that ends before it starts (a call's argument, refused before any request).
    #[error("the range {start}..{end} ends before it starts")]
    InvalidRange {
        /// First byte asked for.
        start: u64,
        /// One past the last byte asked for.
        end: u64,
    },
    /// The client could not be built as configured (unreadable CA file, bad token).
    #[error("client configuration: {0}")]
    Config(String),
}

impl Error {
    /// The `400 invalid_key` problem the gateway would answer for `key`, which the SDK
    /// refuses before sending (an HTTP client's URL layer would rewrite it instead).
    pub(crate) fn invalid_key(key: &str, why: &rasa_openapi::key::KeyError) -> Self {
        Self::Problem(Problem {
            type_uri: format!("urn:rasa:problem:{}", ProblemCode::InvalidKey.as_str()),
            title: "Bad Request".to_owned(),
            status: 400,
            detail: format!("invalid key: {why}"),
            code: ProblemCode::InvalidKey,
            instance: Some(format!("/v1/objects/{}", rasa_openapi::key_to_path(key))),
        })
    }

    /// Whether the gateway said the value is served over HTTP only (too large to cache:
    /// it streams it from its origin, and hands out no descriptor).
    pub fn http_only(&self) -> bool {
        matches!(self, Error::Problem(p) if p.code == ProblemCode::PayloadTooLarge)
    }

    /// The problem code, when the gateway sent one.
    pub fn code(&self) -> Option<ProblemCode> {
        match self {
            Self::Problem(p) => Some(p.code),
            _ => None,
        }
    }
}

/// An error and every cause under it, `: `-separated, so the root cause (e.g. "Connection
/// refused", or a certificate problem under "error sending request") is never hidden.
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}
