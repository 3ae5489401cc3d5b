//! RAII owners of libfabric objects: each `fid_*` is closed by its owner's `Drop`, and a
//! child holds an `Arc` of its parent, so parents close last.

use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::error::{check, FabricError};
use crate::buffer::ArenaBuffer;
use crate::sys;

/// Closes a fid; errors at close are logged to stderr by nobody — they cannot be acted on.
///
/// # Safety
/// `fid` must be an open libfabric object that nothing uses afterwards.
pub(super) unsafe fn close(fid: *mut sys::fid) {
    // SAFETY: guaranteed by the caller.
    let _ = unsafe { sys::rasa_fi_close(fid) };
}

/// An open fabric.
pub(super) struct Fabric {
    pub(super) raw: NonNull<sys::fid_fabric>,
}

// SAFETY: fabric objects are opened with FI_THREAD_SAFE domains; libfabric allows calls on
// them from any thread.
unsafe impl Send for Fabric {}
// SAFETY: see Send.
unsafe impl Sync for Fabric {}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: we own the fabric; children hold an Arc to us, so none is left.
        unsafe { close(&mut (*self.raw.as_ptr()).fid) }
    }
}

/// An open domain: memory registration happens here.
pub struct Domain {
    pub(super) raw: NonNull<sys::fid_domain>,
    pub(super) _fabric: Arc<Fabric>,
}

// SAFETY: the domain was opened with threading FI_THREAD_SAFE (checked in Node::open).
unsafe impl Send for Domain {}
// SAFETY: see Send.
unsafe impl Sync for Domain {}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: we own the domain; endpoints, queues and regions hold an Arc to us.
        unsafe { close(&mut (*self.raw.as_ptr()).fid) }
    }
}

/// A completion queue.
pub(super) struct CompletionQueue {
    pub(super) raw: NonNull<sys::fid_cq>,
    /// Whether it has a wait object (so `fi_cq_sread` can block).
    pub(super) waitable: bool,
    pub(super) _domain: Arc<Domain>,
}

// SAFETY: FI_THREAD_SAFE domain (checked in Node::open).
unsafe impl Send for CompletionQueue {}
// SAFETY: see Send.
unsafe impl Sync for CompletionQueue {}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: we own the queue; the endpoint bound to it holds an Arc to us.
        unsafe { close(&mut (*self.raw.as_ptr()).fid) }
    }
}

/// An address vector.
pub(super) struct AddressVector {
    pub(super) raw: NonNull<sys::fid_av>,
    pub(super) _domain: Arc<Domain>,
}

// SAFETY: FI_THREAD_SAFE domain (checked in Node::open).
unsafe impl Send for AddressVector {}
// SAFETY: see Send.
unsafe impl Sync for AddressVector {}

impl Drop for AddressVector {
    fn drop(&mut self) {
        // SAFETY: we own the AV; the endpoint bound to it holds an Arc to us.
        unsafe { close(&mut (*self.raw.as_ptr()).fid) }
    }
}

/// An event queue: where a provider reports asynchronous errors of an endpoint. The `efa`
/// provider calls `abort()` when it has such an error and no queue is bound (a read with a
/// revoked key when reads are emulated, a reader vanishing mid-read).
pub(super) struct EventQueue {
    pub(super) raw: NonNull<sys::fid_eq>,
    pub(super) _fabric: Arc<Fabric>,
}

// SAFETY: event queues of an FI_THREAD_SAFE fabric/domain are safe to use from any thread.
unsafe impl Send for EventQueue {}
// SAFETY: see Send.
unsafe impl Sync for EventQueue {}

impl Drop for EventQueue {
    fn drop(&mut self) {
        // SAFETY: we own the queue; the endpoint bound to it holds an Arc to us.
        unsafe { close(&mut (*self.raw.as_ptr()).fid) }
    }
}

/// Opens an event queue on `fabric` (no wait object: the progress thread polls it).
pub(super) fn open_eq(fabric: &Arc<Fabric>) -> Result<EventQueue, FabricError> {
    let mut attr = sys::fi_eq_attr {
        size: 64,
        wait_obj: sys::fi_wait_obj_FI_WAIT_NONE,
        ..Default::default()
    };
    let mut eq: *mut sys::fid_eq = ptr::null_mut();
    // SAFETY: valid fabric and attr; `eq` receives a new object we own.
    check("fi_eq_open", unsafe {
        sys::rasa_fi_eq_open(fabric.raw.as_ptr(), &mut attr, &mut eq, ptr::null_mut())
    } as isize)?;
    Ok(EventQueue {
        raw: NonNull::new(eq).expect("fi_eq_open succeeded"),
        _fabric: Arc::clone(fabric),
    })
}

/// An enabled RDM endpoint.
pub(super) struct Endpoint {
    pub(super) raw: NonNull<sys::fid_ep>,
    pub(super) _eq: Option<Arc<EventQueue>>,
    pub(super) _cq: Arc<CompletionQueue>,
    pub(super) _av: Arc<AddressVector>,
    pub(super) _domain: Arc<Domain>,
}

// SAFETY: FI_THREAD_SAFE domain (checked in Node::open).
unsafe impl Send for Endpoint {}
// SAFETY: see Send.
unsafe impl Sync for Endpoint {}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: we own the endpoint; closing it cancels its outstanding operations
        // before the queues, AV and domain (which we keep alive until after) are closed.
        unsafe { close(&mut (*self.raw.as_ptr()).fid) }
    }
}

/// A registered memory region over a whole [`ArenaBuffer`]. Dropping it revokes its key;
/// the buffer stays alive at least that long.
pub struct MemoryRegion {
    pub(super) raw: NonNull<sys::fid_mr>,
    pub(super) key: u64,
    pub(super) desc: *mut libc::c_void,
    pub(super) buffer: Arc<ArenaBuffer>,
    pub(super) _domain: Arc<Domain>,
}

// SAFETY: FI_THREAD_SAFE domain; the region is only read (key, desc) after creation and
// closed once in Drop.
unsafe impl Send for MemoryRegion {}
// SAFETY: see Send.
unsafe impl Sync for MemoryRegion {}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: we own the region and close it once; the buffer (our Arc) is freed only
        // after this, so the NIC never sees freed memory under a live key.
        unsafe { close(&mut (*self.raw.as_ptr()).fid) }
    }
}

impl MemoryRegion {
    /// The remote key that grants access to this region.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The registered buffer.
    pub fn buffer(&self) -> &Arc<ArenaBuffer> {
        &self.buffer
    }

    pub(crate) fn desc(&self) -> *mut libc::c_void {
        self.desc
    }

    /// The domain the region was registered in (its descriptor and key mean something
    /// only there).
    pub(crate) fn domain(&self) -> &Arc<Domain> {
        &self._domain
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("key", &format_args!("{:#x}", self.key))
            .field("buffer", &self.buffer)
            .finish()
    }
}

pub(super) fn open_cq(domain: &Arc<Domain>) -> Result<CompletionQueue, FabricError> {
    // Prefer a queue whose wait object is a file descriptor (fi_cq_sread sleeps in the
    // kernel and honours its timeout: ~0 % idle CPU); providers without one (EFA, shm) get
    // a polled queue. Not FI_WAIT_UNSPEC: shm (libfabric 1.17) answers it with a yield
    // wait that spins a core and, seen here, did not return within its 1 ms timeout.
    for wait in [sys::fi_wait_obj_FI_WAIT_FD, sys::fi_wait_obj_FI_WAIT_NONE] {
        let mut attr = sys::fi_cq_attr {
            size: 1024,
            format: sys::fi_cq_format_FI_CQ_FORMAT_CONTEXT,
            wait_obj: wait,
            ..Default::default()
        };
        let mut cq: *mut sys::fid_cq = ptr::null_mut();
        // SAFETY: valid domain and attr; `cq` receives a new object we own.
        let ret = unsafe {
            sys::rasa_fi_cq_open(domain.raw.as_ptr(), &mut attr, &mut cq, ptr::null_mut())
        };
        if ret == 0 {
            return Ok(CompletionQueue {
                raw: NonNull::new(cq).expect("fi_cq_open succeeded"),
                waitable: wait != sys::fi_wait_obj_FI_WAIT_NONE,
                _domain: Arc::clone(domain),
            });
        }
        if wait == sys::fi_wait_obj_FI_WAIT_NONE {
            check("fi_cq_open", ret as isize)?;
        }
    }
    unreachable!("the last attempt returns")
}

/// Opens an address vector (a table) on `domain`.
pub(super) fn open_av(domain: &Arc<Domain>) -> Result<AddressVector, FabricError> {
    let mut av_attr = sys::fi_av_attr {
        type_: sys::fi_av_type_FI_AV_TABLE,
        ..Default::default()
    };
    let mut av: *mut sys::fid_av = ptr::null_mut();
    // SAFETY: valid domain and attr; `av` receives a new object we own.
    check("fi_av_open", unsafe {
        sys::rasa_fi_av_open(domain.raw.as_ptr(), &mut av_attr, &mut av, ptr::null_mut())
    } as isize)?;
    Ok(AddressVector {
        raw: NonNull::new(av).expect("fi_av_open succeeded"),
        _domain: Arc::clone(domain),
    })
}

/// Opens the RDM endpoint `info` describes on `domain`, bound to `cq`, `av` and (where the
/// provider offers one; required on efa, which aborts without) an event queue, and enables
/// it. Answers the endpoint and its event queue.
pub(super) fn open_endpoint(
    domain: &Arc<Domain>,
    info: &super::info::Info,
    cq: &Arc<CompletionQueue>,
    av: &Arc<AddressVector>,
    provider: &str,
) -> Result<(Endpoint, Option<Arc<EventQueue>>), FabricError> {
    let i = info.raw();
    let mut ep: *mut sys::fid_ep = ptr::null_mut();
    // SAFETY: valid domain, and info from fi_getinfo (its owner outlives this call); `ep`
    // receives a new object we own.
    check("fi_endpoint", unsafe {
        sys::rasa_fi_endpoint(domain.raw.as_ptr(), i, &mut ep, ptr::null_mut())
    } as isize)?;
    let mut ep = Endpoint {
        raw: NonNull::new(ep).expect("fi_endpoint succeeded"),
        _eq: None,
        _cq: Arc::clone(cq),
        _av: Arc::clone(av),
        _domain: Arc::clone(domain),
    };
    // SAFETY: ep, cq and av are open objects of the same domain.
    unsafe {
        check(
            "fi_ep_bind(cq)",
            sys::rasa_fi_ep_bind(
                ep.raw.as_ptr(),
                &mut (*cq.raw.as_ptr()).fid,
                (sys::FI_TRANSMIT | sys::FI_RECV) as u64,
            ) as isize,
        )?;
        check(
            "fi_ep_bind(av)",
            sys::rasa_fi_ep_bind(ep.raw.as_ptr(), &mut (*av.raw.as_ptr()).fid, 0) as isize,
        )?;
    }
    // An event queue: required on efa (which aborts without one), taken where the
    // provider offers it elsewhere.
    let bound = open_eq(&domain._fabric).and_then(|q| {
        let q = Arc::new(q);
        // SAFETY: ep and q are open objects of the same fabric; the endpoint keeps an
        // Arc of the queue, so the queue is closed after it.
        check("fi_ep_bind(eq)", unsafe {
            sys::rasa_fi_ep_bind(ep.raw.as_ptr(), &mut (*q.raw.as_ptr()).fid, 0)
        } as isize)?;
        Ok(q)
    });
    let eq = match bound {
        Ok(q) => {
            ep._eq = Some(Arc::clone(&q));
            Some(q)
        }
        Err(e) if crate::fabric::plan::is_efa(provider) => return Err(e),
        Err(e) => {
            tracing::debug!(%provider, error = %e, "no event queue on this endpoint");
            None
        }
    };
    // SAFETY: the endpoint is bound to its queues and AV.
    unsafe {
        check("fi_enable", sys::rasa_fi_enable(ep.raw.as_ptr()) as isize)?;
    }
    Ok((ep, eq))
}
