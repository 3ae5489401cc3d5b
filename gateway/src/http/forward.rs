//! The native API's side of requests for keys another cluster member owns: the route
//! [`crate::cluster::Peers::route`] chooses — here, redirected (`--cluster-routing
//! redirect`), or forwarded ([`crate::cluster::forward`]) — and each outcome as this
//! API answers it (problem+json, `503` with `Retry-After` for a write no owner took).

use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, Method, StatusCode};
use rasa_openapi::{ClusterMember, HOP_HEADER};

use super::resolve::key_from_uri;
use super::{ApiError, AppState};
use crate::cluster::{near, Forwarded, Outgoing, Peers, Route, Wire};

use crate::cluster::SERVED_BY_HEADER;

/// Middleware of the keyed routes: serves the request here when this node owns the key
/// (or the request was already forwarded), else forwards or redirects it to the owner.
pub(crate) async fn to_owner(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(peers) = &st.peers else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    let prefix = if path.starts_with("/v1/descriptors/") {
        "/v1/descriptors/"
    } else {
        "/v1/objects/"
    };
    // An invalid key is refused by the handler, here.
    let Ok(key) = key_from_uri(path, prefix) else {
        return next.run(req).await;
    };
    let write = !matches!(*req.method(), Method::GET | Method::HEAD);
    let hopped = req.headers().contains_key(HOP_HEADER);
    let route = peers.route(&key, Wire::Api, hopped, write);
    tracing::debug!(key, method = %req.method(), hopped, ?route, "cluster route");
    // Nested routes (`/v1/ns/{ns}/…`) see their path without the prefix: pass on the path
    // as the client sent it.
    let sent = req
        .extensions()
        .get::<axum::extract::OriginalUri>()
        .map_or(req.uri(), |o| &o.0);
    let path_and_query = sent
        .path_and_query()
        .map_or(path, |p| p.as_str())
        .to_owned();
    let named = req.extensions().get::<super::NamespaceName>().cloned();
    let read = (!write).then(|| named.as_ref().map(|n| &*n.0));
    let owner = match route {
        Route::Here if hopped => {
            return counted(
                peers,
                &key,
                read,
                near_granted(peers, &key, req, next).await,
            )
        }
        Route::Here => return counted(peers, &key, read, next.run(req).await),
        Route::Fenced(detail) => {
            return ApiError::Unavailable {
                detail,
                retry_after: 1,
            }
            .into_response()
        }
        Route::Redirect(owner) => {
            let target = format!("{}{path_and_query}", owner.url.trim_end_matches('/'));
            return redirect(&target, &owner);
        }
        Route::Forward(owner) => owner,
    };
    // A replicated key's replica serves it from its own memory.
    let req = match super::replica::at_replica(&st, peers, &key, &owner, req).await {
        Ok(here) => return replica_answer(peers, &key, read, next.run(here).await),
        Err(req) => req,
    };
    // Near copies are tied to the owner this route names.
    let near = peers
        .near()
        .filter(|n| n.keeps_copies() && plain_read(&req))
        .map(|n| (n, crate::cluster::peers::tag_of(&owner)));
    if let Some(copy) = near.and_then(|(n, tag)| n.serve(&key, tag)) {
        tracing::debug!(key, owner = %owner.node_id, "served from a near copy");
        return copy;
    }
    let (parts, body) = req.into_parts();
    let mut headers = parts.headers.clone();
    headers.remove(header::HOST);
    // Only this member asks for a near copy, for itself.
    headers.remove(near::WANT_HEADER);
    let ticket = near.map(|(n, _)| {
        if let Ok(me) = HeaderValue::from_str(peers.cluster().node_id()) {
            headers.insert(near::WANT_HEADER, me);
        }
        (n.ticket(), Instant::now())
    });
    let out = Outgoing {
        method: parts.method.clone(),
        path_and_query,
        headers,
        body: write.then(|| reqwest::Body::wrap_stream(body.into_data_stream())),
    };
    match peers.forward(Wire::Api, &key, &owner, out).await {
        Forwarded::Answer(resp) => match (near, ticket) {
            (Some((n, tag)), Some((ticket, sent))) => n.keep(&key, tag, sent, ticket, resp).await,
            _ => without_lease(resp),
        },
        Forwarded::ServeHere => next.run(Request::from_parts(parts, Body::empty())).await,
        Forwarded::Unknown(why) => ApiError::OwnerUnreachable(why).into_response(),
        Forwarded::Refused { why, retry_after } => ApiError::Unavailable {
            detail: why,
            retry_after,
        }
        .into_response(),
    }
}

/// A request forwarded to this member as the key's owner: served here; when its sender
/// would keep a near copy, the grant is recorded before the read looks the key up
/// ([`crate::cluster::near`]) and the lease is named in a whole answer.
async fn near_granted(peers: &Peers, key: &str, req: Request, next: Next) -> Response {
    let holder = req
        .headers()
        .get(near::WANT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // Only an owner grants (a member serving a hop by an outdated view does not), and
    // only while its etcd lease surely outlasts the copy: no other member can own the key
    // and take a write of it before the copy ends.
    let near = peers.near().filter(|_| {
        peers.owns(key)
            && holder.as_deref().is_some_and(|h| peers.is_other_member(h))
            && peers.cluster().sure_for(near::NEAR_LEASE)
            && plain_read(&req)
    });
    let (Some(near), Some(holder)) = (near, holder) else {
        return next.run(req).await;
    };
    let granted = near.grant(key, &holder);
    let mut resp = next.run(req).await;
    if granted && resp.status() == StatusCode::OK {
        resp.headers_mut().insert(
            near::LEASE_HEADER,
            HeaderValue::from(near::NEAR_LEASE.as_millis() as u64),
        );
    }
    resp
}

/// Whether `req` is a read a near copy answers: a GET of the whole current value of a
/// key of the default namespace, with no condition or query.
fn plain_read(req: &Request) -> bool {
    let h = req.headers();
    req.method() == Method::GET
        && req.uri().path().starts_with("/v1/objects/")
        && req.uri().query().is_none()
        && req.extensions().get::<super::NamespaceName>().is_none()
        && [
            header::RANGE,
            header::IF_RANGE,
            header::IF_MATCH,
            header::IF_NONE_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_UNMODIFIED_SINCE,
        ]
        .iter()
        .all(|n| !h.contains_key(n))
        && !h.contains_key(rasa_openapi::cluster::PEER_FILL_HEADER)
}

/// `resp`, this member's answer as `key`'s owner: a `read` answered with the value counts
/// towards the key's demand (`--cluster-hot-reads`).
/// `read` is the namespace read (`Some(None)`: the default one), `None` for a write.
fn counted(peers: &Peers, key: &str, read: Option<Option<&str>>, resp: Response) -> Response {
    if let (Some(ns), true) = (read, resp.status().is_success()) {
        crate::cluster::replicate::read_at_owner(peers, ns, key);
    }
    resp
}

/// An answer a replica served: marked (`Rasa-Replica: hit`) and counted (in the metric,
/// and, a `read` (as for [`counted`]), towards the key's demand, which the replica
/// reports to the owner).
fn replica_answer(
    peers: &Peers,
    key: &str,
    read: Option<Option<&str>>,
    mut resp: Response,
) -> Response {
    if resp.status().is_success() {
        if let Some(ns) = read {
            crate::cluster::replicate::read_at_replica(peers, ns, key);
        }
        crate::catalog::CLUSTER_REPLICA_READS.counter().increment(1);
        resp.headers_mut().insert(
            crate::cluster::replicas::REPLICA_HEADER,
            HeaderValue::from_static("hit"),
        );
    }
    resp
}

/// An owner's answer relayed to a client that keeps no copy: the lease is not the
/// client's business.
fn without_lease(mut resp: Response) -> Response {
    resp.headers_mut().remove(near::LEASE_HEADER);
    resp
}

/// Middleware of every route in a cluster: a hop marker without a valid proof
/// (`--cluster-secret-file`) is taken off, so the request is a client's like any other.
pub(crate) async fn admit_hop(
    State(peers): State<std::sync::Arc<crate::cluster::Peers>>,
    req: Request,
    next: Next,
) -> Response {
    next.run(peers.admit(req)).await
}

fn redirect(target: &str, owner: &ClusterMember) -> Response {
    let mut resp = StatusCode::TEMPORARY_REDIRECT.into_response();
    if let Ok(v) = HeaderValue::from_str(target) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&owner.node_id) {
        resp.headers_mut().insert(SERVED_BY_HEADER, v);
    }
    resp
}
