//! # rasa-fastpath
//!
//! Rasa's RDMA fast path: the memory one-sided readers read, and safe Rust over libfabric
//! (endpoints, registration, the serving side and the one-sided reader). This is the only crate of the workspace allowed to use `unsafe` code; every
//! `unsafe` block carries a `// SAFETY:` comment, and its public API is safe.
//!
//! - [`buffer`]: [`ArenaBuffer`](buffer::ArenaBuffer), page-aligned memory that never
//!   moves, written append-only through exclusive slots and read through immutable
//!   extents. The gateway keeps its arenas in these so they can be registered with
//!   libfabric as they are.
//! - [`frame`]: the layout of one stored version (header + payload) and its validation,
//!   shared by the gateway (writer) and every fast-path reader.
//! - [`stale`]: removing the `/dev/shm` regions of `shm` endpoints whose processes are gone.
//! - [`silent`]: closing connections that send nothing to a socket provider's fabric port.
//! - [`fabrics`]: several endpoints at once (`shm` for local readers beside a remote
//!   provider), every arena registered in each domain.
//! - [`local`]: whether a reader shares its gateway's host and may read it over `shm`.
//! - [`library`]: libfabric, opened at run time the first time the fast path is used
//!   (nothing links it); [`fabric`]: RAII owners of its objects (fabric, domain,
//!   endpoint, memory regions, completion queues), the only module besides `library`
//!   that touches the raw bindings.
//! - [`server`]: the gateway's serving endpoint; [`reader`]: one-sided reads of a
//!   descriptor's frame, validated; [`check`]: `fabric check`, what a host's providers
//!   can do; [`counting`]: counters of what the fast path did.
//!
//! ## Invariant kept here
//!
//! Bytes become readable only once their writer has finished, and are never written again
//! until the whole buffer is reset, which the type system allows only when no local
//! reader remains. Remote readers are kept away from reused memory by leases and remote
//! key rotation, enforced by the gateway.

pub mod buffer;
pub mod check;
pub mod counting;
pub mod fabric;
pub mod fabrics;
pub mod frame;
pub mod helper;
pub mod library;
pub mod local;
pub mod reader;
pub mod server;
pub mod silent;
pub mod stale;
mod sys;

/// Signals that end a process because of a bug (in Rust `unsafe`, in libfabric or a provider,
/// or an `abort()` anywhere), with the message [`report_fatal_signals`] writes for each.
const FATAL: [(libc::c_int, &str); 5] = [
    (libc::SIGSEGV, "fatal signal SIGSEGV (invalid memory access)"),
    (libc::SIGBUS, "fatal signal SIGBUS (bad memory access, e.g. a truncated mapping)"),
    (libc::SIGILL, "fatal signal SIGILL (illegal instruction)"),
    (libc::SIGFPE, "fatal signal SIGFPE (arithmetic fault)"),
    (
        libc::SIGABRT,
        "fatal signal SIGABRT: abort() was called (a libfabric provider error with no event queue bound, a failed C assertion, a Rust abort after a panic while panicking, or an allocation failure)",
    ),
];

/// The process's name for fatal-signal messages, set once by [`report_fatal_signals`].
static PROGRAM: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    // Only async-signal-safe calls here: write(2) of static bytes, signal, raise.
    let program = PROGRAM.get().copied().unwrap_or("process");
    let what = FATAL
        .iter()
        .find(|(s, _)| *s == sig)
        .map_or("fatal signal", |(_, m)| *m);
    for part in [
        program.as_bytes(),
        b": ",
        what.as_bytes(),
        b"; exiting with that signal (a core dump follows if enabled)\n",
    ] {
        // SAFETY: write(2) on stderr with a valid buffer and its length; async-signal-safe.
        let _ = unsafe { libc::write(2, part.as_ptr().cast(), part.len()) };
    }
    // SAFETY: restoring the default action and re-raising, both async-signal-safe, so the
    // process ends with the signal itself (its exit status and core dump say what it was).
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Makes a fatal signal say what it was, then end the process *with that signal*.
///
/// Debian's libfabric links the PSM (TrueScale) library, whose constructor installs handlers
/// for SIGSEGV, SIGBUS, SIGILL and SIGABRT that print "terminated with signal N" and call
/// `exit(1)`: a crash then looks like an ordinary exit with status 1, and without the log
/// nobody can tell it was a crash. This replaces those handlers (and the default ones) with
/// one that writes `program: fatal signal …` with the likely cause to stderr, restores the
/// default action and re-raises, so the exit status is the signal (and a core dump is
/// written where enabled). Call it at start; it is idempotent.
pub fn report_fatal_signals(program: &'static str) {
    let _ = PROGRAM.set(program);
    for (sig, _) in FATAL {
        // SAFETY: `on_fatal_signal` is an `extern "C" fn(c_int)` that only makes
        // async-signal-safe calls; installing it for a catchable signal is sound.
        unsafe {
            libc::signal(sig, on_fatal_signal as *const () as libc::sighandler_t);
        }
    }
}
