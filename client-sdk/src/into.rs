//! Reads into memory the caller owns: [`Client::get_into`] fills the caller's buffer with
//! one copy (from the reader's registered scratch ring one-sided, from each body chunk
//! over HTTP) — or none one-sided when it is registered memory
//! ([`crate::RegisteredBuffer`]: the fabric writes the value in place) — validated like
//! every read. The buffer is handed over for the read and handed back with the result (the
//! one-sided part runs on the blocking pool, so it needs the buffer for as long as that
//! runs), the way `tokio-uring` does.

use std::any::Any;
use std::io::Cursor;
use std::time::Instant;

use futures_util::StreamExt;
use rasa_openapi::Descriptor;
use sha2::{Digest, Sha256};

use crate::client::Node;
use crate::fabric::FabricPool;
use crate::registered::RegisteredBuffer;
use crate::stream::Written;
use crate::{Client, Error, Fallback, FastPath, ReadPath};

/// [`FabricPool::hold`] at the member `c` (a [`crate::cluster::per_owner`] part).
async fn hold_at(c: Client, keys: Vec<&str>) -> Result<Vec<()>, Error> {
    c.inner.fabric.hold(&keys).await;
    Ok(Vec::new())
}

/// A result and the buffer that was handed over for it.
pub type BufResult<T, B> = (Result<T, Error>, B);

/// Reads of a batch in flight together (descriptor requests and HTTP reads overlap;
/// one-sided reads run on as many of the client's fabric endpoints).
const BATCH_CONCURRENCY: usize = 16;

impl Client {
    /// Reads `key`'s current version into the front of `buf` and hands `buf` back:
    /// one-sided when the policy allows and it works, else over HTTP. The value's length
    /// is in the returned [`Written`]. A [`RegisteredBuffer`] ([`Client::register`]) gets
    /// a one-sided read with no copy: the fabric writes the value straight into it. A buffer shorter than the value gives
    /// [`Error::BufferTooSmall`] (naming the length needed) before anything is read. On any
    /// error the buffer's contents are unspecified.
    pub async fn get_into<B: AsMut<[u8]> + Send + 'static>(
        &self,
        key: &str,
        buf: B,
    ) -> BufResult<Written, B> {
        crate::timeouts::call_scope(async {
            match self.inner.owner(key, true).await {
                Some(c) => c.inner.get_into(key, buf).await,
                None => self.inner.get_into(key, buf).await,
            }
        })
        .await
    }
}

impl Node {
    pub(crate) async fn get_into<B: AsMut<[u8]> + Send + 'static>(
        &self,
        key: &str,
        mut buf: B,
    ) -> BufResult<Written, B> {
        if self.fast_path != FastPath::Off && !self.fabric.known_unavailable() {
            let mut last = None;
            for attempt in 0..2 {
                let (d, deadline) = match self.fabric.descriptor(key, attempt > 0).await {
                    Ok(d) => d,
                    Err(e) => {
                        last = Some(e);
                        break;
                    }
                };
                let capacity = buf.as_mut().len() as u64;
                if d.length > capacity {
                    let needed = Some(d.length);
                    return (Err(Error::BufferTooSmall { needed, capacity }), buf);
                }
                let (r, b) = self.fabric.frame_into(&d, deadline, buf).await;
                buf = b;
                match r {
                    Ok(w) => return (Ok(w), buf),
                    Err(e) => {
                        self.fabric.descriptors.forget(key);
                        last = Some(e);
                        if self.fabric.rebuilding() {
                            break; // the endpoint is down for a while: don't wait for it
                        }
                    }
                }
            }
            let e = last.expect("at least one attempt");
            // The gateway answered no, or did not answer in time, or the policy requires
            // the fast path: HTTP would not do better (but for an object too large to
            // cache, which only HTTP serves).
            let done = matches!(e, Error::Problem(_) | Error::Timeout { .. }) && !e.http_only();
            if done || self.fast_path == FastPath::Required {
                return (Err(e), buf);
            }
            tracing::debug!(key, error = %e, "fast path failed; reading over HTTP");
        }
        let capacity = buf.as_mut().len() as u64;
        let mut out = Cursor::new(buf.as_mut());
        let r = self
            .http
            .http_to(key, &mut out, Some(capacity))
            .await
            .inspect(|w| self.counters.copied(w.length as usize))
            .map_err(|p| match p.error {
                // The body outgrew the buffer (its length was not said up front).
                Error::Output(_) if out.position() == capacity => Error::BufferTooSmall {
                    needed: None,
                    capacity,
                },
                error => error,
            });
        (r, buf)
    }
}

impl FabricPool {
    /// Asks for the descriptors of `keys` this pool does not hold, in one request (per
    /// [`crate::MAX_BATCH_VALUES`] keys), and holds them for the reads that follow. Best
    /// effort: a key it could not resolve is resolved again by its own read (and fails
    /// there with its own error).
    pub(crate) async fn hold(&self, keys: &[&str]) {
        if self.fast_path == FastPath::Off || self.known_unavailable() {
            return;
        }
        let missing = self.descriptors.missing(keys);
        if missing.len() < 2 {
            return; // a lone read asks for its own
        }
        for part in missing.chunks(crate::MAX_BATCH_VALUES) {
            let Ok((resolved, sent)) = self.http.descriptors().many_timed(part).await else {
                return;
            };
            let found = part.iter().zip(resolved).filter_map(|(k, r)| {
                let d = r.ok()?;
                let deadline = crate::descriptors::deadline_of(&d, sent);
                Some((*k, d, deadline))
            });
            self.descriptors.insert_many(found);
        }
    }

    /// The frame `d` names, one-sided, copied from the reader's scratch ring straight into
    /// `buf`, or landing in it when it is registered memory (on the blocking pool, which
    /// owns `buf` meanwhile).
    pub(crate) async fn frame_into<B: AsMut<[u8]> + Send + 'static>(
        &self,
        d: &Descriptor,
        deadline: Instant,
        buf: B,
    ) -> BufResult<Written, B> {
        let (frame, state) = match self.streams().reader_for(d, deadline).await {
            Ok(r) => r,
            Err(e) => return (Err(e), buf),
        };
        let verify = self.verify_sha256.then(|| d.sha256.clone());
        let most = self.read_timeout;
        let (r, buf) = self
            .on_reader(state, buf, move |reader, buf| {
                let digest_ok =
                    |v: &[u8]| verify.is_none_or(|want| hex::encode(Sha256::digest(v)) == want);
                if let Some(reg) = (buf as &mut dyn Any).downcast_mut::<RegisteredBuffer>() {
                    // Registered memory: the payload lands in place, no copy.
                    let timeout = deadline.saturating_duration_since(Instant::now()).min(most);
                    let n = reader.direct().read(&frame, &mut reg.landing, timeout)?;
                    return Ok((n, digest_ok(&reg[..n]), 0));
                }
                let dst = buf.as_mut();
                let mut at = 0usize;
                reader.read_to(&frame, deadline, &mut |piece| {
                    let end = at + piece.len();
                    let Some(room) = dst.get_mut(at..end) else {
                        return Err("the value outgrew the buffer".to_owned());
                    };
                    room.copy_from_slice(piece);
                    at = end;
                    Ok(())
                })?;
                Ok((at, digest_ok(&dst[..at]), at))
            })
            .await;
        let r = match r {
            Err(e) => Err(e),
            Ok((_, false, _)) => {
                self.counters.fallback(Fallback::Sha256Mismatch);
                Err(Error::FastPath(
                    "SHA-256 mismatch on a one-sided read".into(),
                ))
            }
            Ok((length, true, copied)) => {
                self.counters.read(ReadPath::Fabric);
                self.counters.copied(copied);
                Ok(Written {
                    length: length as u64,
                    version: d.version.clone(),
                    sha256: d.sha256.clone(),
                    content_type: d.content_type.clone(),
                    path: ReadPath::Fabric,
                })
            }
        };
        (r, buf)
    }
}

impl crate::Many<'_> {
    /// [`Client::get_into`] for several keys, a buffer each, several in flight at once.
    /// The descriptors this client does not hold yet are asked for first, together (one
    /// request per member), so a cold batch costs about what a warm one does. One result
    /// per key, in order, each with its buffer.
    pub async fn get_into<B: AsMut<[u8]> + Send + 'static>(
        &self,
        keys: &[&str],
        bufs: Vec<B>,
    ) -> Vec<BufResult<Written, B>> {
        assert_eq!(keys.len(), bufs.len(), "one buffer per key");
        if crate::cluster::per_owner(self.0, keys, hold_at)
            .await
            .is_none()
        {
            self.0.inner.fabric.hold(keys).await;
        }
        // Owned keys and clients: the batch's future stays `Send` for any caller.
        let owned: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        futures_util::stream::iter(owned.into_iter().zip(bufs))
            .map(|(k, b)| {
                let c = self.0.clone();
                async move { c.get_into(&k, b).await }
            })
            .buffered(BATCH_CONCURRENCY)
            .collect()
            .await
    }
}
