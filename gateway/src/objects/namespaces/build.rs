//! Building a namespace: a store of its own beside the default one's, its disk tier, its
//! reclaimer.

use std::path::Path;
use std::sync::Arc;

use super::{arena_size_for, Maker, Namespaces, NamespacesError, Spec};
use crate::objects::Objects;
use crate::store::disk::{Disk, DiskConfig};

impl Namespaces {
    /// The default namespace over `default` and those of `file`, each a store of its own
    /// beside the default one's ([`crate::store::Store::sibling`]: arenas sized by
    /// [`arena_size_for`] under `arena_size`, reclaimed every `tick`), memory only (no
    /// read-through origin); with `disk` (the default namespace's disk tier), a namespace
    /// with a disk quota gets a disk tier of its own beside it
    /// ([`crate::store::disk::DiskConfig::for_namespace`]). In a cluster, each namespace's
    /// service reaches the members as the default one's does ([`of_namespace`]).
    pub fn load_beside(
        default: Arc<Objects>,
        (file, specs): (&Path, Vec<Spec>),
        arena_size: u64,
        tick: std::time::Duration,
        disk: Option<DiskConfig>,
    ) -> Result<Arc<Self>, NamespacesError> {
        let base = Arc::clone(default.store());
        // In a cluster, a namespace's keys have the default namespace's owners.
        let peers = default.peers.clone();
        let make: Maker = Box::new(move |spec: &Spec| {
            let mut config = *base.config();
            // Warm memory in the same share of its quota as the default's of --memory.
            config.warm_memory = (u128::from(config.warm_memory) * u128::from(spec.quota)
                / u128::from(config.memory_budget.max(1))) as u64;
            config.memory_budget = spec.quota;
            config.arena_size = arena_size_for(spec.quota, arena_size) as usize;
            let tier = match (&disk, spec.disk_quota) {
                (Some(disk), Some(quota)) => Some(
                    Disk::open(disk.for_namespace(&spec.name, quota)).map_err(|source| {
                        NamespacesError::Disk {
                            name: spec.name.clone(),
                            source,
                        }
                    })?,
                ),
                _ => None,
            };
            let store = Arc::new(base.sibling(config, tier));
            tokio::spawn(Arc::clone(&store).run_reclaimer(tick));
            Ok(of_namespace(&spec.name, store, peers.clone()))
        });
        Self::load(default, (file, specs), make)
    }
}

/// The service of the namespace `name` over `store` (memory only: no origin), in the
/// cluster `peers` reach when given: its versions tied to their key's owner as the
/// default namespace's, its writes revoking the replicas of their key.
fn of_namespace(
    name: &str,
    store: Arc<crate::store::Store>,
    peers: Option<Arc<crate::cluster::Peers>>,
) -> Arc<Objects> {
    Arc::new(Objects {
        store,
        origin: None,
        write_policy: crate::origin::WritePolicy::CacheOnly,
        order: crate::objects::order::KeyOrder::default(),
        peers,
        namespace: Some(Arc::from(name)),
    })
}
