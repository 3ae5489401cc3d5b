//! Loading libfabric at run time (`dlopen`), the first time the fast path is used.
//!
//! Rasa links no libfabric: a process that only speaks HTTP (`rasa --help`, `rasa put`, a
//! gateway with `--fast-path off`, a Python `import`) never loads it, and so never pays
//! for what loading it does — Debian's libfabric pulls in the PSM libraries, whose
//! constructors sleep for ~0.2 s and install signal handlers. The library is found at
//! `$RASA_LIBFABRIC` when set (and only there), else at the AWS EFA installer's path,
//! else by the dynamic loader's search (`libfabric.so.1`).
//!
//! Loading changes no signal disposition: SIGINT, SIGTERM, SIGHUP and the fatal signals are
//! saved before `dlopen` and put back after, so the library's constructors cannot take
//! over shutdown or crash reporting.

use std::sync::OnceLock;

use crate::sys::LibFabric;

/// The environment variable naming the libfabric to load (a path, or a file name for the
/// loader to search).
pub const ENV: &str = "RASA_LIBFABRIC";

/// Where libfabric is looked for when [`ENV`] is not set, in order.
pub const DEFAULT_PATHS: [&str; 3] = [
    "/opt/amazon/efa/lib64/libfabric.so.1",
    "/opt/amazon/efa/lib/libfabric.so.1",
    "libfabric.so.1",
];

/// Signals whose handling a library's constructor must not change.
const KEPT_SIGNALS: [libc::c_int; 8] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// A loaded libfabric and where it came from.
pub struct Loaded {
    /// The library's exported functions.
    pub(crate) lib: LibFabric,
    /// The path or name it was opened by.
    pub path: String,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

static LOADED: OnceLock<Result<Loaded, String>> = OnceLock::new();

/// libfabric, loaded on first use; the error says where it was looked for and how to fix it.
pub fn load() -> Result<&'static Loaded, String> {
    LOADED
        .get_or_init(|| open(std::env::var_os(ENV)))
        .as_ref()
        .map_err(Clone::clone)
}

/// libfabric if it is loaded already (never loads it).
pub fn loaded() -> Option<&'static Loaded> {
    LOADED.get().and_then(|r| r.as_ref().ok())
}

/// Provider settings Rasa gives libfabric unless the environment sets them already.
///
/// `FI_OFI_RXM_MSG_RX_SIZE` and `_TX_SIZE` of 32: the `tcp` message endpoints under
/// `ofi_rxm` default to queues of 128 buffers each way, preallocated, for messages Rasa
/// never sends (only RMA reads, a few in flight, and the provider's own control messages).
/// Measured with libfabric 1.17: an idle gateway's RSS 85 MB → 33 MB, a reading client's
/// 111 MB → 60 MB; one-sided latency unchanged within noise; peers with and without it
/// interoperate (it is local). `FI_OFI_RXM_BUFFER_SIZE` would save ~12 MB more but must
/// match between peers (a client with 4096 against a gateway without timed out), so it
/// is left alone.
pub const PROVIDER_DEFAULTS: [(&str, &str); 2] = [
    ("FI_OFI_RXM_MSG_RX_SIZE", "32"),
    ("FI_OFI_RXM_MSG_TX_SIZE", "32"),
];

/// Puts [`PROVIDER_DEFAULTS`] into this process's environment where unset, for libfabric
/// to read when it is loaded. Returns the names it set, or why it set none: only before
/// libfabric is loaded, and only while the process has a single thread (changing the
/// environment races with any other thread reading it) — call it first thing in `main`.
pub fn apply_provider_defaults() -> Result<Vec<&'static str>, String> {
    if LOADED.get().is_some() {
        return Err("libfabric is loaded already".into());
    }
    let threads = std::fs::read_dir("/proc/self/task")
        .map(Iterator::count)
        .map_err(|e| format!("cannot count this process's threads: {e}"))?;
    if threads != 1 {
        return Err(format!("{threads} threads are running"));
    }
    let mut set = Vec::new();
    for (name, value) in PROVIDER_DEFAULTS {
        if std::env::var_os(name).is_none() {
            // The process has one thread (checked above): nothing reads the environment
            // while it changes.
            std::env::set_var(name, value);
            set.push(name);
        }
    }
    Ok(set)
}

/// Opens the libfabric at `path` on its own (not the one [`load`] keeps), with the same
/// checks: for tests and diagnostics.
pub fn try_open(path: &str) -> Result<Loaded, String> {
    open(Some(path.into()))
}

fn open(chosen: Option<std::ffi::OsString>) -> Result<Loaded, String> {
    let candidates: Vec<String> = match &chosen {
        Some(p) => vec![p.to_string_lossy().into_owned()],
        None => DEFAULT_PATHS.iter().map(|s| (*s).to_owned()).collect(),
    };
    let mut failures = Vec::new();
    for path in &candidates {
        if path.starts_with('/') && !std::path::Path::new(path).exists() {
            failures.push(format!("{path}: no such file"));
            continue;
        }
        match with_signals_kept(|| {
            // SAFETY: loading a shared library runs its constructors; libfabric's are
            // what linking it would have run at start. The function table is checked
            // symbol by symbol (every one must be present).
            unsafe { LibFabric::new(path) }
        }) {
            Ok(lib) => {
                let loaded = Loaded {
                    lib,
                    path: path.clone(),
                };
                check_version(&loaded)?;
                tracing::debug!(path, "libfabric loaded");
                return Ok(loaded);
            }
            Err(e) => failures.push(format!("{path}: {e}")),
        }
    }
    let how = if chosen.is_some() {
        format!("{ENV} names a file that is not a usable libfabric")
    } else {
        format!(
            "install it (Debian/Ubuntu: apt-get install libfabric1; AWS: the EFA installer) or set {ENV} to its path"
        )
    };
    Err(format!(
        "cannot load libfabric ({}); {how}",
        failures.join("; ")
    ))
}

/// Refuses a library older than the headers Rasa was built with: its structures may lack
/// fields the headers declare (linking would have refused it by symbol version).
fn check_version(l: &Loaded) -> Result<(), String> {
    // SAFETY: constant-returning calls.
    let (runtime, header) = unsafe { (l.lib.fi_version(), crate::sys::rasa_fi_header_version()) };
    if runtime < header {
        return Err(format!(
            "libfabric at {} is {}.{}, older than the {}.{} headers Rasa was built with; point {ENV} at a newer one",
            l.path,
            runtime >> 16,
            runtime & 0xffff,
            header >> 16,
            header & 0xffff
        ));
    }
    Ok(())
}

/// Runs `f` and puts back the dispositions of [`KEPT_SIGNALS`] it changed.
fn with_signals_kept<T>(f: impl FnOnce() -> T) -> T {
    let mut saved: Vec<(libc::c_int, libc::sigaction)> = Vec::new();
    for sig in KEPT_SIGNALS {
        // SAFETY: an all-zero sigaction is a valid out-parameter; a NULL new action only
        // reads the current one.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: valid signal number and out-pointer.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0 {
            saved.push((sig, old));
        }
    }
    let out = f();
    for (sig, old) in &saved {
        // SAFETY: re-installing exactly the action read above for the same signal.
        unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
    }
    out
}

#[cfg(test)]
mod tests {
    /// The test harness runs tests on threads of their own: the environment stays as it
    /// is (changing it then could race with another thread reading it).
    #[test]
    fn provider_defaults_are_refused_once_threads_run() {
        let before: Vec<_> = super::PROVIDER_DEFAULTS
            .iter()
            .map(|(name, _)| std::env::var_os(name))
            .collect();
        let e = super::apply_provider_defaults().unwrap_err();
        assert!(e.contains("threads") || e.contains("loaded"), "{e}");
        let after: Vec<_> = super::PROVIDER_DEFAULTS
            .iter()
            .map(|(name, _)| std::env::var_os(name))
            .collect();
        assert_eq!(before, after);
    }
}
