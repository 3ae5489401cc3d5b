//! Where to open an endpoint ([`FabricConfig`]) and the `fi_getinfo` query that finds a
//! provider for it, with the hints Rasa asks for.

use std::ffi::CString;
use std::ptr::{self, NonNull};

use super::error::{check, strerror, FabricError};
use crate::sys;

/// Where and how to open a fabric endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricConfig {
    /// libfabric provider name: `efa`, `tcp;ofi_rxm`, `sockets`, …
    pub provider: String,
    /// Local address to bind to (an IP or interface address); `None` lets the provider pick.
    pub node: Option<String>,
}

impl FabricConfig {
    /// A configuration for `provider`, binding to `node` if given.
    pub fn new(provider: impl Into<String>, node: Option<String>) -> Self {
        Self {
            provider: provider.into(),
            node,
        }
    }
}

/// An `fi_info` list returned by `fi_getinfo` (or allocated by `fi_dupinfo`).
pub(super) struct Info(pub(super) NonNull<sys::fi_info>);

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: we own this list (from fi_getinfo/fi_dupinfo) and free it exactly once.
        unsafe { sys::fi_freeinfo(self.0.as_ptr()) }
    }
}

pub(super) const MR_MODE_OFFERED: u32 =
    sys::FI_MR_LOCAL | sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY;

impl Info {
    pub(super) fn get(cfg: &FabricConfig) -> Result<Info, FabricError> {
        // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with its attribute structs.
        let hints = unsafe { sys::fi_dupinfo(ptr::null()) };
        let hints = Info(NonNull::new(hints).ok_or_else(|| FabricError::Call {
            call: "fi_allocinfo",
            errno: libc::ENOMEM,
            text: strerror(libc::ENOMEM),
        })?);
        let prov = CString::new(cfg.provider.as_str()).map_err(|_| FabricError::Unsupported {
            provider: cfg.provider.clone(),
            why: "the provider name contains a NUL byte".into(),
        })?;
        let h = hints.0.as_ptr();
        // SAFETY: `h` and its attribute pointers were allocated by fi_dupinfo and are
        // valid; prov_name must be malloc'd because fi_freeinfo frees it (strdup does).
        unsafe {
            (*h).caps = (sys::FI_RMA | sys::FI_READ | sys::FI_REMOTE_READ) as u64;
            // We pass an fi_context2 with every operation, so providers may use it.
            (*h).mode = sys::rasa_fi_context_modes();
            (*(*h).ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
            // Rasa only issues RMA reads (a few in flight) and never receives messages:
            // small queues keep providers from preallocating tens of MiB of buffers.
            (*(*h).tx_attr).size = 256;
            (*(*h).rx_attr).size = 16;
            (*(*h).domain_attr).mr_mode = MR_MODE_OFFERED as i32;
            (*(*h).domain_attr).threading = sys::fi_threading_FI_THREAD_SAFE;
            (*(*h).fabric_attr).prov_name = libc::strdup(prov.as_ptr());
        }
        let node = cfg
            .node
            .as_deref()
            .map(CString::new)
            .transpose()
            .map_err(|_| FabricError::Unsupported {
                provider: cfg.provider.clone(),
                why: "the node address contains a NUL byte".into(),
            })?;
        let (node_ptr, flags) = match &node {
            Some(n) => (n.as_ptr(), sys::FI_SOURCE),
            None => (ptr::null(), 0),
        };
        let mut out: *mut sys::fi_info = ptr::null_mut();
        // SAFETY: all pointers are valid for the call; `out` receives a list we then own.
        let ret = unsafe {
            sys::fi_getinfo(
                sys::rasa_fi_header_version(),
                node_ptr,
                ptr::null(),
                flags,
                h,
                &mut out,
            )
        };
        check("fi_getinfo", ret as isize).map_err(|e| match e {
            FabricError::Call { errno, text, .. } if errno == sys::FI_ENODATA as i32 => {
                FabricError::Unsupported {
                    provider: cfg.provider.clone(),
                    why: format!(
                        "no matching provider/interface ({text}); is provider {:?} available (fi_info -l) and is {} a local address?",
                        cfg.provider,
                        cfg.node.as_deref().unwrap_or("the default interface")
                    ),
                }
            }
            other => other,
        })?;
        let info = Info(NonNull::new(out).ok_or_else(|| FabricError::Unsupported {
            provider: cfg.provider.clone(),
            why: "fi_getinfo returned nothing".into(),
        })?);
        Ok(info)
    }

    pub(super) fn raw(&self) -> *mut sys::fi_info {
        self.0.as_ptr()
    }
}
