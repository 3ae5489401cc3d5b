//! Streaming reads: a value of any size written to the caller's output as it arrives, in
//! memory that does not grow with the value. One-sided reads go through the reader's
//! fixed ring of registered pieces ([`rasa_fastpath::reader::Reader::read_to`]); HTTP
//! bodies are written chunk by chunk while they are checked (`verify.rs`). Either way the last
//! bytes are written only once the whole value has been validated, so an output that
//! receives every byte received the right ones.

use std::path::Path;
use std::time::Instant;

use bytes::Bytes;
use rasa_fastpath::reader::RemoteFrame;
use rasa_openapi::Descriptor;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::OwnedMutexGuard;

use crate::client::Node;
use crate::descriptors::{deadline_of, remote_frame};
use crate::fabric::{FabricPool, FabricState};
use crate::files::{Counted, OnProgress};
use crate::http::Transport;
use crate::timeouts::TimeoutKind;
use crate::verify::BodyCheck;
use crate::{Error, Fallback, FastPath, ReadPath};

/// A fabric pool's streaming reads ([`FabricPool::streams`]): a frame through the reader's
/// ring into the caller's output.
#[derive(Clone, Copy)]
pub(crate) struct Streams<'a>(&'a FabricPool);

impl FabricPool {
    /// Its streaming reads.
    pub(crate) fn streams(&self) -> Streams<'_> {
        Streams(self)
    }
}

/// Bytes gathered before each write to a file (a tokio file writes on the blocking pool).
const WRITE_BUFFER: usize = 1 << 20;

/// What a streaming read wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Bytes written (the value's length).
    pub length: u64,
    /// The version read.
    pub version: String,
    /// The value's SHA-256 as the gateway names it (lowercase hex).
    pub sha256: String,
    /// Its media type.
    pub content_type: String,
    /// How the bytes travelled.
    pub path: ReadPath,
}

/// A streaming read that failed, after writing `written` bytes.
pub(crate) struct Partial {
    pub(crate) error: Error,
    pub(crate) written: u64,
}

impl From<Error> for Partial {
    fn from(error: Error) -> Self {
        Partial { error, written: 0 }
    }
}

impl Partial {
    /// The error as the caller sees it: when bytes were written, it says the output is
    /// incomplete.
    fn into_error(self) -> Error {
        if self.written == 0 {
            return self.error;
        }
        Error::Incomplete {
            written: self.written,
            cause: Box::new(self.error),
        }
    }
}

impl Node {
    pub(crate) async fn get_to<W: AsyncWrite + Unpin + ?Sized>(
        &self,
        key: &str,
        out: &mut W,
    ) -> Result<Written, Error> {
        if self.fast_path != FastPath::Off && !self.fabric.known_unavailable() {
            match self.fabric.streams().fabric_to(key, out).await {
                Ok(w) => return Ok(w),
                Err(p) if p.written > 0 || self.final_failure(&p.error) => {
                    return Err(p.into_error())
                }
                Err(p) => {
                    tracing::debug!(key, error = %p.error, "fast path failed; reading over HTTP")
                }
            }
        }
        self.http
            .http_to(key, out, None)
            .await
            .map_err(Partial::into_error)
    }

    pub(crate) async fn get_to_file(
        &self,
        key: &str,
        path: &Path,
        on: Option<&OnProgress>,
    ) -> Result<Written, Error> {
        // A device, pipe or socket (`-o /dev/null`) is written as it is: it cannot be
        // replaced by renaming, nor rewound.
        let target = match tokio::fs::metadata(path).await {
            Ok(m) if !m.is_file() => {
                let out = tokio::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .await
                    .map_err(|e| Error::Output(format!("opening {}: {e}", path.display())))?;
                // A tokio file writes on the blocking pool: one hop per MiB, not per chunk.
                let mut out =
                    Counted::new(tokio::io::BufWriter::with_capacity(WRITE_BUFFER, out), on);
                let w = self.get_to(key, &mut out).await?;
                out.tell();
                return Ok(w);
            }
            // Through a symbolic link: replace the file it points to, not the link.
            Ok(_) => tokio::fs::canonicalize(path)
                .await
                .unwrap_or_else(|_| path.to_owned()),
            Err(_) => path.to_owned(),
        };
        let path = target.as_path();
        let name = path
            .file_name()
            .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
        let tmp = path.with_file_name(format!(".{name}.rasa-partial.{}", std::process::id()));
        let io =
            |what: &str, e: std::io::Error| Error::Output(format!("{what} {}: {e}", tmp.display()));
        let mut file = Counted::new(
            tokio::io::BufWriter::with_capacity(
                WRITE_BUFFER,
                tokio::fs::File::create(&tmp)
                    .await
                    .map_err(|e| io("creating", e))?,
            ),
            on,
        );
        let result = async {
            if self.fast_path != FastPath::Off && !self.fabric.known_unavailable() {
                match self.fabric.streams().fabric_to(key, &mut file).await {
                    Ok(w) => return Ok(w),
                    Err(p) if self.final_failure(&p.error) => return Err(p.into_error()),
                    Err(p) => {
                        tracing::debug!(key, error = %p.error, "fast path failed; reading over HTTP");
                        if p.written > 0 {
                            // Start again from nothing: the file never holds a mix.
                            file.flush().await.map_err(|e| io("writing", e))?;
                            file.inner.get_mut().set_len(0).await.map_err(|e| io("truncating", e))?;
                            tokio::io::AsyncSeekExt::rewind(file.inner.get_mut())
                                .await
                                .map_err(|e| io("rewinding", e))?;
                            file.restart();
                        }
                    }
                }
            }
            self.http.http_to(key, &mut file, None).await.map_err(Partial::into_error)
        }
        .await;
        if result.is_ok() {
            file.tell();
        }
        let done = match result {
            Ok(w) => file
                .inner
                .get_mut()
                .sync_all()
                .await
                .map_err(|e| io("syncing", e))
                .and(tokio::fs::rename(&tmp, path).await.map_err(|e| {
                    Error::Output(format!(
                        "renaming {} to {}: {e}",
                        tmp.display(),
                        path.display()
                    ))
                }))
                .map(|()| w),
            Err(e) => Err(e),
        };
        if done.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        done
    }

    /// Whether a failed one-sided read must not fall back to HTTP: the gateway said no or
    /// did not answer (HTTP would not do better), or the policy requires the fast path.
    fn final_failure(&self, e: &Error) -> bool {
        (matches!(
            e,
            Error::Problem(_) | Error::Timeout { .. } | Error::Output(_)
        ) && !e.http_only())
            || self.fast_path == FastPath::Required
    }
}

impl Transport {
    /// `key` over HTTP into `out`, chunk by chunk while checking ([`BodyCheck`]: the
    /// frame checksum, or the SHA-256); the last chunk is written only once the body is
    /// known to be the version the gateway named.
    /// With `room`, a value longer than that fails before any byte is written
    /// ([`Error::BufferTooSmall`]).
    pub(crate) async fn http_to<W: AsyncWrite + Unpin + ?Sized>(
        &self,
        key: &str,
        out: &mut W,
        room: Option<u64>,
    ) -> Result<Written, Partial> {
        let mut resp = self.send(self.http.get(self.url("objects", key)?)).await?;
        if !resp.status().is_success() {
            return Err(self.problem(resp).await.into());
        }
        if let (Some(capacity), Some(needed)) = (room, resp.content_length()) {
            if needed > capacity {
                return Err(Error::BufferTooSmall {
                    needed: Some(needed),
                    capacity,
                }
                .into());
            }
        }
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let version = header(rasa_openapi::VERSION_HEADER);
        let sha256 = header("etag").trim_matches('"').to_owned();
        let content_type = header("content-type");
        let mut check = BodyCheck::new(resp.headers(), key, self.verify_sha256);
        let idle = self.request_timeout;
        let mut held: Option<Bytes> = None;
        let mut written = 0u64;
        let mut received = 0u64;
        let fail = |error: Error, written: u64| Partial { error, written };
        loop {
            let chunk = match tokio::time::timeout(idle, resp.chunk()).await {
                Err(_) => {
                    return Err(fail(
                        crate::timeouts::timed_out(&self.endpoint, TimeoutKind::Request, idle),
                        written,
                    ))
                }
                Ok(Err(e)) => return Err(fail(self.http_error(e), written)),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(c))) => c,
            };
            check.feed(&chunk).await;
            received += chunk.len() as u64;
            if let Some(previous) = held.replace(chunk) {
                out.write_all(&previous)
                    .await
                    .map_err(|e| fail(Error::Output(e.to_string()), written))?;
                written += previous.len() as u64;
            }
        }
        check.finish(received).await.map_err(|e| fail(e, written))?;
        if let Some(last) = held {
            out.write_all(&last)
                .await
                .map_err(|e| fail(Error::Output(e.to_string()), written))?;
            written += last.len() as u64;
        }
        out.flush()
            .await
            .map_err(|e| fail(Error::Output(e.to_string()), written))?;
        self.counters.read(ReadPath::Http);
        Ok(Written {
            length: written,
            version,
            sha256,
            content_type,
            path: ReadPath::Http,
        })
    }
}

impl Streams<'_> {
    /// `key` one-sided into `out`; a failure before any byte was written gets one more try
    /// with a fresh descriptor.
    async fn fabric_to<W: AsyncWrite + Unpin + ?Sized>(
        &self,
        key: &str,
        out: &mut W,
    ) -> Result<Written, Partial> {
        let mut last = None;
        for attempt in 0..2 {
            let (d, deadline) = self.0.descriptor(key, attempt > 0).await?;
            match self.frame_to(&d, deadline, out).await {
                Ok(w) => return Ok(w),
                Err(p) => {
                    self.0.descriptors.forget(key);
                    let stop = p.written > 0 || self.0.rebuilding();
                    last = Some(p);
                    if stop {
                        break;
                    }
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }

    pub(crate) async fn read_descriptor_to<W: AsyncWrite + Unpin + ?Sized>(
        &self,
        d: &Descriptor,
        sent: Instant,
        out: &mut W,
    ) -> Result<Written, Error> {
        self.frame_to(d, deadline_of(d, sent), out)
            .await
            .map_err(Partial::into_error)
    }

    /// The frame `d` names, one-sided into `out`: the reader runs on the blocking pool and
    /// hands pieces over a small channel, so at most a few pieces are in memory at once.
    async fn frame_to<W: AsyncWrite + Unpin + ?Sized>(
        &self,
        d: &Descriptor,
        deadline: Instant,
        out: &mut W,
    ) -> Result<Written, Partial> {
        let (frame, mut state) = self.reader_for(d, deadline).await?;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(2);
        let task = tokio::task::spawn_blocking(move || {
            let r = match &mut *state {
                FabricState::Ready { reader, .. } => reader.read_to(&frame, deadline, &mut |b| {
                    tx.blocking_send(Bytes::copy_from_slice(b))
                        .map_err(|_| "the output stopped taking bytes".to_owned())
                }),
                _ => unreachable!("connected above"),
            };
            (state, r)
        });
        let mut written = 0u64;
        let mut write_error = None;
        while let Some(chunk) = rx.recv().await {
            if let Err(e) = out.write_all(&chunk).await {
                write_error = Some(e);
                break;
            }
            written += chunk.len() as u64;
        }
        drop(rx); // a reader still sending gets an error and stops
        let (state, result) = task.await.map_err(|e| Partial {
            error: Error::FastPath(format!("read task failed: {e}")),
            written,
        })?;
        if let Some(e) = write_error {
            return Err(Partial {
                error: Error::Output(e.to_string()),
                written,
            });
        }
        match result {
            Ok(()) => {
                drop(state);
                out.flush().await.map_err(|e| Partial {
                    error: Error::Output(e.to_string()),
                    written,
                })?;
                self.0.counters.read(ReadPath::Fabric);
                Ok(Written {
                    length: written,
                    version: d.version.clone(),
                    sha256: d.sha256.clone(),
                    content_type: d.content_type.clone(),
                    path: ReadPath::Fabric,
                })
            }
            Err(e) => {
                self.0.after_failure(&e, state);
                Err(Partial {
                    error: Error::FastPath(e.to_string()),
                    written,
                })
            }
        }
    }

    /// What a one-sided read of `d` needs: its remote frame and the connected reader
    /// (locked), unless the fast path is unavailable, being rebuilt, or the lease is over.
    pub(crate) async fn reader_for(
        &self,
        d: &Descriptor,
        deadline: Instant,
    ) -> Result<(RemoteFrame, OwnedMutexGuard<FabricState>), Error> {
        if remote_frame(d)?.is_none() {
            self.0.counters.fallback(Fallback::Unavailable);
            return Err(Error::FastPath(crate::descriptors::why_http_only(d)));
        }
        let state = self.0.ready_endpoint(deadline).await?;
        let frame = crate::fabric::frames_on(&state, std::iter::once(d))?.remove(0);
        Ok((frame, state))
    }
}
