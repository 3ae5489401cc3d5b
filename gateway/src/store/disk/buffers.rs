//! Buffers records are read into, kept for reuse: a fresh 1 MiB buffer costs more than
//! reading into it (the kernel maps and zeroes its pages, or malloc clears it). At most
//! [`KEEP`] bytes are kept, in buffers of at most [`LARGEST`].

use std::sync::{Arc, Mutex, PoisonError};

/// Bytes of free buffers kept at most.
const KEEP: usize = 64 << 20;
/// Buffers larger than this are not kept.
const LARGEST: usize = 16 << 20;

/// Free buffers.
#[derive(Debug, Default)]
pub(super) struct Buffers(Mutex<(Vec<Vec<u8>>, usize)>);

/// A buffer of `len` bytes taken from [`Buffers`], given back when dropped.
pub(super) struct Pooled {
    buf: Vec<u8>,
    len: usize,
    pool: Arc<Buffers>,
}

impl Buffers {
    /// A buffer of `len` bytes (their contents are whatever the buffer held before).
    pub fn take(self: &Arc<Self>, len: usize) -> Pooled {
        let reused = {
            let mut free = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            let at = free.0.iter().position(|b| b.len() >= len);
            let taken = match at {
                Some(i) => Some(free.0.swap_remove(i)),
                None => free.0.pop(),
            };
            if let Some(b) = &taken {
                free.1 -= b.len();
            }
            taken
        };
        let mut buf = reused.unwrap_or_default();
        if buf.len() < len {
            buf.resize(len, 0);
        }
        Pooled {
            buf,
            len,
            pool: Arc::clone(self),
        }
    }
}

impl AsMut<[u8]> for Pooled {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if buf.len() > LARGEST {
            return;
        }
        let mut free = self.pool.0.lock().unwrap_or_else(PoisonError::into_inner);
        if free.1 + buf.len() <= KEEP {
            free.1 += buf.len();
            free.0.push(buf);
        }
    }
}
