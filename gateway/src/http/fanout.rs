//! The cluster-wide answers of the two routes that span keys: a listing merges every
//! member's page, and a batch of descriptors goes, in one sub-batch per owner, to the
//! keys' owners. The members are asked with the hop marker, so each answers for itself.

use std::collections::BTreeMap;

use http::{header, HeaderMap};
use rasa_openapi::{
    ClusterMember, DescriptorBatchRequest, DescriptorBatchResponse, DescriptorResult, ObjectList,
    HOP_HEADER,
};

use super::{ApiError, AppState};

/// Whether a request with `headers` is answered for the whole cluster (this node is a
/// member, and the request was not sent by another member).
pub(crate) fn cluster_wide(st: &AppState, headers: &HeaderMap) -> bool {
    st.cluster.is_some() && st.peers.is_some() && !headers.contains_key(HOP_HEADER)
}

/// A request to another member, with the caller's credentials and the hop marker.
fn to_member(
    st: &AppState,
    headers: &HeaderMap,
    method: reqwest::Method,
    url: String,
) -> Option<reqwest::RequestBuilder> {
    let mut req = st
        .peers
        .as_ref()?
        .request(method, url)
        .header(HOP_HEADER, "1");
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        req = req.header(header::AUTHORIZATION, auth);
    }
    Some(req)
}

/// Every other member (serving or draining: both hold values).
fn others(st: &AppState) -> Vec<ClusterMember> {
    let Some(cluster) = &st.cluster else {
        return Vec::new();
    };
    cluster
        .snapshot()
        .members
        .into_iter()
        .filter(|m| m.node_id != cluster.node_id())
        .collect()
}

/// This node's page `local` merged with every other member's page for the same query
/// (`query` as received, under `api_root`: `/v1/ns/{ns}`, or `/v1` for the default namespace): at most `limit` items in key order, and `next_after` when any
/// member has more. A member that does not answer fails the listing (a partial list
/// would look complete).
pub(crate) async fn merge_lists(
    st: &AppState,
    headers: &HeaderMap,
    api_root: &str,
    query: &str,
    limit: usize,
    local: ObjectList,
) -> Result<ObjectList, ApiError> {
    let asks = others(st).into_iter().map(|m| async move {
        let url = format!("{}{api_root}/objects?{query}", m.url.trim_end_matches('/'));
        let req = to_member(st, headers, reqwest::Method::GET, url)?;
        let page: Result<ObjectList, String> = match req.send().await {
            Ok(r) if r.status().is_success() => r.json().await.map_err(|e| e.to_string()),
            Ok(r) => Err(format!("answered {}", r.status())),
            Err(e) => Err(crate::http::error::chain(&e)),
        };
        Some((m, page))
    });
    let mut more = local.next_after.is_some();
    let mut merged: BTreeMap<String, rasa_openapi::ObjectSummary> = local
        .items
        .into_iter()
        .map(|i| (i.key.clone(), i))
        .collect();
    for (m, page) in futures_util::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
    {
        let page = page.map_err(|why| ApiError::Unavailable {
            detail: format!(
                "member {} at {} did not answer the listing ({why}); the cluster's list would be incomplete",
                m.node_id, m.url
            ),
            retry_after: 1,
        })?;
        more |= page.next_after.is_some();
        for item in page.items {
            merged.entry(item.key.clone()).or_insert(item);
        }
    }
    more |= merged.len() > limit;
    let items: Vec<_> = merged.into_values().take(limit).collect();
    let next_after = if more {
        items.last().map(|i| i.key.clone())
    } else {
        None
    };
    Ok(ObjectList { items, next_after })
}

/// The keys of a batch that other members own, grouped by owner (indices into `keys`).
pub(crate) fn remote_groups(st: &AppState, keys: &[String]) -> Vec<(ClusterMember, Vec<usize>)> {
    let Some(cluster) = &st.cluster else {
        return Vec::new();
    };
    let mut groups: Vec<(ClusterMember, Vec<usize>)> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        if crate::key::validate(k).is_err() {
            continue; // refused here, in place
        }
        if let Some(owner) = cluster.owner(k) {
            match groups.iter_mut().find(|(m, _)| m.node_id == owner.node_id) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((owner, vec![i])),
            }
        }
    }
    groups
}

/// Asks `owner` for the descriptors of `keys`; `None` when it does not answer in full
/// (its keys are then resolved here).
pub(crate) async fn ask_owner(
    st: &AppState,
    headers: &HeaderMap,
    api_root: &str,
    owner: &ClusterMember,
    keys: Vec<String>,
) -> Option<Vec<DescriptorResult>> {
    let url = format!("{}{api_root}/descriptors", owner.url.trim_end_matches('/'));
    let n = keys.len();
    let resp = to_member(st, headers, reqwest::Method::POST, url)?
        .json(&DescriptorBatchRequest { keys })
        .send()
        .await;
    let answer = match resp {
        Ok(r) if r.status().is_success() => r.json::<DescriptorBatchResponse>().await.ok(),
        _ => None,
    };
    match answer {
        Some(a) if a.results.len() == n => Some(a.results),
        _ => {
            metrics::counter!("rasa_cluster_forwards_total", "result" => "owner_unreachable")
                .increment(1);
            tracing::warn!(owner = %owner.node_id, "a batch's owner did not answer; resolving its keys here");
            None
        }
    }
}
