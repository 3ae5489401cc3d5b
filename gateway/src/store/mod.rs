//! The store of immutable versions. Knows nothing of HTTP.
//!
//! Every write produces a new [`StoredVersion`] with a fresh [`VersionId`], framed (see
//! [`rasa_fastpath::frame`]) in an arena; then, and only then, the key's current pointer
//! moves to it. Bytes of a version never change after it becomes visible, which is what
//! makes one-sided reads safe.
//!
//! - Writes stream: [`Store::begin`] reserves the whole frame up front, [`Upload::write`]
//!   copies each body chunk straight into arena memory while SHA-256 and the frame checksum
//!   are computed, and [`Store::commit`] seals the header and publishes. An upload dropped
//!   before commit (client gone, body too long or short) publishes nothing: its slot is
//!   unreachable garbage until its arena is reused.
//! - Older versions of a key stay readable by version id until reclaimed; a delete makes
//!   every version of the key unreachable for new requests at once. Readers that already
//!   hold a version (an HTTP response in flight, a fast-path lease) keep its arena alive.

pub mod arena;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Bound;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rasa_fastpath::buffer::{Frozen, WriteSlot};
use rasa_fastpath::frame::{self, FrameHasher, FrameIdentity, HEADER_LEN};
use rasa_fastpath::server::FabricServer;
use sha2::{Digest, Sha256};

use arena::{Arena, Arenas};

/// Identity of one immutable version: unique across the keys and the restarts of a gateway.
///
/// A version id is the gateway's random 64-bit incarnation (drawn at start) plus a counter,
/// so two processes collide only if their ranges overlap: about `n / 2^64` for `n` writes.
/// Ids are opaque: compare them for equality only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionId(pub u64);

impl fmt::Display for VersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A version id that is not 16 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a version id is 16 hexadecimal digits")]
pub struct BadVersionId;

impl FromStr for VersionId {
    type Err = BadVersionId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BadVersionId);
        }
        u64::from_str_radix(s, 16)
            .map(VersionId)
            .map_err(|_| BadVersionId)
    }
}

/// One stored, immutable version of a key.
#[derive(Debug)]
pub struct StoredVersion {
    /// The key.
    pub key: String,
    /// The version id.
    pub version: VersionId,
    /// Header and payload in arena memory.
    pub frame: Frozen,
    /// The arena holding the frame.
    pub arena: Arc<Arena>,
    /// SHA-256 of the payload.
    pub sha256: [u8; 32],
    /// Frame checksum (XXH3-64 over payload and header).
    pub checksum: u64,
    /// Media type given at upload.
    pub content_type: String,
    /// When the version was committed.
    pub created: SystemTime,
}

impl StoredVersion {
    /// Payload length.
    pub fn len(&self) -> u64 {
        (self.frame.len() - HEADER_LEN) as u64
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload bytes (shares the arena; no copy).
    pub fn payload(&self) -> Frozen {
        self.frame.slice(HEADER_LEN, self.frame.len())
    }

    /// SHA-256 as lowercase hex.
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }

    /// The strong entity tag, quotes included.
    pub fn etag(&self) -> String {
        format!("\"{}\"", self.sha256_hex())
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The memory budget cannot hold the value.
    #[error("memory budget exhausted: {needed} more bytes needed, {allocated} of {budget} in use")]
    InsufficientStorage {
        /// Bytes the value needed.
        needed: u64,
        /// Bytes allocated when it was refused.
        allocated: u64,
        /// The budget.
        budget: u64,
    },
    /// The body did not have the declared length.
    #[error("the body has {got} bytes but {declared} were declared")]
    LengthMismatch {
        /// Declared length.
        declared: u64,
        /// Bytes that arrived (so far, when too many).
        got: u64,
    },
    /// Registering memory with the fabric failed.
    #[error("fabric registration failed: {0}")]
    Fabric(String),
    /// A conditional write's precondition did not hold at commit.
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
}

#[derive(Debug)]
struct Entry {
    current: Arc<StoredVersion>,
    /// Overwritten versions, still readable by id until reclaimed.
    older: HashMap<VersionId, Arc<StoredVersion>>,
}

/// Sizing of a store.
#[derive(Clone, Copy, Debug)]
pub struct StoreConfig {
    /// Total bytes of arena memory the store may allocate.
    pub memory_budget: u64,
    /// Size of a shared arena; larger values get an arena of their own.
    pub arena_size: usize,
    /// How long a descriptor handed out stays valid.
    pub lease: Duration,
}

/// Keys → versions, over arenas.
#[derive(Debug)]
pub struct Store {
    config: StoreConfig,
    incarnation: u64,
    counter: AtomicU64,
    arenas: Arenas,
    fabric: Option<Arc<FabricServer>>,
    index: RwLock<BTreeMap<String, Entry>>,
}

impl Store {
    /// An empty store with a fresh random incarnation. With `fabric`, every arena is
    /// registered for one-sided reads.
    pub fn new(config: StoreConfig, fabric: Option<Arc<FabricServer>>) -> Self {
        Self {
            incarnation: rand::random(),
            counter: AtomicU64::new(1),
            arenas: Arenas::new(config.arena_size, config.memory_budget, fabric.clone()),
            fabric,
            index: RwLock::new(BTreeMap::new()),
            config,
        }
    }

    /// The random id of this process; version ids count up from it.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The store's sizing.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The fabric endpoint serving one-sided reads, when the fast path is on.
    pub fn fabric(&self) -> Option<&Arc<FabricServer>> {
        self.fabric.as_ref()
    }

    /// Where `v`'s frame can be read one-sided: (remote address, remote key).
    pub fn remote(&self, v: &StoredVersion) -> Option<(u64, u64)> {
        let fabric = self.fabric.as_ref()?;
        v.arena.remote(fabric, v.frame.offset())
    }

    /// Rotates the remote key of the arena holding `v` (revoking the key every descriptor
    /// of that arena carried so far).
    pub fn rotate_key(&self, v: &StoredVersion) -> Result<(), StoreError> {
        match &self.fabric {
            Some(fabric) => v
                .arena
                .rotate_key(fabric)
                .map_err(|e| StoreError::Fabric(e.to_string())),
            None => Ok(()),
        }
    }

    /// Test support: a copy of `v`'s frame, in arena memory, with one byte flipped (the
    /// last payload byte, or a header byte of an empty value), under `v`'s identity and
    /// checksum. A reader given it must reject it.
    pub fn corrupt_copy(&self, v: &StoredVersion) -> Result<Arc<StoredVersion>, StoreError> {
        let (arena, mut slot) = self.arenas.reserve(v.frame.len())?;
        let bytes = slot.as_mut_slice();
        bytes.copy_from_slice(v.frame.as_slice());
        let last = bytes.len() - 1;
        bytes[if v.is_empty() { 20 } else { last }] ^= 0x01;
        Ok(Arc::new(StoredVersion {
            key: v.key.clone(),
            version: v.version,
            frame: slot.freeze(),
            arena,
            sha256: v.sha256,
            checksum: v.checksum,
            content_type: v.content_type.clone(),
            created: v.created,
        }))
    }

    /// Bytes of arena memory allocated now.
    pub fn allocated(&self) -> u64 {
        self.arenas.allocated()
    }

    fn next_version(&self) -> VersionId {
        VersionId(
            self.incarnation
                .wrapping_add(self.counter.fetch_add(1, Ordering::Relaxed)),
        )
    }

    /// Starts storing a value of exactly `len` bytes under `key`: reserves its frame.
    pub fn begin(&self, key: &str, content_type: &str, len: u64) -> Result<Upload, StoreError> {
        let frame_len = usize::try_from(len)
            .ok()
            .and_then(|n| n.checked_add(HEADER_LEN))
            .ok_or(StoreError::InsufficientStorage {
                needed: len,
                allocated: self.allocated(),
                budget: self.config.memory_budget,
            })?;
        let (arena, slot) = self.arenas.reserve(frame_len)?;
        Ok(Upload {
            key: key.to_owned(),
            content_type: content_type.to_owned(),
            declared: len,
            written: 0,
            sha256: Sha256::new(),
            frame: FrameHasher::new(),
            arena,
            slot: Some(slot),
        })
    }

    /// Publishes a fully written upload as the key's current version, if `check` accepts
    /// the current version (or its absence) at that moment. On any error nothing is
    /// published.
    pub fn commit(
        &self,
        mut upload: Upload,
        check: impl FnOnce(Option<&StoredVersion>) -> Result<(), StoreError>,
    ) -> Result<Arc<StoredVersion>, StoreError> {
        if upload.written != upload.declared {
            return Err(StoreError::LengthMismatch {
                declared: upload.declared,
                got: upload.written,
            });
        }
        let mut slot = upload.slot.take().expect("an upload is committed once");
        let version = self.next_version();
        let id = FrameIdentity {
            key_hash: frame::key_hash(&upload.key),
            version: version.0,
            payload_len: upload.declared,
        };
        let hasher = std::mem::take(&mut upload.frame);
        let (header, checksum) = hasher.seal(id);
        slot.as_mut_slice()[..HEADER_LEN].copy_from_slice(&header);
        let sha256: [u8; 32] = std::mem::take(&mut upload.sha256).finalize().into();
        let stored = Arc::new(StoredVersion {
            key: std::mem::take(&mut upload.key),
            version,
            frame: slot.freeze(),
            arena: Arc::clone(&upload.arena),
            sha256,
            checksum,
            content_type: std::mem::take(&mut upload.content_type),
            created: SystemTime::now(),
        });
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        check(index.get(&stored.key).map(|e| &*e.current))?;
        match index.get_mut(&stored.key) {
            Some(entry) => {
                let old = std::mem::replace(&mut entry.current, Arc::clone(&stored));
                entry.older.insert(old.version, old);
            }
            None => {
                index.insert(
                    stored.key.clone(),
                    Entry {
                        current: Arc::clone(&stored),
                        older: HashMap::new(),
                    },
                );
            }
        }
        drop(index);
        metrics::counter!("rasa_versions_stored_total").increment(1);
        metrics::counter!("rasa_bytes_stored_total").increment(stored.len());
        Ok(stored)
    }

    /// The current version of `key`.
    pub fn current(&self, key: &str) -> Option<Arc<StoredVersion>> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        index.get(key).map(|e| Arc::clone(&e.current))
    }

    /// A given version of `key`, current or older, while retained.
    pub fn version(&self, key: &str, version: VersionId) -> Option<Arc<StoredVersion>> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        let entry = index.get(key)?;
        if entry.current.version == version {
            return Some(Arc::clone(&entry.current));
        }
        entry.older.get(&version).cloned()
    }

    /// Makes every version of `key` unreachable for new requests. Returns whether the key
    /// existed, after checking `check` against its current version.
    pub fn delete(
        &self,
        key: &str,
        check: impl FnOnce(Option<&StoredVersion>) -> Result<(), StoreError>,
    ) -> Result<bool, StoreError> {
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        check(index.get(key).map(|e| &*e.current))?;
        let removed = index.remove(key);
        drop(index);
        Ok(removed.is_some())
    }

    /// Current versions of keys starting with `prefix` and sorting after `after`, in key
    /// order, at most `limit`; plus whether more follow.
    pub fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Arc<StoredVersion>>, bool) {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded(a),
            _ => Bound::Included(prefix),
        };
        let mut iter = index
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, e)| Arc::clone(&e.current));
        let page: Vec<_> = iter.by_ref().take(limit).collect();
        let more = iter.next().is_some();
        (page, more)
    }

    /// Grants a lease on `version`: returns its deadline and records it on the arena, which
    /// therefore keeps the bytes unchanged at least until then.
    pub fn lease(&self, version: &StoredVersion) -> SystemTime {
        let deadline = SystemTime::now() + self.config.lease;
        version.arena.extend_lease(deadline);
        metrics::counter!("rasa_leases_granted_total").increment(1);
        deadline
    }
}

/// A value being written. Dropping it unfinished publishes nothing.
#[derive(Debug)]
pub struct Upload {
    key: String,
    content_type: String,
    declared: u64,
    written: u64,
    sha256: Sha256,
    frame: FrameHasher,
    arena: Arc<Arena>,
    slot: Option<WriteSlot>,
}

impl Upload {
    /// Appends the next body chunk: copies it into arena memory and feeds both digests.
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), StoreError> {
        let end = self.written + chunk.len() as u64;
        if end > self.declared {
            return Err(StoreError::LengthMismatch {
                declared: self.declared,
                got: end,
            });
        }
        let slot = self.slot.as_mut().expect("writing a committed upload");
        let at = HEADER_LEN + self.written as usize;
        slot.as_mut_slice()[at..at + chunk.len()].copy_from_slice(chunk);
        self.sha256.update(chunk);
        self.frame.update(chunk);
        self.written = end;
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            metrics::counter!("rasa_uploads_abandoned_total").increment(1);
            tracing::debug!(
                key = %self.key,
                written = self.written,
                declared = self.declared,
                wasted = slot.len(),
                "upload abandoned; nothing published"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(budget: u64, arena: usize) -> Store {
        Store::new(
            StoreConfig {
                memory_budget: budget,
                arena_size: arena,
                lease: Duration::from_secs(10),
            },
            None,
        )
    }

    fn put(s: &Store, key: &str, body: &[u8]) -> Result<Arc<StoredVersion>, StoreError> {
        let mut up = s.begin(key, "application/octet-stream", body.len() as u64)?;
        for part in body.chunks(3) {
            up.write(part)?;
        }
        s.commit(up, |_| Ok(()))
    }

    #[test]
    fn frames_validate_and_versions_stay_readable() {
        let s = store(1 << 20, 64 << 10);
        let v1 = put(&s, "k", b"one").unwrap();
        let v2 = put(&s, "k", b"two!").unwrap();
        assert_ne!(v1.version, v2.version);
        assert_eq!(s.current("k").unwrap().version, v2.version);
        assert_eq!(
            s.version("k", v1.version).unwrap().payload().as_slice(),
            b"one"
        );
        for v in [&v1, &v2] {
            let id = FrameIdentity {
                key_hash: frame::key_hash("k"),
                version: v.version.0,
                payload_len: v.len(),
            };
            let payload = frame::validate(v.frame.as_slice(), id, v.checksum).unwrap();
            assert_eq!(payload, v.payload().as_slice());
        }
        assert_eq!(
            v2.sha256_hex(),
            hex::encode(Sha256::digest(b"two!")),
            "sha256 computed while streaming"
        );
        assert!(s.delete("k", |_| Ok(())).unwrap());
        assert!(s.current("k").is_none());
        assert!(s.version("k", v1.version).is_none());
        assert!(!s.delete("k", |_| Ok(())).unwrap());
    }

    #[test]
    fn wrong_length_or_dropped_upload_publishes_nothing() {
        let s = store(1 << 20, 64 << 10);
        let mut up = s.begin("k", "t", 4).unwrap();
        up.write(b"abc").unwrap();
        assert!(matches!(
            s.commit(up, |_| Ok(())),
            Err(StoreError::LengthMismatch { .. })
        ));
        let mut up = s.begin("k", "t", 2).unwrap();
        assert!(up.write(b"abc").is_err());
        drop(up);
        assert!(s.current("k").is_none());
    }

    #[test]
    fn budget_is_enforced_and_large_values_get_their_own_arena() {
        let s = store(256 << 10, 64 << 10);
        let big = vec![7u8; 100 << 10];
        let v = put(&s, "big", &big).unwrap();
        assert!(v.arena.dedicated);
        assert_eq!(v.payload().as_slice(), &big[..]);
        let mut stored = 1;
        loop {
            match put(&s, &format!("k{stored}"), &[1u8; 30 << 10]) {
                Ok(_) => stored += 1,
                Err(StoreError::InsufficientStorage { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(s.allocated() <= 256 << 10);
        // Nothing stored before the refusal was harmed.
        assert_eq!(s.current("big").unwrap().payload().as_slice(), &big[..]);
        assert!(stored > 2);
        // Deleting frees whole arenas once nothing references them.
        let before = s.allocated();
        s.delete("big", |_| Ok(())).unwrap();
        drop(v);
        assert!(s.allocated() < before);
    }

    #[test]
    fn list_pages_in_key_order_within_prefix() {
        let s = store(1 << 20, 64 << 10);
        for k in ["a/1", "a/2", "a/3", "b/1", "a"] {
            put(&s, k, k.as_bytes()).unwrap();
        }
        let keys = |v: Vec<Arc<StoredVersion>>| v.iter().map(|x| x.key.clone()).collect::<Vec<_>>();
        let (p, more) = s.list("a/", None, 2);
        assert_eq!((keys(p), more), (vec!["a/1".into(), "a/2".into()], true));
        let (p, more) = s.list("a/", Some("a/2"), 2);
        assert_eq!((keys(p), more), (vec!["a/3".to_string()], false));
        let (p, _) = s.list("", Some("a/3"), 10);
        assert_eq!(keys(p), vec!["b/1".to_string()]);
    }

    #[test]
    fn version_ids_parse_and_print() {
        let v = VersionId(0x00ab_cdef_0123_4567);
        assert_eq!(v.to_string(), "00abcdef01234567");
        assert_eq!("00abcdef01234567".parse::<VersionId>(), Ok(v));
        assert!("abc".parse::<VersionId>().is_err());
        assert!("+0abcdef01234567".parse::<VersionId>().is_err());
    }
}
