//! What a provider chose and negotiated when a [`super::Node`] was opened: its name, the
//! fabric and domain, the memory-registration mode and key size, the address format.

use super::addr_format_name;
use super::sys;

/// What the provider chose and negotiated ([`super::Node::provided`]).
#[derive(Clone, Debug)]
pub struct Provided {
    pub(super) provider: String,
    pub(super) fabric_name: String,
    pub(super) domain_name: String,
    pub(super) mr_mode: u32,
    pub(super) mr_key_size: usize,
    pub(super) addr_format: u32,
}

impl Provided {
    /// The provider actually chosen (e.g. `tcp;ofi_rxm`).
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The fabric chosen (e.g. `efa`, `TCP-IP`, a subnet).
    pub fn fabric_name(&self) -> &str {
        &self.fabric_name
    }

    /// The domain (NIC) opened, e.g. `rdmap16s27-rdm` on EFA.
    pub fn domain_name(&self) -> &str {
        &self.domain_name
    }

    /// The negotiated memory-registration mode bits.
    pub fn mr_mode(&self) -> u32 {
        self.mr_mode
    }

    /// Whether remote addresses are virtual addresses (`FI_MR_VIRT_ADDR`) rather than
    /// offsets into the region.
    pub fn virtual_addressing(&self) -> bool {
        self.mr_mode & sys::FI_MR_VIRT_ADDR != 0
    }

    /// Whether the provider chooses keys (`FI_MR_PROV_KEY`) rather than using ours.
    pub fn provider_keys(&self) -> bool {
        self.mr_mode & sys::FI_MR_PROV_KEY != 0
    }

    /// Size in bytes of a requested key the provider accepts.
    pub fn key_size(&self) -> usize {
        self.mr_key_size
    }

    /// The endpoint's address format, by name.
    pub fn address_format(&self) -> String {
        addr_format_name(self.addr_format)
    }
}
