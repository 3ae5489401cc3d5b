//! The native API's side of requests for keys another cluster member owns: the route
//! [`crate::cluster::Peers::route`] chooses — here, redirected (`--cluster-routing
//! redirect`), or forwarded ([`crate::cluster::forward`]) — and each outcome as this
//! API answers it (problem+json, `503` with `Retry-After` for a write no owner took).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, Method, StatusCode};
use rasa_openapi::{ClusterMember, HOP_HEADER};

use super::resolve::key_from_uri;
use super::{ApiError, AppState};
use crate::cluster::{Forwarded, Outgoing, Route, Wire};

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
    let owner = match route {
        Route::Here => return next.run(req).await,
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
    let (parts, body) = req.into_parts();
    let mut headers = parts.headers.clone();
    headers.remove(header::HOST);
    let out = Outgoing {
        method: parts.method.clone(),
        path_and_query,
        headers,
        body: write.then(|| reqwest::Body::wrap_stream(body.into_data_stream())),
    };
    match peers.forward(Wire::Api, &key, &owner, out).await {
        Forwarded::Answer(resp) => resp,
        Forwarded::ServeHere => next.run(Request::from_parts(parts, Body::empty())).await,
        Forwarded::Refused { why, retry_after } => ApiError::Unavailable {
            detail: why,
            retry_after,
        }
        .into_response(),
    }
}

/// Middleware of every route in a cluster: a hop marker without a valid proof
/// (`--cluster-secret-file`) is taken off, so the request is a client's like any other.
pub(crate) async fn admit_hop(
    State(peers): State<std::sync::Arc<crate::cluster::Peers>>,
    mut req: Request,
    next: Next,
) -> Response {
    let (method, uri) = (req.method().clone(), req.uri().clone());
    peers.admit(req.headers_mut(), &method, &uri);
    next.run(req).await
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
