//! Safe owners for libfabric objects.
//!
//! Every `fid_*` is owned by one RAII type whose `Drop` calls `fi_close`; children hold an
//! `Arc` of their parent (endpoint → domain → fabric), so a parent is closed only after all
//! its children. A [`MemoryRegion`] holds an `Arc` of the [`ArenaBuffer`] it registers, so
//! registered memory cannot be freed while its region is open.
//!
//! One code path for every provider: `FI_EP_RDM` endpoints with `FI_RMA | FI_READ |
//! FI_REMOTE_READ | FI_WRITE | FI_REMOTE_WRITE` (reads of frames, writes into upload
//! regions). The memory-registration mode is negotiated: we offer
//! `FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY` and honour what the
//! provider keeps ([`Node::virtual_addressing`], [`Node::provider_keys`]).

mod error;
mod events;
mod info;
mod owners;
pub mod plan;
mod provided;
pub mod queue;

use std::ptr::{self, NonNull};
use std::sync::Arc;

use error::c_text;
pub(crate) use error::check;
pub use error::{strerror, FabricError};
pub use info::{library_versions, offered, FabricConfig};
pub use owners::{Domain, MemoryRegion};
pub use provided::Provided;

/// Access of a local buffer that one-sided reads write into (`FI_READ`), for
/// [`Node::register`].
pub const ACCESS_READ: u64 = sys::FI_READ as u64;

/// Access flag for memory that peers read one-sided (what the gateway registers).
pub const ACCESS_REMOTE_READ: u64 = sys::FI_REMOTE_READ as u64;

/// Access flag for memory that peers write one-sided (a gateway's upload regions: never
/// readable by the key that opens them for writes).
pub const ACCESS_REMOTE_WRITE: u64 = sys::FI_REMOTE_WRITE as u64;

/// Access of a local buffer that one-sided writes send from (`FI_WRITE`).
pub const ACCESS_WRITE: u64 = sys::FI_WRITE as u64;

use info::{Info, MR_MODE_OFFERED};
use owners::{
    open_av, open_cq, open_endpoint, AddressVector, CompletionQueue, Endpoint, EventQueue, Fabric,
};

use crate::buffer::ArenaBuffer;
use crate::sys;

/// Names of libfabric address formats.
fn addr_format_name(f: u32) -> String {
    match f {
        sys::FI_SOCKADDR => "FI_SOCKADDR".into(),
        sys::FI_SOCKADDR_IN => "FI_SOCKADDR_IN".into(),
        sys::FI_SOCKADDR_IN6 => "FI_SOCKADDR_IN6".into(),
        sys::FI_ADDR_EFA => "FI_ADDR_EFA".into(),
        other => format!("format {other}"),
    }
}

/// A complete local fabric stack: fabric, domain, completion queue, address vector and an
/// enabled RDM endpoint, as negotiated with one provider.
pub struct Node {
    // Field order is drop order: endpoint first, then what it was bound to.
    ep: Endpoint,
    /// Where the provider reports asynchronous errors (see [`events`]); `None` where the
    /// provider does not take one on an RDM endpoint.
    eq: Option<Arc<EventQueue>>,
    cq: Arc<CompletionQueue>,
    av: Arc<AddressVector>,
    domain: Arc<Domain>,
    provided: Provided,
    /// The key the next local registration asks for (keys are unique in a domain; local
    /// ones are never advertised).
    local_keys: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("provider", &self.provided.provider)
            .field("mr_mode", &format_args!("{:#x}", self.provided.mr_mode))
            .field("addr_format", &self.provided.address_format())
            .finish()
    }
}

impl Node {
    /// Opens the stack for `cfg`.
    pub fn open(cfg: &FabricConfig) -> Result<Node, FabricError> {
        let info = Info::get(cfg)?;
        let i = info.raw();
        // SAFETY: fi_getinfo returned a valid first entry with its attribute structs.
        let (
            provider,
            fabric_name,
            domain_name,
            mr_mode,
            mr_key_size,
            threading,
            addr_format,
            mode,
        ) = unsafe {
            let text = |p: *const libc::c_char| (!p.is_null()).then(|| c_text(p));
            let provider =
                text((*(*i).fabric_attr).prov_name).unwrap_or_else(|| cfg.provider.clone());
            (
                provider,
                text((*(*i).fabric_attr).name).unwrap_or_default(),
                text((*(*i).domain_attr).name).unwrap_or_default(),
                (*(*i).domain_attr).mr_mode as u32,
                (*(*i).domain_attr).mr_key_size,
                (*(*i).domain_attr).threading,
                (*i).addr_format,
                (*i).mode,
            )
        };
        let unsupported = |why: String| FabricError::Unsupported {
            provider: provider.clone(),
            why,
        };
        if threading != sys::fi_threading_FI_THREAD_SAFE {
            return Err(unsupported("no FI_THREAD_SAFE domain".into()));
        }
        // SAFETY: a constant-returning shim function.
        if mode & !unsafe { sys::rasa_fi_context_modes() } != 0 {
            return Err(unsupported(format!(
                "requires unsupported mode bits {mode:#x}"
            )));
        }
        if mr_mode & !MR_MODE_OFFERED != 0 {
            return Err(unsupported(format!(
                "requires memory-registration mode bits {:#x} beyond those offered",
                mr_mode & !MR_MODE_OFFERED
            )));
        }

        let mut fabric: *mut sys::fid_fabric = ptr::null_mut();
        // SAFETY: fabric_attr comes from fi_getinfo; `fabric` receives a new object we own.
        let ret = unsafe { info::lib()?.fi_fabric((*i).fabric_attr, &mut fabric, ptr::null_mut()) };
        check("fi_fabric", ret as isize)?;
        let fabric = Arc::new(Fabric {
            raw: NonNull::new(fabric).expect("fi_fabric succeeded"),
        });

        let mut domain: *mut sys::fid_domain = ptr::null_mut();
        // SAFETY: valid fabric and info; `domain` receives a new object we own.
        check("fi_domain", unsafe {
            sys::rasa_fi_domain(fabric.raw.as_ptr(), i, &mut domain, ptr::null_mut())
        } as isize)?;
        let domain = Arc::new(Domain {
            raw: NonNull::new(domain).expect("fi_domain succeeded"),
            _fabric: fabric,
        });

        let cq = Arc::new(open_cq(&domain)?);

        let av = Arc::new(open_av(&domain)?);
        let (ep, eq) = open_endpoint(&domain, &info, &cq, &av, &provider)?;
        drop(info);
        Ok(Node {
            ep,
            eq,
            cq,
            av,
            domain,
            provided: Provided {
                provider,
                fabric_name,
                domain_name,
                mr_mode,
                mr_key_size,
                addr_format,
            },
            local_keys: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// What the provider chose and negotiated when the node was opened.
    pub fn provided(&self) -> &Provided {
        &self.provided
    }

    /// The endpoint's own address (`fi_getname`), to give to peers.
    pub fn address(&self) -> Result<Vec<u8>, FabricError> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: buf has `len` writable bytes; fi_getname writes at most that and updates len.
        let ret = unsafe {
            sys::rasa_fi_getname(self.ep.raw.as_ptr(), buf.as_mut_ptr().cast(), &mut len)
        };
        if ret == -(sys::FI_ETOOSMALL as i32) {
            buf.resize(len, 0);
            // SAFETY: as above, with the size the provider asked for.
            check("fi_getname", unsafe {
                sys::rasa_fi_getname(self.ep.raw.as_ptr(), buf.as_mut_ptr().cast(), &mut len)
            } as isize)?;
        } else {
            check("fi_getname", ret as isize)?;
        }
        buf.truncate(len);
        Ok(buf)
    }

    /// Inserts a peer's address into the address vector.
    pub(crate) fn insert_peer(&self, addr: &[u8]) -> Result<sys::fi_addr_t, FabricError> {
        let mut out: sys::fi_addr_t = 0;
        // SAFETY: addr is a readable peer address of this provider's format (checked by the
        // provider); one address in, one fi_addr_t out.
        let n = check("fi_av_insert", unsafe {
            sys::rasa_fi_av_insert(
                self.av.raw.as_ptr(),
                addr.as_ptr().cast(),
                1,
                &mut out,
                0,
                ptr::null_mut(),
            )
        } as isize)?;
        if n != 1 {
            return Err(FabricError::Call {
                call: "fi_av_insert",
                errno: libc::EINVAL,
                text: "the peer address was not accepted".into(),
            });
        }
        Ok(out)
    }

    /// Registers all of `buffer` with `access` (`FI_REMOTE_READ` to serve, `FI_READ` to
    /// read into), asking for `requested_key` where the provider uses requested keys.
    pub fn register(
        &self,
        buffer: Arc<ArenaBuffer>,
        access: u64,
        requested_key: u64,
    ) -> Result<MemoryRegion, FabricError> {
        let mut mr: *mut sys::fid_mr = ptr::null_mut();
        // SAFETY: the buffer is a live allocation of `capacity` bytes that the region keeps
        // alive (it holds the Arc) until the region is closed.
        check("fi_mr_reg", unsafe {
            sys::rasa_fi_mr_reg(
                self.domain.raw.as_ptr(),
                buffer.base_addr() as *const libc::c_void,
                buffer.capacity(),
                access,
                0,
                requested_key,
                0,
                &mut mr,
                ptr::null_mut(),
            )
        } as isize)?;
        let raw = NonNull::new(mr).expect("fi_mr_reg succeeded");
        // SAFETY: `raw` is an open region.
        let (key, desc) = unsafe {
            (
                sys::rasa_fi_mr_key(raw.as_ptr()),
                sys::rasa_fi_mr_desc(raw.as_ptr()),
            )
        };
        Ok(MemoryRegion {
            raw,
            key,
            desc,
            buffer,
            _domain: Arc::clone(&self.domain),
        })
    }

    /// Registers all of `buffer` for one-sided reads to land in (`FI_READ`) and writes to
    /// send from (`FI_WRITE`), under a key no other local registration of this node holds.
    pub fn register_local(&self, buffer: Arc<ArenaBuffer>) -> Result<MemoryRegion, FabricError> {
        let key = self
            .local_keys
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.register(buffer, ACCESS_READ | ACCESS_WRITE, key)
    }

    /// The remote address a peer must use for `offset` within `region`.
    pub fn remote_addr(&self, region: &MemoryRegion, offset: usize) -> u64 {
        if self.provided.virtual_addressing() {
            (region.buffer.base_addr() + offset) as u64
        } else {
            offset as u64
        }
    }

    /// Whether `region` was registered in this node's domain (so its descriptor may be
    /// passed to this node's reads). A region holds its domain open, so a domain address
    /// is never reused while a region names it.
    pub fn owns(&self, region: &MemoryRegion) -> bool {
        Arc::ptr_eq(&self.domain, region.domain())
    }

    /// Whether the completion queue has a wait object (blocking reads possible).
    pub fn waitable(&self) -> bool {
        self.cq.waitable
    }
}
