//! Zero-copy reads: [`Client::register`] hands out memory the fabric writes into directly.
//! Read into with [`Client::get_into`] (or `get_many_into`), a [`RegisteredBuffer`] gets
//! the value one-sided with no copy at all: the payload lands at its front, the frame is
//! validated where it landed. Over HTTP it is filled like any buffer (one copy).

use rasa_fastpath::reader::LandingBuffer;

use crate::{Client, Error};

/// Memory registered for one-sided reads to land in, for a caller that reads value after
/// value into the same place. Page-aligned, never moving; registered (`FI_READ`) on each of
/// the client's fabric endpoints the first time one reads into it, and kept registered
/// until dropped. Dereferences to its bytes.
#[derive(Debug)]
pub struct RegisteredBuffer {
    pub(crate) landing: LandingBuffer,
}

impl RegisteredBuffer {
    /// Bytes it holds.
    pub fn capacity(&self) -> usize {
        self.landing.capacity()
    }

    /// Fabric endpoints it is registered with now (one per endpoint that read into it).
    pub fn registrations(&self) -> usize {
        self.landing.registrations()
    }
}

impl std::ops::Deref for RegisteredBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.landing.as_slice()
    }
}

impl std::ops::DerefMut for RegisteredBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.landing.as_mut_slice()
    }
}

impl AsMut<[u8]> for RegisteredBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl AsRef<[u8]> for RegisteredBuffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Client {
    /// A zeroed buffer of `capacity` bytes that one-sided reads through
    /// [`Client::get_into`] write straight into (no copy): for callers that reuse a buffer.
    /// Registering costs a system call or two per endpoint (pinning pages on RDMA NICs),
    /// once; keep the buffer and read into it again.
    pub fn register(&self, capacity: usize) -> Result<RegisteredBuffer, Error> {
        let landing = LandingBuffer::new(capacity).map_err(|e| Error::Output(e.to_string()))?;
        Ok(RegisteredBuffer { landing })
    }
}
