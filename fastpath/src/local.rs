//! Whether a reader is on its gateway's host and may read it over `shm`.
//!
//! `shm` copies with `process_vm_readv` (cross-memory attach, CMA) from the reader's
//! process, which works only on the same kernel, in the same PID namespace, and when the
//! kernel lets the reader ptrace the gateway (same user, `kernel.yama.ptrace_scope`).
//! Without CMA, libfabric 1.17 silently falls back to a slow path that copies through
//! the gateway's CPU; a reader should know before it picks `shm`. So the gateway publishes
//! its [`HostIdentity`] (boot id, PID namespace) with its pid and the address of a *probe*
//! (a few bytes of its memory whose content it also publishes), and the reader:
//!
//! 1. compares the host identity with its own ([`HostIdentity::here`]): another machine
//!    or container is told apart without a system call to a foreign pid;
//! 2. reads the probe with `process_vm_readv` ([`probe`]): EPERM says CMA is not
//!    permitted, ESRCH that the pid is not visible here, other bytes that the pid is
//!    another process; only the published bytes mean `shm` reads will work.

/// What identifies a kernel and a PID namespace: two processes with the same identity
/// see the same pids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostIdentity {
    /// `/proc/sys/kernel/random/boot_id`: one per boot of one machine.
    pub boot_id: String,
    /// The PID namespace (`/proc/self/ns/pid`, e.g. `pid:[4026531836]`).
    pub pid_namespace: String,
}

impl HostIdentity {
    /// This process's host identity; `None` where `/proc` does not tell it.
    pub fn here() -> Option<Self> {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let pid_namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
        Some(Self {
            boot_id: boot_id.trim().to_owned(),
            pid_namespace: pid_namespace.to_string_lossy().into_owned(),
        })
    }
}

/// Why a reader cannot use `shm` towards a gateway.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotLocal {
    /// Another machine, another boot, or another PID namespace (a container).
    #[error("the gateway is on another host or in another PID namespace ({0})")]
    OtherHost(String),
    /// The kernel refused cross-memory attach.
    #[error(
        "cross-memory attach to the gateway (pid {pid}) is not permitted: run the reader as the gateway's user, and check kernel.yama.ptrace_scope (0 or 1 for a child, or CAP_SYS_PTRACE)"
    )]
    NotPermitted {
        /// The gateway's pid.
        pid: u32,
    },
    /// The pid holds another process or none (the gateway restarted, or another namespace).
    #[error("pid {pid} is not the gateway here: {why}")]
    NotTheGateway {
        /// The pid asked for.
        pid: u32,
        /// What the probe found.
        why: String,
    },
}

/// Whether a process on `gateway`'s host, as pid `pid`, holds `expected` at `addr` and
/// lets this process read it with `process_vm_readv` — i.e. whether `shm` reads of that
/// gateway will take the fast path from here.
pub fn probe(gateway: &HostIdentity, pid: u32, addr: u64, expected: &[u8]) -> Result<(), NotLocal> {
    match HostIdentity::here() {
        Some(here) if here == *gateway => {}
        Some(here) => {
            let what = if here.boot_id != gateway.boot_id {
                "another boot id"
            } else {
                "another PID namespace"
            };
            return Err(NotLocal::OtherHost(what.into()));
        }
        None => {
            return Err(NotLocal::OtherHost(
                "this process cannot tell its host (no /proc)".into(),
            ))
        }
    }
    let mut got = vec![0u8; expected.len()];
    let local = libc::iovec {
        iov_base: got.as_mut_ptr().cast(),
        iov_len: got.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: expected.len(),
    };
    // SAFETY: `local` describes `got`, a live buffer of its length that only this call
    // writes; the remote iovec names another process's memory, which the kernel checks and
    // reads (never this process's). Both iovec arrays have one element.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) => NotLocal::NotPermitted { pid },
            Some(libc::ESRCH) => NotLocal::NotTheGateway {
                pid,
                why: "no such process".into(),
            },
            _ => NotLocal::NotTheGateway {
                pid,
                why: e.to_string(),
            },
        });
    }
    if got[..n as usize] != *expected {
        return Err(NotLocal::NotTheGateway {
            pid,
            why: "its memory does not hold the gateway's probe".into(),
        });
    }
    Ok(())
}

/// Why a cross-memory copy failed (the reader makes its [`crate::reader::ReadError`] of it).
#[derive(Debug)]
pub(crate) enum CopyError {
    /// The address is no longer mapped there (`EFAULT`, or a short copy): a stale
    /// descriptor.
    Unmapped(crate::fabric::FabricError),
    /// The process is gone (`ESRCH`).
    Gone(crate::fabric::FabricError),
    /// Anything else.
    Failed(crate::fabric::FabricError),
}

/// The most iovecs one cross-memory call takes (the kernel's `UIO_MAXIOV`).
pub(crate) const MAX_IOV: usize = 1024;

/// One piece of a batched cross-memory copy: `len` bytes at `remote` in the other process
/// to `local` here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Part {
    /// Where the bytes land here.
    pub(crate) local: *mut u8,
    /// Where they are in the other process.
    pub(crate) remote: u64,
    /// How many.
    pub(crate) len: usize,
}

/// Copies every one of `parts` (at most [`MAX_IOV`]) from process `pid` with a single
/// `process_vm_readv`: one system call for a batch of frames instead of one per piece (the
/// call's fixed cost, a permission check and a page-table walk, was most of a small
/// value's read). `Err((i, why))` when part `i` could not be copied: the parts before it
/// were; it and those after it hold nothing meaningful. An address the gateway no longer
/// maps (`EFAULT`, or a short copy) is a stale descriptor; a process that is gone
/// (`ESRCH`) a lost connection.
///
/// # Safety
///
/// Each part's `local .. local + len` must be valid for writes that nothing else reads or
/// writes during the call, and the parts must not overlap.
pub(crate) unsafe fn copy_many_from(pid: u32, parts: &[Part]) -> Result<(), (usize, CopyError)> {
    // SAFETY: as the caller promised.
    unsafe { cross(pid, parts, false) }
}

/// Copies every one of `parts` (at most [`MAX_IOV`]) to process `pid` with a single
/// `process_vm_writev`: a batch of one-sided writes done by this process (`shm`'s fast
/// path). Errors as [`copy_many_from`]'s.
///
/// # Safety
///
/// Each part's `local .. local + len` must be valid for reads during the call.
pub(crate) unsafe fn copy_many_to(pid: u32, parts: &[Part]) -> Result<(), (usize, CopyError)> {
    // SAFETY: as the caller promised; the kernel only reads the local parts.
    unsafe { cross(pid, parts, true) }
}

/// [`copy_many_from`] (`write` false) or [`copy_many_to`].
///
/// # Safety
///
/// Reading: as [`copy_many_from`]; writing: as [`copy_many_to`].
unsafe fn cross(pid: u32, parts: &[Part], write: bool) -> Result<(), (usize, CopyError)> {
    assert!(parts.len() <= MAX_IOV, "at most MAX_IOV parts a call");
    if parts.is_empty() {
        return Ok(());
    }
    let iov = |base: *mut libc::c_void, len| libc::iovec {
        iov_base: base,
        iov_len: len,
    };
    let local: Vec<libc::iovec> = parts.iter().map(|p| iov(p.local.cast(), p.len)).collect();
    let remote: Vec<libc::iovec> = parts
        .iter()
        .map(|p| iov(p.remote as usize as *mut libc::c_void, p.len))
        .collect();
    let (call, f): (_, unsafe extern "C" fn(_, _, _, _, _, _) -> _) = if write {
        ("process_vm_writev", libc::process_vm_writev)
    } else {
        ("process_vm_readv", libc::process_vm_readv)
    };
    // SAFETY: each local iovec describes memory the caller lets this call write (reading)
    // or read (writing), see above; the remote iovecs name another process's memory,
    // which the kernel checks; both arrays have `parts.len()` (≤ UIO_MAXIOV) elements.
    let n = unsafe {
        f(
            pid as libc::pid_t,
            local.as_ptr(),
            local.len() as libc::c_ulong,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    };
    let total: usize = parts.iter().map(|p| p.len).sum();
    if n >= 0 && n as usize == total {
        return Ok(());
    }
    // Short (or failed): the first part not wholly copied is the one that failed.
    let mut done = n.max(0) as usize;
    let first = parts
        .iter()
        .position(|p| {
            let whole = done >= p.len;
            done = done.saturating_sub(p.len);
            !whole
        })
        .unwrap_or(0);
    let why = match copied(call, n.min(0), 0) {
        Err(e) => e, // the call failed: errno says why
        Ok(()) => CopyError::Unmapped(crate::fabric::FabricError::Call {
            call,
            errno: libc::EFAULT,
            text: format!(
                "copied {n} of {total} bytes: part {first} ({} bytes) is not all mapped",
                parts[first].len
            ),
        }),
    };
    Err((first, why))
}

/// What a cross-memory copy's return value `n` (of `len` bytes asked) means.
fn copied(call: &'static str, n: isize, len: usize) -> Result<(), CopyError> {
    use crate::fabric::FabricError;
    let fail = |errno: i32, text: String| FabricError::Call { call, errno, text };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        return Err(match errno {
            libc::EFAULT => CopyError::Unmapped(fail(errno, e.to_string())),
            libc::ESRCH => CopyError::Gone(fail(errno, e.to_string())),
            _ => CopyError::Failed(fail(errno, e.to_string())),
        });
    }
    if n as usize != len {
        return Err(CopyError::Unmapped(fail(
            libc::EFAULT,
            format!("copied {n} of {len} bytes: the range is not all mapped"),
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_probes_itself_from_a_child_and_a_wrong_probe_fails() {
        let here = HostIdentity::here().expect("/proc");
        let secret: &'static [u8] =
            Box::leak(b"rasa-probe 0123456789abcdef".to_vec().into_boxed_slice());
        let addr = secret.as_ptr() as u64;
        let pid = std::process::id();
        assert_eq!(probe(&here, pid, addr, secret), Ok(()));
        assert!(matches!(
            probe(&here, pid, addr, b"rasa-probe fedcba9876543210"),
            Err(NotLocal::NotTheGateway { .. })
        ));
        let other = HostIdentity {
            boot_id: "another".into(),
            ..here.clone()
        };
        assert!(matches!(
            probe(&other, pid, addr, secret),
            Err(NotLocal::OtherHost(_))
        ));
        assert!(matches!(
            probe(&here, i32::MAX as u32, addr, secret),
            Err(NotLocal::NotTheGateway { .. })
        ));
    }

    #[test]
    fn a_batch_is_copied_by_one_call_and_an_unmapped_part_is_named() {
        let pid = std::process::id();
        let src: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; 10_000];
        let lens = [64usize, 4096, 1, 5839];
        let mut parts = Vec::new();
        let mut at = 0;
        for len in lens {
            parts.push(Part {
                local: dst[at..].as_mut_ptr(),
                remote: src[at..].as_ptr() as u64,
                len,
            });
            at += len;
        }
        // SAFETY: the parts cover disjoint ranges of `dst`, alive and unread meanwhile.
        unsafe { copy_many_from(pid, &parts) }.expect("copied");
        assert_eq!(dst, src);
        // The third part names memory not mapped here: the first two are copied, and the
        // third is named as the one that failed.
        dst.fill(0);
        parts[2].remote = 8; // the null page is never mapped
                             // SAFETY: as above.
        let Err((i, why)) = (unsafe { copy_many_from(pid, &parts) }) else {
            panic!("an unmapped part was copied")
        };
        assert_eq!(i, 2);
        assert!(matches!(why, CopyError::Unmapped(_)), "{why:?}");
        assert_eq!(dst[..64 + 4096], src[..64 + 4096]);
        // The first part unmapped: the call fails as a whole.
        parts[0].remote = 8;
        // SAFETY: as above.
        let Err((i, why)) = (unsafe { copy_many_from(pid, &parts) }) else {
            panic!("an unmapped part was copied")
        };
        assert_eq!(i, 0);
        assert!(matches!(why, CopyError::Unmapped(_)), "{why:?}");
    }
}
