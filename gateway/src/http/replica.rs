//! The native API's side of replicas ([`crate::cluster::replicas`]): a read of a
//! replicated key served by a replica from its own memory (copying the key from its
//! owner first when it holds no live copy), the owner's frame route, and the replicas'
//! nudge route.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{header, HeaderValue, Method, StatusCode};
use rasa_openapi::{ClusterMember, ProblemCode, HOP_HEADER};

use super::resolve::key_from_uri;
use super::{ApiError, AppState};
use crate::cluster::near::{LEASE_HEADER, MARGIN, WANT_HEADER};
use crate::cluster::peers::tag_of;
use crate::cluster::replicas::{
    Kept, Replica, Replicas, CHECKSUM_HEADER, REPLICA_LEASE, REPLICA_PATH,
};
use crate::cluster::scope::scoped;
use crate::cluster::{replicate, Peers};
use crate::objects::Objects;

/// A read this member serves from its replica: the version to serve.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReplicaRead(pub u64);

/// Response header of the owner's frame route: the version's payload length.
const LENGTH_HEADER: &str = "rasa-payload-length";

/// Request header of a replica's copy or renewal: the reads it served of the key since it
/// last asked (the owner counts them towards the key's demand, `--cluster-hot-reads`).
const READS_HEADER: &str = "rasa-replica-reads";

/// Longest wait for an owner's frame to arrive.
const COPY_WITHIN: Duration = Duration::from_secs(30);

/// Query parameter of the owner's frame route: the key's namespace (absent: the default
/// one).
const NS_QUERY: &str = "ns";

/// Longest list of keys one nudge names.
const MOST_NUDGED: usize = 64 << 10;

/// A read of `key` (owned by `owner`, of the request's namespace) this member serves as
/// one of the key's replicas: `Ok` with the request marked to be served here from the
/// replica's version, or `Err` with the request untouched (not a replicated key, not one
/// of its holders, not a plain read, or no copy could be made: it goes to the owner).
pub(crate) async fn at_replica(
    st: &AppState,
    peers: &Arc<Peers>,
    key: &str,
    owner: &ClusterMember,
    mut req: Request,
) -> Result<Request, Request> {
    let Some(reps) = peers.near().and_then(|n| n.replicas()) else {
        return Err(req);
    };
    let path = req.uri().path();
    let readable = matches!(*req.method(), Method::GET | Method::HEAD)
        && (path.starts_with("/v1/objects/")
            || (path.starts_with("/v1/descriptors/") && req.method() == Method::GET))
        && req.uri().query().is_none();
    let named = req.extensions().get::<super::NamespaceName>().cloned();
    let ns = named.as_ref().map(|n| &*n.0);
    if !readable || replicate::owner_of_replica(peers, ns, key).is_none() {
        return Err(req);
    }
    let Ok(objects) = st.objects_of(named.as_ref()) else {
        return Err(req);
    };
    match copy(st, (peers, reps), &objects, (ns, key), owner).await {
        Some(version) => {
            req.extensions_mut().insert(ReplicaRead(version));
            Ok(req)
        }
        None => Err(req),
    }
}

/// For each of `keys` (a batch of namespace `ns`, `None`: the default one): the version
/// of it this member serves as one of its replicas (copied now when needed), or `None`
/// (not a replicated key, not one of its holders, no copy: its owner answers for it).
pub(crate) async fn held_here(
    st: &AppState,
    peers: &Arc<Peers>,
    ns: Option<&super::NamespaceName>,
    keys: &[String],
) -> Vec<Option<u64>> {
    let none = || keys.iter().map(|_| None).collect();
    let Some(reps) = peers.near().and_then(|n| n.replicas()) else {
        return none();
    };
    let Ok(objects) = st.objects_of(ns) else {
        return none();
    };
    let ns = ns.map(|n| &*n.0);
    let each = keys.iter().map(|key| {
        let objects = &objects;
        async move {
            if crate::key::validate(key).is_err() {
                return None;
            }
            let owner = replicate::owner_of_replica(peers, ns, key)?;
            let version = copy(st, (peers, reps), objects, (ns, key), &owner).await?;
            crate::catalog::CLUSTER_REPLICA_READS.counter().increment(1);
            reps.served(ns, key);
            Some(version)
        }
    });
    futures_util::future::join_all(each).await
}

/// A key of a namespace (`None`: the default one).
type InNs<'k> = (Option<&'k str>, &'k str);

/// The version of `key` to serve from this member's replica: held and leased (renewed in
/// the background once half the lease is gone), renewed (a `304` from the owner), or
/// copied now — one copy of a key at a time.
async fn copy(
    st: &AppState,
    (peers, reps): (&Arc<Peers>, &Replicas),
    objects: &Arc<Objects>,
    (ns, key): InNs<'_>,
    owner: &ClusterMember,
) -> Option<u64> {
    let tag = tag_of(owner);
    let name = scoped(ns, key);
    let live = |reps: &Replicas| {
        reps.live(&name, tag)
            .filter(|(v, _)| objects.replicas().holds(key, *v))
    };
    if let Some((v, until)) = live(reps) {
        if until.saturating_duration_since(Instant::now()) < REPLICA_LEASE / 2 {
            renew_behind(peers, objects, (ns, key), owner);
        }
        return Some(v);
    }
    let entry = reps.pulls.enter(&name);
    let _one = entry.value().lock().await;
    if let Some((v, _)) = live(reps) {
        return Some(v);
    }
    // The replicas this member no longer serves go first.
    drop_copies(st, reps.sweep(|k, t| replicate::still_replica(peers, k, t)));
    refresh(peers, reps, objects, (ns, key), owner).await
}

/// Drops from memory the replicas `dropped` names (by [`scoped`] key, and version), each
/// from its namespace's store (of a namespace gone since: nothing to drop).
pub(crate) fn drop_copies(st: &AppState, dropped: Vec<(String, u64)>) {
    for (name, version) in dropped {
        let (ns, key) = crate::cluster::scope::split(&name);
        let ns = ns.map(|n| super::NamespaceName(Arc::from(n)));
        if let Ok(objects) = st.objects_of(ns.as_ref()) {
            objects.replicas().drop_copy(key, version);
        }
    }
}

/// Renews `key`'s replica in the background, unless a copy of it is under way.
fn renew_behind(
    peers: &Arc<Peers>,
    objects: &Arc<Objects>,
    (ns, key): InNs<'_>,
    owner: &ClusterMember,
) {
    let (peers, objects) = (Arc::clone(peers), Arc::clone(objects));
    let (ns, key, owner) = (ns.map(str::to_owned), key.to_owned(), owner.clone());
    tokio::spawn(async move {
        let Some(reps) = peers.near().and_then(|n| n.replicas()) else {
            return;
        };
        let entry = reps.pulls.enter(&scoped(ns.as_deref(), &key));
        let Ok(_one) = entry.value().try_lock() else {
            return;
        };
        refresh(&peers, reps, &objects, (ns.as_deref(), &key), &owner).await;
    });
}

/// Copies or renews `key`'s replica from `owner` (the key's copy held by the caller),
/// dropping first the replicas this member no longer serves.
async fn refresh(
    peers: &Peers,
    reps: &Replicas,
    objects: &Objects,
    (ns, key): InNs<'_>,
    owner: &ClusterMember,
) -> Option<u64> {
    let tag = tag_of(owner);
    let name = scoped(ns, key);
    let (mut got, mut copied) = (None, false);
    for _ in 0..3 {
        let ticket = reps.ticket(&name);
        let held = reps
            .held_from(&name, tag)
            .filter(|r| objects.replicas().holds(key, r.version));
        got = ask_owner(peers, reps, objects, (ns, key), owner, held).await;
        copied |= got.is_some() && held.is_none_or(|r| Some(r.version) != got);
        match got {
            Some(_) if reps.live(&name, tag).is_some() => break,
            // Copied, its lease over on the way: renewed now (a `304`).
            Some(_) => got = None,
            // A revocation of the key came meanwhile (perhaps a late one, for the version
            // before): asked once more.
            None if reps.ticket(&name) != ticket => {}
            None => break,
        }
    }
    let result = match (&got, copied) {
        (Some(_), true) => "copied",
        (Some(_), false) => "renewed",
        (None, _) => "failed",
    };
    crate::catalog::CLUSTER_REPLICA_COPIES
        .counter_by(&[("result", result)])
        .increment(1);
    got
}

/// Asks `owner` for `key`'s frame (naming the version `held` here, if any), adopts it,
/// and keeps it as a replica unless a revocation came meanwhile.
async fn ask_owner(
    peers: &Peers,
    reps: &Replicas,
    objects: &Objects,
    (ns, key): InNs<'_>,
    owner: &ClusterMember,
    held: Option<Replica>,
) -> Option<u64> {
    let mut url = format!(
        "{}{REPLICA_PATH}/{}",
        owner.url.trim_end_matches('/'),
        crate::key::to_path(key)
    );
    if let Some(ns) = ns {
        url.push_str(&format!("?{NS_QUERY}={ns}"));
    }
    let name = scoped(ns, key);
    let url = reqwest::Url::parse(&url).ok()?;
    let covered = crate::cluster::secret::HopBody::Empty;
    let mut headers = peers.hop_headers(&owner.node_id, &Method::GET, &url, &covered);
    headers.insert(
        WANT_HEADER,
        HeaderValue::from_str(peers.cluster().node_id()).ok()?,
    );
    if let Some(r) = held {
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from(r.version));
    }
    let served = reps.take_served(&name);
    if served > 0 {
        headers.insert(READS_HEADER, HeaderValue::from(served));
    }
    let ticket = reps.ticket(&name);
    let sent = Instant::now();
    let asked = peers.client().get(url).headers(headers).send();
    let resp = match tokio::time::timeout(COPY_WITHIN, asked).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => return failed(key, owner, &e.to_string()),
        Err(_) => return failed(key, owner, "no answer in time"),
    };
    let took = sent.elapsed();
    let number = |name: &str| -> Option<u64> {
        let text = resp.headers().get(name)?.to_str().ok()?;
        text.parse().ok()
    };
    let Some(lease) = number(LEASE_HEADER) else {
        return failed(key, owner, &format!("{} without a lease", resp.status()));
    };
    let lease = Duration::from_millis(lease).min(REPLICA_LEASE);
    let until = (sent + lease).checked_sub(MARGIN)?;
    let replica = |version, bytes| Replica {
        owner_tag: tag_of(owner),
        version,
        bytes,
        until,
        read_at: Instant::now(),
    };
    if resp.status() == StatusCode::NOT_MODIFIED {
        let r = held?;
        let kept = reps.keep(&name, ticket, replica(r.version, r.bytes));
        if kept == Kept::Revoked {
            return failed(key, owner, &format!("revoked (took {took:?})"));
        }
        return Some(r.version);
    }
    if resp.status() != StatusCode::OK {
        return failed(key, owner, &format!("{}", resp.status()));
    }
    let ids = (
        number(rasa_openapi::VERSION_HEADER)?,
        number(LENGTH_HEADER)?,
        number(CHECKSUM_HEADER)?,
    );
    let size = resp.content_length()?;
    let Some(_room) = reps.reserve(&name, size) else {
        tracing::debug!(
            key,
            size,
            "no room for a replica here: reads go to the owner"
        );
        return None;
    };
    let frame = tokio::time::timeout_at((sent + COPY_WITHIN).into(), resp.bytes())
        .await
        .ok()?
        .ok()?;
    let adopted = objects.replicas().adopt(key, &frame, ids).await;
    if let Err(e) = &adopted {
        tracing::warn!(key, owner = %owner.node_id, error = %e, "a replica's copy was refused");
    }
    let version = adopted.ok()?.version().0;
    match reps.keep(&name, ticket, replica(version, frame.len() as u64)) {
        Kept::Replacing(Some(old)) => objects.replicas().drop_copy(key, old),
        Kept::Replacing(None) => {}
        Kept::Revoked => {
            objects.replicas().drop_copy(key, version);
            return failed(key, owner, &format!("revoked (took {took:?})"));
        }
    }
    Some(version)
}

/// A copy of `key` from `owner` that failed (`why`): the read goes to the owner.
fn failed(key: &str, owner: &ClusterMember, why: &str) -> Option<u64> {
    tracing::debug!(key, owner = %owner.node_id, why, "no replica: the read goes to the owner");
    None
}

/// `GET /v1/cluster/replica/{key}`, a member's internal route: as `key`'s owner, grants
/// the asking member (`Rasa-Near-Want`) a replica and answers the current version's frame
/// with the lease — `304` when `If-None-Match` names that version already. `409` when this
/// member does not own the key (or cannot be sure it will for a lease), `503` while a
/// write of it is under way; only another member may ask (`403`: a hop marker, proven
/// under `--cluster-secret-file`, which a gateway with tokens requires).
pub async fn frame(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let peers = member(&st, &req, "asks for a replica")?;
    // Values leave here for a hop marker alone: with tokens guarding the API, only a
    // proven one (`--cluster-secret-file`) will do.
    if st.config.tokens.is_some() && peers.cluster().config().secret.is_none() {
        return Err(ApiError::Forbidden {
            detail: "replicas between members guarded by tokens need --cluster-secret-file".into(),
            challenge: String::new(),
        });
    }
    let key = key_from_uri(req.uri().path(), &format!("{REPLICA_PATH}/"))?;
    let ns = namespace_asked(&req)?;
    let name = scoped(ns.as_ref().map(|n| &*n.0), &key);
    let holder = req
        .headers()
        .get(WANT_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|h| peers.is_other_member(h))
        .ok_or_else(|| ApiError::InvalidRequest("no member asks for the replica".into()))?;
    let near = peers.near().filter(|n| n.replicas().is_some());
    let Some(near) = near.filter(|_| peers.owns(&key) && peers.cluster().sure_for(REPLICA_LEASE))
    else {
        return Ok(refused(
            StatusCode::CONFLICT,
            ProblemCode::PreconditionFailed,
            "this member does not own the key now",
        ));
    };
    let reads = req
        .headers()
        .get(READS_HEADER)
        .and_then(|v| v.to_str().ok());
    let reads = reads.and_then(|n| n.parse::<u64>().ok());
    if let (Some(reps), Some(n)) = (near.replicas(), reads) {
        reps.demanded(ns.as_ref().map(|n| &*n.0), &key, n);
    }
    // Recorded before the key is looked up: a write from now on revokes it.
    if !near.grant_for(&name, holder, REPLICA_LEASE) {
        return Ok(refused(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemCode::Unavailable,
            "a write of the key is under way",
        ));
    }
    let v = st.objects_of(ns.as_ref())?.replicas().source(&key).await?;
    let version = v.version().0;
    let same = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| h.parse() == Ok(version));
    let mut resp = match same {
        true => StatusCode::NOT_MODIFIED.into_response(),
        false => Response::new(Body::from(Bytes::from_owner(v.frame.clone()))),
    };
    let h = resp.headers_mut();
    h.insert(
        LEASE_HEADER,
        HeaderValue::from(REPLICA_LEASE.as_millis() as u64),
    );
    h.insert(rasa_openapi::VERSION_HEADER, HeaderValue::from(version));
    h.insert(LENGTH_HEADER, HeaderValue::from(v.len()));
    h.insert(CHECKSUM_HEADER, HeaderValue::from(v.checksum()));
    Ok(resp)
}

/// The namespace a request to the frame route names (`?ns=NAME`; none: the default one).
fn namespace_asked(req: &Request) -> Result<Option<super::NamespaceName>, ApiError> {
    let Some(query) = req.uri().query() else {
        return Ok(None);
    };
    let ns = query
        .split('&')
        .find_map(|p| p.strip_prefix(NS_QUERY)?.strip_prefix('='))
        .ok_or_else(|| ApiError::InvalidRequest(format!("unknown query: {query}")))?;
    crate::key::check_namespace(ns).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    Ok(Some(super::NamespaceName(Arc::from(ns))))
}

/// `POST /v1/cluster/replica`, a member's internal route: the owner of the keys in the
/// body (one a line) wrote them; this member, when it is one of their replicas, copies
/// them now (in the background). `202`; only another member may ask (`403`).
pub async fn nudge(State(st): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let peers = Arc::clone(member(&st, &req, "tells of a write")?);
    let body = axum::body::to_bytes(req.into_body(), MOST_NUDGED)
        .await
        .map_err(|e| ApiError::InvalidRequest(format!("the list of keys: {e}")))?;
    // Each line a key as the protocol names it (`scope`): of its namespace, if one is
    // served here.
    let keys: Vec<(Option<super::NamespaceName>, String)> = std::str::from_utf8(&body)
        .map_err(|_| ApiError::InvalidRequest("the list of keys is not UTF-8".to_owned()))?
        .lines()
        .map(crate::cluster::scope::split)
        .filter(|(ns, k)| {
            crate::key::validate(k).is_ok()
                && ns.is_none_or(|n| crate::key::check_namespace(n).is_ok())
        })
        .map(|(ns, k)| (ns.map(|n| super::NamespaceName(Arc::from(n))), k.to_owned()))
        .collect();
    tokio::spawn(async move {
        let Some(reps) = peers.near().and_then(|n| n.replicas()) else {
            return;
        };
        for (named, key) in keys {
            let Ok(objects) = st.objects_of(named.as_ref()) else {
                continue;
            };
            let ns = named.as_ref().map(|n| &*n.0);
            if let Some(owner) = replicate::owner_of_replica(&peers, ns, &key) {
                copy(&st, (&peers, reps), &objects, (ns, &key), &owner).await;
            }
        }
    });
    Ok(StatusCode::ACCEPTED.into_response())
}

/// This member's way to the others, for a request another member sent (a proven hop
/// marker) that `does` something: else `404` (no cluster) or `403`.
fn member<'s>(st: &'s AppState, req: &Request, does: &str) -> Result<&'s Arc<Peers>, ApiError> {
    let Some(peers) = st.peers.as_ref() else {
        return Err(ApiError::NotFound(
            "no replicas: this gateway is not a member of a cluster".to_owned(),
        ));
    };
    if !req.headers().contains_key(HOP_HEADER) {
        return Err(ApiError::Forbidden {
            detail: format!("only another member of the cluster {does}"),
            challenge: String::new(),
        });
    }
    Ok(peers)
}

fn refused(status: StatusCode, code: ProblemCode, why: &str) -> Response {
    super::error::problem_response(&super::error::problem(status, code, why))
}
