//! Files in and out: `put_file` and `get_file` streamed (memory bounded by a chunk, not
//! the file), a Python callable told the bytes moved so far (the SDK's
//! [`FileTransfer`] counts them), and `get_file` into a file object (its `write` called
//! a piece at a time).

use std::pin::Pin;
use std::task::{Context, Poll};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rasa_client::{Client as Sdk, FileTransfer};

use crate::errors::IntoPy;
use crate::types::Descriptor;

/// A transfer through `sdk` that tells `progress(done)`, called with the GIL taken; an
/// exception it raises is reported as unraisable (printed) and the transfer goes on.
fn transfer(sdk: &Sdk, progress: Option<Py<PyAny>>) -> FileTransfer<'_> {
    let t = FileTransfer::new(sdk);
    match progress {
        None => t,
        Some(f) => t.on_progress(move |done| {
            Python::attach(|py| {
                if let Err(e) = f.call1(py, (done,)) {
                    e.write_unraisable(py, Some(f.bind(py)));
                }
            })
        }),
    }
}

/// `put_file`: the file streamed from disk (memory does not grow with it).
pub(crate) async fn put_file(
    sdk: Sdk,
    key: String,
    path: std::path::PathBuf,
    content_type: Option<String>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Descriptor> {
    transfer(&sdk, progress)
        .put_file(&key, &path, content_type.as_deref())
        .await
        .map(Descriptor)
        .py()
}

/// `get_file`: the value streamed into a temporary file next to `path`, renamed into
/// place once whole and validated; the bytes written.
pub(crate) async fn get_file(
    sdk: Sdk,
    key: String,
    path: std::path::PathBuf,
    progress: Option<Py<PyAny>>,
) -> PyResult<u64> {
    transfer(&sdk, progress)
        .get_to_file(&key, &path)
        .await
        .map(|w| w.length)
        .py()
}

/// `get_file` into a file object: the value streamed to its `write`; the bytes written.
pub(crate) async fn get_to_writer(
    sdk: Sdk,
    key: String,
    file: Py<PyAny>,
    progress: Option<Py<PyAny>>,
) -> PyResult<u64> {
    transfer(&sdk, progress)
        .get_to(&key, &mut PyWriter { file })
        .await
        .map(|w| w.length)
        .py()
}

/// A Python file object as an `AsyncWrite`: each piece handed to its `write` (the GIL
/// taken for it), which must take it whole (as a buffered or raw binary file does).
struct PyWriter {
    file: Py<PyAny>,
}

impl tokio::io::AsyncWrite for PyWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let wrote = Python::attach(|py| -> PyResult<usize> {
            let n = self
                .file
                .call_method1(py, "write", (PyBytes::new(py, buf),))?;
            Ok(n.extract::<Option<usize>>(py)?.unwrap_or(buf.len()))
        });
        let n =
            wrote.map_err(|e| std::io::Error::other(format!("the file object's write: {e}")))?;
        if n != buf.len() {
            return Poll::Ready(Err(std::io::Error::other(format!(
                "the file object's write took {n} of {} bytes",
                buf.len()
            ))));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
