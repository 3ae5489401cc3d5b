//! # rasa-nixl — Rasa as a NIXL backend (`libplugin_RASA.so`)
//!
//! NIXL (NVIDIA's inference transfer library) moves bytes between an agent's registered
//! memory and its backends. This crate is the Rust half of a NIXL backend plugin for
//! Rasa: a C ABI over the Rust SDK that the C++ engine in `cpp/plugin.cpp` (NIXL's
//! `nixlBackendEngine`, a C++20 interface) calls. `scripts/nixl-plugin.sh` links the two
//! into `target/nixl/libplugin_RASA.so`, which NIXL loads from `NIXL_PLUGIN_DIR`.
//!
//! What a transfer does: NIXL's `DRAM_SEG` descriptors are the agent's memory, its
//! `OBJ_SEG` descriptors name Rasa keys (the descriptor's `metaInfo` at registration, as
//! NIXL's own `OBJ` plugin names S3 objects). A `WRITE` stores each local buffer as a
//! key's new version — one `put_many` for the whole transfer, one-sided where the fast
//! path is on (the gateway copies the bytes out of the agent's memory: cross-memory
//! attach on its host, `fi_write` elsewhere). A `READ` lands each key's value in the local
//! buffer — one `get_many_in` over the memory NIXL registered (registered with the fabric
//! once, at the first read into it, until NIXL deregisters it), a range read for a part of
//! a value.
//!
//! The functions are declared for C in `cpp/rasa_nixl.h`. Every pointer they take is
//! checked for null; strings are UTF-8, not NUL-terminated (pointer and length).

mod xfer;

use std::ffi::{c_char, c_int};
use std::sync::Arc;
use std::time::Duration;

use rasa_client::{Client, FastPath};

pub use xfer::{Item, Xfer};

/// A transfer still under way (`rasa_nixl_check`); NIXL's `NIXL_IN_PROG`.
pub const IN_PROGRESS: c_int = 1;
/// A transfer that ended well; NIXL's `NIXL_SUCCESS`.
pub const DONE: c_int = 0;
/// An argument NIXL passed is wrong (a null pointer, a write at an offset); `NIXL_ERR_INVALID_PARAM`.
pub const INVALID: c_int = -2;
/// The gateway or the transfer failed; NIXL's `NIXL_ERR_BACKEND`.
pub const FAILED: c_int = -3;
/// A key to read has no value; NIXL's `NIXL_ERR_NOT_FOUND`.
pub const NOT_FOUND: c_int = -4;
/// A value is shorter than the bytes asked for; NIXL's `NIXL_ERR_MISMATCH`.
pub const MISMATCH: c_int = -5;

/// A client of one gateway (or cluster), as a NIXL backend instance holds it.
pub struct Backend {
    client: Client,
    timeout: Duration,
}

/// Memory NIXL registered (`DRAM_SEG`): reads land in it with no copy.
pub struct Region {
    pub(crate) base: usize,
    pub(crate) len: usize,
    /// The registered buffer, out of its place while a read lands in it.
    pub(crate) buffer: std::sync::Mutex<Option<rasa_client::RegisteredBuffer>>,
}

/// Writes `msg` into `err[..err_len]`, NUL-terminated and cut to fit.
fn say(err: *mut c_char, err_len: usize, msg: &str) {
    if err.is_null() || err_len == 0 {
        return;
    }
    let n = msg.len().min(err_len - 1);
    // SAFETY: the caller gave `err` as `err_len` writable bytes; `n + 1 <= err_len`.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), err.cast::<u8>(), n);
        *err.add(n) = 0;
    }
}

/// `ptr[..len]` as a string, when it is one.
fn text<'a>(ptr: *const c_char, len: usize) -> Option<&'a str> {
    if ptr.is_null() {
        return (len == 0).then_some("");
    }
    // SAFETY: the caller gave `ptr` as `len` readable bytes that outlive this call.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    std::str::from_utf8(bytes).ok()
}

/// What was `made`, handed to C (`into`: a pointer the C side owns from then), or null
/// with why in `err`.
fn handed<T, P>(
    made: Result<T, String>,
    into: impl FnOnce(T) -> *mut P,
    err: *mut c_char,
    err_len: usize,
) -> *mut P {
    made.map(into).unwrap_or_else(|why| {
        say(err, err_len, &why);
        std::ptr::null_mut()
    })
}

/// Drops what [`handed`] gave C as a box (null: nothing).
///
/// # Safety
/// `p` came from `Box::into_raw` and is not used again.
unsafe fn drop_boxed<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: as this function's contract says; dropped once.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// This plugin's version (the workspace's), NUL-terminated, for NIXL's plugin table.
#[no_mangle]
pub extern "C" fn rasa_nixl_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The settings a NIXL backend is created with (`create_backend("RASA", {...})`).
#[repr(C)]
pub struct Settings {
    /// The gateway's URL (several comma-separated for a cluster).
    pub endpoint: *const c_char,
    /// Its length.
    pub endpoint_len: usize,
    /// The namespace every key lives in (empty: the default one).
    pub namespace: *const c_char,
    /// Its length.
    pub namespace_len: usize,
    /// A bearer token (empty: none).
    pub token: *const c_char,
    /// Its length.
    pub token_len: usize,
    /// `auto`, `required` or `off`.
    pub fast_path: *const c_char,
    /// Its length.
    pub fast_path_len: usize,
    /// The most one transfer may take, in milliseconds (0: 30 s).
    pub timeout_ms: u64,
}

/// Makes a backend's client from `settings`; null (and why, in `err`) when it cannot be.
///
/// # Safety
/// `settings` points to a valid [`Settings`] whose strings are readable for their
/// lengths; `err` is `err_len` writable bytes (or null).
#[no_mangle]
pub unsafe extern "C" fn rasa_nixl_open(
    settings: *const Settings,
    err: *mut c_char,
    err_len: usize,
) -> *mut Backend {
    if settings.is_null() {
        say(err, err_len, "no settings");
        return std::ptr::null_mut();
    }
    // SAFETY: checked for null; the caller keeps it valid for this call.
    let s = unsafe { &*settings };
    handed(open(s), |b| Box::into_raw(Box::new(b)), err, err_len)
}

fn open(s: &Settings) -> Result<Backend, String> {
    let field = |p, n, name: &str| text(p, n).ok_or_else(|| format!("{name} is not UTF-8"));
    let endpoint = field(s.endpoint, s.endpoint_len, "endpoint")?;
    if endpoint.is_empty() {
        return Err(
            "the backend needs an endpoint: the gateway's URL (e.g. http://127.0.0.1:8080)".into(),
        );
    }
    let fast_path = match field(s.fast_path, s.fast_path_len, "fast_path")? {
        "" | "auto" => FastPath::Auto,
        "required" | "on" => FastPath::Required,
        "off" => FastPath::Off,
        other => return Err(format!("fast_path is auto, required or off, not {other:?}")),
    };
    let timeout = Duration::from_millis(if s.timeout_ms == 0 {
        30_000
    } else {
        s.timeout_ms
    });
    let mut b = Client::builder(endpoint)
        .fast_path(fast_path)
        .timeout(timeout);
    let namespace = field(s.namespace, s.namespace_len, "namespace")?;
    if !namespace.is_empty() {
        b = b.namespace(namespace);
    }
    let token = field(s.token, s.token_len, "token")?;
    if !token.is_empty() {
        b = b.token(token);
    }
    let client = xfer::runtime()
        .block_on(async { b.build() })
        .map_err(|e| e.to_string())?;
    Ok(Backend { client, timeout })
}

/// Drops a backend made by [`rasa_nixl_open`] (null: nothing).
///
/// # Safety
/// `backend` came from [`rasa_nixl_open`] and is not used again; no transfer of it is
/// under way (NIXL releases its requests first).
#[no_mangle]
pub unsafe extern "C" fn rasa_nixl_close(backend: *mut Backend) {
    // SAFETY: made by `Box::into_raw` in `rasa_nixl_open`, dropped once (the contract).
    unsafe { drop_boxed(backend) }
}

/// Registers NIXL's memory `addr..addr+len` for reads to land in (with the fabric, once,
/// the first time a read lands there); null (and why) when it cannot be.
///
/// # Safety
/// `addr..addr+len` is memory the caller owns, writable, that stays valid until
/// [`rasa_nixl_deregister`]; `err` is `err_len` writable bytes (or null).
#[no_mangle]
pub unsafe extern "C" fn rasa_nixl_register(
    addr: usize,
    len: usize,
    err: *mut c_char,
    err_len: usize,
) -> *mut Region {
    if addr == 0 || len == 0 {
        say(
            err,
            err_len,
            "no memory to register (a null address or no bytes)",
        );
        return std::ptr::null_mut();
    }
    // SAFETY: as this function's contract says.
    let owner = unsafe { xfer::Raw::new(addr, len) };
    let region = rasa_client::RegisteredBuffer::from_owned(owner)
        .map(|buf| Region {
            base: addr,
            len,
            buffer: std::sync::Mutex::new(Some(buf)),
        })
        .map_err(|e| e.to_string());
    handed(region, |r| Box::into_raw(Box::new(r)), err, err_len)
}

/// Drops a registration made by [`rasa_nixl_register`] (null: nothing).
///
/// # Safety
/// `region` came from [`rasa_nixl_register`] and is not used again; no transfer into it
/// is under way.
#[no_mangle]
pub unsafe extern "C" fn rasa_nixl_deregister(region: *mut Region) {
    // SAFETY: made by `Box::into_raw` in `rasa_nixl_register`, dropped once (the contract).
    unsafe { drop_boxed(region) }
}

/// Starts a transfer of `items` (`write`: local memory to keys; else keys to local
/// memory) and returns it at once; [`rasa_nixl_check`] says how it goes. Null (and why)
/// when an argument is wrong: nothing was started.
///
/// # Safety
/// `backend` came from [`rasa_nixl_open`]; `items` points to `n` valid [`Item`]s whose
/// keys are readable and whose memory stays valid until [`rasa_nixl_release`]; `err` is
/// `err_len` writable bytes (or null).
#[no_mangle]
pub unsafe extern "C" fn rasa_nixl_post(
    backend: *const Backend,
    write: bool,
    items: *const Item,
    n: usize,
    err: *mut c_char,
    err_len: usize,
) -> *mut Xfer {
    if backend.is_null() || (items.is_null() && n > 0) {
        say(err, err_len, "no backend or no items");
        return std::ptr::null_mut();
    }
    // SAFETY: checked for null; valid for this call as the contract says.
    let (backend, items) = unsafe {
        (
            &*backend,
            if n == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(items, n)
            },
        )
    };
    let started = xfer::start(&backend.client, backend.timeout, write, items);
    handed(started, |x| Arc::into_raw(x).cast_mut(), err, err_len)
}

/// How a transfer goes: [`IN_PROGRESS`], [`DONE`], or an error code (and why, in `err`).
///
/// # Safety
/// `xfer` came from [`rasa_nixl_post`] and was not released; `err` is `err_len` writable
/// bytes (or null).
#[no_mangle]
pub unsafe extern "C" fn rasa_nixl_check(
    xfer: *const Xfer,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    if xfer.is_null() {
        say(err, err_len, "no transfer");
        return INVALID;
    }
    // SAFETY: a live `Arc<Xfer>` made by `rasa_nixl_post`.
    let x = unsafe { &*xfer };
    let (code, why) = x.state();
    if let Some(why) = why {
        say(err, err_len, &why);
    }
    code
}

/// Ends a transfer: waits for it to stop touching NIXL's memory (at most its timeout and a
/// margin), then drops it. Returns [`DONE`], or [`FAILED`] when it had to give up waiting.
///
/// # Safety
/// `xfer` came from [`rasa_nixl_post`] and is not used again.
#[no_mangle]
pub unsafe extern "C" fn rasa_nixl_release(xfer: *mut Xfer) -> c_int {
    if xfer.is_null() {
        return DONE;
    }
    // SAFETY: made by `Arc::into_raw` in `rasa_nixl_post`, released once.
    let x = unsafe { Arc::from_raw(xfer.cast_const()) };
    if x.wait_end() {
        DONE
    } else {
        FAILED
    }
}
