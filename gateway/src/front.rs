//! What both fronts — the HTTP API and the S3 listener — enforce on every request: one
//! [`Limits`], made once from the flags (`Args::front_limits`) and given to each, so the
//! two can never disagree.

use std::time::Duration;

/// The limits both fronts enforce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest value a PUT (or an S3 PutObject, a completed multipart upload) may store.
    pub max_object_size: u64,
    /// Most requests handled at once; more are answered `503` at once.
    pub max_concurrent_requests: usize,
    /// Largest request line plus header section, in bytes.
    pub max_header_size: usize,
    /// Longest wait for the next chunk of a request body.
    pub body_timeout: Duration,
    /// `--min-upload-rate`, bytes a second (0: none).
    pub min_upload_rate: u64,
}

impl Limits {
    /// The defaults, for values of at most `max_object_size`.
    pub fn new(max_object_size: u64) -> Self {
        Self {
            max_object_size,
            max_concurrent_requests: 1024,
            max_header_size: 16 << 10,
            body_timeout: Duration::from_secs(30),
            min_upload_rate: 0,
        }
    }

    /// The pace a request body must keep ([`crate::pace::Pace`]).
    pub fn pace(&self) -> crate::pace::Pace {
        crate::pace::Pace::new(self.body_timeout, self.min_upload_rate)
    }
}

/// Reads and drops `stream` to its end, or `most` bytes, or `deadline`, whichever comes
/// first (the S3 front drains unread bodies with it too).
pub(crate) async fn discard(
    stream: &mut axum::body::BodyDataStream,
    most: u64,
    deadline: tokio::time::Instant,
) {
    let mut left = most;
    while let Ok(Some(Ok(chunk))) =
        tokio::time::timeout_at(deadline, futures_util::StreamExt::next(stream)).await
    {
        left = left.saturating_sub(chunk.len() as u64);
        if left == 0 {
            break;
        }
    }
}
