//! The native API's side of the routes that span keys, over [`crate::cluster::Peers`]: a
//! listing merges every member's page ([`crate::cluster::Peers::each_other`]); a batch of
//! descriptors, presence checks, puts or deletes goes, in one sub-batch per owner
//! ([`crate::cluster::Peers::by_owner`]), to the keys' owners. The
//! members are asked with the hop marker, so each answers for itself; what is here is
//! this API's wire format (JSON pages and batches, problem+json errors).

use crate::catalog;
use std::collections::BTreeMap;

use http::{header, HeaderMap};
use rasa_openapi::{
    ClusterMember, DeleteResult, DescriptorResult, ExistsResult, ObjectList, PutBatchItem,
    PutBatchManifest, PutBatchResponse, BATCH_CONTENT_TYPE, HOP_HEADER,
};

use super::{ApiError, AppState};
use crate::cluster::{Peers, Route, Wire};

/// The members to ask when a request with `headers` is answered for the whole cluster
/// (this node is a member, and the request was not sent by another member).
pub(crate) fn cluster_wide<'s>(st: &'s AppState, headers: &HeaderMap) -> Option<&'s Peers> {
    st.peers
        .as_deref()
        .filter(|_| !headers.contains_key(HOP_HEADER))
}

/// A request to the member `to`, with the caller's credentials and the hop marker, and
/// its body of `length` bytes if any (sealed for the proof, [`Peers::hop`]).
fn to_member(
    peers: &Peers,
    headers: &HeaderMap,
    to: &ClusterMember,
    (method, url): (reqwest::Method, String),
    body: Option<(reqwest::Body, u64)>,
) -> reqwest::RequestBuilder {
    let Ok(url) = reqwest::Url::parse(&url) else {
        // Sent as it is, to fail with the reason.
        return peers.client().request(method, url);
    };
    let mut marks = HeaderMap::new();
    if let Some((_, length)) = &body {
        marks.insert(header::CONTENT_LENGTH, (*length).into());
    }
    let body = peers.hop(&to.node_id, &method, &url, &mut marks, body.map(|(b, _)| b));
    let mut req = peers.client().request(method, url).headers(marks);
    if let Some(body) = body {
        req = req.body(body);
    }
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        req = req.header(header::AUTHORIZATION, auth);
    }
    req
}

/// This node's page `local` merged with every other member's page for the same query
/// (`query` as received, under `api_root`: `/v1/ns/{ns}`, or `/v1` for the default
/// namespace): at most `limit` items in key order, and `next_after` when any member has
/// more. A member that does not answer fails the listing (a partial list would look
/// complete).
pub(crate) async fn merge_lists(
    peers: &Peers,
    headers: &HeaderMap,
    api_root: &str,
    query: &str,
    limit: usize,
    local: ObjectList,
) -> Result<ObjectList, ApiError> {
    let failed = |m: &ClusterMember, why: &str| {
        ApiError::Unavailable {
        detail: format!(
            "member {} at {} did not answer the listing ({why}); the cluster's list would be incomplete",
            m.node_id, m.url
        ),
        retry_after: 1,
    }
    };
    let pages = peers
        .each_other(
            Wire::Api,
            |m| async move {
                let url = format!("{}{api_root}/objects?{query}", m.url.trim_end_matches('/'));
                let get = (reqwest::Method::GET, url);
                let sent = to_member(peers, headers, &m, get, None).send();
                let page: Result<ObjectList, String> = match sent.await {
                    Ok(r) if r.status().is_success() => r.json().await.map_err(|e| e.to_string()),
                    Ok(r) => Err(format!("answered {}", r.status())),
                    Err(e) => Err(crate::http::error::chain(&e)),
                };
                page.map_err(|why| failed(&m, &why))
            },
            |m| {
                failed(
                    m,
                    &format!("no answer within {:?}", crate::cluster::peers::PART_WITHIN),
                )
            },
        )
        .await?;
    let mut more = local.next_after.is_some();
    let mut merged: BTreeMap<String, rasa_openapi::ObjectSummary> = local
        .items
        .into_iter()
        .map(|i| (i.key.clone(), i))
        .collect();
    for page in pages {
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

/// The keys of a batch that other members own, grouped by owner (indices into `keys`),
/// but those `here` says this member answers itself (a replica's).
pub(crate) fn remote_groups(
    peers: &Peers,
    keys: &[String],
    here: impl Fn(usize) -> bool,
) -> Vec<(ClusterMember, Vec<usize>)> {
    // An invalid key is refused here, in place.
    let valid = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (crate::key::validate(k).is_ok() && !here(i)).then_some(k.as_str()));
    peers.by_owner(valid, Wire::Api)
}

/// Asks `owner` for the descriptors of `keys`; `None` when it does not answer in full
/// within [`crate::cluster::peers::PART_WITHIN`] (its keys are then resolved here).
pub(crate) async fn ask_owner(
    peers: &Peers,
    headers: &HeaderMap,
    api_root: &str,
    owner: &ClusterMember,
    keys: Vec<String>,
) -> Option<Vec<DescriptorResult>> {
    let part = KeysPart {
        peers,
        headers,
        api_root,
        owner,
    };
    part.send("descriptors", keys, "resolving its keys here")
        .await
}

/// Asks `owner` whether it holds each of `keys`; `None` when it does not answer in full
/// within [`crate::cluster::peers::PART_WITHIN`] (its keys are then checked here).
pub(crate) async fn exists_at_owner(
    peers: &Peers,
    headers: &HeaderMap,
    api_root: &str,
    owner: &ClusterMember,
    keys: Vec<String>,
) -> Option<Vec<ExistsResult>> {
    let part = KeysPart {
        peers,
        headers,
        api_root,
        owner,
    };
    part.send("batch/exists", keys, "checking its keys here")
        .await
}

/// A batch of keys (`{"keys": [...]}`) for one owner, answered `{"results": [...]}`.
struct KeysPart<'a> {
    peers: &'a Peers,
    headers: &'a HeaderMap,
    api_root: &'a str,
    owner: &'a ClusterMember,
}

/// The answer to a [`KeysPart`].
#[derive(serde::Deserialize)]
struct Results<R> {
    results: Vec<R>,
}

impl KeysPart<'_> {
    /// `keys` posted to the owner's `{api_root}/{route}`; one result per key, or `None`
    /// (counted and logged, `then` saying what follows).
    async fn send<R: serde::de::DeserializeOwned>(
        self,
        route: &str,
        keys: Vec<String>,
        then: &str,
    ) -> Option<Vec<R>> {
        let url = format!(
            "{}{}/{route}",
            self.owner.url.trim_end_matches('/'),
            self.api_root
        );
        let n = keys.len();
        let body = serde_json::to_vec(&serde_json::json!({ "keys": keys })).ok()?;
        let body = vec![bytes::Bytes::from(body)];
        let part = post_part::<Results<R>>(self.peers, self.headers, self.owner, url, JSON, body);
        whole(part.await.map(|a| a.results), n, self.owner, then)
    }
}

/// Stores `values` (each a manifest entry and its bytes) at `owner`, in one put batch
/// (`query`: `?lease=true` or nothing); one result per value, `None` when it does not
/// answer in full within [`crate::cluster::peers::PART_WITHIN`].
pub(crate) async fn put_at_owner(
    peers: &Peers,
    headers: &HeaderMap,
    api_root: &str,
    query: &str,
    owner: &ClusterMember,
    values: Vec<(PutBatchItem, Vec<bytes::Bytes>)>,
) -> Option<Vec<DescriptorResult>> {
    let url = format!(
        "{}{api_root}/batch/put{query}",
        owner.url.trim_end_matches('/')
    );
    let n = values.len();
    let (items, bytes): (Vec<_>, Vec<_>) = values.into_iter().unzip();
    let line = PutBatchManifest { items }.line();
    let body: Vec<bytes::Bytes> = std::iter::once(bytes::Bytes::from(line))
        .chain(bytes.into_iter().flatten())
        .collect();
    let part = post_part::<PutBatchResponse>(peers, headers, owner, url, BATCH_CONTENT_TYPE, body);
    whole(
        part.await.map(|a| a.results),
        n,
        owner,
        "its values are not stored",
    )
}

/// Deletes `keys` at `owner`, in one delete batch; one result per key, `None` when it
/// does not answer in full within [`crate::cluster::peers::PART_WITHIN`].
pub(crate) async fn delete_at_owner(
    peers: &Peers,
    headers: &HeaderMap,
    api_root: &str,
    owner: &ClusterMember,
    keys: Vec<String>,
) -> Option<Vec<DeleteResult>> {
    let part = KeysPart {
        peers,
        headers,
        api_root,
        owner,
    };
    part.send("batch/delete", keys, "its keys are not deleted")
        .await
}

const JSON: &str = "application/json";

/// `body` (of media type `ctype`, in pieces) posted to `owner` at `url`, and its JSON
/// answer; `None` on any failure or after [`crate::cluster::peers::PART_WITHIN`].
async fn post_part<T: serde::de::DeserializeOwned>(
    peers: &Peers,
    headers: &HeaderMap,
    owner: &ClusterMember,
    url: String,
    ctype: &'static str,
    body: Vec<bytes::Bytes>,
) -> Option<T> {
    let length: u64 = body.iter().map(|b| b.len() as u64).sum();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(
        body.into_iter().map(Ok::<_, std::convert::Infallible>),
    ));
    let post = (reqwest::Method::POST, url);
    let asked = async {
        let r = to_member(peers, headers, owner, post, Some((body, length)))
            .header(header::CONTENT_TYPE, ctype)
            .send()
            .await;
        let r = match r {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                tracing::warn!(owner = %owner.node_id, status = %r.status(), "a member refused its part of a batch");
                return None;
            }
            Err(e) => {
                tracing::warn!(owner = %owner.node_id, error = %crate::http::error::chain(&e), "a member did not take its part of a batch");
                return None;
            }
        };
        r.json::<T>().await.ok()
    };
    tokio::time::timeout(crate::cluster::peers::PART_WITHIN, asked)
        .await
        .ok()
        .flatten()
}

/// `answer` when it has all `n` results; else counted, logged (`then`: what follows) and
/// `None`.
fn whole<R>(answer: Option<Vec<R>>, n: usize, owner: &ClusterMember, then: &str) -> Option<Vec<R>> {
    match answer {
        Some(a) if a.len() == n => Some(a),
        _ => {
            catalog::CLUSTER_FORWARDS
                .counter_by(&[("result", "owner_unreachable")])
                .increment(1);
            tracing::warn!(owner = %owner.node_id, "a batch's owner did not answer in full; {then}");
            None
        }
    }
}

/// The problem of a value or key whose `owner` did not take its part of a batch.
pub(crate) fn unreachable(owner: &ClusterMember) -> ApiError {
    ApiError::Unavailable {
        detail: format!(
            "member {} at {}, which owns this key, did not take its part of the batch within {:?}; nothing was done with it",
            owner.node_id,
            owner.url,
            crate::cluster::peers::PART_WITHIN
        ),
        retry_after: 1,
    }
}

/// Where a write of `key` (a valid key) in a batch goes: here (`None`), to the member
/// that owns it, or nowhere (this node fenced).
pub(crate) fn write_owner(
    st: &AppState,
    key: &str,
    hopped: bool,
) -> Result<Option<ClusterMember>, ApiError> {
    let Some(peers) = &st.peers else {
        return Ok(None);
    };
    match peers.route(key, Wire::Api, hopped, true) {
        Route::Here => Ok(None),
        Route::Fenced(detail) => Err(ApiError::Unavailable {
            detail,
            retry_after: 1,
        }),
        Route::Redirect(owner) | Route::Forward(owner) => Ok(Some(owner)),
    }
}
