//! Namespaces: the unit of isolation and of quota. Each namespace is an object service of
//! its own ([`Objects`]) over a store of its own: its own arenas (so a descriptor, whose
//! remote key opens one arena, exposes only its namespace's frames), its own memory budget
//! (its quota: filling it evicts its own cold values, never another namespace's) and its
//! own index.
//!
//! The namespaces file (`--namespaces FILE`, read again on SIGHUP) has one namespace per
//! line, a name, a memory quota and, with `--disk`, an optional disk quota (a namespace
//! without one keeps no disk tier: its evicted values are dropped):
//!
//! ```text
//! # name    quota   disk quota
//! train        4GiB    100GiB
//! web       16MiB
//! ```
//!
//! The `default` namespace always exists: the native API's `/v1/objects/…` and the S3
//! listener's `--s3-bucket` buckets are in it, and it gets what `--memory` leaves after the
//! quotas. Another namespace is `/v1/ns/{ns}/objects/…` and, on the S3 listener, the bucket
//! of its name.
//!
//! A file per job: the file's format and the sizing it implies (`file.rs`), building a
//! namespace's store and disk tier (`build.rs`), editing the file for S3's CreateBucket and
//! DeleteBucket (`edit.rs`), the series on `/metrics` (`gauges.rs`); here the registry and
//! its reload.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::Objects;

mod build;
mod edit;
mod error;
mod file;

pub use crate::key::{check_namespace as check_name, NAMESPACE_PATTERN as NAME_PATTERN};

pub use edit::{CreateError, RemoveError};
pub use error::{NamespacesError, SpecError};
pub use file::{
    arena_size_for, default_arena_size, parse, read, Spec, MAX_NAMESPACES, MIN_DISK_QUOTA,
    MIN_QUOTA,
};

/// The namespace that always exists.
pub const DEFAULT: &str = "default";

/// One namespace: its name and its object service.
#[derive(Debug)]
pub struct Namespace {
    /// Its name.
    pub name: String,
    /// Its object service (its store's budget is its quota).
    pub objects: Arc<Objects>,
}

/// Makes the object service of a new namespace (its store, arenas sized for its quota, and
/// its reclaimer).
pub type Maker = Box<dyn Fn(&Spec) -> Result<Arc<Objects>, NamespacesError> + Send + Sync>;

/// The namespaces in force: the default one, and those of the namespaces file.
pub struct Namespaces {
    default: Arc<Namespace>,
    named: RwLock<Arc<BTreeMap<String, Arc<Namespace>>>>,
    /// `--memory`: the quotas' total must fit; the default namespace gets the rest.
    memory: u64,
    file: Option<(PathBuf, Maker)>,
    /// Held while the file is edited ([`Namespaces::create`], [`Namespaces::remove`]).
    edit: std::sync::Mutex<()>,
}

impl std::fmt::Debug for Namespaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespaces")
            .field("default", &self.default)
            .field("named", &self.named)
            .field("memory", &self.memory)
            .finish_non_exhaustive()
    }
}

impl Namespaces {
    /// Only the default namespace, over `objects` (no `--namespaces`).
    pub fn single(objects: Arc<Objects>) -> Arc<Self> {
        let memory = objects.store().memory().budget();
        Arc::new(Self {
            default: Arc::new(Namespace {
                name: DEFAULT.to_owned(),
                objects,
            }),
            named: RwLock::default(),
            memory,
            file: None,
            edit: std::sync::Mutex::default(),
        })
    }

    /// The default namespace over `default` and those of `file`, each made by `make`;
    /// `memory` is `--memory`. Refused with a one-line reason when the file is invalid or
    /// its quotas do not fit.
    pub fn load(
        default: Arc<Objects>,
        (file, specs): (&Path, Vec<Spec>),
        make: Maker,
    ) -> Result<Arc<Self>, NamespacesError> {
        let memory = default.store().memory().budget();
        let this = Arc::new(Self {
            default: Arc::new(Namespace {
                name: DEFAULT.to_owned(),
                objects: default,
            }),
            named: RwLock::default(),
            memory,
            file: Some((file.to_owned(), make)),
            edit: std::sync::Mutex::default(),
        });
        this.apply(specs)?;
        Ok(this)
    }

    /// The default namespace.
    pub fn default_ns(&self) -> &Arc<Namespace> {
        &self.default
    }

    /// The namespace named `name`, if it exists.
    pub fn get(&self, name: &str) -> Option<Arc<Namespace>> {
        if name == DEFAULT {
            return Some(Arc::clone(&self.default));
        }
        self.current().get(name).cloned()
    }

    /// Every namespace, the default one first, then by name.
    pub fn all(&self) -> Vec<Arc<Namespace>> {
        let named = self.current();
        std::iter::once(Arc::clone(&self.default))
            .chain(named.values().cloned())
            .collect()
    }

    fn current(&self) -> Arc<BTreeMap<String, Arc<Namespace>>> {
        Arc::clone(&self.named.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reads the namespaces file again and puts it in force: new namespaces are made,
    /// changed quotas applied (a smaller one evicts that namespace's least recently used
    /// values), removed namespaces dropped (their remote keys are revoked as their memory
    /// is freed). On error nothing changes. Returns how many named namespaces are in force.
    pub fn reload(&self) -> Result<usize, NamespacesError> {
        let Some((path, _)) = &self.file else {
            return Ok(0);
        };
        self.apply(read(path)?)
    }

    /// Puts `specs` (the namespaces file's, as read) in force: see [`Namespaces::reload`].
    fn apply(&self, specs: Vec<Spec>) -> Result<usize, NamespacesError> {
        let Some((path, make)) = &self.file else {
            return Ok(0);
        };
        let left = file::left_for_default(&specs, self.memory, path)?;
        // A budget must hold at least one of its store's arenas.
        let small = |name: &str, budget: u64, objects: &Objects| {
            let arena = objects.store().config().arena_size as u64;
            (budget < arena).then(|| NamespacesError::BelowArena {
                path: path.clone(),
                name: name.to_owned(),
                budget,
                arena,
            })
        };
        let mut named = self.named.write().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = small(DEFAULT, left, &self.default.objects) {
            return Err(why);
        }
        for spec in &specs {
            if let Some(why) = named
                .get(&spec.name)
                .and_then(|ns| small(&spec.name, spec.quota, &ns.objects))
            {
                return Err(why);
            }
        }
        // New namespaces first: one that cannot be made (its disk tier) changes nothing.
        let mut made = BTreeMap::new();
        for spec in specs.iter().filter(|s| !named.contains_key(&s.name)) {
            let ns = Namespace {
                name: spec.name.clone(),
                objects: make(spec)?,
            };
            made.insert(spec.name.clone(), Arc::new(ns));
        }
        let mut next = BTreeMap::new();
        for spec in &specs {
            let ns = match named.get(&spec.name) {
                Some(ns) => {
                    let store = ns.objects.store();
                    store.memory().set_budget(spec.quota);
                    if let (Some(disk), Some(quota)) = (store.disk(), spec.disk_quota) {
                        disk.set_size(quota);
                    }
                    Arc::clone(ns)
                }
                None => made.remove(&spec.name).expect("made above"),
            };
            next.insert(spec.name.clone(), ns);
        }
        self.default.objects.store().memory().set_budget(left);
        let next = Arc::new(next);
        let before = std::mem::replace(&mut *named, Arc::clone(&next));
        drop(named);
        for (name, ns) in before.iter() {
            // A namespace removed from the file takes its disk tier with it: made again
            // later, it starts empty.
            if let (false, Some(disk)) = (next.contains_key(name), ns.objects.store().disk()) {
                if let Err(e) = crate::store::disk::remove_tier(&disk.config().dir) {
                    tracing::warn!(namespace = %name, error = %e, "cannot remove a removed namespace's disk tier");
                }
            }
        }
        // In a cluster, the namespaces' replicas follow the file.
        let peers = self.default.objects.peers.as_ref();
        if let Some(reps) = peers.and_then(|p| p.near()).and_then(|n| n.replicas()) {
            reps.rules().set_namespaces(file::replica_rules(&specs));
        }
        Ok(specs.len())
    }

    /// Each namespace's quota and memory now, the default one first (for `/v1/stats`).
    pub fn stats(&self) -> Vec<rasa_openapi::stats::NamespaceStats> {
        self.all()
            .iter()
            .map(|ns| {
                let memory = ns.objects.store().memory();
                rasa_openapi::stats::NamespaceStats {
                    name: ns.name.clone(),
                    quota_bytes: memory.budget(),
                    allocated_bytes: memory.allocated(),
                    live_bytes: memory.live_bytes(),
                    evictions: memory
                        .arena_stats()
                        .evicted
                        .load(std::sync::atomic::Ordering::Relaxed),
                }
            })
            .collect()
    }
}

mod gauges;

#[cfg(test)]
mod tests;
