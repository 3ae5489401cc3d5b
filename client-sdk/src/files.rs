//! Files in and out with progress: [`FileTransfer`] is [`Client::put_file`],
//! [`Client::get_to_file`] and [`Client::get_to`] with a callback told the bytes moved so
//! far, for a progress bar over a multi-GB upload or download. Memory does not grow with
//! the file either way.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rasa_openapi::Descriptor;
use tokio::io::AsyncWrite;

use crate::{Client, Error, Written};

/// Told the bytes moved so far (read from the file for a put, written to it for a get),
/// at most about once a MiB and once at the end. A transfer that starts over (the next
/// member after an owner that did not answer, HTTP after a failed one-sided read) counts
/// from 0 again.
pub(crate) type OnProgress = Arc<dyn Fn(u64) + Send + Sync>;

/// Bytes between two reports.
pub(crate) const REPORT_EVERY: u64 = 1 << 20;

/// A file transfer through `client`, reporting its progress.
///
/// ```no_run
/// # async fn demo(client: &rasa_client::Client) -> Result<(), rasa_client::Error> {
/// use rasa_client::FileTransfer;
/// let t = FileTransfer::new(client).on_progress(|n| eprintln!("{n} bytes"));
/// t.put_file("weights/model.safetensors", "model.safetensors", None).await?;
/// t.get_to_file("weights/model.safetensors", "/tmp/copy.safetensors").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FileTransfer<'a> {
    client: &'a Client,
    progress: Option<OnProgress>,
}

impl<'a> FileTransfer<'a> {
    /// A transfer through `client`, reporting to nobody yet.
    pub fn new(client: &'a Client) -> Self {
        Self {
            client,
            progress: None,
        }
    }

    /// Reports the bytes moved so far to `f`.
    pub fn on_progress(mut self, f: impl Fn(u64) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }

    /// [`Client::put_file`], reporting progress.
    pub async fn put_file(
        &self,
        key: &str,
        path: impl AsRef<std::path::Path>,
        content_type: Option<&str>,
    ) -> Result<Descriptor, Error> {
        let (path, on) = (path.as_ref(), self.progress.as_ref());
        crate::cluster::on_owner_write(self.client, key, |c| async move {
            c.inner.put_file(key, path, content_type, on).await
        })
        .await
    }

    /// [`Client::get_to_file`], reporting progress.
    pub async fn get_to_file(
        &self,
        key: &str,
        path: impl AsRef<std::path::Path>,
    ) -> Result<Written, Error> {
        let (path, on) = (path.as_ref(), self.progress.as_ref());
        crate::cluster::on_owner(self.client, key, |c| async move {
            c.inner.get_to_file(key, path, on).await
        })
        .await
    }

    /// [`Client::get_to`], reporting progress: the bytes written to `out` so far.
    pub async fn get_to<W: AsyncWrite + Unpin + ?Sized>(
        &self,
        key: &str,
        out: &mut W,
    ) -> Result<Written, Error> {
        let mut out = Counted::new(out, self.progress.as_ref());
        let w = self.client.get_to(key, &mut out).await?;
        out.tell();
        Ok(w)
    }
}

/// Counts what goes through it, at most once a MiB to the callback.
pub(crate) struct Counted<'p, W> {
    pub(crate) inner: W,
    on: Option<&'p OnProgress>,
    done: u64,
    told: u64,
}

impl<'p, W> Counted<'p, W> {
    pub(crate) fn new(inner: W, on: Option<&'p OnProgress>) -> Self {
        Self {
            inner,
            on,
            done: 0,
            told: 0,
        }
    }

    /// Counts from 0 again (the output was truncated to start over).
    pub(crate) fn restart(&mut self) {
        self.done = 0;
        self.told = 0;
        self.tell();
    }

    /// Reports the count now (the end of a transfer).
    pub(crate) fn tell(&mut self) {
        if let Some(f) = self.on {
            f(self.done);
        }
        self.told = self.done;
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counted<'_, W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.done += n as u64;
            if self.done - self.told >= REPORT_EVERY {
                self.tell();
            }
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
