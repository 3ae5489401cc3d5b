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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::Objects;
use crate::store::disk::{Disk, DiskConfig};

/// The namespace that always exists.
pub const DEFAULT: &str = "default";

/// At most this many namespaces in a file (they are metric labels: the count stays bounded).
pub const MAX_NAMESPACES: usize = 1000;

/// The smallest quota a namespace may have.
pub const MIN_QUOTA: u64 = 1 << 20;

pub use crate::key::{check_namespace as check_name, NAMESPACE_PATTERN as NAME_PATTERN};

/// One line of the namespaces file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Its name.
    pub name: String,
    /// Bytes of arena memory it may hold.
    pub quota: u64,
    /// Bytes of the disk tier it may hold (with `--disk`; none: its evicted values are
    /// dropped).
    pub disk_quota: Option<u64>,
}

/// The smallest disk quota a namespace may have.
pub const MIN_DISK_QUOTA: u64 = 2 << 20;

/// Parses the namespaces file format (see the module documentation).
pub fn parse(text: &str) -> Result<Vec<Spec>, String> {
    let mut specs: Vec<Spec> = Vec::new();
    for (n, fields) in crate::credfile::lines(text) {
        let at = |why: String| format!("line {n}: {why}");
        let (name, quota, disk) = match fields[..] {
            [name, quota] => (name, quota, None),
            [name, quota, disk] => (name, quota, Some(disk)),
            _ => {
                return Err(at(format!(
                    "expected 'NAME QUOTA [DISK_QUOTA]', found {} fields",
                    fields.len()
                )))
            }
        };
        check_name(name).map_err(at)?;
        if name == DEFAULT {
            return Err(at(format!(
                "'{DEFAULT}' always exists and gets what --memory leaves after the quotas"
            )));
        }
        let quota = crate::units::parse_size(quota).map_err(|e| at(format!("quota: {e}")))?;
        if quota < MIN_QUOTA {
            return Err(at(format!(
                "quota {quota} bytes of {name} is below the minimum of 1MiB"
            )));
        }
        let disk_quota = disk
            .map(|d| crate::units::parse_size(d).map_err(|e| at(format!("disk quota: {e}"))))
            .transpose()?;
        if disk_quota.is_some_and(|d| d < MIN_DISK_QUOTA) {
            return Err(at(format!(
                "the disk quota of {name} is below the minimum of 2MiB"
            )));
        }
        if specs.iter().any(|s| s.name == name) {
            return Err(at(format!("{name} is listed twice")));
        }
        specs.push(Spec {
            name: name.to_owned(),
            quota,
            disk_quota,
        });
    }
    if specs.len() > MAX_NAMESPACES {
        return Err(format!(
            "{} namespaces: at most {MAX_NAMESPACES}",
            specs.len()
        ));
    }
    Ok(specs)
}

/// Reads and parses the namespaces file at `path`; the error names the file and line.
pub fn read(path: &Path) -> Result<Vec<Spec>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the namespaces file {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("namespaces file {}: {e}", path.display()))
}

/// What `memory` (`--memory`) leaves the default namespace after the quotas of `specs`
/// (from `path`), or why they do not fit.
fn left_for_default(specs: &[Spec], memory: u64, path: &Path) -> Result<u64, String> {
    let total: u64 = specs.iter().map(|s| s.quota).sum();
    memory.checked_sub(total).ok_or_else(|| {
        format!(
            "namespaces file {}: the quotas add up to {total} bytes, more than --memory ({memory} bytes)",
            path.display()
        )
    })
}

/// The default namespace's arena size beside the namespaces of `path`: sized for what
/// `--memory` leaves it, as any namespace's ([`arena_size_for`]).
pub fn default_arena_size(path: &Path, memory: u64, arena_size: u64) -> Result<u64, String> {
    let specs = read(path)?;
    Ok(arena_size_for(
        left_for_default(&specs, memory, path)?,
        arena_size,
    ))
}

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
pub type Maker = Box<dyn Fn(&Spec) -> Result<Arc<Objects>, String> + Send + Sync>;

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

/// Why a namespace could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// There is no such namespace.
    #[error("no namespace {0:?}")]
    NotFound(String),
    /// It still holds values.
    #[error("namespace {0:?} holds values: delete them first")]
    NotEmpty(String),
    /// Namespaces are the operator's here, or the file could not be changed.
    #[error("{0}")]
    Refused(String),
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
    pub fn load(default: Arc<Objects>, file: &Path, make: Maker) -> Result<Arc<Self>, String> {
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
        this.reload()?;
        Ok(this)
    }

    /// The default namespace over `default` and those of `file`, each a store of its own
    /// beside the default one's ([`crate::store::Store::sibling`]: arenas sized by
    /// [`arena_size_for`] under `arena_size`, reclaimed every `tick`), memory only (no
    /// read-through origin); with `disk` (the default namespace's disk tier), a namespace
    /// with a disk quota gets a disk tier of its own beside it
    /// ([`crate::store::disk::DiskConfig::for_namespace`]).
    pub fn load_beside(
        default: Arc<Objects>,
        file: &Path,
        arena_size: u64,
        tick: std::time::Duration,
        disk: Option<DiskConfig>,
    ) -> Result<Arc<Self>, String> {
        let base = Arc::clone(default.store());
        let make: Maker = Box::new(move |spec: &Spec| {
            let mut config = *base.config();
            config.memory_budget = spec.quota;
            config.arena_size = arena_size_for(spec.quota, arena_size) as usize;
            let store = Arc::new(base.sibling(config));
            if let (Some(disk), Some(quota)) = (&disk, spec.disk_quota) {
                let config = disk.for_namespace(&spec.name, quota);
                store.tier().attach(
                    Disk::open(config).map_err(|e| format!("namespace {}: {e}", spec.name))?,
                );
            }
            tokio::spawn(Arc::clone(&store).run_reclaimer(tick));
            Ok(Objects::new(
                store,
                None,
                crate::origin::WritePolicy::CacheOnly,
            ))
        });
        Self::load(default, file, make)
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
    pub fn reload(&self) -> Result<usize, String> {
        let Some((path, make)) = &self.file else {
            return Ok(0);
        };
        let specs = read(path)?;
        let left = left_for_default(&specs, self.memory, path)?;
        // A budget must hold at least one of its store's arenas.
        let small = |name: &str, budget: u64, objects: &Objects| {
            let arena = objects.store().config().arena_size as u64;
            (budget < arena).then(|| {
                format!(
                    "namespaces file {}: {name} would get {budget} bytes, less than one of its arenas ({arena} bytes); restart to resize its arenas",
                    path.display()
                )
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

    /// The namespaces file, which the gateway may edit ([`Namespaces::create`]).
    fn owned_file(&self) -> Result<&Path, String> {
        match &self.file {
            Some((path, _)) => Ok(path),
            None => Err(
                "this gateway has no namespaces file (--namespaces): its buckets are the operator's --s3-bucket"
                    .into(),
            ),
        }
    }

    /// Adds namespace `name` with `quota` to the namespaces file and puts it in force (as a
    /// SIGHUP would); `Ok(false)` when it exists already. On any refusal (no file, a bad
    /// name, quotas beyond `--memory`) the file is as it was.
    pub fn create(&self, name: &str, quota: u64) -> Result<bool, String> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        if self.get(name).is_some() {
            return Ok(false);
        }
        let path = self.owned_file()?;
        check_name(name)?;
        let before = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the namespaces file {}: {e}", path.display()))?;
        let sep = if before.is_empty() || before.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        let quota_text = match quota % (1 << 20) {
            0 => format!("{}MiB", quota >> 20),
            _ => quota.to_string(),
        };
        let after = format!("{before}{sep}{name} {quota_text}\n");
        crate::credfile::rewrite(path, &after)?;
        if let Err(e) = self.reload() {
            let _ = crate::credfile::rewrite(path, &before);
            return Err(e);
        }
        Ok(true)
    }

    /// Removes namespace `name`, which must hold no value, from the file and from force.
    pub fn remove(&self, name: &str) -> Result<(), RemoveError> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        let ns = self
            .current()
            .get(name)
            .cloned()
            .ok_or_else(|| RemoveError::NotFound(name.to_owned()))?;
        if !ns.objects.store().list("", None, 1).0.is_empty() {
            return Err(RemoveError::NotEmpty(name.to_owned()));
        }
        let path = self.owned_file().map_err(RemoveError::Refused)?;
        let before = std::fs::read_to_string(path)
            .map_err(|e| RemoveError::Refused(format!("cannot read {}: {e}", path.display())))?;
        let after = crate::credfile::without_name(&before, name, "namespace")
            .map_err(RemoveError::Refused)?;
        crate::credfile::rewrite(path, &after).map_err(RemoveError::Refused)?;
        if let Err(e) = self.reload() {
            let _ = crate::credfile::rewrite(path, &before);
            return Err(RemoveError::Refused(e));
        }
        Ok(())
    }
}

/// The arena size for a namespace of `quota` under `--arena-size` `arena_size`: a quarter of
/// the quota (at least 64 KiB, a multiple of 64 KiB), never more than `arena_size`, so a
/// small namespace does not pin a whole default arena.
pub fn arena_size_for(quota: u64, arena_size: u64) -> u64 {
    const STEP: u64 = 64 << 10;
    ((quota / 4) / STEP * STEP).clamp(STEP, arena_size.max(STEP))
}

mod gauges;

#[cfg(test)]
mod tests;
