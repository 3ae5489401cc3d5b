//! Filling a miss from another member before the origin: after a membership change a
//! key's new owner asks the key's next choice — its previous owner — for the copy it
//! holds, so a join costs no storm of origin requests.
//!
//! The peer answers from memory only ([`PEER_FILL_HEADER`]), with the origin's entity tag
//! and the copy's age, so freshness and revalidation carry over. Any failure (no copy, no
//! answer within [`ANSWER_WITHIN`]) means: go to the origin. The copy saves an origin
//! request, no more, so it is not waited for long: a peer that does not answer in time is
//! a suspect (not asked again until it answers a probe), and a suspect is not asked — a
//! frozen next choice cost every miss of its keys 2 s, and a read forwarded to the owner
//! that much of its time (the chaos harness's fixed seed).

use crate::catalog;
use std::time::Duration;

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use rasa_openapi::cluster::{ORIGIN_ETAG_HEADER, PEER_FILL_HEADER};

use super::peers::{Peers, Wire};

/// Longest wait for a peer's answer to start (from its memory: milliseconds when it is
/// well).
pub const ANSWER_WITHIN: Duration = Duration::from_millis(500);

/// A copy another member holds.
pub struct PeerCopy {
    /// Its length.
    pub length: u64,
    /// Its media type.
    pub content_type: Option<String>,
    /// The origin's entity tag of it.
    pub etag: Option<String>,
    /// How long ago the origin confirmed it, when the peer said.
    pub age: Option<Duration>,
    /// Its bytes, as they arrive (an error says why the copy broke off).
    pub body: BoxStream<'static, Result<bytes::Bytes, reqwest::Error>>,
}

impl Peers {
    /// The copy of `key` the key's next choice holds, or `None`.
    pub async fn copy(&self, key: &str) -> Option<PeerCopy> {
        let peer = self.cluster().others_for(key).into_iter().next()?;
        if self.cluster().suspects().remaining(&peer).is_some() {
            catalog::PEER_FILLS
                .counter_by(&[("result", "suspect")])
                .increment(1);
            return None;
        }
        let url = format!(
            "{}/v1/objects/{}",
            Wire::Api.base(&peer).unwrap_or_default(),
            rasa_openapi::key_to_path(key)
        );
        let url = reqwest::Url::parse(&url).ok()?;
        let request = self
            .client()
            .get(url.clone())
            .headers(self.hop_headers(
                &peer.node_id,
                &http::Method::GET,
                &url,
                &super::secret::HopBody::Empty,
            ))
            .header(PEER_FILL_HEADER, "1")
            .send();
        let resp = match tokio::time::timeout(ANSWER_WITHIN, request).await {
            Ok(Ok(r)) if r.status() == reqwest::StatusCode::OK => r,
            Ok(Ok(_)) => {
                catalog::PEER_FILLS
                    .counter_by(&[("result", "miss")])
                    .increment(1);
                return None;
            }
            Ok(Err(_)) | Err(_) => {
                catalog::PEER_FILLS
                    .counter_by(&[("result", "unreachable")])
                    .increment(1);
                tracing::debug!(key, peer = %peer.node_id, "the previous owner did not answer a fill; a suspect until it answers");
                super::suspects::suspect_and_probe(self, &peer);
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
        catalog::PEER_FILLS
            .counter_by(&[("result", "hit")])
            .increment(1);
        tracing::debug!(key, peer = %peer.node_id, length, "filling a miss from the previous owner");
        let body = resp.bytes_stream().boxed();
        Some(PeerCopy {
            length,
            content_type,
            etag,
            age,
            body,
        })
    }
}
