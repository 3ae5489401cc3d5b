//! The object service: what looking up, reading, writing and deleting a key means, once,
//! for both fronts. The HTTP API ([`crate::http`]) and the S3 listener ([`crate::s3`])
//! parse their requests, call [`Objects`] and translate its answer into HTTP or S3; the
//! store ([`crate::store`]), the optional read-through origin ([`crate::origin`]) and the
//! write policy stand behind this one handle.
//!
//! - [`Objects::lookup`]: the version a read names, or the current one (through the
//!   origin on a miss).
//! - [`Objects::read`] ([`read`]): what a read resolves to — a stored version, a fill
//!   under way, the origin's HEAD, or a pass-through — so cache policy is decided here,
//!   not by a front.
//! - [`Objects::put`]: a sealed upload goes to the origin (write-through) and is then
//!   published; [`Objects::delete`] likewise. Writes of one key take turns
//!   ([`order`]), so the origin and the gateway agree on which write was last.

pub mod conditions;
mod detached;
pub mod namespaces;
pub mod order;
pub mod read;
pub mod replica;

use std::sync::Arc;

use bytes::Bytes;

use crate::origin::readthrough::{FetchError, ReadThrough};
use crate::origin::{Origin, OriginError, WritePolicy};
use crate::store::disk::Want;
use crate::store::{Sealed, Store, StoreError, StoredVersion, VersionId};

/// Why an object operation failed; each front names it in its own terms.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The key has no current version (here or at the origin).
    #[error("no object {0:?}")]
    NotFound(String),
    /// The version asked for is not retained (reclaimed, or its key deleted).
    #[error("version {version} of {key:?} is not retained")]
    VersionNotFound {
        /// The key.
        key: String,
        /// The version asked for.
        version: VersionId,
    },
    /// The store refused (a precondition, memory, a length).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The origin failed a write-through or a pass-through.
    #[error(transparent)]
    Origin(#[from] OriginError),
    /// A read-through miss could not be filled.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// In a cluster, the key's ownership moved to another member while the write waited
    /// (on near-copy holders): nothing was stored, the client may send it again.
    #[error(
        "the key {0:?} moved to another member while the write waited; nothing was stored, retry"
    )]
    Moved(String),
}

/// A check of a key's current version (`None`: it has none) that a write must pass:
/// the preconditions of the request, in the store's terms.
pub trait Check: Fn(Option<&StoredVersion>) -> Result<(), StoreError> {}
impl<F: Fn(Option<&StoredVersion>) -> Result<(), StoreError>> Check for F {}

/// The store, the origin behind it and what writes do with the origin: the handle both
/// fronts hold.
#[derive(Debug)]
pub struct Objects {
    store: Arc<Store>,
    origin: Option<Arc<ReadThrough>>,
    write_policy: WritePolicy,
    order: order::KeyOrder,
    /// In a cluster, the other members: versions are tied to their key's owner.
    peers: Option<Arc<crate::cluster::Peers>>,
    /// The namespace served, when not the default one: how the near-copy and replica
    /// protocols name its keys ([`crate::cluster::scope`]).
    namespace: Option<Arc<str>>,
}

impl Objects {
    /// The service over `store`, reading through `origin` when there is one; writes follow
    /// `write_policy` (which matters only with an origin). In the cluster `peers` reach
    /// (when given), versions are tied to their key's owner: a copy made under another
    /// owner is not served as current unless the origin confirms it (the origin, built
    /// with the same `peers`, fills misses from the key's previous owner first).
    pub fn new(
        store: Arc<Store>,
        origin: Option<Arc<ReadThrough>>,
        write_policy: WritePolicy,
        peers: Option<Arc<crate::cluster::Peers>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            origin,
            write_policy,
            order: order::KeyOrder::default(),
            peers,
            namespace: None,
        })
    }

    /// In a cluster without an origin, whether `v` was written here under another owner
    /// of its key than the one now: nothing can confirm it, and it may be older than a
    /// write the owner acknowledged since, so it is not served as current. (A version
    /// recovered from the disk tier is tied to no owner and served as before.)
    fn untied(&self, v: &StoredVersion) -> bool {
        let tied = v.origin.tied();
        tied != 0
            && self.peers.as_ref().is_some_and(|p| {
                !v.origin
                    .tie_holds(|tag, at| crate::cluster::still_tied(p, v.key(), tag, at))
            })
    }

    /// The versions.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The read-through origin, when the gateway caches a bucket.
    pub fn read_through(&self) -> Option<&Arc<ReadThrough>> {
        self.origin.as_ref()
    }

    /// The origin that writes go to first (`--write-policy write-through`).
    fn write_through(&self) -> Option<&Arc<dyn Origin>> {
        match (&self.origin, self.write_policy) {
            (Some(rt), WritePolicy::WriteThrough) => Some(rt.origin()),
            _ => None,
        }
    }

    /// Version `version` of `key` while retained, or (`None`) the current version — from
    /// the origin on a miss or a stale hit, when there is one.
    pub async fn lookup(
        &self,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<Arc<StoredVersion>, ObjectError> {
        let found = match (version, &self.origin) {
            (Some(version), _) => {
                let held = match self.store.version(key, version) {
                    Some(v) => Some(v),
                    // The current version on disk, when it is the one asked for.
                    None => self
                        .store
                        .tier()
                        .from_disk(key, Want::Read)
                        .await?
                        .filter(|v| v.version() == version),
                };
                return held.ok_or_else(|| ObjectError::VersionNotFound {
                    key: key.to_owned(),
                    version,
                });
            }
            (None, Some(rt)) => rt.current(key).await?,
            (None, None) => {
                let v = self.store.tier().read_current(key).await;
                v.filter(|v| {
                    let untied = self.untied(v);
                    tracing::debug!(key, version = %v.version(), untied, "read here");
                    !untied
                })
            }
        };
        found.ok_or_else(|| ObjectError::NotFound(key.to_owned()))
    }

    /// Whether `key` has a current version here, in memory or in the disk tier, as the
    /// index says: nothing is read, and an object only the origin holds does not count.
    pub fn holds(&self, key: &str) -> bool {
        match self.store.current(key) {
            Some(v) => !self.untied(&v),
            None => self.store.tier().on_disk(key),
        }
    }

    /// [`Objects::lookup`] for a descriptor: a version read back from the disk tier is
    /// admitted into memory first (one-sided readers read memory only).
    pub async fn resident(
        &self,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<Arc<StoredVersion>, ObjectError> {
        let v = self.lookup(key, version).await?;
        Ok(self.store.tier().admit(v).await?)
    }

    /// [`Objects::resident`] of each of `keys`' current version, for those it can answer
    /// at once: the version the index holds in memory, on a gateway with no origin to
    /// confirm it with and no cluster whose ties could undo it; `None` for every other
    /// key (and every key when there is an origin or a cluster): ask [`Objects::resident`].
    /// A batch of descriptors resolves its keys this way first, without a future a key.
    pub fn resident_now<'k>(
        &self,
        keys: impl Iterator<Item = &'k str>,
    ) -> Vec<Option<Arc<StoredVersion>>> {
        if self.origin.is_some() || self.peers.is_some() {
            return keys.map(|_| None).collect();
        }
        let found: Vec<_> = keys
            .map(|k| self.store.current(k).filter(|v| v.in_memory()))
            .collect();
        let hits = found.iter().filter(|v| v.is_some()).count();
        crate::catalog::CACHE_HITS.counter().increment(hits as u64);
        found
    }

    /// The current version of `key` a write's preconditions are checked against: in
    /// memory, else on disk (read for the check, not admitted).
    async fn current_anywhere(&self, key: &str) -> Result<Option<Arc<StoredVersion>>, ObjectError> {
        match self.store.current(key) {
            Some(v) => Ok(Some(v)),
            None => Ok(self.store.tier().from_disk(key, Want::Check).await?),
        }
    }

    /// `key`'s current version when it is on disk (for a write's check; `None` when it is
    /// not on disk, memory then being what the check sees).
    async fn only_on_disk(&self, key: &str) -> Result<Option<Arc<StoredVersion>>, ObjectError> {
        match self.store.tier().on_disk(key) {
            true => self.current_anywhere(key).await,
            false => Ok(None),
        }
    }

    /// `check` against the current version of `key` as it stands: a write fails fast with
    /// this before its body is read (it is checked again, atomically, when published).
    pub async fn precheck(&self, key: &str, check: impl Check) -> Result<(), ObjectError> {
        Ok(check(self.current_anywhere(key).await?.as_deref())?)
    }

    /// Makes `sealed` the current version of its key if `check` accepts the version it
    /// replaces. With write-through the origin stores it first (with its SHA-256 as the
    /// checksum) and nothing is published if the origin fails. Writes of one key take
    /// turns, so the last one published is the last one the origin stored.
    pub async fn put(
        &self,
        sealed: Sealed,
        check: impl Check,
    ) -> Result<Arc<StoredVersion>, ObjectError> {
        let v = Arc::clone(sealed.version());
        let key = v.key().to_string();
        // The key's turn, held until the write is published.
        let mut _turn = None;
        if let Some((origin, held)) = self.origin_turn(&key, &check).await? {
            let body = Bytes::from_owner(v.payload());
            let (origin, k, sha, ctype) = (
                Arc::clone(origin),
                key.clone(),
                v.sha256(),
                v.content_type().to_owned(),
            );
            let request = async move { origin.put(&k, body, sha, &ctype).await };
            let (etag, held) = detached::Detached::run(&self.store, &key, held, request).await;
            _turn = Some(held);
            if let Some(e) = etag? {
                v.origin.set_etag(e);
            }
            v.origin.touch();
        }
        // No near copy serves what this replaces once it is published.
        let _near = near_before(self.peers.as_ref(), &scoped(self, &key)).await;
        self.still_owner(&key)?;
        let on_disk = self.only_on_disk(&key).await?;
        let stored = self
            .store
            .writes()
            .publish(sealed, with_disk(&check, on_disk))?;
        if let Some(rt) = &self.origin {
            rt.supersede(&key);
        }
        if let Some(p) = &self.peers {
            let (tag, at) = crate::cluster::tie_now(p, &key);
            stored.origin.tie(tag, at); // written under the owner now
            tracing::debug!(key, version = %stored.version(), tie = stored.origin.tied(), "published");
            near_after(p, &scoped(self, &key)).await;
            crate::cluster::replicate::nudge(p, self.namespace.as_deref(), &key);
        }
        Ok(stored)
    }

    /// Deletes `key` if `check` accepts its current version (an absent key is deleted
    /// too); with write-through, at the origin first. Whether a version was removed here.
    pub async fn delete(&self, key: &str, check: impl Check) -> Result<bool, ObjectError> {
        // The key's turn, held until the delete is done here.
        let mut _turn = None;
        if let Some((origin, held)) = self.origin_turn(key, &check).await? {
            let (origin, k) = (Arc::clone(origin), key.to_owned());
            let request = async move { origin.delete(&k).await };
            let (done, held) = detached::Detached::run(&self.store, key, held, request).await;
            _turn = Some(held);
            done?;
        }
        // No near copy serves what this deletes once it is gone.
        let _near = near_before(self.peers.as_ref(), &scoped(self, key)).await;
        self.still_owner(key)?;
        let on_disk = self.only_on_disk(key).await?;
        let removed = self.store.delete(key, with_disk(&check, on_disk))?;
        match (&self.origin, self.write_through().is_some()) {
            // The origin deleted it too.
            (Some(rt), true) => rt.deleted(key),
            (Some(rt), false) => rt.supersede(key),
            (None, _) => {}
        }
        if let Some(p) = &self.peers {
            near_after(p, &scoped(self, key)).await;
        }
        Ok(removed)
    }

    /// In a cluster, whether this member still owns `key` as a write of it is about to be
    /// published (after waiting on near-copy holders): a write accepted as owner that
    /// waited across a view change would be acknowledged beside the new owner's writes
    /// and tied to that owner as if it were its own (issue 65). With write-through the
    /// origin already has it: published here too (this member's copy is confirmed with
    /// the origin before it is served, as every copy of a member not the owner).
    fn still_owner(&self, key: &str) -> Result<(), ObjectError> {
        let moved =
            self.write_through().is_none() && self.peers.as_ref().is_some_and(|p| !p.owns(key));
        if moved {
            return Err(ObjectError::Moved(key.to_owned()));
        }
        Ok(())
    }

    /// With write-through, the origin a write of `key` goes to first and the write's turn
    /// at the key (held until the write is published), once `check` still passes: no
    /// origin write for a write that cannot be published. `None` without write-through.
    async fn origin_turn(
        &self,
        key: &str,
        check: &impl Check,
    ) -> Result<Option<(&Arc<dyn Origin>, order::Turn)>, ObjectError> {
        let Some(origin) = self.write_through() else {
            return Ok(None);
        };
        let turn = self.order.turn(key).await;
        self.precheck(key, check).await?;
        Ok(Some((origin, turn)))
    }
}

/// How the near-copy and replica protocols name `key` of the namespace `objects` serves.
fn scoped<'k>(objects: &Objects, key: &'k str) -> std::borrow::Cow<'k, str> {
    crate::cluster::scope::scoped(objects.namespace.as_deref(), key)
}

/// Before a write of `key` is published: its near copies revoked, and none granted until
/// the answer is dropped (see [`crate::cluster::near`]). With the bug `early-ack` planted,
/// nothing: [`near_after`] revokes them after the write was acknowledged.
async fn near_before(
    peers: Option<&Arc<crate::cluster::Peers>>,
    key: &str,
) -> Option<crate::cluster::NearWrite> {
    if crate::planted::planted(crate::planted::Bug::EarlyAck) {
        return None;
    }
    peers?.near_write(key).await
}

/// After a write of `key` was published: nothing, unless the bug `early-ack` is planted
/// (then its near copies are revoked a moment after the write was acknowledged).
async fn near_after(peers: &Arc<crate::cluster::Peers>, key: &str) {
    if crate::planted::planted(crate::planted::Bug::EarlyAck) {
        let (p, key) = (Arc::clone(peers), key.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            drop(p.near_write(&key).await); // revoked only now
        });
    }
}

/// `check`, for a key whose current version may be only on disk (`on_disk`, read before):
/// the check a publish or delete applies to what memory holds then.
fn with_disk<'c>(
    check: &'c impl Check,
    on_disk: Option<Arc<StoredVersion>>,
) -> impl Fn(Option<&StoredVersion>) -> Result<(), StoreError> + 'c {
    move |cur| match (cur, &on_disk) {
        (None, Some(d)) => check(Some(d)),
        _ => check(cur),
    }
}
