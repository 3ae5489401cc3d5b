//! `Client` (blocking; the GIL is released while it waits) and `AsyncClient` (coroutines
//! on the SDK's runtime): the same methods, written once ([`methods!`]) over the futures
//! of [`crate::ops`]; only how a call is awaited differs.

use std::future::Future;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::IntoPyObjectExt;

use crate::buffer::{In, Out};
use crate::core::{Config, Core};
use crate::files;
use crate::ops;
use crate::registered::RegisteredBuffer;
use crate::runtime::{coroutine, wait, within};

/// A client of a Rasa gateway (or a cluster of them) whose calls block, with the GIL
/// released while they wait.
#[pyclass(subclass, frozen, module = "rasa_client")]
pub(crate) struct Client {
    core: Core,
}

/// A client of a Rasa gateway (or a cluster of them) whose calls are coroutines.
#[pyclass(subclass, frozen, module = "rasa_client")]
pub(crate) struct AsyncClient {
    core: Core,
}

/// Runs `fut` to its end (or its `limit`) with the GIL released.
fn blocking<'py, F, T>(
    py: Python<'py>,
    limit: Option<Duration>,
    fut: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send,
    T: IntoPyObject<'py> + Send,
{
    wait(py, within(limit, fut))??.into_bound_py_any(py)
}

/// `fut` as an awaitable that ends by its `limit`.
fn awaitable<'py, F, T>(
    py: Python<'py>,
    limit: Option<Duration>,
    fut: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    coroutine(py, within(limit, fut))
}

macro_rules! methods {
    ($class:ident, $run:ident $(, { $($only:tt)* })?) => {
        #[pymethods]
        impl $class {
            $($($only)*)?

            #[new]
            #[pyo3(signature = (
                                                endpoint = "http://127.0.0.1:8080".to_owned(),
                                                *,
                                                fast_path = "auto",
                                                token = None,
                                                ca_file = None,
                                                timeout = 30.0,
                                                read_timeout = 5.0,
                                                connect_timeout = 3.0,
                                                verify_sha256 = false,
                                                fabric_addr = None,
                                                fabric_provider = None,
                                                retries_when_busy = 2,
                                                discover_cluster = true,
                                                namespace = None,
                                                lease_puts = None,
                                            ))]
            #[allow(clippy::too_many_arguments)]
            fn new(
                endpoint: String,
                fast_path: &str,
                token: Option<String>,
                ca_file: Option<std::path::PathBuf>,
                timeout: Option<f64>,
                read_timeout: f64,
                connect_timeout: f64,
                verify_sha256: bool,
                fabric_addr: Option<String>,
                fabric_provider: Option<String>,
                retries_when_busy: u32,
                discover_cluster: bool,
                namespace: Option<String>,
                lease_puts: Option<bool>,
            ) -> PyResult<Self> {
                let config = Config {
                    endpoint,
                    fast_path: fast_path.to_owned(),
                    token,
                    ca_file: ca_file.map(|p| p.to_string_lossy().into_owned()),
                    timeout,
                    read_timeout,
                    connect_timeout,
                    verify_sha256,
                    fabric_addr,
                    fabric_provider,
                    retries_when_busy,
                    discover_cluster,
                    namespace,
                    lease_puts,
                }
                .checked()?;
                Ok(Self {
                    core: Core::new(config),
                })
            }

            /// Stores `data` (any bytes-like object) as a new version of `key`; returns
            /// its descriptor. `if_match=etag` stores only if the current version has that
            /// ETag, `if_none_match="*"` only if the key has none; otherwise nothing is
            /// stored and `PreconditionFailed` is raised.
            #[pyo3(signature = (key, data, content_type = None, *, if_match = None, if_none_match = None))]
            #[allow(clippy::too_many_arguments)]
            fn put<'py>(
                &self,
                py: Python<'py>,
                key: String,
                data: &Bound<'py, PyAny>,
                content_type: Option<String>,
                if_match: Option<String>,
                if_none_match: Option<String>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let data = In::bytes(data)?;
                match crate::core::condition(if_match, if_none_match)? {
                    Some(c) => $run(py, self.core.limit(), ops::put_if(self.core.sdk()?, key, data, content_type, c)),
                    None => $run(py, self.core.limit(), ops::put(self.core.sdk()?, key, data, content_type)),
                }
            }

            /// Reads `key`'s current version (one-sided when possible) as an `Object`;
            /// with `version=`, that version while the gateway still holds it.
            #[pyo3(signature = (key, *, version = None))]
            fn get<'py>(
                &self,
                py: Python<'py>,
                key: String,
                version: Option<String>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::get(self.core.sdk()?, key, version))
            }

            /// Reads bytes `start` (inclusive) to `end` (exclusive) of `key` into the
            /// front of the writable buffer `out`; returns the bytes written (fewer when
            /// the value ends first). `BufferTooSmall` when the range does not fit.
            fn get_range_into<'py>(
                &self,
                py: Python<'py>,
                key: String,
                start: u64,
                end: u64,
                out: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let out = Out::of(out)?;
                $run(py, self.core.limit(), ops::get_range_into(self.core.sdk()?, key, start, end, out))
            }

            /// Reads `key`'s current version into the writable buffer `out`; returns the
            /// number of bytes written. `BufferTooSmall` (with `.needed`) when it does not fit.
            fn get_into<'py>(
                &self,
                py: Python<'py>,
                key: String,
                out: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                if let Ok(reg) = out.cast::<RegisteredBuffer>() {
                    let reg = reg.clone().unbind();
                    return $run(py, self.core.limit(), ops::get_registered(self.core.sdk()?, key, reg));
                }
                let out = Out::of(out)?;
                $run(py, self.core.limit(), ops::get_into(self.core.sdk()?, key, out))
            }

            /// Memory that one-sided reads through `get_into` (and `get_many_into` with
            /// offsets) land in with no copy: a new buffer of `capacity` bytes, or the
            /// caller's own writable, contiguous buffer (a numpy array, a `bytearray`),
            /// kept alive (and unresizable) by the registration. Reuse it read after read.
            fn register(&self, capacity: &Bound<'_, PyAny>) -> PyResult<RegisteredBuffer> {
                RegisteredBuffer::new(&self.core.sdk()?, capacity)
            }

            /// Reads several keys: one result per key, `None` for a miss, the exception
            /// for another failure.
            fn get_many<'py>(
                &self,
                py: Python<'py>,
                keys: Vec<String>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::get_many(self.core.sdk()?, keys))
            }

            /// `get_many`, with each miss as the `NotFound` that `get` raises (returned in
            /// its place): how `AsyncClient.get` reads what one event-loop turn asked for.
            fn _get_batch<'py>(
                &self,
                py: Python<'py>,
                keys: Vec<String>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::get_batch(self.core.sdk()?, keys))
            }

            /// Reads several keys into caller memory: `out` is a buffer per key, or one
            /// buffer with `offsets` (where each key's value starts; each region runs to
            /// the next offset, or for `lengths` bytes when given, in any order). One
            /// result per key: bytes written, `None` for a miss, or the exception.
            #[pyo3(signature = (keys, out, offsets = None, lengths = None))]
            fn get_many_into<'py>(
                &self,
                py: Python<'py>,
                keys: Vec<String>,
                out: &Bound<'py, PyAny>,
                offsets: Option<Vec<usize>>,
                lengths: Option<Vec<usize>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                if let Ok(reg) = out.cast::<RegisteredBuffer>() {
                    let Some(offsets) = offsets else {
                        return Err(pyo3::exceptions::PyValueError::new_err(
                            "one buffer for several keys needs offsets=[...] (where each key's value starts)",
                        ));
                    };
                    let spans = ops::spans(keys.len(), reg.get().len(), offsets, lengths)?;
                    let reg = reg.clone().unbind();
                    return $run(py, self.core.limit(), ops::get_many_registered(self.core.sdk()?, keys, reg, spans));
                }
                let outs = ops::regions(keys.len(), out, offsets, lengths)?;
                $run(py, self.core.limit(), ops::get_many_into(self.core.sdk()?, keys, outs))
            }

            /// Reads bytes `start` (inclusive) to `end` (exclusive) of `key`.
            fn get_range<'py>(
                &self,
                py: Python<'py>,
                key: String,
                start: u64,
                end: u64,
            ) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::get_range(self.core.sdk()?, key, start, end))
            }

            /// The metadata of `key`'s current version (`Meta`).
            fn head<'py>(&self, py: Python<'py>, key: String) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::head(self.core.sdk()?, key))
            }

            /// Whether `key` has a current version.
            fn exists<'py>(&self, py: Python<'py>, key: String) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::exists(self.core.sdk()?, key))
            }

            /// A page of keys starting with `prefix` after `after` (`ObjectList`).
            #[pyo3(signature = (prefix = String::new(), *, after = None, limit = 1000))]
            fn list<'py>(
                &self,
                py: Python<'py>,
                prefix: String,
                after: Option<String>,
                limit: usize,
            ) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::list(self.core.sdk()?, prefix, after, limit))
            }

            /// Stores each `(key, data)` as its own version, in one request per batch
            /// (up to 1000 values, 64 MiB); one result per item, in order: its
            /// descriptor, or the exception that kept that value alone from being stored.
            fn _put_many<'py>(
                &self,
                py: Python<'py>,
                items: Vec<(String, Bound<'py, PyAny>)>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let items = items
                    .into_iter()
                    .map(|(k, v)| Ok((k, In::bytes(&v)?)))
                    .collect::<PyResult<Vec<_>>>()?;
                $run(py, self.core.limit(), ops::put_many(self.core.sdk()?, items))
            }

            /// Deletes each key, in one request per batch; one result per key, in
            /// order: `None`, or the exception that kept that key alone from being deleted.
            fn _delete_many<'py>(
                &self,
                py: Python<'py>,
                keys: Vec<String>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::delete_many(self.core.sdk()?, keys))
            }

            /// Whether each key has a current version (the gateway's index: memory and
            /// disk tier, no value read), in one request per batch; one result per key,
            /// in order: a bool, or the exception of a key that could not be checked.
            fn _exists_many<'py>(
                &self,
                py: Python<'py>,
                keys: Vec<String>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::exists_many(self.core.sdk()?, keys))
            }

            /// Stores the file at `path` as a new version of `key`, streamed from disk
            /// (memory does not grow with the file); its descriptor. `progress(done)` is
            /// told the bytes read so far (about once a MiB).
            #[pyo3(signature = (key, path, *, content_type = None, progress = None))]
            fn put_file<'py>(
                &self,
                py: Python<'py>,
                key: String,
                path: std::path::PathBuf,
                content_type: Option<String>,
                progress: Option<Py<PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), files::put_file(self.core.sdk()?, key, path, content_type, progress))
            }

            /// Writes `key`'s current version to the file `path`, streamed (memory does
            /// not grow with the value): under a temporary name next to it, renamed into
            /// place once whole and validated, so `path` never holds a partial value.
            /// Returns the bytes written; `progress(done)` is told them as they go.
            #[pyo3(signature = (key, path, *, progress = None))]
            fn _get_file<'py>(
                &self,
                py: Python<'py>,
                key: String,
                path: std::path::PathBuf,
                progress: Option<Py<PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), files::get_file(self.core.sdk()?, key, path, progress))
            }

            /// Streams `key`'s current version to the file object `file` (its `write`, a
            /// piece at a time); the bytes written.
            #[pyo3(signature = (key, file, *, progress = None))]
            fn _get_to_writer<'py>(
                &self,
                py: Python<'py>,
                key: String,
                file: Py<PyAny>,
                progress: Option<Py<PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), files::get_to_writer(self.core.sdk()?, key, file, progress))
            }

            /// Deletes `key` (no error when it is absent).
            fn delete<'py>(&self, py: Python<'py>, key: String) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::delete(self.core.sdk()?, key))
            }

            /// The descriptor of `key`'s current version (where to read it one-sided).
            fn resolve<'py>(&self, py: Python<'py>, key: String) -> PyResult<Bound<'py, PyAny>> {
                $run(py, self.core.limit(), ops::resolve(self.core.sdk()?, key))
            }

            /// Counters: `fabric_reads`, `http_reads`, `fabric_batches` (batches read
            /// one-sided in one go), `fabric_writes` (values written one-sided),
            /// `http_writes`, `busy_retries`, and `fallbacks` (why reads left the fast path).
            fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                self.core.stats(py)
            }

            /// Closes connections and the fabric endpoint; later calls raise `RasaError`.
            fn close(&self) {
                self.core.close()
            }

            /// The keyword arguments that make this client again (pickling uses them).
            fn _config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                self.core.config.kwargs(py)
            }

            fn __repr__(&self) -> String {
                self.core.config.repr(stringify!($class))
            }
        }
    };
}

methods!(Client, blocking, {
    /// Bytes `start` (inclusive) to `end` (exclusive) of `key` as a `bytes` object the
    /// read lands in (one-sided where possible; no copy after it): what `rasa://` files
    /// hand their readers.
    fn _read_range<'py>(
        &self,
        py: Python<'py>,
        key: String,
        start: u64,
        end: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let len = usize::try_from(end.saturating_sub(start))
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("too large a range"))?;
        let (obj, out) = Out::fresh_bytes(py, len);
        let sdk = self.core.sdk()?;
        let n = wait(
            py,
            within(
                self.core.limit(),
                ops::get_range_into(sdk, key, start, end, out),
            ),
        )??;
        let obj = obj.into_bound(py).into_any();
        if n as usize == len {
            return Ok(obj);
        }
        // The value ended first: the bytes it had.
        obj.get_item(pyo3::types::PySlice::new(py, 0, n as isize, 1))
    }
});
methods!(AsyncClient, awaitable);
