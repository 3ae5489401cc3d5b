//! A cold object on its way in: the chunks received from the origin so far, shared with
//! the requests that wait for it, so that they stream it as it arrives (Varnish-style)
//! instead of waiting for the whole object to be stored. The version is still published
//! only when complete and verified; a fetch that fails midway ends every stream with an
//! error (the client sees a body cut short, never a complete-looking wrong one).

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use futures_util::Stream;

/// How far a fill has come.
#[derive(Debug, Clone)]
enum Progress {
    Running,
    Done,
    Failed(String),
}

/// An object being filled from the origin.
#[derive(Debug)]
pub struct Filling {
    /// Its length (the origin's `Content-Length`).
    pub length: u64,
    /// Its media type.
    pub content_type: String,
    state: Mutex<(Vec<Bytes>, Progress)>,
    changed: tokio::sync::Notify,
}

impl Filling {
    /// A fill of `length` bytes of `content_type`, nothing received yet.
    pub fn new(length: u64, content_type: String) -> Self {
        Self {
            length,
            content_type,
            state: Mutex::new((Vec::new(), Progress::Running)),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// The next chunk arrived.
    pub(super) fn push(&self, chunk: Bytes) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .push(chunk);
        self.changed.notify_waiters();
    }

    /// The fill ended: complete (`Ok`) or not (the reason).
    pub(super) fn finish(&self, result: Result<(), String>) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.1 = match result {
            Ok(()) => Progress::Done,
            Err(why) => Progress::Failed(why),
        };
        drop(st);
        self.changed.notify_waiters();
    }

    /// The object from its first byte, as it arrives; an error if the fill fails.
    pub fn stream(self: std::sync::Arc<Self>) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
        futures_util::stream::unfold((self, 0usize), |(this, next)| async move {
            let step = this.next_chunk(next).await?;
            let after = if step.is_ok() { next + 1 } else { usize::MAX };
            Some((step, (this, after)))
        })
    }

    /// Chunk `next` once it has arrived; `None` at the end (and after an error).
    async fn next_chunk(&self, next: usize) -> Option<Result<Bytes, std::io::Error>> {
        if next == usize::MAX {
            return None;
        }
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before looking, so a chunk pushed in between is not missed.
            changed.as_mut().enable();
            {
                let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                match (st.0.get(next), &st.1) {
                    (Some(chunk), _) => return Some(Ok(chunk.clone())),
                    (None, Progress::Done) => return None,
                    (None, Progress::Failed(why)) => {
                        return Some(Err(std::io::Error::other(format!(
                            "the origin fetch failed midway: {why}"
                        ))))
                    }
                    (None, Progress::Running) => {}
                }
            }
            changed.await;
        }
    }
}
