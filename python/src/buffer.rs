//! Caller memory through the buffer protocol: [`Out`], a writable, C-contiguous region
//! the SDK fills (`get_into`), and [`In`], bytes to store (`put`), both without copying
//! on the way in. The buffer export is held for as long as the SDK uses the memory, so
//! a `bytearray` cannot be resized (nor a numpy array's memory freed) meanwhile.

use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyMemoryView;

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

/// A writable region of a caller's buffer, handed to the SDK to fill.
pub(crate) struct Out {
    ptr: *mut u8,
    len: usize,
    _export: Arc<Export>,
}

// SAFETY: the memory stays valid while `_export` (the buffer export, which pins it) lives,
// and the SDK uses an `Out` from one thread at a time. Distinct `Out`s of one buffer
// cover disjoint ranges (checked in `Out::split`).
unsafe impl Send for Out {}

impl AsMut<[u8]> for Out {
    fn as_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: `ptr..ptr+len` lies inside the exported, writable, C-contiguous buffer
        // that `_export` keeps alive; no other `Out` overlaps it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Out {
    /// The whole of `obj`, which must be writable and C-contiguous.
    pub(crate) fn of(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let export = Export::of(obj, true)?;
        Ok(Self {
            ptr: export.ptr(),
            len: export.len(),
            _export: Arc::new(export),
        })
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

    /// Consecutive regions starting at `offsets` (non-decreasing, within the buffer); each
    /// runs to the next offset, the last to the end.
    pub(crate) fn split(self, offsets: &[usize]) -> PyResult<Vec<Out>> {
        let mut regions = Vec::with_capacity(offsets.len());
        for (i, &start) in offsets.iter().enumerate() {
            let end = offsets.get(i + 1).copied().unwrap_or(self.len);
            if start > end || end > self.len {
                return Err(PyValueError::new_err(format!(
                    "offsets must be non-decreasing and within the buffer ({} bytes); offset {i} is {start}",
                    self.len
                )));
            }
            regions.push(Out {
                // SAFETY: start <= len, so the pointer stays within (or one past) the buffer.
                ptr: unsafe { self.ptr.add(start) },
                len: end - start,
                _export: Arc::clone(&self._export),
            });
        }
        Ok(regions)
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
