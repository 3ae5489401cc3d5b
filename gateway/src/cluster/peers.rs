//! The one interface through which the fronts and the read-through origin work with the
//! other members: where a keyed request is served ([`Peers::route`]), who holds which keys
//! of a batch ([`Peers::by_owner`]), every other member asked at once, all or nothing
//! ([`Peers::each_other`]); forwarding is in [`super::forward`] and peer fill in
//! [`super::fill`].
//!
//! It speaks no front's wire format: a front says which listener it speaks for
//! ([`Wire`]), and maps each outcome to its own answer (problem+json on the native API, S3
//! XML on the S3 listener).

use crate::catalog;
use std::sync::Arc;
use std::time::Duration;

use rasa_openapi::ClusterMember;

use super::{Cluster, Routing};

/// Longest wait for one member's part of a request that spans members (a listing, a batch
/// of descriptors, a `DeleteObjects`, a copy's source).
pub const PART_WITHIN: Duration = Duration::from_secs(30);

/// Which of a member's listeners a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// The native HTTP API (`ClusterMember::url`).
    Api,
    /// The S3 listener (`ClusterMember::s3_url`; members without one are left out).
    S3,
}

impl Wire {
    /// `member`'s listener for this wire, without a trailing `/`.
    pub fn base(self, member: &ClusterMember) -> Option<&str> {
        match self {
            Wire::Api => Some(member.url.as_str()),
            Wire::S3 => member.s3_url.as_deref(),
        }
        .map(|u| u.trim_end_matches('/'))
    }
}

/// Where a keyed request is served.
#[derive(Debug)]
pub enum Route {
    /// Here: this node owns the key, or another member forwarded the request.
    Here,
    /// Nowhere, for now: a write while this node is fenced (its membership not renewed)
    /// and no other member can take it, or a write another member passed on for a key
    /// this node does not own (their views differ); the text says why. Nothing is stored, so the
    /// client may send it again.
    Fenced(String),
    /// At `owner`, which the client is sent to (`--cluster-routing redirect`, native API).
    Redirect(ClusterMember),
    /// At `owner`, to which this node forwards it.
    Forward(ClusterMember),
}

/// A member's way to the others: its membership and the client that reaches them
/// (`--cluster-ca-file` trusted).
#[derive(Debug)]
pub struct Peers {
    cluster: Arc<Cluster>,
    client: reqwest::Client,
    /// [`Peers::owner_tag`] of the keys this member owns.
    own_tag: u64,
    /// Near copies, when `--cluster-near-cache` allows them ([`super::near`]).
    near: Option<super::near::Near>,
}

/// The tag of `member` as the owner copies are tied to: its node id and incarnation.
pub(crate) fn tag_of(member: &ClusterMember) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (member.node_id.as_str(), member.incarnation.as_str()).hash(&mut h);
    h.finish() | 1
}

impl Peers {
    /// The others of `cluster`, reached with `client`; `near`: near copies of other
    /// owners' values kept and served here, and granted to the others.
    pub fn new(
        cluster: Arc<Cluster>,
        client: reqwest::Client,
        near: Option<super::near::Near>,
    ) -> Self {
        let own_tag = tag_of(&cluster.record());
        Self {
            cluster,
            client,
            own_tag,
            near,
        }
    }

    /// Near copies, when this member keeps and grants them.
    pub fn near(&self) -> Option<&super::near::Near> {
        self.near.as_ref()
    }

    /// This node's membership.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The client that reaches the other members.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The hop marker for a request of `method` to `url` at the member `to`, with `body`,
    /// and under `--cluster-secret-file` its proof ([`super::secret`]).
    pub fn hop_headers(
        &self,
        to: &str,
        method: &http::Method,
        url: &reqwest::Url,
        body: &super::secret::HopBody,
    ) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(
            rasa_openapi::HOP_HEADER,
            http::HeaderValue::from_static("1"),
        );
        if let Some(secret) = &self.cluster.config().secret {
            let path = match url.query() {
                Some(q) => format!("{}?{q}", url.path()),
                None => url.path().to_owned(),
            };
            let proof = secret.proof(self.cluster.node_id(), to, method, &path, body);
            h.insert(super::secret::PROOF_HEADER, proof);
        }
        h
    }

    /// Marks a request of `method` to `url` at the member `to` as a hop: its hop headers
    /// added to `headers`, and its body (if any) as it must be sent — under a secret,
    /// sealed for the proof as it streams (sent chunked, its declared length named by the
    /// proof instead of `Content-Length`); a request without a body is proven to have none.
    pub fn hop(
        &self,
        to: &str,
        method: &http::Method,
        url: &reqwest::Url,
        headers: &mut http::HeaderMap,
        body: Option<reqwest::Body>,
    ) -> Option<reqwest::Body> {
        let Some(body) = body else {
            let empty = super::secret::HopBody::Empty;
            headers.extend(self.hop_headers(to, method, url, &empty));
            return None;
        };
        Some(self.sealed(to, method, url, headers, body))
    }

    /// [`Peers::hop`] of a request with a body.
    fn sealed(
        &self,
        to: &str,
        method: &http::Method,
        url: &reqwest::Url,
        headers: &mut http::HeaderMap,
        body: reqwest::Body,
    ) -> reqwest::Body {
        let Some(secret) = &self.cluster.config().secret else {
            headers.extend(self.hop_headers(to, method, url, &super::secret::HopBody::Empty));
            return body;
        };
        // Its length, as the header says or (an S3 body passed on) its size hint.
        let length = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .or_else(|| http_body::Body::size_hint(&body).exact());
        headers.remove(http::header::CONTENT_LENGTH);
        let covered = super::secret::HopBody::Sealed(length);
        let hop = self.hop_headers(to, method, url, &covered);
        let proof = hop[super::secret::PROOF_HEADER].clone();
        headers.extend(hop);
        headers.insert(
            http::header::TRAILER,
            http::HeaderValue::from_static(super::secret::seal::SEAL_TRAILER),
        );
        let sealed = super::secret::seal::Sealing::new(body, std::sync::Arc::clone(secret), proof);
        reqwest::Body::wrap(sealed)
    }

    /// Takes an unproven hop marker off a request this member received, and binds the
    /// body of a proven one to its proof (see [`super::secret::ClusterSecret::admit`]);
    /// without a secret the marker is trusted.
    pub fn admit(&self, req: axum::extract::Request) -> axum::extract::Request {
        match &self.cluster.config().secret {
            Some(secret) => secret.admit(self.cluster.node_id(), req),
            None => req,
        }
    }

    /// Where a request for `key` on `wire` is served; `hopped`: another member sent it.
    /// A read another member sent is served here whatever this node's view says, so that
    /// two members whose views differ never send a request back and forth. A write is
    /// stored only by the key's owner by its own view, unfenced: one another member sent
    /// by a view this one does not share is refused (nothing stored; the client sends it
    /// again). Stored by a member that does not own the key, it would be served as current
    /// neither there nor, once the views agree, by the owner, which would serve what it
    /// replaced (a fenced member passes its keys' writes on to the member the others will
    /// make their owner; that one takes them once it owns them).
    pub fn route(&self, key: &str, wire: Wire, hopped: bool, write: bool) -> Route {
        if hopped {
            if write && !self.owns(key) {
                return Route::Fenced(format!(
                    "a member passed on a write of '{key}' to node {}, which does not own it by its view of the cluster (the views differ while a member joins or leaves); nothing was stored, retry shortly",
                    self.cluster.node_id()
                ));
            }
            return Route::Here;
        }
        let owner = self.cluster.owner(key).filter(|m| wire.base(m).is_some());
        match owner {
            // Not a member as far as the others can tell (its lease may have expired): it
            // owns nothing, so it takes no write as an owner would.
            None if write && self.cluster.fenced() => Route::Fenced(format!(
                "node {} has not renewed its cluster membership within --member-ttl (etcd unreachable from here); writes are refused until it has",
                self.cluster.node_id()
            )),
            None => Route::Here,
            Some(owner)
                if wire == Wire::Api && self.cluster.config().routing == Routing::Redirect =>
            {
                catalog::CLUSTER_REDIRECTS.counter().increment(1);
                Route::Redirect(owner)
            }
            Some(owner) => Route::Forward(owner),
        }
    }

    /// A tag of a key's owner, `owner` as [`Cluster::owner`] names it (its node id and
    /// incarnation; `None`, this member: its own, which changes each time it registers
    /// again after a lost lease): copies are tied to it, so a copy made under another
    /// owner — one that is gone, restarted, or was replaced, or this member before others
    /// owned its keys — is confirmed again before it is served as current (without an
    /// origin, not served). Never 0.
    pub fn owner_tag(&self, owner: Option<&ClusterMember>) -> u64 {
        match owner {
            Some(m) => tag_of(m),
            None => {
                let rejoins = self
                    .cluster
                    .rejoins
                    .load(std::sync::atomic::Ordering::Acquire);
                let epoch = rejoins.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                (self.own_tag ^ epoch).max(1)
            }
        }
    }

    /// Whether this member owns `key` (as its view says; fenced, it owns none).
    pub fn owns(&self, key: &str) -> bool {
        self.cluster.owner(key).is_none()
    }

    /// Every other member with a listener on `wire` (serving or draining: both hold
    /// values).
    pub fn others(&self, wire: Wire) -> Vec<ClusterMember> {
        self.cluster
            .snapshot()
            .members
            .into_iter()
            .filter(|m| m.node_id != self.cluster.node_id() && wire.base(m).is_some())
            .collect()
    }

    /// Whether `node` is another member in this member's view (serving or draining).
    pub fn is_other_member(&self, node: &str) -> bool {
        node != self.cluster.node_id()
            && self
                .cluster
                .snapshot()
                .members
                .iter()
                .any(|m| m.node_id == node)
    }

    /// The owner of `key` on `wire` when it is another member.
    pub fn remote_owner(&self, key: &str, wire: Wire) -> Option<ClusterMember> {
        self.cluster.owner(key).filter(|m| wire.base(m).is_some())
    }

    /// The items of a batch that other members own, grouped by owner in the order first
    /// met (indices into `keys`; `None` keys — refused in place — are left out).
    pub fn by_owner<'k>(
        &self,
        keys: impl IntoIterator<Item = Option<&'k str>>,
        wire: Wire,
    ) -> Vec<(ClusterMember, Vec<usize>)> {
        let mut groups: Vec<(ClusterMember, Vec<usize>)> = Vec::new();
        for (i, key) in keys.into_iter().enumerate() {
            let Some(owner) = key.and_then(|k| self.remote_owner(k, wire)) else {
                continue;
            };
            match groups.iter_mut().find(|(m, _)| m.node_id == owner.node_id) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((owner, vec![i])),
            }
        }
        groups
    }

    /// `ask` of every other member on `wire`, all at once, each within [`PART_WITHIN`]
    /// (`late` makes the error of one that is not done by then); the first failure fails
    /// the whole, since a part missing would look complete.
    pub async fn each_other<T, E, F, Fut>(
        &self,
        wire: Wire,
        ask: F,
        late: impl Fn(&ClusterMember) -> E,
    ) -> Result<Vec<T>, E>
    where
        F: Fn(ClusterMember) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let asks = self.others(wire).into_iter().map(|m| {
            let late = &late;
            let asked = ask(m.clone());
            async move {
                match tokio::time::timeout(PART_WITHIN, asked).await {
                    Ok(answer) => answer,
                    Err(_) => Err(late(&m)),
                }
            }
        });
        futures_util::future::join_all(asks)
            .await
            .into_iter()
            .collect()
    }
}

/// A write of a key under way at its owner, its near copies revoked
/// ([`Peers::near_write`]): no copy of the key is granted until this is dropped, once the
/// write is published (or failed).
pub struct NearWrite {
    peers: Arc<Peers>,
    key: String,
}

impl Drop for NearWrite {
    fn drop(&mut self) {
        if let Some(near) = self.peers.near() {
            near.end_write(&self.key);
        }
    }
}

impl Peers {
    /// Before a write of `key` is published here, as its owner: no copy of `key` is
    /// granted from now until the answer is dropped, and every holder of a near copy has
    /// dropped it or its lease has ended (and, in this process's first lease, those an
    /// earlier process granted have ended). `None` without near copies.
    pub async fn near_write(self: &Arc<Self>, key: &str) -> Option<NearWrite> {
        let near = self.near()?;
        let writing = NearWrite {
            peers: Arc::clone(self),
            key: key.to_owned(),
        };
        revoke_near(self, near, near.begin_write(key), key).await;
        Some(writing)
    }

    /// Asks the member `node` at `base` to drop its copy of `key`; whether it said it did.
    async fn tell_revoked(&self, node: &str, base: &str, key: &str) -> bool {
        let Ok(url) = reqwest::Url::parse(&format!(
            "{}{}",
            base.trim_end_matches('/'),
            super::near::REVOKE_PATH
        )) else {
            return false;
        };
        let body = format!("{key}\n");
        let covered = super::secret::HopBody::of(&[body.as_bytes()]);
        let headers = self.hop_headers(node, &http::Method::POST, &url, &covered);
        let sent = self
            .client()
            .post(url)
            .headers(headers)
            .body(body)
            .send()
            .await;
        matches!(sent, Ok(r) if r.status() == http::StatusCode::NO_CONTENT)
    }
}

/// Tells `holders` of near copies of `key` to drop them, and waits until each said
/// it did or its lease has ended.
async fn revoke_near(
    peers: &Peers,
    near: &super::near::Near,
    holders: Vec<(String, std::time::Instant)>,
    key: &str,
) {
    // Grants another process, or the member that held this one's keys while it was away,
    // made before this one owned them end within a lease of its owning them.
    let owning_since = near.started.max(super::owning_since(peers.cluster()));
    let first_lease_ends = owning_since + near.longest_lease();
    if std::time::Instant::now() < first_lease_ends {
        tokio::time::sleep_until(first_lease_ends.into()).await;
    }
    if holders.is_empty() {
        return;
    }
    let members = peers.cluster().snapshot().members;
    let sends = holders.into_iter().map(|(node, until)| {
        let to = members.iter().find(|m| m.node_id == node).cloned();
        async move {
            let told = match to {
                Some(m) => {
                    let sent = peers.tell_revoked(&m.node_id, &m.url, key);
                    tokio::time::timeout_at(until.into(), sent).await == Ok(true)
                }
                None => false,
            };
            if told {
                near.revoked(key, &node);
            } else {
                // Unreachable (or gone from the view): its copy ends with its lease.
                catalog::CLUSTER_NEAR
                    .counter_by(&[("result", "waited_out")])
                    .increment(1);
                tokio::time::sleep_until(until.into()).await;
            }
        }
    });
    futures_util::future::join_all(sends).await;
}
