//! Answers that go out before their request's body was read (a conditional `PUT` refused
//! with `412` on its headers, a bucket that does not exist, a denied key): what is left of
//! the body is read and dropped first, as nginx's lingering close does. The connection
//! could not carry another request after an unread body, so hyper closes it; a client
//! still sending the body then meets a reset, which discards the answer it had not read
//! yet — boto3 saw `SSL: EOF occurred in violation of protocol` where S3 says
//! `PreconditionFailed` (eight leaders racing for one lock, as Dynamo's KVBM takes them).
//!
//! A request that asked `Expect: 100-continue` is not drained: its body was never asked
//! for, and reading it now would ask for it; `edge::close_unasked` closes that connection.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http_body::{Body as _, Frame, SizeHint};
use tokio::sync::oneshot;

/// Most bytes of an unread body read and dropped before the answer goes out.
const DRAIN_BYTES: u64 = 8 << 20;
/// Longest wait for the rest of an unread body.
const DRAIN_FOR: std::time::Duration = std::time::Duration::from_secs(2);

/// A request body that, dropped before its end, hands itself back for draining.
struct Returning {
    inner: Option<Body>,
    back: Option<oneshot::Sender<Body>>,
    ended: bool,
}

impl http_body::Body for Returning {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if let (Some(inner), Some(back)) = (self.inner.take(), self.back.take()) {
            if !self.ended && !inner.is_end_stream() {
                let _ = back.send(inner);
            }
        }
    }
}

/// Runs `req`; when its answer is ready and its body was dropped unread, reads and drops
/// what is left of it (at most [`DRAIN_BYTES`], for at most [`DRAIN_FOR`]) first.
pub(super) async fn unread_bodies(req: Request, next: axum::middleware::Next) -> Response {
    let expects = req.headers().contains_key(http::header::EXPECT);
    if expects || req.body().is_end_stream() {
        return next.run(req).await;
    }
    let (tx, rx) = oneshot::channel();
    let req = req.map(|body| {
        Body::new(Returning {
            inner: Some(body),
            back: Some(tx),
            ended: false,
        })
    });
    let answer = next.run(req).await;
    // Read to its end, the body's sender is gone: no wait. Dropped unread, it is here.
    // Still held (a forward to the key's owner still sending it), it comes when let go.
    let deadline = tokio::time::Instant::now() + DRAIN_FOR;
    if let Ok(Ok(body)) = tokio::time::timeout_at(deadline, rx).await {
        let mut stream = body.into_data_stream();
        crate::front::discard(&mut stream, DRAIN_BYTES, deadline).await;
    }
    answer
}
