//! The store of immutable versions. Knows nothing of HTTP.
//!
//! Every write produces a new [`StoredVersion`] with a fresh [`VersionId`], framed (see
//! [`rasa_fastpath::frame`]) in an arena; then, and only then, the key's current pointer
//! moves to it. Bytes of a version never change after it becomes visible, which is what
//! makes one-sided reads safe.
//!
//! - Writes stream: [`Store::begin`] reserves the whole frame up front, [`Upload::write`]
//!   copies each body chunk into staging memory (or a dedicated arena not yet registered)
//!   while SHA-256 and the frame checksum are computed, and [`Store::commit`] seals the
//!   frame into its arena and publishes. An upload dropped
//!   before commit (client gone, body too long or short) publishes nothing: its slot is
//!   unreachable garbage until its arena is reused.
//! - Older versions of a key stay readable by version id until reclaimed; a delete makes
//!   every version of the key unreachable for new requests at once. Readers that already
//!   hold a version (an HTTP response in flight, a fast-path lease) keep its arena alive.

pub mod arena;
pub mod disk;
mod error;
mod fills;
mod headers;
mod index;
mod memory;
mod onesided;
mod origin_meta;
mod replica;
mod testing;
mod upload;
mod version;
mod writes;

pub use error::StoreError;
pub use fills::FillTicket;
pub use headers::{ObjectHeaders, MAX_USER_METADATA};
pub use memory::Memory;
pub use onesided::{OneSided, Reservation, UploadError, Wanted};
pub use origin_meta::OriginMeta;
pub use replica::REPLICA_TIE;
pub use testing::Testing;
pub use upload::{room_deadline, Sealed, Upload};
pub use version::{BadVersionId, StoredVersion, VersionId, VERSION_PATTERN};
pub use writes::Writes;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rasa_fastpath::fabrics::Fabrics;

use arena::Arenas;
use index::Index;

/// Sizing of a store.
#[derive(Clone, Copy, Debug)]
pub struct StoreConfig {
    /// Total bytes of arena memory the store may allocate.
    pub memory_budget: u64,
    /// Size of a shared arena; larger values get an arena of their own.
    pub arena_size: usize,
    /// How long a descriptor handed out stays valid.
    pub lease: Duration,
    /// Extra time after the latest lease deadline before an arena's memory is reused.
    pub grace: Duration,
    /// Longest time one remote key stays in force for new descriptors before its arena is
    /// registered under a fresh one (the old key is revoked once its leases end); `None`
    /// rotates keys only on reclaim.
    pub key_lifetime: Option<Duration>,
    /// Block size of each frame's table of block checksums (0: no table).
    pub block_size: u32,
    /// Memory that values being uploaded for shared arenas may hold together, outside
    /// advertised memory, until each is sealed (at least one arena's worth is allowed).
    pub staging_memory: u64,
    /// Spare memory to keep faulted in ahead of writes, within the budget
    /// ([`arena`]'s warm memory; 0: none).
    pub warm_memory: u64,
}

/// Most spare memory kept faulted in by default (`--warm-memory` unset): a gateway of up
/// to this much `--memory` has all of it faulted in at start, in the background, so a
/// writer's first pass over its memory is as fast as the next ones (a write into fresh
/// memory faults its pages in the writer's own copy: 0.8 GB/s here, against 5.6–6.5).
pub const WARM_BY_DEFAULT: u64 = 1 << 30;

/// Keys → versions, over arenas.
#[derive(Debug)]
pub struct Store {
    config: StoreConfig,
    incarnation: u64,
    /// Version ids count up from the incarnation; namespaces' stores share the counter.
    counter: Arc<AtomicU64>,
    arenas: Arenas,
    fabric: Option<Arc<Fabrics>>,
    index: Index,
    /// Woken whenever reclamation makes memory reusable (PUTs waiting for room).
    room: tokio::sync::Notify,
    /// The latest lease deadline handed out, in milliseconds since the Unix epoch.
    latest_lease_ms: AtomicU64,
    /// Staging memory for uploads ([`StoreConfig::staging_memory`]).
    staging: upload::Staging,
    /// The disk tier evicted versions spill to and misses read from, when there is one
    /// (given when the store is made).
    disk: Option<Arc<disk::Disk>>,
    /// One-sided uploads open for writes ([`Store::one_sided`]).
    uploads: onesided::Uploads,
    /// Read-through fills in flight, and the deletes they must not undo.
    fills: Arc<fills::Fills>,
}

/// A store's arenas, as `config` sizes them.
fn arenas_for(config: &StoreConfig, fabric: Option<Arc<Fabrics>>) -> Arenas {
    let arenas = Arenas::new(
        config.arena_size,
        config.memory_budget,
        config.grace,
        fabric,
    );
    arena::Warm::of(&arenas).set_target(config.warm_memory);
    arenas
}

impl Store {
    /// An empty store with a fresh random incarnation. With `fabric`, every arena is
    /// registered for one-sided reads; with `disk`, evicted versions spill to that tier
    /// and misses read from it.
    pub fn new(
        config: StoreConfig,
        fabric: Option<Arc<Fabrics>>,
        disk: Option<Arc<disk::Disk>>,
    ) -> Self {
        Self {
            staging: upload::Staging::new(config.staging_memory, config.arena_size as u64),
            incarnation: rand::random(),
            counter: Arc::new(AtomicU64::new(1)),
            arenas: arenas_for(&config, fabric.clone()),
            fabric,
            room: tokio::sync::Notify::new(),
            latest_lease_ms: AtomicU64::new(0),
            index: Index::default(),
            disk,
            config,
            uploads: Default::default(),
            fills: Default::default(),
        }
    }

    /// A store of its own for a namespace: its own arenas (of `config`'s size and budget),
    /// index and reclamation, sharing this one's incarnation and version counter (version
    /// ids stay unique across namespaces), fabric and staging memory; over `disk`, its own
    /// disk tier, when it has one.
    pub fn sibling(&self, config: StoreConfig, disk: Option<Arc<disk::Disk>>) -> Self {
        Self {
            staging: self.staging.clone(),
            incarnation: self.incarnation,
            counter: Arc::clone(&self.counter),
            arenas: arenas_for(&config, self.fabric.clone()),
            fabric: self.fabric.clone(),
            room: tokio::sync::Notify::new(),
            latest_lease_ms: AtomicU64::new(0),
            index: Index::default(),
            disk,
            config,
            uploads: Default::default(),
            fills: Default::default(),
        }
    }

    /// A ticket for a read-through fill, taken before it fetches: a delete of its key
    /// from now on makes its publish ([`Writes::commit_fill`]) fail.
    pub fn fill_ticket(&self) -> FillTicket {
        FillTicket::new(&self.fills)
    }

    /// The random id of this process; version ids count up from it.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The store's sizing.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The fabric endpoints serving one-sided reads, when the fast path is on.
    pub fn fabric(&self) -> Option<&Arc<Fabrics>> {
        self.fabric.as_ref()
    }

    /// Where `v`'s frame can be read one-sided: (remote address, remote key) on each fabric
    /// endpoint, the primary first.
    pub fn remote(&self, v: &StoredVersion) -> Option<Vec<(u64, u64)>> {
        let fabric = self.fabric.as_ref()?;
        v.arena.remote(fabric, v.frame.offset())
    }

    /// Grants a lease on `version`: returns its deadline and records it on the arena, which
    /// therefore keeps the bytes unchanged at least until then. The caller that hands the
    /// lease out counts it (`rasa_leases_granted_total`, once for a batch).
    pub fn lease(&self, version: &StoredVersion) -> SystemTime {
        let deadline = SystemTime::now() + self.config.lease;
        version.arena.extend_lease(deadline);
        let ms = deadline
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.latest_lease_ms.fetch_max(ms, Ordering::Relaxed);
        deadline
    }
}

#[cfg(test)]
mod tests;
