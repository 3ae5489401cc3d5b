//! Requests for keys another cluster member owns: forwarded to the owner (one hop, bodies
//! streamed both ways) or redirected to it (`--cluster-routing`).
//!
//! A forwarded request carries [`HOP_HEADER`], and a request that carries it is served
//! here whatever this node's view says, so two nodes whose views differ can never send a
//! request back and forth. When the owner cannot be reached, reads are served here (from
//! memory, else the origin); writes are refused with `503` and `Retry-After`, since a
//! value written here would not be found where the others look for it. An owner that
//! failed to answer is passed over for a few seconds ([`crate::cluster::suspects`]), so
//! only one request waits for a crashed or frozen owner, not every one until its lease
//! ends.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, Method, StatusCode};
use rasa_openapi::{ClusterMember, HOP_HEADER};

use super::resolve::key_from_uri;
use super::{ApiError, AppState};
use crate::cluster::suspects::SUSPECT_FOR;
use crate::cluster::Routing;

pub use crate::net::SERVED_BY_HEADER;

/// Middleware of the keyed routes: serves the request here when this node owns the key
/// (or the request was already forwarded), else forwards or redirects it to the owner.
pub(crate) async fn to_owner(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(cluster) = &st.cluster else {
        return next.run(req).await;
    };
    let write = !matches!(*req.method(), Method::GET | Method::HEAD);
    // Not a member as far as the others can tell (its lease may have expired): it owns
    // nothing, so it takes no write as an owner would (reads are served as a non-owner).
    let fenced = || {
        ApiError::Unavailable {
            detail: format!(
                "node {} has not renewed its cluster membership within --member-ttl (etcd unreachable from here); writes are refused until it has",
                cluster.node_id()
            ),
            retry_after: 1,
        }
        .into_response()
    };
    if req.headers().contains_key(HOP_HEADER) {
        if write && cluster.fenced() {
            return fenced();
        }
        return next.run(req).await;
    }
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
    let Some(owner) = cluster.owner(&key) else {
        if write && cluster.fenced() {
            return fenced();
        }
        return next.run(req).await;
    };
    // Nested routes (`/v1/ns/{ns}/…`) see their path without the prefix: forward the
    // path as the client sent it.
    let sent = req
        .extensions()
        .get::<axum::extract::OriginalUri>()
        .map_or(req.uri(), |o| &o.0);
    let target = format!(
        "{}{}",
        owner.url.trim_end_matches('/'),
        sent.path_and_query().map_or(path, |p| p.as_str())
    );
    match cluster.config().routing {
        Routing::Redirect => {
            metrics::counter!("rasa_cluster_redirects_total").increment(1);
            redirect(&target, &owner)
        }
        Routing::Proxy => forward(&st, req, next, &key, &target, &owner).await,
    }
}

/// A forwarded read that failed faster than this (a refused or reset connection, not an
/// owner that does not answer) is sent once more before the owner is suspected.
const STALE_CONNECTION_FAILS_WITHIN: Duration = Duration::from_millis(250);

/// Longest wait for a forwarded read's answer to start before it is served here.
pub const FORWARDED_READ_ANSWER_WITHIN: Duration = Duration::from_secs(2);

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

async fn forward(
    st: &AppState,
    req: Request,
    next: Next,
    key: &str,
    target: &str,
    owner: &ClusterMember,
) -> Response {
    let (Some(peers), Some(cluster)) = (&st.peers, &st.cluster) else {
        return next.run(req).await;
    };
    let (parts, body) = req.into_parts();
    let mut headers = parts.headers.clone();
    crate::net::strip_hop_by_hop(&mut headers);
    headers.remove(header::HOST);
    headers.insert(HOP_HEADER, HeaderValue::from_static("1"));
    let read = matches!(parts.method, Method::GET | Method::HEAD);
    let body = (!read).then(|| reqwest::Body::wrap_stream(body.into_data_stream()));
    let send = |to: &str, body: Option<reqwest::Body>| {
        let mut out = peers
            .request(parts.method.clone(), to)
            .headers(headers.clone());
        if let Some(b) = body {
            out = out.body(b);
        }
        crate::net::send_forwarded(out, read, FORWARDED_READ_ANSWER_WITHIN)
    };
    let suspect_for = cluster.suspects().remaining(owner);
    let cause = if suspect_for.is_some() {
        // It failed a moment ago: pass it over rather than wait for it again.
        metrics::counter!("rasa_cluster_forwards_total", "result" => "owner_suspect").increment(1);
        format!("it did not answer within the last {SUSPECT_FOR:?}")
    } else {
        // A read fails over to another member; but a read refused at once is first sent
        // once more, on a new connection: a pooled one may be to the owner's previous
        // process (restarted at the same address), which says nothing about the owner now.
        // (An owner that does not answer is not asked twice.)
        let started = std::time::Instant::now();
        let mut sent = send(target, body).await;
        if read && sent.is_err() && started.elapsed() < STALE_CONNECTION_FAILS_WITHIN {
            sent = send(target, None).await;
        }
        match sent {
            Ok(resp) => return answer(resp, owner),
            Err(cause) => {
                // Only a read that failed twice makes the owner a suspect; a write is
                // refused with Retry-After, and its client's retry finds the owner again.
                if read {
                    cluster.suspects().suspect(owner);
                }
                metrics::counter!("rasa_cluster_forwards_total", "result" => "owner_unreachable")
                    .increment(1);
                cause
            }
        }
    };
    let hint = if cause.contains("certificate") {
        " (members with a private certificate authority need --cluster-ca-file)"
    } else {
        ""
    };
    let why = format!(
        "the owner of '{key}', node {} at {}, cannot be reached: {cause}{hint}",
        owner.node_id, owner.url,
    );
    if !read {
        tracing::warn!("{why}; write refused");
        // Retry when the owner is tried again: at once for one that just failed (its
        // client's retry finds it again), when the suspicion ends for a suspect one.
        let retry_after = suspect_for.map_or(1, |left| left.as_secs_f64().ceil().max(1.0) as u64);
        return ApiError::Unavailable {
            detail: format!("{why}; nothing was stored, retry shortly"),
            retry_after,
        }
        .into_response();
    }
    // The key's next choice serves it (and fills it once for every member), unless that
    // is this node.
    if let Some(next_choice) = cluster.next_choice(key, &owner.node_id) {
        let to = retarget(target, &owner.url, &next_choice.url);
        if let Ok(resp) = send(&to, None).await {
            tracing::warn!(next = %next_choice.node_id, "{why}; asked the key's next choice");
            metrics::counter!("rasa_cluster_forwards_total", "result" => "next_choice")
                .increment(1);
            return answer(resp, &next_choice);
        }
    }
    tracing::warn!("{why}; serving it here");
    next.run(Request::from_parts(parts, Body::empty())).await
}

/// `target` (a URL under `from`) under `to` instead.
fn retarget(target: &str, from: &str, to: &str) -> String {
    let path = target
        .strip_prefix(from.trim_end_matches('/'))
        .unwrap_or(target);
    format!("{}{path}", to.trim_end_matches('/'))
}

/// The answer of `member`, relayed as it streams.
fn answer(resp: reqwest::Response, member: &ClusterMember) -> Response {
    metrics::counter!("rasa_cluster_forwards_total", "result" => "ok").increment(1);
    crate::net::relay(resp, &member.node_id)
        .unwrap_or_else(|e| ApiError::Internal(format!("forwarded answer: {e}")).into_response())
}
