//! Caller memory through the buffer protocol: [`Out`], a writable, C-contiguous region
//! the SDK fills (`get_into`), and [`In`], bytes to store (`put`), both without copying
//! on the way in. The buffer export is held for as long as the SDK uses the memory, so
//! a `bytearray` cannot be resized (nor a numpy array's memory freed) meanwhile.

use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMemoryView};

/// An exported buffer, viewed as bytes.
struct Export {
    buf: PyBuffer<u8>,
}

impl Export {
    /// `obj`'s memory as one run of bytes: any object with the buffer protocol
    /// (`bytes`, `bytearray`, `memoryview`, numpy arrays of any dtype), if C-contiguous.
    fn of(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        let view = PyMemoryView::from(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "a bytes-like object is required (one with the buffer protocol), not {}",
                obj.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?;
        if writable && view.getattr("readonly")?.extract::<bool>()? {
            return Err(PyTypeError::new_err(
                "the output buffer is read-only: pass a bytearray, a writable memoryview or a numpy array",
            ));
        }
        if !view.getattr("c_contiguous")?.extract::<bool>()? {
            return Err(PyValueError::new_err(
                "the buffer is not C-contiguous: pass a contiguous array (e.g. numpy.ascontiguousarray)",
            ));
        }
        let flat = view.call_method1("cast", ("B",))?;
        let buf = PyBuffer::<u8>::get(&flat)?;
        Ok(Self { buf })
    }

    fn ptr(&self) -> *mut u8 {
        self.buf.buf_ptr().cast()
    }

    fn len(&self) -> usize {
        self.buf.len_bytes()
    }
}

/// What keeps an [`Out`]'s memory alive while the SDK may still write into it.
#[derive(Clone)]
enum Keeper {
    /// A caller's buffer, exported (pinned) for as long as the SDK holds it.
    Export(#[allow(dead_code)] Arc<Export>),
    /// A `bytes` object this layer made and nobody else holds yet ([`Out::fresh_bytes`]).
    Fresh(#[allow(dead_code)] Arc<Py<PyBytes>>),
}

/// A writable region of a caller's buffer, handed to the SDK to fill.
pub(crate) struct Out {
    ptr: *mut u8,
    len: usize,
    _keeper: Keeper,
}

// SAFETY: the memory stays valid while `_keeper` (the buffer export, which pins it, or the
// reference to a fresh `bytes` object) lives, and the SDK uses an `Out` from one thread at a
// time. Distinct `Out`s of one buffer cover disjoint ranges (checked by `Out::disjoint`).
unsafe impl Send for Out {}

impl AsMut<[u8]> for Out {
    fn as_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: `ptr..ptr+len` lies inside the exported, writable, C-contiguous buffer
        // (or the fresh `bytes` object) that `_keeper` keeps alive; no other `Out` overlaps it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Out {
    /// Bytes it spans.
    pub(crate) fn capacity(&self) -> usize {
        self.len
    }

    /// The whole of `obj`, which must be writable and C-contiguous.
    pub(crate) fn of(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let export = Export::of(obj, true)?;
        Ok(Self {
            ptr: export.ptr(),
            len: export.len(),
            _keeper: Keeper::Export(Arc::new(export)),
        })
    }

    /// A new `bytes` object of `len` bytes and the `Out` that fills it: the SDK writes the
    /// value straight into the object it returns (no copy after the read). The object is
    /// shared with nobody until the read has ended; the `Out` holds a reference, so memory
    /// the SDK may still write into (a read abandoned at a timeout) is never freed under it.
    pub(crate) fn fresh_bytes(py: Python<'_>, len: usize) -> (Py<PyBytes>, Self) {
        let obj = PyBytes::new_with(py, len, |_| Ok(()))
            .expect("a bytes object of a size that was asked for")
            .unbind();
        // SAFETY: `obj` is a live `bytes` object (held here and by the keeper); CPython's
        // `PyBytes_AsString` returns its buffer, writable by C code that owns the only
        // references, as this layer does until the read has ended.
        let ptr: *mut u8 = unsafe { pyo3::ffi::PyBytes_AsString(obj.as_ptr()) }.cast();
        let keeper = Keeper::Fresh(Arc::new(obj.clone_ref(py)));
        (
            obj,
            Self {
                ptr,
                len,
                _keeper: keeper,
            },
        )
    }

    /// Fails when two of `outs` share memory (they are filled at the same time).
    pub(crate) fn disjoint(outs: &[Out]) -> PyResult<()> {
        let mut spans: Vec<(usize, usize)> = outs
            .iter()
            .filter(|o| o.len > 0)
            .map(|o| (o.ptr as usize, o.ptr as usize + o.len))
            .collect();
        spans.sort_unstable();
        if spans.windows(2).any(|w| w[1].0 < w[0].1) {
            return Err(PyValueError::new_err(
                "two of the output buffers share memory: give each key its own",
            ));
        }
        Ok(())
    }

    /// The buffer's `regions` (byte ranges within it), one `Out` each; overlaps are for
    /// [`Out::disjoint`] to refuse.
    pub(crate) fn cut(self, regions: &[std::ops::Range<usize>]) -> PyResult<Vec<Out>> {
        let mut outs = Vec::with_capacity(regions.len());
        for (i, r) in regions.iter().enumerate() {
            if r.start > r.end || r.end > self.len {
                return Err(PyValueError::new_err(format!(
                    "region {i} ({r:?}) does not lie within the buffer ({} bytes)",
                    self.len
                )));
            }
            outs.push(Out {
                // SAFETY: start <= len, so the pointer stays within (or one past) the buffer.
                ptr: unsafe { self.ptr.add(r.start) },
                len: r.len(),
                _keeper: self._keeper.clone(),
            });
        }
        Ok(outs)
    }
}

/// Bytes of a caller's buffer to send, as `bytes::Bytes` without a copy.
pub(crate) struct In {
    ptr: *const u8,
    len: usize,
    _export: Export,
}

// SAFETY: the memory stays valid while `_export` lives; it is only read.
unsafe impl Send for In {}
// SAFETY: as above; shared reads only.
unsafe impl Sync for In {}

impl AsRef<[u8]> for In {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr..ptr+len` is the exported, C-contiguous buffer `_export` keeps alive.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl In {
    /// `obj`'s bytes (any C-contiguous buffer), shared with Python rather than copied.
    pub(crate) fn bytes(obj: &Bound<'_, PyAny>) -> PyResult<bytes::Bytes> {
        let export = Export::of(obj, false)?;
        Ok(bytes::Bytes::from_owner(In {
            ptr: export.ptr(),
            len: export.len(),
            _export: export,
        }))
    }
}
