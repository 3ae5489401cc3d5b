//! Filling a miss from another cluster member before the origin: after a membership
//! change a key's new owner asks the key's next choice — its previous owner — for the
//! copy it holds, so a join costs no storm of origin requests.
//!
//! The peer answers from memory only ([`PEER_FILL_HEADER`]), with the origin's entity
//! tag and the copy's age, so freshness and revalidation carry over. Any failure (no
//! copy, no answer within a second or two) means: go to the origin.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use rasa_openapi::cluster::{ORIGIN_ETAG_HEADER, PEER_FILL_HEADER};
use rasa_openapi::HOP_HEADER;

use super::{OriginError, OriginObject};
use crate::cluster::Cluster;

/// Longest wait for a peer's answer to start.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The members a node may fill from, and the client to reach them.
#[derive(Debug)]
pub struct Peers {
    /// This node's cluster.
    pub cluster: Arc<Cluster>,
    /// The HTTP client for other members.
    pub client: reqwest::Client,
}

/// The copy of `key` the key's next choice holds (and how long ago the origin confirmed
/// it), or `None`.
pub(super) async fn copy(peers: &Peers, key: &str) -> Option<(OriginObject, Option<Duration>)> {
    let peer = peers.cluster.others_for(key).into_iter().next()?;
    let url = format!(
        "{}/v1/objects/{}",
        peer.url.trim_end_matches('/'),
        rasa_openapi::key_to_path(key)
    );
    let request = peers
        .client
        .get(url)
        .header(HOP_HEADER, "1")
        .header(PEER_FILL_HEADER, "1")
        .send();
    let resp = match tokio::time::timeout(ANSWER_WITHIN, request).await {
        Ok(Ok(r)) if r.status() == reqwest::StatusCode::OK => r,
        Ok(Ok(_)) => {
            metrics::counter!("rasa_peer_fills_total", "result" => "miss").increment(1);
            return None;
        }
        Ok(Err(_)) | Err(_) => {
            metrics::counter!("rasa_peer_fills_total", "result" => "unreachable").increment(1);
            return None;
        }
    };
    let text = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let length = resp.content_length()?;
    let content_type = text("content-type");
    let etag = text(ORIGIN_ETAG_HEADER);
    let age = text("age")
        .and_then(|a| a.parse().ok())
        .map(Duration::from_secs);
    metrics::counter!("rasa_peer_fills_total", "result" => "hit").increment(1);
    tracing::debug!(key, peer = %peer.node_id, length, "filling a miss from the previous owner");
    let body = resp
        .bytes_stream()
        .map(|chunk| chunk.map_err(|e| OriginError::Failed(format!("peer copy: {e}"))));
    Some((
        OriginObject {
            length,
            content_type,
            etag,
            content_range: None,
            body: Box::pin(body),
        },
        age,
    ))
}
