//! A node's data path, wrapped once: posting one-sided reads and reaping the completion
//! queue. The reader's engine and the server's progress thread call these instead of the
//! raw `fi_read` / `fi_cq_*` bindings, and see libfabric's return codes as [`Polled`] and
//! [`Posted`] rather than negative integers.

use super::error::{c_text, strerror};
use super::{check, FabricError, Node};
use crate::sys;

/// A peer, as inserted in a node's address vector.
pub type PeerAddr = sys::fi_addr_t;

/// One completion (the context of the operation that completed).
pub type Completion = sys::fi_cq_entry;

/// The per-operation context a read carries; the provider may write into it while the
/// read is in flight, so it must stay at one address until the read completes.
pub type ReadContext = sys::fi_context2;

/// What one look at the completion queue found.
#[derive(Debug)]
pub enum Polled {
    /// This many completions, written to the front of the slice given.
    Completed(usize),
    /// Nothing yet (or a wait that timed out or was woken).
    Empty,
    /// An operation failed: its error entry is next, to be read with
    /// [`Node::completion_error`].
    ErrorPending,
    /// The queue itself failed.
    Failed(FabricError),
}

/// Whether a read was posted.
#[derive(Debug, PartialEq, Eq)]
pub enum Posted {
    /// In flight: it completes (or fails) on the completion queue.
    Issued,
    /// The provider's queue is full: reap completions (which also drives progress) and
    /// post again.
    QueueFull,
}

/// Where a posted read lands and what it reads (for a write, [`Node::post_write`]: the
/// local bytes sent and where they go).
#[derive(Debug, Clone, Copy)]
pub struct ReadOp {
    /// The local buffer the bytes land in.
    pub local: *mut u8,
    /// How many bytes.
    pub len: usize,
    /// The local buffer's memory descriptor (null where the provider needs none).
    pub desc: *mut libc::c_void,
    /// The peer, as inserted in this node's address vector.
    pub peer: PeerAddr,
    /// The remote address (virtual or offset, as the provider addresses).
    pub remote: u64,
    /// The remote key.
    pub rkey: u64,
}

impl Posted {
    /// What a post's return value means (`call` names it in an error).
    fn of(call: &'static str, ret: isize) -> Result<Self, FabricError> {
        if ret == -(sys::FI_EAGAIN as isize) {
            return Ok(Self::QueueFull);
        }
        check(call, ret).map(|_| Self::Issued)
    }
}

impl Polled {
    fn of(call: &'static str, ret: isize) -> Self {
        match ret {
            n if n > 0 => Self::Completed(n as usize),
            0 => Self::Empty,
            n if n == -(sys::FI_EAGAIN as isize) => Self::Empty,
            n if n == -(sys::FI_EAVAIL as isize) => Self::ErrorPending,
            n => Self::Failed(check(call, n).expect_err("negative")),
        }
    }
}

impl Node {
    /// Reaps completions into `into` without blocking (this also drives the provider's
    /// progress).
    pub fn poll_completions(&self, into: &mut [Completion]) -> Polled {
        // SAFETY: `into` has room for `into.len()` context-format entries (the queue's
        // format); the queue is open while the node is alive.
        let ret = unsafe {
            sys::rasa_fi_cq_read(self.cq.raw.as_ptr(), into.as_mut_ptr().cast(), into.len())
        };
        Polled::of("fi_cq_read", ret)
    }

    /// Like [`Node::poll_completions`], but sleeps on the queue's wait object up to
    /// `timeout_ms` when nothing is there (only for a [`Node::waitable`] queue);
    /// [`Node::wake_waiter`] ends the wait early.
    pub fn wait_completions(&self, into: &mut [Completion], timeout_ms: i32) -> Polled {
        // SAFETY: as for poll_completions; a null condition means "any completion".
        let ret = unsafe {
            sys::rasa_fi_cq_sread(
                self.cq.raw.as_ptr(),
                into.as_mut_ptr().cast(),
                into.len(),
                std::ptr::null(),
                timeout_ms,
            )
        };
        // A wait cut short by [`Node::wake_waiter`] found nothing.
        if ret == -(sys::FI_ECANCELED as isize) {
            return Polled::Empty;
        }
        Polled::of("fi_cq_sread", ret)
    }

    /// Wakes a thread blocked in [`Node::wait_completions`] (nothing to do on a polled
    /// queue, which nobody blocks on; signalling one crashes some providers).
    pub fn wake_waiter(&self) {
        if !self.waitable() {
            return;
        }
        // SAFETY: the queue is open while the node is alive; signalling is thread-safe.
        unsafe {
            sys::rasa_fi_cq_signal(self.cq.raw.as_ptr());
        }
    }

    /// Reads the pending error completion (after [`Polled::ErrorPending`]), as an error
    /// naming `call`.
    pub fn completion_error(&self, call: &'static str) -> FabricError {
        let mut entry = sys::fi_cq_err_entry::default();
        // SAFETY: entry is a valid, zeroed err entry (err_data NULL, err_data_size 0).
        let ret = unsafe { sys::rasa_fi_cq_readerr(self.cq.raw.as_ptr(), &mut entry, 0) };
        if ret < 0 {
            return check("fi_cq_readerr", ret).expect_err("negative");
        }
        let mut buf = [0 as libc::c_char; 256];
        // SAFETY: buf has 256 bytes; fi_cq_strerror returns a NUL-terminated string (ours or
        // a static one).
        let prov_text = unsafe {
            c_text(sys::rasa_fi_cq_strerror(
                self.cq.raw.as_ptr(),
                entry.prov_errno,
                entry.err_data,
                buf.as_mut_ptr(),
                buf.len(),
            ))
        };
        FabricError::Completion {
            call,
            errno: entry.err,
            text: strerror(entry.err),
            prov_errno: entry.prov_errno,
            prov_text,
        }
    }

    /// Posts a one-sided read of `op` whose completion carries `context`.
    ///
    /// # Safety
    ///
    /// `op.local .. op.local + op.len` must lie in memory registered with this node's
    /// domain (described by `op.desc`) that nothing else reads or writes until the read
    /// completes or the endpoint is closed, and that outlives both; `context` must stay
    /// valid and unmoved for as long.
    pub unsafe fn post_read(
        &self,
        op: ReadOp,
        context: *mut ReadContext,
    ) -> Result<Posted, FabricError> {
        // SAFETY: the caller keeps the buffer and context valid and exclusive (above); the
        // endpoint is open while the node is alive.
        let ret = unsafe {
            sys::rasa_fi_read(
                self.ep.raw.as_ptr(),
                op.local.cast(),
                op.len,
                op.desc,
                op.peer,
                op.remote,
                op.rkey,
                context.cast(),
            )
        };
        Posted::of("fi_read", ret)
    }
}

impl Node {
    /// Posts a one-sided write of `op` (the bytes at `op.local` sent to `op.remote`) whose
    /// completion carries `context`.
    ///
    /// # Safety
    ///
    /// `op.local .. op.local + op.len` must lie in memory registered with this node's
    /// domain (described by `op.desc`) that nothing writes until the write completes or the
    /// endpoint is closed, and that outlives both; `context` must stay valid and unmoved
    /// for as long.
    pub unsafe fn post_write(
        &self,
        op: ReadOp,
        context: *mut ReadContext,
    ) -> Result<Posted, FabricError> {
        // SAFETY: the caller keeps the buffer and context valid (above); the endpoint is
        // open while the node is alive.
        let ret = unsafe {
            sys::rasa_fi_write(
                self.ep.raw.as_ptr(),
                op.local.cast_const().cast(),
                op.len,
                op.desc,
                op.peer,
                op.remote,
                op.rkey,
                context.cast(),
            )
        };
        Posted::of("fi_write", ret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{FabricConfig, Node};
    use std::time::{Duration, Instant};

    /// Every wait names its bound: a wait on an empty queue comes back within its timeout on
    /// every provider here (shm's yield wait once did not, and a read spun past its own).
    #[test]
    fn a_wait_on_an_empty_queue_ends_within_its_timeout() {
        for provider in ["tcp;ofi_rxm", "sockets", "shm"] {
            let node = Node::open(&FabricConfig::new(provider, Some("127.0.0.1".into())))
                .unwrap_or_else(|e| panic!("{provider} must open here: {e}"));
            if !node.waitable() {
                continue;
            }
            let mut entries = [Completion::default(); 4];
            for _ in 0..20 {
                let started = Instant::now();
                let polled = node.wait_completions(&mut entries, 5);
                assert!(matches!(polled, Polled::Empty), "{provider}: {polled:?}");
                let took = started.elapsed();
                assert!(
                    took < Duration::from_millis(500),
                    "{provider}: a 5 ms wait took {took:?}"
                );
            }
        }
    }

    /// shm's wait objects spin (a yield wait) rather than sleep: its queue is polled.
    #[test]
    fn only_queues_that_sleep_in_the_kernel_are_waited_on() {
        for (provider, waitable) in [("tcp;ofi_rxm", true), ("sockets", true), ("shm", false)] {
            let node = Node::open(&FabricConfig::new(provider, Some("127.0.0.1".into()))).unwrap();
            assert_eq!(node.waitable(), waitable, "{provider}");
        }
    }
}
