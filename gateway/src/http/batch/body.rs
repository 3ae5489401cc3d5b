//! A put batch's body as it arrives: its manifest line, then each value's bytes, read
//! within the body's pace (`--body-timeout`, `--min-upload-rate`).

use crate::catalog;
use axum::body::BodyDataStream;
use bytes::Bytes;
use futures_util::StreamExt;
use rasa_openapi::PutBatchManifest;

use crate::http::ApiError;
use crate::pace::Pace;

/// Longest manifest line per value: a key (1024 bytes, each escaped at most to 6), a
/// media type (256) and the JSON around them.
const MANIFEST_BYTES_PER_ITEM: usize = 6 * 1024 + 6 * 256 + 128;

/// A put batch's body, read piece by piece.
pub(super) struct Framed<'s> {
    stream: &'s mut BodyDataStream,
    pace: Pace,
    /// Bytes received and not yet handed out.
    held: Bytes,
    /// Bytes received so far.
    received: u64,
}

impl<'s> Framed<'s> {
    pub(super) fn new(stream: &'s mut BodyDataStream, pace: Pace) -> Self {
        Self {
            stream,
            pace,
            held: Bytes::new(),
            received: 0,
        }
    }

    /// The next bytes of the body as they came, `None` at its end.
    async fn arrive(&mut self) -> Result<Option<Bytes>, ApiError> {
        if !self.held.is_empty() {
            return Ok(Some(std::mem::take(&mut self.held)));
        }
        loop {
            let next = self
                .pace
                .within(self.received, self.stream.next())
                .await
                .ok_or_else(|| {
                    catalog::HTTP_UPLOADS_TOO_SLOW.counter().increment(1);
                    ApiError::TooSlow {
                        rate: self.pace.min_rate(),
                    }
                })?;
            match next {
                None => return Ok(None),
                Some(Err(e)) => return Err(crate::http::objects::body_error(e)),
                Some(Ok(b)) if b.is_empty() => continue,
                Some(Ok(b)) => {
                    self.received += b.len() as u64;
                    return Ok(Some(b));
                }
            }
        }
    }

    /// The manifest: the body's first line, of at most `max_items` values.
    pub(super) async fn manifest(
        &mut self,
        max_items: usize,
    ) -> Result<PutBatchManifest, ApiError> {
        let longest = max_items.saturating_mul(MANIFEST_BYTES_PER_ITEM);
        let mut line: Vec<u8> = Vec::new();
        loop {
            let Some(mut b) = self.arrive().await? else {
                return Err(ApiError::IncompleteBody(
                    "the batch's body ended before its manifest line (JSON, then a newline)".into(),
                ));
            };
            if let Some(at) = b.iter().position(|&c| c == b'\n') {
                line.extend_from_slice(&b[..at]);
                self.held = b.split_off(at + 1);
                break;
            }
            line.extend_from_slice(&b);
            if line.len() > longest {
                return Err(ApiError::InvalidRequest(format!(
                    "the batch's manifest line is longer than {longest} bytes without a newline (a manifest of at most --max-batch-keys {max_items} values fits)"
                )));
            }
        }
        serde_json::from_slice(&line).map_err(|e| {
            ApiError::InvalidRequest(format!(
                "the batch's first line is not its manifest ({{\"items\":[{{\"key\":…,\"length\":…}},…]}}): {e}"
            ))
        })
    }

    /// Bytes of the body handed out so far.
    pub(super) fn consumed(&self) -> u64 {
        self.received - self.held.len() as u64
    }

    /// The next piece of the current value, at most `left` (> 0) bytes of it.
    pub(super) async fn piece(&mut self, left: u64, key: &str) -> Result<Bytes, ApiError> {
        let Some(mut b) = self.arrive().await? else {
            return Err(ApiError::IncompleteBody(format!(
                "the batch's body ended {left} bytes before the end of the value of '{key}'; nothing in the batch was stored"
            )));
        };
        if b.len() as u64 > left {
            self.held = b.split_off(left as usize);
        }
        Ok(b)
    }

    /// Reads and drops the next `len` bytes (a value that is refused).
    pub(super) async fn skip(&mut self, mut len: u64, key: &str) -> Result<(), ApiError> {
        while len > 0 {
            len -= self.piece(len, key).await?.len() as u64;
        }
        Ok(())
    }

    /// Checks that nothing follows the last value.
    pub(super) async fn end(&mut self) -> Result<(), ApiError> {
        match self.arrive().await? {
            None => Ok(()),
            Some(_) => Err(ApiError::InvalidRequest(
                "the batch's body goes on after the last value its manifest names; nothing in the batch was stored".into(),
            )),
        }
    }
}
