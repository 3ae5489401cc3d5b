//! `RegisteredBuffer`: memory one-sided reads land in with no copy (the Rust SDK's
//! [`rasa_client::RegisteredBuffer`]), exported to Python through the buffer protocol
//! (`numpy.frombuffer(buf, dtype)` views it without copying).

use std::ffi::c_int;
use std::sync::Mutex;

use pyo3::exceptions::{PyBufferError, PyRuntimeError};
use pyo3::prelude::*;

use crate::buffer::Out;
use crate::errors::IntoPy;

/// Memory registered for one-sided reads to land in (`Client.register(capacity)`); pass it
/// to `get_into`. It never moves; read it through `memoryview(buf)` or numpy, not while a
/// read into it is in flight.
#[pyclass(frozen, module = "rasa_client")]
pub(crate) struct RegisteredBuffer {
    /// The buffer, out while a read fills it.
    inner: Mutex<Option<rasa_client::RegisteredBuffer>>,
    /// Where its memory starts and how long it is: fixed for its whole life.
    ptr: usize,
    len: usize,
}

impl RegisteredBuffer {
    /// A buffer of `capacity` bytes for `sdk`'s reads, or, given a writable buffer (a
    /// numpy array, a `bytearray`, any writable buffer), that memory itself,
    /// exported (so pinned: not resized, not freed) for as long as the registration lives.
    pub(crate) fn new(sdk: &rasa_client::Client, what: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut buf = match what.extract::<usize>() {
            Ok(capacity) => sdk.register(capacity).py()?,
            Err(_) if what.is_instance_of::<pyo3::types::PyInt>() => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "capacity must be a non-negative number of bytes",
                ))
            }
            Err(_) => {
                let buf = rasa_client::RegisteredBuffer::from_owned(Out::of(what)?).py()?;
                buf.register_with(sdk);
                buf
            }
        };
        let (ptr, len) = (buf.as_mut_ptr() as usize, buf.len());
        Ok(Self {
            inner: Mutex::new(Some(buf)),
            ptr,
            len,
        })
    }

    /// The buffer, for one read; an error while another read has it.
    pub(crate) fn take(&self) -> PyResult<rasa_client::RegisteredBuffer> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("another read into this buffer is in flight"))
    }

    /// Bytes it holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Gives the buffer back after a read.
    pub(crate) fn put_back(&self, buf: rasa_client::RegisteredBuffer) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = Some(buf);
    }
}

#[pymethods]
impl RegisteredBuffer {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Fabric endpoints it is registered with now.
    #[getter]
    fn registrations(&self) -> PyResult<usize> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .as_ref()
            .map(rasa_client::RegisteredBuffer::registrations)
            .ok_or_else(|| PyRuntimeError::new_err("a read into this buffer is in flight"))
    }

    fn __repr__(&self) -> String {
        format!("<rasa_client.RegisteredBuffer {} bytes>", self.len)
    }

    /// # Safety
    /// Called by CPython with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let (ptr, len) = (slf.get().ptr, slf.get().len);
        if len == 0 && flags & pyo3::ffi::PyBUF_WRITABLE != 0 {
            return Err(PyBufferError::new_err(
                "an empty buffer has nothing to write",
            ));
        }
        // SAFETY: `view` is CPython's to fill; the memory is the registered buffer this
        // object owns (out of it only for the length of a read, and always put back, never
        // freed or moved before the object is), and `PyBuffer_FillInfo` takes a reference
        // to the object, which keeps it alive until the view is released.
        let status = unsafe {
            pyo3::ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                ptr as *mut std::ffi::c_void,
                len as pyo3::ffi::Py_ssize_t,
                0,
                flags,
            )
        };
        if status == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
}
