//! The object service's side of replicas (`crate::cluster::replicas`): the version an
//! owner copies to its replicas, and a replica's copy adopted and dropped here.

use std::sync::Arc;

use super::{ObjectError, Objects};
use crate::store::{StoredVersion, VersionId};

/// Replicas of this service's keys, as a source (the owner) and as a holder.
pub struct Replicas<'a> {
    objects: &'a Objects,
}

impl Objects {
    /// Replicas: the owner's source, a replica's copies.
    pub fn replicas(&self) -> Replicas<'_> {
        Replicas { objects: self }
    }
}

impl Replicas<'_> {
    /// As the owner: the current version of `key` a replica copies (read back from the
    /// disk tier or the origin when it is not in memory, as for a descriptor).
    pub async fn source(&self, key: &str) -> Result<Arc<StoredVersion>, ObjectError> {
        self.objects.resident(key, None).await
    }

    /// As a replica: adopts `frame`, version `ids` = (version id, payload length, frame
    /// checksum) of `key` another member owns, checked against them.
    pub async fn adopt(
        &self,
        key: &str,
        frame: &[u8],
        ids: (u64, u64, u64),
    ) -> Result<Arc<StoredVersion>, ObjectError> {
        Ok(self.objects.store.writes().adopt(key, frame, ids).await?)
    }

    /// As a replica: whether version `version` of `key` is still in memory here (a
    /// replica evicted to make room is copied again).
    pub fn holds(&self, key: &str, version: u64) -> bool {
        self.objects
            .store
            .version(key, VersionId(version))
            .is_some()
    }

    /// As a replica: drops the replica `version` of `key` (revoked, replaced, idle).
    pub fn drop_copy(&self, key: &str, version: u64) {
        self.objects.store.writes().drop_replica(key, version);
    }
}
