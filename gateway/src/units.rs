//! Sizes and durations as flags and environment variables write them (`64MiB`, `10s`).

use std::time::Duration;

/// A size or duration that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// Not a size.
    #[error("{reason} (write sizes like 64MiB, 1GiB or 1000000)")]
    Size {
        /// What the parser said.
        reason: String,
    },
    /// Not a duration.
    #[error("{reason} (write durations like 10s or 250ms)")]
    Duration {
        /// What the parser said.
        reason: String,
    },
}

/// A size like `64MiB`, `1GiB` or `1000000` (bytes).
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    s.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|reason| UnitError::Size { reason })
}

/// A duration like `10s` or `250ms`.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    humantime::parse_duration(s.trim()).map_err(|e| UnitError::Duration {
        reason: e.to_string(),
    })
}
