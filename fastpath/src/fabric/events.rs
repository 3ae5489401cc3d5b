//! What a provider reports outside the completion queue: asynchronous endpoint errors on
//! the event queue (drained by whoever drives progress), and whether the `efa` provider
//! emulates RDMA read in software.

use super::error::{c_text, check, FabricError};
use super::Node;
use crate::sys;

impl Node {
    /// Takes every pending event-queue entry, as log-ready text (errors with the provider's
    /// own explanation). Non-blocking; empty when the provider takes no event queue.
    pub fn drain_events(&self) -> Vec<String> {
        let Some(eq) = &self.eq else {
            return Vec::new();
        };
        let raw = eq.raw.as_ptr();
        let mut out = Vec::new();
        // Bounded: a provider flooding the queue must not starve the progress loop.
        for _ in 0..64 {
            let mut event = 0u32;
            let mut buf = [0u8; 256];
            // SAFETY: valid queue; `buf` has room for any fi_eq_entry/fi_eq_cm_entry.
            let ret = unsafe {
                sys::rasa_fi_eq_read(raw, &mut event, buf.as_mut_ptr().cast(), buf.len(), 0)
            };
            if ret == -(sys::FI_EAGAIN as isize) {
                break;
            }
            if ret == -(sys::FI_EAVAIL as isize) {
                out.push(self.eq_error());
                continue;
            }
            if ret < 0 {
                out.push(check("fi_eq_read", ret).expect_err("negative").to_string());
                break;
            }
            out.push(format!("fabric event {event} ({ret} bytes)"));
        }
        out
    }

    fn eq_error(&self) -> String {
        let Some(eq) = &self.eq else {
            return String::new();
        };
        let raw = eq.raw.as_ptr();
        let mut entry = sys::fi_eq_err_entry::default();
        // SAFETY: zeroed entry (err_data NULL, err_data_size 0) for a valid queue.
        let ret = unsafe { sys::rasa_fi_eq_readerr(raw, &mut entry, 0) };
        if ret < 0 {
            return check("fi_eq_readerr", ret)
                .expect_err("negative")
                .to_string();
        }
        let mut buf = [0 as libc::c_char; 256];
        // SAFETY: buf has 256 bytes; the result is a NUL-terminated string (ours or static).
        let prov = unsafe {
            c_text(sys::rasa_fi_eq_strerror(
                raw,
                entry.prov_errno,
                entry.err_data,
                buf.as_mut_ptr(),
                buf.len(),
            ))
        };
        let e = FabricError::Completion {
            call: "endpoint event",
            errno: entry.err,
            text: super::strerror(entry.err),
            prov_errno: entry.prov_errno,
            prov_text: prov,
        };
        e.to_string()
    }

    /// Whether the provider emulates RDMA read in software on this endpoint (`efa` only:
    /// instances without device RDMA read, mixed device generations, or an API version
    /// below 1.18). `None` when the provider cannot tell (every other provider).
    pub fn emulated_read(&self) -> Option<bool> {
        // SAFETY: valid endpoint; the shim passes a bool and its size to fi_getopt.
        match unsafe { sys::rasa_fi_efa_emulated_read(self.ep.raw.as_ptr()) } {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}
