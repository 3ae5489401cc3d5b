//! Sizes and durations as flags and environment variables write them (`64MiB`, `10s`).

use std::time::Duration;

/// A size like `64MiB`, `1GiB` or `1000000` (bytes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{e} (write sizes like 64MiB, 1GiB or 1000000)"))
}

/// A duration like `10s` or `250ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e} (write durations like 10s or 250ms)"))
}
