//! # rasa-fastpath
//!
//! The memory side of Rasa's RDMA fast path, and (in a later step) safe Rust over
//! libfabric. This is the only crate of the workspace allowed to use `unsafe` code; every
//! `unsafe` block carries a `// SAFETY:` comment, and its public API is safe.
//!
//! - [`buffer`]: [`ArenaBuffer`](buffer::ArenaBuffer), page-aligned memory that never
//!   moves, written append-only through exclusive slots and read through immutable
//!   extents. The gateway keeps its arenas in these so they can be registered with
//!   libfabric as they are.
//! - [`frame`]: the layout of one stored version (header + payload) and its validation,
//!   shared by the gateway (writer) and every fast-path reader.
//!
//! ## Invariant kept here
//!
//! Bytes become readable only once their writer has finished, and are never written again
//! until the whole buffer is reset, which the type system allows only when no local
//! reader remains. Remote readers are kept away from reused memory by leases and remote
//! key rotation, enforced by the gateway.

pub mod buffer;
pub mod fabric;
pub mod frame;
pub mod reader;
pub mod server;
mod sys;

/// Gives SIGINT and SIGTERM back their default disposition if a library constructor took
/// them over.
///
/// Debian's libfabric links the PSM (TrueScale) provider library, whose constructor installs
/// handlers for SIGINT and SIGTERM (and possibly SIGHUP, reset here too) that exit the
/// process with status 1 (unless
/// `IPATH_NO_BACKTRACE=1` was set before the program started). An application that wants
/// a graceful shutdown calls this at start, before installing its own handlers (which would
/// otherwise chain to PSM's). Handlers set to "ignore" are left alone.
pub fn reset_termination_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction with a NULL new action only reads the current one into `old`,
        // a zeroed, properly sized struct.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
            continue;
        }
        if old.sa_sigaction == libc::SIG_DFL || old.sa_sigaction == libc::SIG_IGN {
            continue;
        }
        // SAFETY: installing SIG_DFL (no handler code) for a catchable signal is always sound.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}
