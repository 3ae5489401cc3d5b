//! What calls return: [`Object`] (a value, readable through the buffer protocol without a
//! copy), [`Descriptor`], [`Meta`], [`ObjectSummary`] and [`ObjectList`].

use std::os::raw::c_int;

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// A value read from the gateway, bytes-like: the buffer protocol (read-only:
/// `memoryview(obj)`, `numpy.frombuffer(obj, ...)` see the SDK's bytes without a copy),
/// `len`, `==` with `bytes` and other buffers, slicing and indexing as `bytes` does,
/// `decode()`, `bytes(obj)`, hashing like the equal `bytes`, and pickling (as its bytes
/// and metadata).
#[pyclass(frozen, module = "rasa_client")]
pub(crate) struct Object {
    bytes: bytes::Bytes,
    /// The key it was read under.
    #[pyo3(get)]
    key: String,
    /// The version id.
    #[pyo3(get)]
    version: String,
    /// The value's SHA-256, lowercase hex.
    #[pyo3(get)]
    sha256: String,
    /// Its media type.
    #[pyo3(get)]
    content_type: String,
    /// `"fabric"` (one-sided) or `"http"`.
    #[pyo3(get)]
    path: &'static str,
}

impl Object {
    /// What `key` read as `o`.
    pub(crate) fn of(key: String, o: rasa_client::Object) -> Self {
        Self {
            bytes: o.bytes,
            key,
            version: o.version,
            sha256: o.sha256,
            content_type: o.content_type,
            path: o.path.as_str(),
        }
    }

    /// The value as a `bytes` object (a copy).
    fn py_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.bytes)
    }
}

#[pymethods]
impl Object {
    /// An object from its parts (what pickling stores; `path` says how it was read).
    #[new]
    #[pyo3(signature = (data, key, version, sha256, content_type, path))]
    fn new(
        data: &[u8],
        key: String,
        version: String,
        sha256: String,
        content_type: String,
        path: &str,
    ) -> PyResult<Self> {
        let path = match path {
            "fabric" => "fabric",
            "http" => "http",
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "path is \"fabric\" or \"http\", not {other:?}"
                )))
            }
        };
        Ok(Self {
            bytes: bytes::Bytes::copy_from_slice(data),
            key,
            version,
            sha256,
            content_type,
            path,
        })
    }

    fn __len__(&self) -> usize {
        self.bytes.len()
    }

    /// The value as `bytes` (a copy).
    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        self.py_bytes(py)
    }

    /// The entity tag the gateway answers for it: its SHA-256, quoted.
    #[getter]
    fn etag(&self) -> String {
        format!("\"{}\"", self.sha256)
    }

    /// Equal to `bytes`, `bytearray`, `memoryview` or another `Object` holding the same
    /// bytes (like `bytes`, whatever the metadata).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        if let Ok(o) = other.cast::<Object>() {
            return o.get().bytes == self.bytes;
        }
        match pyo3::buffer::PyBuffer::<u8>::get(other) {
            Ok(buf) => buf
                .to_vec(other.py())
                .is_ok_and(|v| v[..] == self.bytes[..]),
            Err(_) => false,
        }
    }

    /// The hash of the equal `bytes`, so that objects and bytes mix in sets and dicts.
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.py_bytes(py).hash()
    }

    /// `obj[i]` (an int) or `obj[a:b:c]` (`bytes`), as `bytes` answers.
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        index: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(slice) = index.cast::<pyo3::types::PySlice>() {
            let ind = slice.indices(self.bytes.len() as isize)?;
            if ind.step == 1 {
                let (start, stop) = (ind.start as usize, ind.stop.max(ind.start) as usize);
                return Ok(PyBytes::new(py, &self.bytes[start..stop]).into_any());
            }
        }
        self.py_bytes(py).as_any().get_item(index)
    }

    /// The value decoded as text (`bytes.decode`).
    #[pyo3(signature = (encoding = "utf-8", errors = "strict"))]
    fn decode<'py>(
        &self,
        py: Python<'py>,
        encoding: &str,
        errors: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.py_bytes(py).call_method1("decode", (encoding, errors))
    }

    /// Pickles as its bytes and metadata (a `multiprocessing.Pool` can return it).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, pyo3::types::PyTuple>)> {
        let py = slf.py();
        let o = slf.get();
        let args = (
            o.py_bytes(py),
            o.key.clone(),
            o.version.clone(),
            o.sha256.clone(),
            o.content_type.clone(),
            o.path,
        )
            .into_pyobject(py)?;
        Ok((slf.get_type().into_any(), args))
    }

    fn __repr__(&self) -> String {
        format!(
            "<rasa_client.Object {:?}: {} bytes, version {}, via {}>",
            self.key,
            self.bytes.len(),
            self.version,
            self.path
        )
    }

    /// # Safety
    /// Called by CPython with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if flags & pyo3::ffi::PyBUF_WRITABLE == pyo3::ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("rasa_client.Object is read-only"));
        }
        let bytes = &slf.get().bytes;
        // SAFETY: `view` is CPython's to fill; the memory is the `Bytes` this frozen object
        // owns and never changes, and `PyBuffer_FillInfo` takes a reference to the object,
        // which keeps it (and so the bytes) alive until the view is released.
        let status = unsafe {
            pyo3::ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                bytes.as_ptr() as *mut std::ffi::c_void,
                bytes.len() as pyo3::ffi::Py_ssize_t,
                1,
                flags,
            )
        };
        if status == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
}

/// Where and how a version can be read one-sided, and its lease.
#[pyclass(frozen, module = "rasa_client")]
pub(crate) struct Descriptor(pub(crate) rasa_client::Descriptor);

#[pymethods]
impl Descriptor {
    /// The key.
    #[getter]
    fn key(&self) -> &str {
        &self.0.key
    }
    /// The version id.
    #[getter]
    fn version(&self) -> &str {
        &self.0.version
    }
    /// Payload length in bytes.
    #[getter]
    fn length(&self) -> u64 {
        self.0.length
    }
    /// SHA-256 of the payload, lowercase hex.
    #[getter]
    fn sha256(&self) -> &str {
        &self.0.sha256
    }
    /// Media type.
    #[getter]
    fn content_type(&self) -> &str {
        &self.0.content_type
    }
    /// Lease length in milliseconds.
    #[getter]
    fn lease_ms(&self) -> u64 {
        self.0.lease_ms
    }
    /// When the lease ends (RFC 3339).
    #[getter]
    fn lease_expires_at(&self) -> &str {
        &self.0.lease_expires_at
    }
    /// The cluster member that handed it out, if clustered.
    #[getter]
    fn node_id(&self) -> Option<&str> {
        self.0.node_id.as_deref()
    }
    /// Whether the version can be read one-sided.
    #[getter]
    fn one_sided(&self) -> bool {
        self.0.addr.is_some() && self.0.rkey.is_some()
    }
    /// Every field, as the gateway sent it (JSON names).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let json = serde_json::to_string(&self.0).expect("a descriptor serialises");
        py.import("json")?
            .call_method1("loads", (json,))?
            .cast_into::<PyDict>()
            .map_err(Into::into)
    }
    fn __repr__(&self) -> String {
        format!(
            "<rasa_client.Descriptor {} version {} ({} bytes)>",
            self.0.key, self.0.version, self.0.length
        )
    }
}

/// The metadata of a version (`head`).
#[pyclass(frozen, module = "rasa_client")]
pub(crate) struct Meta {
    /// The version id.
    #[pyo3(get)]
    version: String,
    /// Payload length in bytes.
    #[pyo3(get)]
    length: u64,
    /// The entity tag (quoted SHA-256).
    #[pyo3(get)]
    etag: String,
    /// Media type.
    #[pyo3(get)]
    content_type: String,
}

impl From<rasa_client::Meta> for Meta {
    fn from(m: rasa_client::Meta) -> Self {
        Self {
            version: m.version,
            length: m.length,
            etag: m.etag,
            content_type: m.content_type,
        }
    }
}

#[pymethods]
impl Meta {
    fn __repr__(&self) -> String {
        format!(
            "<rasa_client.Meta version {} ({} bytes)>",
            self.version, self.length
        )
    }
}

/// A key in a listing.
#[pyclass(frozen, module = "rasa_client")]
#[derive(Clone)]
pub(crate) struct ObjectSummary {
    /// The key.
    #[pyo3(get)]
    key: String,
    /// Its current version id.
    #[pyo3(get)]
    version: String,
    /// Payload length in bytes.
    #[pyo3(get)]
    length: u64,
    /// The entity tag (quoted SHA-256).
    #[pyo3(get)]
    etag: String,
}

#[pymethods]
impl ObjectSummary {
    fn __repr__(&self) -> String {
        format!(
            "<rasa_client.ObjectSummary {} ({} bytes)>",
            self.key, self.length
        )
    }
}

/// A page of a listing.
#[pyclass(frozen, module = "rasa_client")]
pub(crate) struct ObjectList {
    /// The keys of this page, in order.
    #[pyo3(get)]
    items: Vec<ObjectSummary>,
    /// Pass as `after` for the next page; `None` on the last one.
    #[pyo3(get)]
    next_after: Option<String>,
}

impl From<rasa_client::ObjectList> for ObjectList {
    fn from(l: rasa_client::ObjectList) -> Self {
        let items = l
            .items
            .into_iter()
            .map(|s| ObjectSummary {
                key: s.key,
                version: s.version,
                length: s.length,
                etag: s.etag,
            })
            .collect();
        Self {
            items,
            next_after: l.next_after,
        }
    }
}

#[pymethods]
impl ObjectList {
    fn __len__(&self) -> usize {
        self.items.len()
    }
    /// Its summaries, in order (`for s in page`).
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyIterator>> {
        pyo3::types::PyList::new(py, self.items.iter().cloned())?.try_iter()
    }
    /// The `i`-th summary (negative counts from the end).
    fn __getitem__(&self, i: isize) -> PyResult<ObjectSummary> {
        let n = self.items.len() as isize;
        let at = if i < 0 { i + n } else { i };
        if !(0..n).contains(&at) {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "index {i} of a page of {n} keys"
            )));
        }
        Ok(self.items[at as usize].clone())
    }
    fn __repr__(&self) -> String {
        let next = match &self.next_after {
            None => "None".to_owned(),
            Some(k) => format!("{k:?}"),
        };
        format!(
            "<rasa_client.ObjectList {} keys, next_after={next}>",
            self.items.len()
        )
    }
}
