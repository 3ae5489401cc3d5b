//! Several fabric endpoints at once: one gateway serving local readers over `shm` and
//! remote ones over `efa` or `tcp;ofi_rxm` (`--fabric-provider 'tcp;ofi_rxm,shm'`).
//!
//! [`Fabrics`] is an ordered set of [`FabricServer`]s, the first one the *primary* (the one
//! a descriptor's `addr`/`rkey` and `GET /v1/fabric`'s top-level fields name, as with a
//! single provider). Every arena is registered in every open domain: [`Regions`] holds one
//! memory region per endpoint, in the same order, and is registered, rotated and revoked
//! as one, so a key revocation fences every provider at once (where a provider checks
//! keys at all: `shm` does not).

use std::sync::Arc;

use crate::buffer::ArenaBuffer;
use crate::fabric::{FabricConfig, FabricError, MemoryRegion};
use crate::server::FabricServer;

/// The fabric endpoints of one gateway, the primary first.
#[derive(Debug)]
pub struct Fabrics {
    servers: Vec<FabricServer>,
}

/// One arena's registrations: a memory region in each endpoint's domain, in the order of
/// [`Fabrics::servers`]. Dropping it closes them all (every key revoked).
#[derive(Debug)]
pub struct Regions {
    regions: Vec<MemoryRegion>,
}

impl Regions {
    /// The primary endpoint's remote key (for logs).
    pub fn key(&self) -> u64 {
        self.regions[0].key()
    }

    /// The registered buffer.
    pub fn buffer(&self) -> &Arc<ArenaBuffer> {
        self.regions[0].buffer()
    }
}

/// Why a set of endpoints could not be opened: which provider failed, and how.
#[derive(Debug, thiserror::Error)]
#[error("provider {provider}: {error}")]
pub struct StartError {
    /// The provider whose endpoint failed to open.
    pub provider: String,
    /// What failed.
    pub error: FabricError,
}

impl Fabrics {
    /// Opens an endpoint for each of `configs` (at least one), in order, with its progress
    /// thread. Two configurations of one provider are refused.
    pub fn start(configs: &[FabricConfig]) -> Result<Self, StartError> {
        assert!(!configs.is_empty(), "at least one fabric configuration");
        let mut servers = Vec::with_capacity(configs.len());
        for (i, cfg) in configs.iter().enumerate() {
            if configs[..i].iter().any(|c| c.provider == cfg.provider) {
                return Err(StartError {
                    provider: cfg.provider.clone(),
                    error: FabricError::Call {
                        call: "open the fabric endpoints",
                        errno: libc::EINVAL,
                        text: "the provider is named twice".into(),
                    },
                });
            }
            servers.push(FabricServer::start(cfg).map_err(|error| StartError {
                provider: cfg.provider.clone(),
                error,
            })?);
        }
        Ok(Self { servers })
    }

    /// The endpoints, the primary first.
    pub fn servers(&self) -> &[FabricServer] {
        &self.servers
    }

    /// The primary endpoint.
    pub fn primary(&self) -> &FabricServer {
        &self.servers[0]
    }

    /// Registers `buffer` for remote reads in every endpoint's domain, each under a fresh
    /// key; if one registration fails, those made are closed again.
    pub fn register(&self, buffer: Arc<ArenaBuffer>) -> Result<Regions, FabricError> {
        self.register_each(buffer, FabricServer::register)
    }

    /// Registers `buffer` for remote writes only (an upload region) in every endpoint's
    /// domain, each under a fresh key; dropping the [`Regions`] revokes them all.
    pub fn register_writable(&self, buffer: Arc<ArenaBuffer>) -> Result<Regions, FabricError> {
        self.register_each(buffer, FabricServer::register_writable)
    }

    /// `buffer` registered by `how` in every endpoint's domain, in order; on a failure the
    /// regions made are dropped (closed) again.
    fn register_each(
        &self,
        buffer: Arc<ArenaBuffer>,
        how: fn(&FabricServer, Arc<ArenaBuffer>) -> Result<MemoryRegion, FabricError>,
    ) -> Result<Regions, FabricError> {
        let regions = self
            .servers
            .iter()
            .map(|s| how(s, Arc::clone(&buffer)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Regions { regions })
    }

    /// Key rotation on every endpoint: registers the buffer again under fresh keys, then
    /// closes the old regions (revoking their keys).
    pub fn rotate(&self, old: Regions) -> Result<Regions, FabricError> {
        let fresh = self.register(Arc::clone(old.buffer()))?;
        drop(old);
        Ok(fresh)
    }

    /// The remote address and key of `offset` within `regions` for each endpoint, in order.
    pub fn remotes<'a>(
        &'a self,
        regions: &'a Regions,
        offset: usize,
    ) -> impl Iterator<Item = (u64, u64)> + 'a {
        self.servers
            .iter()
            .zip(&regions.regions)
            .map(move |(s, r)| (s.remote_addr(r, offset), r.key()))
    }
}
