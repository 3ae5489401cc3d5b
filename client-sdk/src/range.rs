//! Range reads: one-sided when the version's frame has a block table (the header, the
//! covering blocks and their table entries, each block validated), else over HTTP.

use std::ops::Range;
use std::time::Instant;

use bytes::Bytes;
use rasa_openapi::Descriptor;

use crate::client::Node;
use crate::fabric::FabricPool;
use crate::{BufResult, Error, Fallback, FastPath, Object, ReadPath, Written};

/// Bytes `range` of a value of `len` bytes, as HTTP serves them: an end past the value is
/// cut at its end. `None` when the range starts past the end (HTTP's 416) or is reversed.
fn clamp(range: &Range<u64>, len: u64) -> Option<Range<u64>> {
    if range.start > range.end || range.start > len || (range.start == len && !range.is_empty()) {
        return None;
    }
    Some(range.start..range.end.min(len))
}

impl Node {
    /// Reads bytes `range` of `key`'s current version: one-sided when the policy allows,
    /// the version's frame has a block table and the read validates, else over HTTP. An
    /// end past the value is cut at its end (as HTTP does); a start past it is an error
    /// ([`rasa_openapi::ProblemCode::RangeNotSatisfiable`]). An empty range reads nothing
    /// but still names the version.
    pub(crate) async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Object, Error> {
        let fit = |b: &mut Vec<u8>, n: usize| {
            b.resize(n, 0);
            true
        };
        let (r, buf) = self.range_core(key, range, Vec::new(), fit).await;
        r.map(|w| Object {
            bytes: Bytes::from(buf),
            version: w.version,
            sha256: w.sha256,
            content_type: w.content_type,
            path: w.path,
        })
    }

    /// Reads bytes `range` of `key`'s current version into the front of `buf` and hands
    /// `buf` back, like [`Client::get_range`] (one-sided straight into `buf`, one copy from
    /// the reader's scratch space). A buffer shorter than the range gives
    /// [`Error::BufferTooSmall`] before anything is read.
    pub(crate) async fn get_range_into<B: AsMut<[u8]> + Send + 'static>(
        &self,
        key: &str,
        range: Range<u64>,
        buf: B,
    ) -> BufResult<Written, B> {
        let fit = |b: &mut B, n: usize| b.as_mut().len() >= n;
        self.range_core(key, range, buf, fit).await
    }

    /// The work of both range reads: `fit(buf, n)` makes room for `n` bytes at the front
    /// of `buf`, or says there is none.
    async fn range_core<B: AsMut<[u8]> + Send + 'static>(
        &self,
        key: &str,
        range: Range<u64>,
        mut buf: B,
        fit: impl Fn(&mut B, usize) -> bool,
    ) -> BufResult<Written, B> {
        if range.start > range.end {
            let (start, end) = (range.start, range.end);
            return (Err(Error::InvalidRange { start, end }), buf);
        }
        let one_sided = self.fast_path != FastPath::Off && !self.fabric.known_unavailable();
        let mut last = None;
        for attempt in 0..2 {
            if !one_sided && !range.is_empty() {
                break;
            }
            let (d, deadline) = match self.fabric.descriptor(key, attempt > 0).await {
                Ok(d) => d,
                Err(e) => return (Err(e), buf),
            };
            let Some(r) = clamp(&range, d.length) else {
                break; // HTTP names the problem
            };
            let n = (r.end - r.start) as usize;
            if !fit(&mut buf, n) {
                let capacity = buf.as_mut().len() as u64;
                let e = Error::BufferTooSmall {
                    needed: Some(n as u64),
                    capacity,
                };
                return (Err(e), buf);
            }
            let written = |path| Written {
                length: n as u64,
                version: d.version.clone(),
                sha256: d.sha256.clone(),
                content_type: d.content_type.clone(),
                path,
            };
            if r.is_empty() {
                return (Ok(written(ReadPath::Http)), buf);
            }
            if !one_sided {
                break;
            }
            let (res, b) = self.fabric.range_into(&d, deadline, r, buf).await;
            buf = b;
            match res {
                Ok(()) => {
                    self.counters.copied(n);
                    return (Ok(written(ReadPath::Fabric)), buf);
                }
                Err(e) => {
                    self.fabric.descriptors.forget(key);
                    let lasting = matches!(&e, Error::FastPath(m) if m.starts_with(NO_TABLE));
                    last = Some(e);
                    if lasting || self.fabric.rebuilding() {
                        break; // a fresh descriptor will not do better
                    }
                }
            }
        }
        if let Some(e) = last.filter(|_| self.fast_path == FastPath::Required) {
            return (Err(e), buf);
        }
        let header = format!("bytes={}-{}", range.start, range.end.saturating_sub(1));
        let obj = match self.http.get(key, Some(header)).await {
            Ok(obj) => obj,
            Err(e) => return (Err(e), buf),
        };
        if !fit(&mut buf, obj.bytes.len()) {
            let capacity = buf.as_mut().len() as u64;
            let e = Error::BufferTooSmall {
                needed: Some(obj.bytes.len() as u64),
                capacity,
            };
            return (Err(e), buf);
        }
        buf.as_mut()[..obj.bytes.len()].copy_from_slice(&obj.bytes);
        self.counters.copied(obj.bytes.len());
        let w = Written {
            length: obj.bytes.len() as u64,
            version: obj.version,
            sha256: obj.sha256,
            content_type: obj.content_type,
            path: ReadPath::Http,
        };
        (Ok(w), buf)
    }
}

impl FabricPool {
    /// Bytes `range` (within the value) of the version `d` names, one-sided into the front
    /// of `buf` (on the blocking pool, which owns `buf` meanwhile).
    pub(crate) async fn range_into<B: AsMut<[u8]> + Send + 'static>(
        &self,
        d: &Descriptor,
        deadline: Instant,
        range: Range<u64>,
        buf: B,
    ) -> BufResult<(), B> {
        let (frame, state) = match self.streams().reader_for(d, deadline).await {
            Ok(r) => r,
            Err(e) => return (Err(e), buf),
        };
        if frame.blocks.is_none() {
            drop(state);
            self.counters.fallback(Fallback::NoBlockTable);
            let e = Error::FastPath(format!(
                "{NO_TABLE} (frame format {}, block size {})",
                d.frame_format, d.block_size
            ));
            return (Err(e), buf);
        }
        let timeout = deadline
            .saturating_duration_since(Instant::now())
            .min(self.read_timeout);
        let n = (range.end - range.start) as usize;
        let (r, buf) = self
            .on_reader(state, buf, move |reader, buf| {
                reader.read_range_into(&frame, range, timeout, &mut buf.as_mut()[..n])
            })
            .await;
        if r.is_ok() {
            self.counters.read(ReadPath::Fabric);
        }
        (r, buf)
    }
}

/// How a range read that cannot go one-sided for this version says so.
const NO_TABLE: &str = "the version's frame has no block table";

#[cfg(test)]
mod tests {
    use super::clamp;

    #[test]
    fn ranges_are_cut_as_http_cuts_them() {
        assert_eq!(clamp(&(0..10), 5), Some(0..5));
        assert_eq!(clamp(&(2..4), 5), Some(2..4));
        assert_eq!(clamp(&(5..5), 5), Some(5..5));
        assert_eq!(clamp(&(5..6), 5), None);
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 4..2;
        assert_eq!(clamp(&reversed, 5), None);
        assert_eq!(clamp(&(0..0), 0), Some(0..0));
        assert_eq!(clamp(&(0..1), 0), None);
    }
}
