//! Where to open an endpoint ([`FabricConfig`]) and the `fi_getinfo` query that finds a
//! provider for it, with the hints Rasa asks for.

use std::ffi::CString;
use std::ptr::{self, NonNull};

use super::error::{c_text, check, strerror, FabricError};
use super::plan::Plan;
use crate::sys;

/// Where and how to open a fabric endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricConfig {
    /// libfabric provider name: `efa`, `tcp;ofi_rxm`, `sockets`, …
    pub provider: String,
    /// Local address to bind to (an IP or interface address); `None` lets the provider pick.
    /// Not used for `efa`, whose devices are not matched by IP (see [`super::plan`]).
    pub node: Option<String>,
    /// Domain (NIC) to open, e.g. `rdmap16s27-rdm` on EFA; `None`: the first one found.
    pub domain: Option<String>,
    /// Whether the endpoint serves reads (a gateway's) rather than issues them: on `shm`
    /// a serving endpoint gets a deep command queue ([`super::plan::SHM_SERVING_RX_SIZE`]).
    pub serving: bool,
    /// On `shm`, the gateway's pid when this process may read its memory with
    /// cross-memory attach ([`crate::local::probe`] said so): reads then copy with
    /// `process_vm_readv` themselves — what shm's fast path does, without the provider's
    /// lock on the gateway's region (which made reads of one gateway copy one at a time)
    /// and without the first contact that needs the gateway's progress.
    pub cma_pid: Option<u32>,
}

impl FabricConfig {
    /// A configuration for `provider`, binding to `node` if given.
    pub fn new(provider: impl Into<String>, node: Option<String>) -> Self {
        Self {
            provider: provider.into(),
            node,
            domain: None,
            serving: false,
            cma_pid: None,
        }
    }

    /// The same `shm` configuration, reading the gateway `pid`'s memory directly
    /// ([`FabricConfig::cma_pid`]).
    pub fn with_cma(mut self, pid: u32) -> Self {
        self.cma_pid = Some(pid);
        self
    }

    /// The same configuration for an endpoint that serves reads ([`FabricConfig::serving`]).
    pub fn serving(mut self) -> Self {
        self.serving = true;
        self
    }

    /// The same configuration, opening the domain (NIC) named `domain`.
    pub fn with_domain(mut self, domain: Option<String>) -> Self {
        self.domain = domain;
        self
    }
}

/// An `fi_info` list returned by `fi_getinfo` (or allocated by `fi_dupinfo`).
pub(super) struct Info(pub(super) NonNull<sys::fi_info>);

impl Drop for Info {
    fn drop(&mut self) {
        // An Info exists only from a loaded library's fi_getinfo/fi_dupinfo.
        let Some(l) = crate::library::loaded() else {
            return;
        };
        // SAFETY: we own this list (from fi_getinfo/fi_dupinfo) and free it exactly once.
        unsafe { l.lib.fi_freeinfo(self.0.as_ptr()) }
    }
}

pub(super) const MR_MODE_OFFERED: u32 =
    sys::FI_MR_LOCAL | sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY;

impl Info {
    pub(super) fn get(cfg: &FabricConfig) -> Result<Info, FabricError> {
        let (runtime, header) = library_versions().map_err(FabricError::Library)?;
        let plan = Plan::new(cfg, header, runtime);
        if let Some(ignored) = &plan.ignored_node {
            tracing::warn!(
                provider = %plan.provider,
                "the local address {ignored} is not used: EFA devices are chosen by domain name (e.g. --fabric-domain rdmap16s27-rdm), not by IP"
            );
        }
        Self::query(&plan, Some(&cfg.provider))
    }

    /// Every provider offering what Rasa needs on this machine (no provider named).
    pub(super) fn all(api_version: u32) -> Result<Option<Info>, FabricError> {
        let plan = Plan {
            provider: String::new(),
            node: None,
            ignored_node: None,
            fabric_name: None,
            domain_name: None,
            rx_size: None,
            api_version,
        };
        match Self::query(&plan, None) {
            Ok(info) => Ok(Some(info)),
            Err(FabricError::Unsupported { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn query(plan: &Plan, provider: Option<&str>) -> Result<Info, FabricError> {
        let cfg_provider = provider.unwrap_or("any").to_owned();
        // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with its attribute structs.
        let hints = unsafe { lib()?.fi_dupinfo(ptr::null()) };
        let hints = Info(NonNull::new(hints).ok_or_else(|| FabricError::Call {
            call: "fi_allocinfo",
            errno: libc::ENOMEM,
            text: strerror(libc::ENOMEM),
        })?);
        let cstr = |what: &str, s: &str| {
            CString::new(s).map_err(|_| FabricError::Unsupported {
                provider: cfg_provider.clone(),
                why: format!("the {what} contains a NUL byte"),
            })
        };
        let prov = provider.map(|p| cstr("provider name", p)).transpose()?;
        let fabric_name = plan
            .fabric_name
            .map(|f| cstr("fabric name", f))
            .transpose()?;
        let domain_name = plan
            .domain_name
            .as_deref()
            .map(|d| cstr("domain name", d))
            .transpose()?;
        let h = hints.0.as_ptr();
        // SAFETY: `h` and its attribute pointers were allocated by fi_dupinfo and are
        // valid; prov_name must be malloc'd because fi_freeinfo frees it (strdup does).
        unsafe {
            // Reads of published frames, and one-sided writes of values into upload regions.
            (*h).caps = (sys::FI_RMA
                | sys::FI_READ
                | sys::FI_REMOTE_READ
                | sys::FI_WRITE
                | sys::FI_REMOTE_WRITE) as u64;
            // We pass an fi_context2 with every operation, so providers may use it.
            (*h).mode = sys::rasa_fi_context_modes();
            (*(*h).ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
            // Rasa only issues RMA reads (a few in flight) and never receives messages:
            // small queues keep providers from preallocating tens of MiB of buffers.
            (*(*h).tx_attr).size = 256;
            if let Some(rx) = plan.rx_size {
                (*(*h).rx_attr).size = rx;
            }
            (*(*h).domain_attr).mr_mode = MR_MODE_OFFERED as i32;
            (*(*h).domain_attr).threading = sys::fi_threading_FI_THREAD_SAFE;
            if let Some(p) = &prov {
                (*(*h).fabric_attr).prov_name = libc::strdup(p.as_ptr());
            }
            if let Some(f) = &fabric_name {
                (*(*h).fabric_attr).name = libc::strdup(f.as_ptr());
            }
            if let Some(d) = &domain_name {
                (*(*h).domain_attr).name = libc::strdup(d.as_ptr());
            }
        }
        let node = plan
            .node
            .as_deref()
            .map(|n| cstr("node address", n))
            .transpose()?;
        let (node_ptr, flags) = match &node {
            Some(n) => (n.as_ptr(), sys::FI_SOURCE),
            None => (ptr::null(), 0),
        };
        let mut out: *mut sys::fi_info = ptr::null_mut();
        // SAFETY: all pointers are valid for the call; `out` receives a list we then own.
        let ret = unsafe {
            lib()?.fi_getinfo(plan.api_version, node_ptr, ptr::null(), flags, h, &mut out)
        };
        check("fi_getinfo", ret as isize).map_err(|e| match e {
            FabricError::Call { errno, text, .. } if errno == sys::FI_ENODATA as i32 => {
                FabricError::Unsupported {
                    provider: cfg_provider.clone(),
                    why: format!(
                        "no matching provider/interface ({text}); is provider {:?} available (fi_info -l){}{}?",
                        cfg_provider,
                        plan.node
                            .as_deref()
                            .map(|n| format!(" and is {n} a local address"))
                            .unwrap_or_default(),
                        plan.domain_name
                            .as_deref()
                            .map(|d| format!(" and is {d} one of its domains (rasa-gateway fabric check)"))
                            .unwrap_or_default(),
                    ),
                }
            }
            other => other,
        })?;
        let info = Info(NonNull::new(out).ok_or_else(|| FabricError::Unsupported {
            provider: cfg_provider.clone(),
            why: "fi_getinfo returned nothing".into(),
        })?);
        Ok(info)
    }

    pub(super) fn raw(&self) -> *mut sys::fi_info {
        self.0.as_ptr()
    }
}

/// The (runtime library, headers) versions of libfabric, packed as `FI_VERSION`, loading
/// the library if it is not yet; the error says why it cannot be loaded.
pub fn library_versions() -> Result<(u32, u32), String> {
    let l = crate::library::load()?;
    // SAFETY: constant-returning calls.
    Ok(unsafe { (l.lib.fi_version(), sys::rasa_fi_header_version()) })
}

/// The loaded library's functions (loading it on first use).
pub(super) fn lib() -> Result<&'static sys::LibFabric, FabricError> {
    crate::library::load()
        .map(|l| &l.lib)
        .map_err(FabricError::Library)
}

/// Every (provider, fabric, domain) on this machine that offers what Rasa needs (RMA reads
/// on RDM endpoints), asking for API `api_version`; empty when none does or the query fails.
pub fn offered(api_version: u32) -> Vec<(String, String, String)> {
    let Ok(Some(info)) = Info::all(api_version) else {
        return Vec::new();
    };
    let mut out: Vec<(String, String, String)> = Vec::new();
    let mut cur = info.raw();
    while !cur.is_null() {
        // SAFETY: `cur` walks the list fi_getinfo returned, which `info` owns and keeps
        // alive; each entry's attribute pointers are valid or NULL.
        let entry = unsafe {
            let e = (
                c_text((*(*cur).fabric_attr).prov_name),
                c_text((*(*cur).fabric_attr).name),
                c_text((*(*cur).domain_attr).name),
            );
            cur = (*cur).next;
            e
        };
        if !out.contains(&entry) {
            out.push(entry);
        }
    }
    out
}
