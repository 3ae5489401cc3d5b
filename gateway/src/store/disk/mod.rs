//! The disk tier (`--disk DIR`): versions the memory policy evicts are spilled to segment
//! files instead of dropped, read back from there on a miss, and recovered at start.
//!
//! - **Spill**: [`Disk::spill`] queues an evicted current version (its arena stays allocated
//!   until it is written, so a burst of spills slows PUTs down rather than losing values);
//!   one writer thread appends it as a record ([`record`]: the frame as it was in memory,
//!   plus the heap extras) to the open segment ([`segments`]). Deleted and overwritten
//!   versions are never spilled, and a write or delete of a key that has a record appends a
//!   tombstone, so a restart never brings an old value back.
//! - **Index**: key hash → (segment, offset, length, version tag): 16 bytes a value plus the
//!   hash table's own ([`Disk::usage`]). A hash collision costs a miss, never wrong
//!   bytes: a read checks the key in the record and the record's hash.
//! - **Full**: the oldest segment is deleted whole (FIFO), its values with it.
//! - **Recovery** ([`Disk::open`]): every segment is scanned and every record validated; a
//!   torn tail is cut off. Writing resumes in a new segment.

mod buffers;
mod entry;
mod error;
mod files;
mod record;
mod segments;
mod tier;
mod writer;

#[cfg(test)]
mod tests;

pub use error::DiskError;
pub(crate) use segments::remove_tier;
pub use tier::{Tier, Want};

use crate::catalog;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rasa_fastpath::buffer::ArenaBuffer;

use super::arena::Arena;
use super::StoredVersion;
use entry::{ByHash, Entry, HIT};
use record::{Extras, Head, HEAD};

/// When a value read from disk is admitted into memory (a descriptor request always
/// admits it: one-sided readers read memory only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Admit {
    /// On its first read.
    FirstHit,
    /// On its second read since it was spilled or recovered (the first is served from disk).
    SecondHit,
    /// Never on a read: served from disk every time.
    Never,
}

/// A disk tier's settings.
#[derive(Debug, Clone)]
pub struct DiskConfig {
    /// `--disk`: the directory under which this tier's is (itself, or `ns/NAME` below it).
    pub root: PathBuf,
    /// The directory of its segment files.
    pub dir: PathBuf,
    /// Bytes of segment files it may keep.
    pub size: u64,
    /// Bytes of a segment file (a larger value gets one of its own).
    pub segment_size: u64,
    /// When a read admits a value into memory.
    pub admit: Admit,
    /// Whether to recover what the directory holds (else its segments are deleted at
    /// start: a cluster member without an origin cannot tell whether its keys were written
    /// elsewhere while it was away).
    pub recover: bool,
}

impl DiskConfig {
    /// The disk tier of namespace `name` with a disk quota of `quota` beside this one (the
    /// default namespace's): `DIR/ns/NAME`, segments of at most an eighth of the quota.
    pub fn for_namespace(&self, name: &str, quota: u64) -> Self {
        Self {
            root: self.root.clone(),
            dir: self.dir.join("ns").join(name),
            size: quota,
            segment_size: (quota / 8).clamp(1 << 20, self.segment_size.max(1 << 20)),
            admit: self.admit,
            recover: self.recover,
        }
    }
}

/// One segment file.
#[derive(Debug)]
pub(super) struct Segment {
    file: Arc<File>,
    bytes: u64,
}

/// What the disk tier holds, behind one lock.
#[derive(Debug, Default)]
pub(super) struct State {
    index: ByHash<Entry>,
    /// Versions queued for the writer: served from memory until written.
    pending: ByHash<Arc<StoredVersion>>,
    /// Versions read back and waiting for room in memory: served from this copy meanwhile.
    held: ByHash<Arc<StoredVersion>>,
    files: BTreeMap<u32, Segment>,
    bytes: u64,
}

/// Counters of one disk tier (the metrics count every tier together).
#[derive(Debug, Default)]
pub struct DiskStats {
    /// Values written to disk.
    pub spilled: AtomicU64,
    /// Values the writer could not keep (too large, or a write failed).
    pub dropped: AtomicU64,
    /// Values deleted with their segment to make room.
    pub evicted: AtomicU64,
}

/// What recovery found at start.
#[derive(Debug, Default, Clone, Copy)]
pub struct Recovered {
    /// Values indexed.
    pub values: u64,
    /// Bytes of valid records.
    pub bytes: u64,
    /// Bytes cut off the segments' ends (torn by a crash).
    pub torn: u64,
    /// How long the scan took.
    pub took: Duration,
    /// Whether the last process to use the directory shut down cleanly (else it crashed
    /// or was killed: values it had in memory, and writes queued for disk, are lost).
    pub clean: bool,
}

/// Room for a record's extras (media type, headers, entity tags) when judging whether a
/// value could fit the tier at all.
const EXTRAS_ROOM: usize = 512;

/// Most values read back held in memory at once while they wait for room.
const MAX_HELD: usize = 256;

/// The file a clean shutdown leaves, removed at start.
pub(super) const CLEAN: &str = "clean-shutdown";

/// The state and counters the writer thread shares with readers.
#[derive(Debug)]
pub(super) struct Shared {
    config: DiskConfig,
    /// The directory's identity, in every segment's header.
    identity: [u8; files::ID_LEN],
    /// Bytes it may keep: `config.size`, until [`Disk::set_size`].
    size: AtomicU64,
    state: Mutex<State>,
    stats: DiskStats,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An evicted value the tier could not keep.
    fn count_dropped(&self) {
        self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        catalog::DISK_DROPPED.counter().increment(1);
    }
}

/// A disk tier over one directory.
#[derive(Debug)]
pub struct Disk {
    shared: Arc<Shared>,
    ops: Mutex<mpsc::Sender<writer::Op>>,
    recovered: Recovered,
    /// Reads of a key under way: one disk read however many requests wait for it.
    flights: tier::Flights,
    /// Buffers records are read into, reused.
    buffers: Arc<buffers::Buffers>,
    /// The directory's lock, held while the tier is open: one process at a time.
    _lock: File,
}

/// Where a key's version on disk is.
pub(super) enum Found {
    /// Still queued for the writer, or read back and waiting for room: a copy in memory.
    Held(Arc<StoredVersion>),
    /// A record to read.
    Record(Record),
}

/// A record [`Disk::locate`] found.
pub(super) struct Record {
    file: Arc<File>,
    entry: Entry,
    /// Why the policy admits the value into memory when read (`first_hit`, `second_hit`),
    /// if it does.
    pub admit: Option<&'static str>,
}

fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

impl Disk {
    /// Opens the disk tier in `config.dir` (created if missing): checks it can hold
    /// `config.size` bytes, recovers what its segment files hold (validating every record),
    /// starts the writer. The reason it cannot, in one line.
    pub fn open(config: DiskConfig) -> Result<Arc<Self>, DiskError> {
        let shown = config.dir.display().to_string();
        let lock = segments::lock_dir(&config.root, &config.dir)?;
        let identity = files::identity(&config.dir)?;
        let ids = segments::list(&config.dir)
            .map_err(|e| DiskError::io(&config.dir, "list its segments", e))?;
        let mut ours = Vec::new();
        for &id in &ids {
            let opened = segments::open_ours(&config.dir, id, &identity)
                .map_err(|e| DiskError::io(&config.dir, "open a segment", e))?;
            ours.extend(opened.map(|f| (id, f)));
        }
        // Numbers go on after every segment-named file, foreign ones included: a segment
        // is never created over one.
        let next = ids.last().map_or(1, |id| id + 1);
        if !config.recover {
            for (id, file) in ours.drain(..) {
                files::remove_if_same(&segments::path_of(&config.dir, id), &file)
                    .map_err(|e| DiskError::io(&config.dir, "clear an old segment", e))?;
            }
        }
        let existing = ours
            .iter()
            .filter_map(|(_, f)| f.metadata().ok())
            .map(|m| m.len())
            .sum();
        segments::check_dir(&config.dir, config.size, existing)?;
        let clean = files::take_marker(&config.dir.join(CLEAN));
        let started = Instant::now();
        let (state, mut recovered) = writer::recover(&config.dir, ours)
            .map_err(|e| DiskError::io(&config.dir, "recover its segments", e))?;
        recovered.took = started.elapsed();
        recovered.clean = clean;
        let active = segments::Active::create(&config.dir, next, &identity)
            .map_err(|e| DiskError::io(&config.dir, "create a segment", e))?;
        let shared = Arc::new(Shared {
            identity,
            size: AtomicU64::new(config.size),
            config,
            state: Mutex::new(state),
            stats: DiskStats::default(),
        });
        let ops = writer::start(Arc::clone(&shared), active)
            .map_err(|e| DiskError::io(&shared.config.dir, "start its writer", e))?;
        tracing::info!(
            dir = %shown,
            values = recovered.values,
            bytes = recovered.bytes,
            torn = recovered.torn,
            took = ?recovered.took,
            "disk tier recovered"
        );
        Ok(Arc::new(Self {
            shared,
            ops: Mutex::new(ops),
            recovered,
            flights: tier::Flights::default(),
            buffers: Arc::default(),
            _lock: lock,
        }))
    }

    /// Its settings.
    pub fn config(&self) -> &DiskConfig {
        &self.shared.config
    }

    /// Bytes it may keep now.
    pub fn size(&self) -> u64 {
        self.shared.size.load(Ordering::Relaxed)
    }

    /// Changes the bytes it may keep (a namespace's disk quota): a smaller size deletes the
    /// oldest segments with the next write.
    pub fn set_size(&self, size: u64) {
        self.shared.size.store(size, Ordering::Relaxed);
    }

    /// What recovery found at start.
    pub fn recovered(&self) -> Recovered {
        self.recovered
    }

    /// Its counters.
    pub fn stats(&self) -> &DiskStats {
        &self.shared.stats
    }

    /// Values on disk (or queued for it), bytes of segment files, bytes of index memory.
    pub fn usage(&self) -> (u64, u64, u64) {
        let st = self.shared.state();
        let slot = std::mem::size_of::<(u64, Entry)>() + 1;
        let index = st.index.capacity() * slot;
        (
            (st.index.len() + st.pending.len()) as u64,
            st.bytes,
            index as u64,
        )
    }

    fn send(&self, op: writer::Op) {
        let ops = self.ops.lock().unwrap_or_else(PoisonError::into_inner);
        // The writer ends only when this sender is dropped.
        let _ = ops.send(op);
    }

    /// Whether `key` has a version on disk (or queued for it).
    pub fn contains(&self, key: &str) -> bool {
        let h = key_hash(key.as_bytes());
        let st = self.shared.state();
        st.pending.contains_key(&h) || st.index.contains_key(&h)
    }

    /// Whether the disk tier holds version `version` of `key` (written or queued).
    fn holds(&self, key: &[u8], version: u64) -> bool {
        let h = key_hash(key);
        let st = self.shared.state();
        st.index.get(&h).is_some_and(|e| e.is(version))
            || st.pending.get(&h).is_some_and(|v| v.version().0 == version)
    }

    /// Queues `v`, a current version the memory policy evicts, to be written (called with
    /// its key's index shard locked, so a write of the key cannot come in between). A
    /// version already on disk (read back and admitted) is not written again.
    pub(super) fn spill(&self, v: &Arc<StoredVersion>) {
        let h = key_hash(v.key_bytes());
        let record = (HEAD + v.frame.len() + EXTRAS_ROOM) as u64;
        if record > self.size() || record > u64::from(u32::MAX) {
            self.shared.count_dropped();
            return;
        }
        let mut st = self.shared.state();
        if st.index.get(&h).is_some_and(|e| e.is(v.version().0)) {
            return;
        }
        st.pending.insert(h, Arc::clone(v));
        drop(st);
        self.send(writer::Op::Spill(Arc::clone(v)));
    }

    /// Forgets `key`'s version on disk (a new version was published, or the key deleted),
    /// leaving a tombstone so a restart does not bring it back. Whether there was one.
    pub(super) fn forget(&self, key: &[u8]) -> bool {
        let h = key_hash(key);
        let mut st = self.shared.state();
        st.held.remove(&h);
        let had = st.pending.remove(&h).is_some() | st.index.remove(&h).is_some();
        drop(st);
        if had {
            self.send(writer::Op::Tomb(h));
        }
        had
    }

    /// Holds `v`, read back, while it waits for room in memory (at most [`MAX_HELD`]
    /// values at once). Whether it is held.
    pub(super) fn hold(&self, v: &Arc<StoredVersion>) -> bool {
        let mut st = self.shared.state();
        if st.held.len() >= MAX_HELD {
            return false;
        }
        st.held
            .insert(key_hash(v.key_bytes()), Arc::clone(v))
            .is_none()
    }

    /// Stops holding `v` (admitted, or no room came).
    pub(super) fn release(&self, v: &Arc<StoredVersion>) {
        let h = key_hash(v.key_bytes());
        let mut st = self.shared.state();
        if st.held.get(&h).is_some_and(|x| Arc::ptr_eq(x, v)) {
            st.held.remove(&h);
        }
    }

    /// Waits until everything queued so far is written and synced, at most `timeout`.
    /// Whether it was.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (tx, rx) = mpsc::channel();
        self.send(writer::Op::Sync(tx));
        rx.recv_timeout(timeout).is_ok()
    }

    /// Records that everything queued is written and synced (a clean shutdown), within
    /// `timeout`. Whether it was.
    pub fn close_cleanly(&self, timeout: Duration) -> bool {
        self.flush(timeout) && files::create(&self.shared.config.dir.join(CLEAN)).is_ok()
    }

    /// Where `key`'s version is (no disk read): a copy in memory (queued for the writer,
    /// or waiting for room), or a record, with whether the policy admits it when read.
    pub(super) fn locate(&self, key: &str) -> Option<Found> {
        let h = key_hash(key.as_bytes());
        let mut st = self.shared.state();
        if let Some(v) = (st.pending.get(&h))
            .or(st.held.get(&h))
            .filter(|v| v.key() == key)
        {
            return Some(Found::Held(Arc::clone(v)));
        }
        let entry = st.index.get_mut(&h)?;
        let seen = entry.tag & HIT != 0;
        entry.tag |= HIT;
        let e = *entry;
        let file = Arc::clone(&st.files.get(&e.seg)?.file);
        let admit = match self.shared.config.admit {
            Admit::FirstHit => Some("first_hit"),
            Admit::SecondHit => seen.then_some("second_hit"),
            Admit::Never => None,
        };
        Some(Found::Record(Record {
            file,
            entry: e,
            admit,
        }))
    }

    /// Reads a record [`Disk::locate`] found (blocking: a positional read), validating it
    /// and the key in it; a record that fails is dropped from the index.
    pub(super) fn read(&self, key: &str, r: &Record) -> Option<Arc<StoredVersion>> {
        catalog::DISK_READS.counter().increment(1);
        let e = r.entry;
        if let Some(v) = self.load(&r.file, &e, key) {
            return Some(v);
        }
        tracing::warn!(
            key,
            segment = e.seg,
            offset = e.off,
            "a disk record failed validation; dropped"
        );
        catalog::DISK_CORRUPT.counter().increment(1);
        let h = key_hash(key.as_bytes());
        let mut st = self.shared.state();
        if st
            .index
            .get(&h)
            .is_some_and(|x| x.seg == e.seg && x.off == e.off)
        {
            st.index.remove(&h);
        }
        None
    }

    /// The version in the record `e` of `file`, when valid and `key`'s.
    fn load(&self, file: &File, e: &Entry, key: &str) -> Option<Arc<StoredVersion>> {
        let mut head = [0u8; HEAD];
        file.read_exact_at(&mut head, u64::from(e.off)).ok()?;
        let head = Head::parse(&head)?;
        let mut pooled = self.buffers.take((e.len as usize).checked_sub(HEAD)?);
        let body = pooled.as_mut();
        file.read_exact_at(body, u64::from(e.off) + HEAD as u64)
            .ok()?;
        if !head.holds(body)
            || record::frame_key(&body[..head.frame_len as usize])? != key.as_bytes()
        {
            return None;
        }
        let frame_len = head.frame_len as usize;
        let extras = Extras::decode(&body[frame_len..])?;
        let origin = extras.restore(&mut body[..frame_len]);
        let buffer = ArenaBuffer::from_owned(pooled).ok()?;
        let frame = buffer.try_reserve(frame_len, 1)?.freeze();
        Some(Arc::new(StoredVersion {
            frame,
            arena: Arc::new(Arena::detached(buffer)),
            origin,
        }))
    }
}
