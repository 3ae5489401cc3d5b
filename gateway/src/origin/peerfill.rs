//! Filling a miss from the key's previous owner before the origin
//! ([`crate::cluster::Peers::copy`]): only once the origin confirms the copy is its
//! current object.

use futures_util::StreamExt;
use std::sync::Arc;

use super::flight::Permit;
use super::readthrough::ReadThrough;
use super::{FetchError, OriginError, OriginObject};
use crate::catalog;
use crate::cluster::fill::PeerCopy;
use crate::store::{FillTicket, StoredVersion};

impl ReadThrough {
    /// `key` filled from the copy its previous owner holds, when the origin confirms it:
    /// the fill's outcome, or `None` (no copy, not current, or it broke off): fetch from
    /// the origin.
    pub(super) async fn fill_from_peer(
        &self,
        key: &str,
        (filling, ticket): (&Permit, &FillTicket),
    ) -> Option<Result<Option<Arc<StoredVersion>>, FetchError>> {
        let peers = self.peers.as_ref()?;
        let copy = self.confirmed(peers.copy(key).await, key).await?;
        let age = copy.age;
        let obj = OriginObject {
            length: copy.length,
            content_type: copy.content_type,
            etag: copy.etag,
            content_range: None,
            body: Box::pin(
                copy.body
                    .map(|c| c.map_err(|e| OriginError::Failed(format!("peer copy: {e}")))),
            ),
        };
        match self.store_object(key, obj, None, (filling, ticket)).await {
            Ok(v) => {
                if let (Some(v), Some(age)) = (&v, age) {
                    v.origin.confirmed_ago(age);
                }
                Some(Ok(v))
            }
            Err(FetchError::Origin(e)) => {
                tracing::warn!(key, error = %e, "the peer's copy broke off; fetching from the origin");
                None
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// A peer's `copy` of `key` once the origin confirms it is current (a HEAD: the same
    /// entity tag), else `None`: a restarted or new owner adopts nothing older than what
    /// the origin holds.
    async fn confirmed(&self, copy: Option<PeerCopy>, key: &str) -> Option<PeerCopy> {
        let copy = copy?;
        catalog::ORIGIN_HEADS.counter().increment(1);
        let head = self.origin.head(key).await;
        let current = match &head {
            Ok(Some(h)) => h.etag.is_some() && h.etag == copy.etag,
            _ => false,
        };
        if !current {
            tracing::debug!(
                key,
                "the peer's copy is not the origin's current one; fetching"
            );
            catalog::PEER_FILLS
                .counter_by(&[("result", "stale")])
                .increment(1);
        }
        current.then_some(copy)
    }
}
