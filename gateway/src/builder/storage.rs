//! The first stages: the store (its fabric, disk tier and reclaimer), the read-through
//! origin in front of it, and the namespaces over the object service.

use super::error::StartError;
use crate::catalog;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::figures::Recorders;

use crate::config::Args;
use crate::objects::namespaces::{self, Namespaces};
use crate::objects::Objects;
use crate::origin::readthrough::ReadThrough;
use crate::store::disk::DiskConfig;
use crate::store::Store;

/// The store and what the later stages need of how it was set up.
pub(super) struct Storage {
    pub store: Arc<Store>,
    /// The reclaimer's period (namespaces' stores use it too).
    pub tick: Duration,
    /// The disk tier's settings (namespaces get tiers beside the default one's).
    pub disk: Option<DiskConfig>,
    /// The process's metrics recorder (for `/metrics`).
    pub recorder: Recorders,
    /// `--namespaces`, as read once at start (the default namespace's arenas are sized
    /// from it, then the namespaces are made from it).
    pub namespaces: Option<(std::path::PathBuf, Vec<namespaces::Spec>)>,
}

impl Storage {
    /// Opens the fast path, the store and its disk tier, and starts the reclaimer.
    pub fn build(args: &Args) -> Result<Storage, StartError> {
        let fabric = args.start_fast_path()?;
        let recorder = recorder()?;
        let specs = match &args.namespaces {
            Some(file) => Some((file.clone(), namespaces::read(file)?)),
            None => None,
        };
        let mut store_config = args.store_config();
        if let Some((file, specs)) = &specs {
            // The default namespace's arenas fit what the quotas leave it.
            let size = namespaces::default_arena_size((file, specs), args.memory, args.arena_size)?;
            store_config.arena_size = size as usize;
        }
        let mut disk = args.disk.config();
        let mut tier = None;
        if let Some(config) = &mut disk {
            if args.cluster.etcd.is_some() && args.origin.is_none() {
                tracing::warn!("--disk in a --cluster without an --origin starts empty: its keys may have been written on other members while it was away, and nothing could check its old values");
                config.recover = false;
            }
            tier = Some(crate::store::disk::Disk::open(config.clone())?);
        }
        let store = Arc::new(Store::new(store_config, fabric, tier));
        let tick = super::reclaim_tick(args.lease_grace);
        tokio::spawn(Arc::clone(&store).run_reclaimer(tick));
        Ok(Storage {
            store,
            tick,
            disk,
            recorder,
            namespaces: specs,
        })
    }

    /// Values back from disk are checked against the origin on their next read when other
    /// members may have written this member's keys while it was away, or a crash lost
    /// writes not yet on disk. (After a clean stop a single gateway's are revalidated
    /// after --origin-ttl, as any value: their confirmation time is kept.)
    pub fn revalidate_recovered(&self, args: &Args, origin: Option<&ReadThrough>) {
        if let (Some(rt), Some(disk)) = (origin, self.store.disk()) {
            let r = disk.recovered();
            if r.values > 0 && (args.cluster.etcd.is_some() || !r.clean) {
                rt.revalidate_all();
            }
        }
    }
}

/// The process's metrics recorder, installed by the first gateway built in it (a second
/// one in the same process shares it).
fn recorder() -> Result<Recorders, StartError> {
    static RECORDER: OnceLock<Recorders> = OnceLock::new();
    if let Some(r) = RECORDER.get() {
        return Ok(r.clone());
    }
    let installed = Recorders::install()?;
    Ok(RECORDER.get_or_init(|| installed).clone())
}

/// The read-through origin `cfg` names, in front of `store` (filling misses from the other
/// members `peers` reach first, in a cluster).
pub(super) async fn read_through(
    args: &Args,
    cfg: crate::origin::s3::S3Config,
    store: &Arc<Store>,
    peers: Option<Arc<crate::cluster::Peers>>,
) -> Arc<ReadThrough> {
    let origin = crate::origin::s3::S3Origin::new(cfg).await;
    tracing::info!(
        origin = %crate::origin::Origin::describe(&origin),
        write_policy = ?args.effective_write_policy(),
        ttl = ?args.origin_ttl,
        "read-through origin"
    );
    let rt = ReadThrough::new(
        (Arc::new(origin), Arc::clone(store)),
        (!args.origin_ttl.is_zero()).then_some(args.origin_ttl),
        args.negative_ttl,
        args.max_object_size,
        args.negative_cache_size,
        peers,
    );
    rt.set_range_fill(args.origin_fill);
    rt
}

/// The namespaces: the default one alone, or those of `--namespaces` (`specs`, as read at
/// start; read again on SIGHUP) beside it.
pub(super) fn namespaces(
    args: &Args,
    objects: &Arc<Objects>,
    (tick, disk): (Duration, Option<DiskConfig>),
    specs: Option<(std::path::PathBuf, Vec<namespaces::Spec>)>,
) -> Result<Arc<Namespaces>, StartError> {
    let Some((file, specs)) = specs else {
        return Ok(Namespaces::single(Arc::clone(objects)));
    };
    let ns = Namespaces::load_beside(
        Arc::clone(objects),
        (&file, specs),
        args.arena_size,
        tick,
        disk,
    )?;
    let count = |r| {
        catalog::NAMESPACE_RELOADS
            .counter_by(&[("result", r)])
            .increment(1)
    };
    crate::reload::reload_on_sighup("namespaces file", count, {
        let ns = Arc::clone(&ns);
        move || ns.reload()
    })
    .map_err(|source| StartError::Signal {
        signal: "SIGHUP",
        source,
    })?;
    Ok(ns)
}
