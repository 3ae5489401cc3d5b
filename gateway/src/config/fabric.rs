//! The fast path's endpoint configurations from `--fabric-provider` (one per provider),
//! `--fabric-addr` and `--fabric-domain`.

use rasa_fastpath::fabric::plan::is_shm;
use rasa_fastpath::fabric::FabricConfig;

use super::{Args, DEFAULT_PROVIDER};

impl Args {
    /// The fabric endpoint configurations, one per provider of `--fabric-provider` (a
    /// comma-separated list, e.g. `tcp;ofi_rxm,shm`; the first is the primary, whose
    /// address and keys descriptors carry in their top-level fields). `--fabric-domain`
    /// applies to every provider but `shm` (whose one domain is `shm`).
    pub fn fabric_configs(&self) -> Vec<FabricConfig> {
        let providers = self
            .fabric_provider
            .clone()
            .or_else(|| std::env::var("FI_PROVIDER").ok().filter(|p| !p.is_empty()))
            .unwrap_or_else(|| DEFAULT_PROVIDER.to_owned());
        let node = self.fabric_addr.clone().or_else(|| {
            let ip = self.listen.ip();
            (!ip.is_unspecified()).then(|| ip.to_string())
        });
        let configs: Vec<_> = providers
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|provider| {
                let domain = (!is_shm(provider))
                    .then(|| self.fabric_domain.clone())
                    .flatten();
                FabricConfig::new(provider, node.clone()).with_domain(domain)
            })
            .collect();
        if configs.is_empty() {
            vec![FabricConfig::new(DEFAULT_PROVIDER, node)]
        } else {
            configs
        }
    }

    /// The primary fabric endpoint's configuration (the first of [`Args::fabric_configs`]).
    pub fn fabric_config(&self) -> FabricConfig {
        self.fabric_configs().remove(0)
    }
}
