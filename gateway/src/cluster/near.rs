//! Near copies (`--cluster-near-cache`): a member that forwards plain reads of a key to its
//! owner keeps the owner's answer and serves it itself, without the hop, for a short lease
//! the owner grants with the answer ([`NEAR_LEASE`]).
//!
//! No near copy serves bytes a write replaced once anyone can read the write: the owner
//! records a grant **before** it looks the key up for the read it grants, and a write of
//! the key, **before** it publishes (or deletes), takes the key's grants and stops new
//! ones, tells each holder to drop its copy and waits for the answer, or, for a holder
//! that does not answer, until that holder's lease has ended. Only then is the write
//! published, and grants made again. (Revoking after publishing let a reader at the owner
//! see the new value and a later reader at a holder the old one: the chaos checker found
//! it.) A read granted before the write took the grants is revoked with them; a read
//! during the write gets no grant. A holder that hears of a revocation while a read is on
//! its way back keeps nothing from that read ([`Near::ticket`]). The holder's lease is
//! measured from when it sent the read, which is before the owner granted it, so it ends
//! first.
//!
//! The owner's grants live in its memory: for one lease (the longest it grants) after it
//! starts owning keys (at start, and again when it registers after a lost lease), its
//! writes wait out the grants
//! an earlier process, or the member that held its keys meanwhile, may have made (the
//! chaos checker found a holder that had not yet seen the owner back serving such a copy
//! after the owner's write). A copy is tied to its owner's tag
//! (node id and incarnation) and served only while this member's view names that owner.
//! Only the default namespace, only gateways without a read-through origin (whose
//! versions can change under the owner), and only reads without a range, a condition or
//! a query are served near.

use crate::catalog;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

/// How long a near copy may be served after its read was sent.
pub const NEAR_LEASE: Duration = Duration::from_secs(1);

/// Request header of a forwarded read whose sender would keep a near copy: its node id.
pub const WANT_HEADER: &str = "rasa-near-want";

/// Response header of an owner granting a near copy: the lease, in milliseconds.
pub const LEASE_HEADER: &str = "rasa-near-lease";

/// Response header of an answer served from a near copy (`hit`).
pub const NEAR_HEADER: &str = "rasa-near";

/// The path of the revocation route: `POST` with the keys, one a line.
pub const REVOKE_PATH: &str = "/v1/cluster/near";

/// Longest value kept as a near copy.
const LARGEST_COPY: u64 = 4 << 20;

/// Time taken off a holder's lease (a near copy's or a replica's) for clocks that run at
/// slightly different rates.
pub const MARGIN: Duration = Duration::from_millis(50);

/// A kept answer.
struct Copy {
    owner_tag: u64,
    until: Instant,
    headers: HeaderMap,
    body: Bytes,
}

#[derive(Clone)]
struct Weigh;

impl quick_cache::Weighter<String, Arc<Copy>> for Weigh {
    fn weight(&self, key: &String, copy: &Arc<Copy>) -> u64 {
        (key.len() + copy.body.len() + 64 * copy.headers.len() + 128) as u64
    }
}

/// Grants made by this member as an owner: key → (holder's node id, lease end).
#[derive(Default)]
struct Grants {
    by_key: HashMap<String, Vec<(String, Instant)>>,
    /// Keys with writes under way (and how many): no grant is made for them until the
    /// writes are published, so no copy of the value they replace is handed out after
    /// their revocations were sent.
    writing: HashMap<String, usize>,
    /// Grant count when expired grants were last dropped.
    pruned_at: usize,
}

/// Both sides of near copies for one member: the grants it made as an owner, and the
/// copies it keeps of other owners' answers.
pub struct Near {
    /// When this process started: its first lease waits out an earlier one's grants.
    pub(super) started: Instant,
    grants: Mutex<Grants>,
    copies: quick_cache::sync::Cache<String, Arc<Copy>, Weigh>,
    /// Revocations heard so far: a read sent before one is not kept. Held to drop copies
    /// and to keep one, so that no copy is kept past a revocation.
    revocations: Mutex<u64>,
    largest: u64,
    /// Replicas (`--cluster-replicas`), which follow the same grants and revocations.
    replicas: Option<super::replicas::Replicas>,
}

impl std::fmt::Debug for Near {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Near")
            .field("copies", &self.copies.len())
            .finish_non_exhaustive()
    }
}

impl Near {
    /// Near copies within `capacity` bytes (0: none kept, grants still made — for
    /// `replicas`, when there are).
    pub fn new(capacity: u64, replicas: Option<super::replicas::Replicas>) -> Self {
        let items = (capacity / 4096).clamp(16, 1 << 20) as usize;
        Self {
            started: Instant::now(),
            grants: Mutex::default(),
            copies: quick_cache::sync::Cache::with_weighter(items, capacity, Weigh),
            revocations: Mutex::default(),
            largest: LARGEST_COPY.min(capacity / 8),
            replicas,
        }
    }

    /// Whether this member keeps near copies (`--cluster-near-cache`).
    pub fn keeps_copies(&self) -> bool {
        self.largest > 0
    }

    /// Replicas, when `--cluster-replicas` names any.
    pub fn replicas(&self) -> Option<&super::replicas::Replicas> {
        self.replicas.as_ref()
    }

    /// The longest lease this member's grants run for (the replicas' when there are).
    pub fn longest_lease(&self) -> Duration {
        match self.replicas {
            Some(_) => NEAR_LEASE.max(super::replicas::REPLICA_LEASE),
            None => NEAR_LEASE,
        }
    }

    /// As the owner: records that `holder` may keep a copy of `key` for [`NEAR_LEASE`];
    /// `false` (no grant) while a write of `key` is under way. Called before the read is
    /// served, so that a write starting after this finds it.
    pub fn grant(&self, key: &str, holder: &str) -> bool {
        self.grant_for(key, holder, NEAR_LEASE)
    }

    /// [`Near::grant`] for `lease` (a replica's, [`super::replicas::REPLICA_LEASE`]).
    pub fn grant_for(&self, key: &str, holder: &str, lease: Duration) -> bool {
        let now = Instant::now();
        let mut g = self.grants.lock().unwrap_or_else(|e| e.into_inner());
        if g.writing.contains_key(key) {
            return false;
        }
        let total = g.by_key.len();
        if total >= 2 * g.pruned_at.max(1024) {
            g.by_key.retain(|_, holders| {
                holders.retain(|(_, until)| *until > now);
                !holders.is_empty()
            });
            g.pruned_at = g.by_key.len();
        }
        let holders = g.by_key.entry(key.to_owned()).or_default();
        holders.retain(|(node, until)| *until > now && node != holder);
        holders.push((holder.to_owned(), now + lease));
        true
    }

    /// As the owner, before a write of `key` is published: the grants still running, and
    /// no grant of `key` made until [`Near::end_write`]. A grant stays recorded until its
    /// holder said it dropped its copy ([`Near::revoked`]) or its lease ended: a second
    /// write of the key while the first still waits on a holder waits on it too (taking
    /// the grants had let the second write publish at once, and the holder serve the
    /// value both replaced: the chaos checker found it).
    pub(super) fn begin_write(&self, key: &str) -> Vec<(String, Instant)> {
        let now = Instant::now();
        let mut g = self.grants.lock().unwrap_or_else(|e| e.into_inner());
        *g.writing.entry(key.to_owned()).or_default() += 1;
        let Some(holders) = g.by_key.get_mut(key) else {
            return Vec::new();
        };
        holders.retain(|(_, until)| *until > now);
        let running = holders.clone();
        if running.is_empty() {
            g.by_key.remove(key);
        }
        running
    }

    /// As the owner: `holder` said it dropped its copy of `key` (no grant of `key` is made
    /// while a write of it is under way, so this is the grant that was revoked).
    pub(super) fn revoked(&self, key: &str, holder: &str) {
        let mut g = self.grants.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(holders) = g.by_key.get_mut(key) {
            holders.retain(|(node, _)| node != holder);
            if holders.is_empty() {
                g.by_key.remove(key);
            }
        }
    }

    /// As the owner, once a write [`Near::begin_write`] began is published (or failed):
    /// grants of `key` are made again when no other write of it is under way.
    pub(super) fn end_write(&self, key: &str) {
        let mut g = self.grants.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = g.writing.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                g.writing.remove(key);
            }
        }
    }

    /// As a holder: the number to give [`Near::keep`] for a read about to be sent.
    pub fn ticket(&self) -> u64 {
        *self.revocations.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// As a holder: the copy of `key` to serve, if one is kept under owner `owner_tag`
    /// and its lease runs.
    pub fn serve(&self, key: &str, owner_tag: u64) -> Option<Response> {
        let copy = self.copies.get(key)?;
        if copy.owner_tag != owner_tag || Instant::now() >= copy.until {
            self.copies.remove(key);
            return None;
        }
        catalog::CLUSTER_NEAR
            .counter_by(&[("result", "hit")])
            .increment(1);
        let mut resp = Response::new(Body::from(copy.body.clone()));
        *resp.headers_mut() = copy.headers.clone();
        resp.headers_mut()
            .insert(NEAR_HEADER, HeaderValue::from_static("hit"));
        Some(resp)
    }

    /// As a holder: keeps the owner's answer `resp` to a read of `key` sent at `sent`
    /// with `ticket`, when the owner granted a lease, the answer is a whole value small
    /// enough, and no revocation was heard since the read was sent. The answer to relay.
    pub async fn keep(
        &self,
        key: &str,
        owner_tag: u64,
        sent: Instant,
        ticket: u64,
        mut resp: Response,
    ) -> Response {
        let Some(lease) = resp.headers_mut().remove(LEASE_HEADER) else {
            return resp;
        };
        let lease = lease
            .to_str()
            .ok()
            .and_then(|ms| ms.parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or_default()
            .min(NEAR_LEASE);
        let length = resp
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let small = length.is_some_and(|n| n <= self.largest);
        if resp.status() != StatusCode::OK || !small || lease <= MARGIN {
            return resp;
        }
        let (parts, body) = resp.into_parts();
        let body = match axum::body::to_bytes(body, self.largest as usize).await {
            Ok(b) => b,
            Err(e) => {
                // The owner's answer broke off: the client sees the same.
                let err = Body::from_stream(futures_util::stream::once(async move {
                    Err::<Bytes, _>(std::io::Error::other(e.to_string()))
                }));
                return Response::from_parts(parts, err);
            }
        };
        let mut headers = parts.headers.clone();
        headers.remove(http::header::DATE); // each answer from the copy gets its own
        let copy = Arc::new(Copy {
            owner_tag,
            until: sent + lease - MARGIN,
            headers,
            body: body.clone(),
        });
        // Checked after the answer arrived: a revocation heard while it travelled wins.
        let revocations = self.revocations.lock().unwrap_or_else(|e| e.into_inner());
        if *revocations == ticket && Instant::now() < copy.until {
            self.copies.insert(key.to_owned(), copy);
            catalog::CLUSTER_NEAR
                .counter_by(&[("result", "kept")])
                .increment(1);
        }
        Response::from_parts(parts, Body::from(body))
    }

    /// As a holder: drops the copies and replicas of `keys` (their owner wrote them); the
    /// replicas' versions, to drop from memory.
    pub fn revoke<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k str> + Clone,
    ) -> Vec<(String, u64)> {
        let mut revocations = self.revocations.lock().unwrap_or_else(|e| e.into_inner());
        *revocations += 1;
        for key in keys.clone() {
            self.copies.remove(key);
        }
        self.replicas
            .as_ref()
            .map(|r| r.revoke(keys))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_write_waits_on_the_holders_the_first_has_not_heard_from() {
        let near = Near::new(1 << 20, None);
        assert!(near.grant("k", "g2"));
        let first = near.begin_write("k");
        assert_eq!(first.len(), 1, "the first write revokes g2's copy");
        let second = near.begin_write("k");
        assert_eq!(
            second, first,
            "g2 not heard from yet: the second write waits on it too"
        );
        assert!(
            !near.grant("k", "g3"),
            "no grant while writes are under way"
        );
        near.revoked("k", "g2");
        assert!(near.begin_write("k").is_empty(), "g2 dropped its copy");
        for _ in 0..3 {
            near.end_write("k");
        }
        assert!(near.grant("k", "g3"));
    }
}
