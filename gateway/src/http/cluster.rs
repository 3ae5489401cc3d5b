//! `GET /v1/cluster`: the members this gateway knows, for SDKs and people; a long poll
//! with `?after=`. And `POST /v1/cluster/near`, between members: near copies revoked.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use rasa_openapi::ClusterView;
use serde::Deserialize;
use utoipa::IntoParams;

use super::{json_response, ApiError, AppState};

/// Longest a long poll waits before answering with the unchanged view.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// Query of `GET /v1/cluster`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ClusterQuery {
    /// Answer only once the view's revision is past this one (or `wait` ends): a long
    /// poll for the next membership change.
    pub after: Option<i64>,
    /// Longest wait for a change, in seconds (default 30, at most 60).
    #[param(minimum = 0, maximum = 60)]
    pub wait: Option<u64>,
}

/// The cluster's members as this gateway sees them.
///
/// A single gateway (no `--cluster`) answers `enabled: false` and no members. With
/// `?after=REV`, the answer waits until the view's revision is past `REV`, the replica
/// rules change (the namespaces file read again), or `wait` seconds pass (then it is
/// the unchanged view).
#[utoipa::path(
    get, path = "/v1/cluster", tag = "cluster", operation_id = "get_cluster",
    params(ClusterQuery),
    responses(
        (status = 200, description = "The members, the etcd revision and this node.", body = ClusterView),
        (status = 400, description = "A malformed query.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_cluster(
    State(st): State<AppState>,
    Query(q): Query<ClusterQuery>,
) -> Result<Response, ApiError> {
    if q.wait.is_some_and(|w| w > MAX_WAIT.as_secs()) {
        return Err(ApiError::InvalidRequest(format!(
            "wait is at most {} seconds",
            MAX_WAIT.as_secs()
        )));
    }
    if let (Some(cluster), Some(after)) = (st.cluster(), q.after) {
        let wait = Duration::from_secs(q.wait.unwrap_or(30));
        let mut changes = cluster.subscribe();
        // The replica rules in the view change with the namespaces file, not etcd.
        let mut rules = replicas_of(&st).map(|r| r.rules().changes());
        let ruled = async {
            match rules.as_mut() {
                Some(rules) => drop(rules.changed().await),
                None => std::future::pending().await,
            }
        };
        let changed = async {
            tokio::select! {
                _ = changes.wait_for(|v| v.revision > after) => {}
                () = ruled => {}
            }
        };
        let _ = tokio::time::timeout(wait, changed).await;
    }
    Ok(json_response(StatusCode::OK, &view(&st)))
}

/// The members now, and the replica rules in force (the namespaces file's too); for a
/// single gateway, `enabled: false` and none.
pub(crate) fn view(st: &AppState) -> ClusterView {
    let reps = replicas_of(st);
    match st.cluster() {
        Some(cluster) => {
            let mut view = cluster.snapshot();
            if let Some(reps) = reps {
                view.replicas = reps.rules().all();
            }
            view
        }
        None => ClusterView {
            enabled: false,
            name: String::new(),
            revision: 0,
            this_node: String::new(),
            members: Vec::new(),
            replicas: Vec::new(),
        },
    }
}

/// This member's replicas, when it keeps any.
fn replicas_of(st: &AppState) -> Option<&crate::cluster::replicas::Replicas> {
    st.peers.as_ref()?.near()?.replicas()
}

/// Longest list of keys one revocation names.
const MOST_REVOKED: usize = 64 << 10;

/// `POST /v1/cluster/near`, a member's internal route: the owner of the keys in the body
/// (one a line) wrote them; near copies of them here are dropped
/// ([`crate::cluster::near`]). Only another member may ask (a proven hop marker; `403`
/// otherwise); `204`, or `404` from a gateway that is not in a cluster.
pub async fn revoke_near(
    State(st): State<AppState>,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    let Some(peers) = st.peers.as_ref() else {
        return Err(ApiError::NotFound(
            "no near copies: this gateway is not a member of a cluster".to_owned(),
        ));
    };
    if !req.headers().contains_key(rasa_openapi::HOP_HEADER) {
        return Ok(super::error::problem_response(&super::error::problem(
            StatusCode::FORBIDDEN,
            rasa_openapi::ProblemCode::Forbidden,
            "only another member of the cluster revokes near copies",
        )));
    }
    let body = axum::body::to_bytes(req.into_body(), MOST_REVOKED)
        .await
        .map_err(|e| ApiError::InvalidRequest(format!("the list of keys: {e}")))?;
    let keys = std::str::from_utf8(&body)
        .map_err(|_| ApiError::InvalidRequest("the list of keys is not UTF-8".to_owned()))?;
    if let Some(near) = peers.near() {
        // Keys as the protocol names them (`cluster::scope`): a namespace's replicas too.
        super::replica::drop_copies(&st, near.revoke(keys.lines()));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
