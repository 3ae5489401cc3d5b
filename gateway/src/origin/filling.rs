//! A cold object on its way in: the chunks received from the origin so far, shared with
//! the requests that wait for it, so that they stream it as it arrives (Varnish-style)
//! instead of waiting for the whole object to be stored. The version is still published
//! only when complete and verified; a fetch that fails midway ends every stream with an
//! error (the client sees a body cut short, never a complete-looking wrong one).

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures_util::Stream;

/// What a read-through lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// A stored version.
    Stored(Arc<crate::store::StoredVersion>),
    /// An object being fetched from the origin, to stream as it arrives.
    Filling(Arc<Filling>),
    /// Neither here nor at the origin.
    Missing,
}

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
    /// The chunks so far, how far the fill has come, and the bytes received.
    state: Mutex<(Vec<Bytes>, Progress, u64)>,
    changed: tokio::sync::Notify,
}

impl Filling {
    /// A fill of `length` bytes of `content_type`, nothing received yet.
    pub fn new(length: u64, content_type: String) -> Self {
        Self {
            length,
            content_type,
            state: Mutex::new((Vec::new(), Progress::Running, 0)),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// The next chunk arrived.
    pub(super) fn push(&self, chunk: Bytes) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.2 += chunk.len() as u64;
        st.0.push(chunk);
        drop(st);
        self.changed.notify_waiters();
    }

    /// Bytes received so far (from the object's first byte).
    pub fn received(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).2
    }

    /// The fill ended: complete (`Ok`) or not (the reason).
    pub(super) fn finish(&self, result: Result<(), &super::FetchError>) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.1 = match result {
            Ok(()) => Progress::Done,
            Err(why) => Progress::Failed(why.to_string()),
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

    /// Bytes `start..end` of the object as they arrive: a range read that joins the fill
    /// rather than asking the origin again. Ends with an error if the fill fails.
    pub fn stream_range(
        self: std::sync::Arc<Self>,
        start: u64,
        end: u64,
    ) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
        futures_util::stream::unfold(
            (self, 0usize, 0u64),
            move |(this, mut next, mut at)| async move {
                while at < end {
                    let chunk = match this.next_chunk(next).await? {
                        Ok(chunk) => chunk,
                        Err(e) => return Some((Err(e), (this, usize::MAX, at))),
                    };
                    let (from, len) = (at, chunk.len() as u64);
                    next += 1;
                    at += len;
                    let (lo, hi) = (start.max(from), end.min(from + len));
                    if lo < hi {
                        let part = chunk.slice((lo - from) as usize..(hi - from) as usize);
                        return Some((Ok(part), (this, next, at)));
                    }
                }
                None
            },
        )
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures_util::StreamExt;

    use super::*;

    async fn collect(
        s: impl Stream<Item = Result<Bytes, std::io::Error>>,
    ) -> Result<Vec<u8>, std::io::Error> {
        let mut out = Vec::new();
        futures_util::pin_mut!(s);
        while let Some(part) = s.next().await {
            out.extend_from_slice(&part?);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn a_range_is_cut_from_the_chunks_across_their_boundaries() {
        let all: Vec<u8> = (0..100u8).collect();
        let f = Arc::new(Filling::new(100, "x/y".into()));
        for c in all.chunks(7) {
            f.push(Bytes::copy_from_slice(c));
        }
        assert_eq!(f.received(), 100);
        f.finish(Ok(()));
        for (start, end) in [(0, 100), (0, 1), (6, 8), (7, 14), (13, 99), (99, 100)] {
            let got = collect(Arc::clone(&f).stream_range(start, end)).await;
            assert_eq!(
                got.unwrap(),
                all[start as usize..end as usize],
                "{start}..{end}"
            );
        }
    }

    #[tokio::test]
    async fn a_range_waits_for_its_bytes_and_fails_with_the_fill() {
        let f = Arc::new(Filling::new(30, "x/y".into()));
        f.push(Bytes::from_static(&[1; 10]));
        let reader = tokio::spawn(collect(Arc::clone(&f).stream_range(5, 25)));
        f.push(Bytes::from_static(&[2; 10]));
        f.push(Bytes::from_static(&[3; 10]));
        f.finish(Ok(()));
        let mut want = vec![1; 5];
        want.extend([2; 10]);
        want.extend([3; 5]);
        assert_eq!(reader.await.unwrap().unwrap(), want);

        let f = Arc::new(Filling::new(30, "x/y".into()));
        f.push(Bytes::from_static(&[1; 10]));
        let reader = tokio::spawn(collect(Arc::clone(&f).stream_range(5, 25)));
        let reset = crate::origin::OriginError::Failed("origin reset".into());
        f.finish(Err(&crate::origin::FetchError::Origin(reset)));
        let err = reader.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("origin reset"), "{err}");
    }
}
