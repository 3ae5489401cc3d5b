//! Timeouts of HTTP exchanges: a client of a cache must fail fast and say why, never hang
//! on a frozen gateway.
//!
//! - **Connect**: reqwest's connect timeout ([`ClientBuilder::connect_timeout`]).
//! - **Request**: "no progress for [`ClientBuilder::timeout`]". Until the answer's head
//!   arrives, progress is request-body bytes taken by the connection (so a large upload on a
//!   slow link is fine while it moves); after it, each body chunk must arrive within the
//!   timeout (so a large download is fine while it moves).
//!
//! - **One call, one timeout per gateway**: a public call may take several exchanges
//!   (cluster discovery, then the object; a descriptor, then a fallback over HTTP). Once
//!   one of them times out against a gateway, every later exchange of the same call with
//!   that gateway fails at once with the same timeout ([`call_scope`]), so a frozen
//!   gateway fails a call after one timeout, not after one per exchange. (Failing over to
//!   another cluster member is still allowed.)
//! - **One call, one deadline**: the first exchange or one-sided read of a call sets its
//!   deadline, the request timeout from then ([`call_deadline`]). Until an exchange makes
//!   progress (request body bytes taken, or its answer arriving), every wait of the call —
//!   an answer's head, a one-sided read, a turn at a busy fabric endpoint, the second try
//!   with a fresh descriptor, the fallback over HTTP, a failover to another member — ends
//!   by then: a call against a frozen gateway ends within its timeout, however many steps
//!   it would have taken. A download or upload that keeps moving is not cut.
//!
//! [`ClientBuilder::connect_timeout`]: crate::ClientBuilder::connect_timeout
//! [`ClientBuilder::timeout`]: crate::ClientBuilder::timeout

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// Which timeout fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutKind {
    /// The TCP (and TLS) connection was not established in time.
    Connect,
    /// The gateway made no progress on a request (no answer, or no body bytes moving).
    Request,
    /// A one-sided read did not complete in time.
    FastPathRead,
}

impl TimeoutKind {
    /// The setting that bounds this wait, as a user would change it.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Connect => "connect timeout: ClientBuilder::connect_timeout",
            Self::Request => "request timeout: ClientBuilder::timeout or rasa --timeout",
            Self::FastPathRead => "fast-path read timeout: ClientBuilder::read_timeout",
        }
    }
}

/// One public call: the gateways that timed out during it (with the timeout that fired),
/// and its deadline once set.
#[derive(Default)]
struct Call {
    stalled: std::sync::Mutex<Vec<(String, TimeoutKind, Duration)>>,
    deadline: std::sync::OnceLock<Instant>,
}

tokio::task_local! {
    static CALL: Arc<Call>;
    /// The deadline of one attempt of the call (on one cluster member), when it has one.
    static ATTEMPT: Instant;
}

/// Runs one public call: exchanges inside it share the memory of gateways that timed out
/// and one deadline (a call inside a call shares its caller's).
pub(crate) async fn call_scope<F: std::future::Future>(f: F) -> F::Output {
    if CALL.try_with(|_| ()).is_ok() {
        f.await
    } else {
        CALL.scope(Arc::default(), f).await
    }
}

/// The current call's deadline: `timeout` from its first exchange or read (set now if
/// this is the first). `None` outside a call.
pub(crate) fn call_deadline(timeout: Duration) -> Option<Instant> {
    let call = CALL
        .try_with(|c| *c.deadline.get_or_init(|| Instant::now() + timeout))
        .ok()?;
    Some(ATTEMPT.try_with(|a| call.min(*a)).unwrap_or(call))
}

/// Runs `fut`, one attempt of the current call that another may follow (the key's next
/// choice, when this member does not answer), with `1 / share` of the time the call has
/// left: a frozen member leaves the next one time to answer within the call's timeout.
pub(crate) async fn attempt<F: std::future::Future>(
    timeout: Duration,
    share: u32,
    fut: F,
) -> F::Output {
    match call_deadline(timeout) {
        Some(deadline) => {
            let now = Instant::now();
            let until = now + deadline.saturating_duration_since(now) / share.max(1);
            ATTEMPT.scope(until, fut).await
        }
        None => fut.await,
    }
}

/// `wait`, or less: what is left of the current call's time (see [`call_deadline`]).
pub(crate) fn within_call(wait: Duration, timeout: Duration) -> Duration {
    match call_deadline(timeout) {
        Some(d) => wait.min(d.saturating_duration_since(Instant::now())),
        None => wait,
    }
}

/// The error of a call to `endpoint` that waited `after` (`kind`) for nothing, the endpoint
/// marked stalled (see [`mark_stalled`]).
pub(crate) fn timed_out(endpoint: &str, kind: TimeoutKind, after: Duration) -> crate::Error {
    mark_stalled(endpoint, kind, after);
    crate::Error::Timeout {
        endpoint: endpoint.to_owned(),
        kind,
        after,
    }
}

/// Notes that `endpoint` timed out (connect or request) in the current call.
pub(crate) fn mark_stalled(endpoint: &str, kind: TimeoutKind, after: Duration) {
    if kind == TimeoutKind::FastPathRead {
        return; // the fabric timing out says nothing of the gateway's HTTP side
    }
    let _ = CALL.try_with(|c| {
        let mut s = c
            .stalled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !s.iter().any(|(e, _, _)| e == endpoint) {
            s.push((endpoint.to_owned(), kind, after));
        }
    });
}

/// The timeout `endpoint` already hit in the current call, if it did.
pub(crate) fn stalled(endpoint: &str) -> Option<(TimeoutKind, Duration)> {
    CALL.try_with(|c| {
        let s = c
            .stalled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.iter()
            .find(|(e, _, _)| e == endpoint)
            .map(|&(_, kind, after)| (kind, after))
    })
    .ok()
    .flatten()
}

/// When an exchange last made progress.
#[derive(Debug)]
pub(crate) struct Progress {
    start: Instant,
    last_ms: AtomicU64,
    /// Whether bytes moved (not only the idle clock restarted).
    moved: std::sync::atomic::AtomicBool,
}

impl Progress {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            moved: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Bytes moved now.
    pub(crate) fn bump(&self) {
        self.moved.store(true, Ordering::Relaxed);
        self.restart();
    }

    /// The idle clock starts again now (nothing moved).
    pub(crate) fn restart(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    fn moved(&self) -> bool {
        self.moved.load(Ordering::Relaxed)
    }
}

/// Waits for `fut` while `progress` keeps moving: fails with `None` once nothing moved for
/// `idle`, or, before anything moved, at the call's deadline ([`call_deadline`]).
pub(crate) async fn until_idle<F: std::future::Future>(
    fut: F,
    progress: &Progress,
    idle: Duration,
) -> Option<F::Output> {
    tokio::pin!(fut);
    let call = call_deadline(idle);
    loop {
        let deadline = match call {
            Some(call) if !progress.moved() => (progress.last() + idle).min(call),
            _ => progress.last() + idle,
        };
        match tokio::time::timeout_at(deadline.into(), &mut fut).await {
            Ok(out) => return Some(out),
            Err(_) if deadline <= Instant::now() && !progress.moved() => return None,
            Err(_) if progress.last() + idle <= Instant::now() => return None,
            Err(_) => {} // something moved meanwhile: wait on from then
        }
    }
}

/// Size of the pieces an in-memory body is handed to the connection in: small enough that
/// progress is seen on a slow link, large enough to cost nothing.
const PIECE: usize = 256 * 1024;

/// An in-memory request body handed over in pieces, each taken by the connection counting
/// as progress. Its exact size is known, so the request carries `Content-Length` (the
/// gateway then streams it straight into arena memory).
///
/// Handing out the first piece says only that sending began, so it is not progress: a
/// body of one piece (a small write) keeps its call's deadline while it waits for the
/// answer. (Counted, a small write retried after a `503` waited a whole request timeout
/// from the retry: 4.0 s against a 3 s timeout in the chaos runs.)
pub(crate) struct TrackedBytes {
    rest: Bytes,
    progress: Arc<Progress>,
    /// Whether a piece was handed out already.
    started: bool,
}

impl TrackedBytes {
    pub(crate) fn new(bytes: Bytes, progress: Arc<Progress>) -> Self {
        Self {
            rest: bytes,
            progress,
            started: false,
        }
    }
}

impl Body for TrackedBytes {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.rest.is_empty() {
            return Poll::Ready(None);
        }
        let n = self.rest.len().min(PIECE);
        let piece = self.rest.split_to(n);
        if self.started {
            self.progress.bump(); // the piece before was taken
        }
        self.started = true;
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

/// A streaming request body whose chunks count as progress.
pub(crate) struct TrackedStream {
    inner: reqwest::Body,
    progress: Arc<Progress>,
}

impl TrackedStream {
    pub(crate) fn new(inner: reqwest::Body, progress: Arc<Progress>) -> Self {
        Self { inner, progress }
    }
}

impl Body for TrackedStream {
    type Data = Bytes;
    type Error = reqwest::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            self.progress.bump();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_future_that_keeps_progressing_is_not_cut_off() {
        let p = Progress::new();
        let p2 = Arc::clone(&p);
        let work = async move {
            for _ in 0..6 {
                tokio::time::sleep(Duration::from_millis(40)).await;
                p2.bump();
            }
            7
        };
        // 240 ms of work, never 100 ms without progress.
        assert_eq!(
            until_idle(work, &p, Duration::from_millis(100)).await,
            Some(7)
        );
    }

    #[tokio::test]
    async fn a_stalled_future_is_cut_off_after_the_idle_time() {
        let p = Progress::new();
        let t = Instant::now();
        let stalled = std::future::pending::<()>();
        assert_eq!(
            until_idle(stalled, &p, Duration::from_millis(150)).await,
            None
        );
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(150) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_body_of_one_piece_is_no_progress_and_a_longer_one_is() {
        use http_body_util::BodyExt;
        let small = Progress::new();
        let mut body = TrackedBytes::new(Bytes::from(vec![1u8; 1000]), Arc::clone(&small));
        while body.frame().await.is_some() {}
        assert!(!small.moved(), "a small write keeps its call's deadline");
        let large = Progress::new();
        let mut body = TrackedBytes::new(Bytes::from(vec![1u8; 2 * PIECE]), Arc::clone(&large));
        while body.frame().await.is_some() {}
        assert!(large.moved(), "a body whose first piece was taken moved");
    }

    #[test]
    fn tracked_bytes_keep_their_exact_size() {
        let body = TrackedBytes::new(Bytes::from(vec![7u8; 600_000]), Progress::new());
        assert_eq!(body.size_hint().exact(), Some(600_000));
    }
}
