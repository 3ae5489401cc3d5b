//! A keyed request passed on to the key's owner, one hop, for either front: the body
//! streamed as it arrives, the answer relayed as it streams, the hop marker set so the
//! owner serves it whatever its view says.
//!
//! When the owner cannot be reached, a read goes to the key's next choice (which fills it
//! once for every member) or is served here (from memory, else the origin); a write is
//! refused with a time to retry, since a value written here would not be found where the
//! others look for it. An owner that failed to answer is passed over for a few seconds
//! ([`super::suspects`]), so only one request waits for a crashed or frozen owner, not
//! every one until its lease ends.

use crate::catalog;
use std::time::{Duration, Instant};

use axum::response::Response;
use http::{HeaderMap, HeaderValue, Method};
use rasa_openapi::ClusterMember;

use super::peers::{Peers, Wire};
use super::suspects::SUSPECT_FOR;

/// A forwarded read that failed faster than this (a refused or reset connection, not an
/// owner that does not answer) is sent once more before the owner is suspected.
const STALE_CONNECTION_FAILS_WITHIN: Duration = Duration::from_millis(250);

/// Longest wait for a forwarded read's answer to start before it is served elsewhere.
pub const FORWARDED_READ_ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The shortest wait for an owner's answer, however little time the caller has left.
const MIN_ANSWER_WITHIN: Duration = Duration::from_millis(100);

/// How long a forwarded read waits for the owner's answer: at most half of what the
/// caller has left of its call (`Rasa-Timeout-Ms`, set by the SDKs), so the next choice
/// can still answer within the caller's timeout.
fn answer_within(headers: &HeaderMap) -> Duration {
    let left = headers
        .get(rasa_openapi::TIMEOUT_HEADER)
        .and_then(|h| h.to_str().ok())
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis);
    left.map_or(FORWARDED_READ_ANSWER_WITHIN, |left| {
        (left / 2).clamp(MIN_ANSWER_WITHIN, FORWARDED_READ_ANSWER_WITHIN)
    })
}

/// The response header naming the member that served a forwarded request.
pub const SERVED_BY_HEADER: &str = "rasa-served-by";

/// A request to pass on, as the front received it.
pub struct Outgoing {
    /// Its method.
    pub method: Method,
    /// Its path and query, as the client sent them.
    pub path_and_query: String,
    /// Its headers, the front's choice of `Host` made (hop-by-hop ones are dropped here).
    pub headers: HeaderMap,
    /// Its body (none for a read).
    pub body: Option<reqwest::Body>,
}

/// What became of a forwarded request.
pub enum Forwarded {
    /// A member answered; its answer, relayed.
    Answer(Response),
    /// No member answered a read: serve it here (the request's head is given back).
    ServeHere,
    /// A write reached the owner and got no answer: it may or may not have been stored
    /// (the text says why).
    Unknown(String),
    /// No owner answered a write: refused, to be retried after `retry_after` seconds.
    Refused {
        /// Why, naming the key, the owner and the cause.
        why: String,
        /// Seconds before the owner is tried again.
        retry_after: u64,
    },
}

impl Peers {
    /// Passes `out`, a request for `key` on `wire`, to `owner`.
    pub async fn forward(
        &self,
        wire: Wire,
        key: &str,
        owner: &ClusterMember,
        out: Outgoing,
    ) -> Forwarded {
        let Outgoing {
            method,
            path_and_query,
            mut headers,
            body,
        } = out;
        crate::net::strip_hop_by_hop(&mut headers);
        headers.remove(super::secret::PROOF_HEADER);
        // The body is sent at once, not on `100 Continue`: an owner told the client waits
        // for it would close the connection after a refusal (`412` on a conditional PUT)
        // with the body unread, and this end would see a broken pipe, not the refusal.
        headers.remove(http::header::EXPECT);
        let read = matches!(method, Method::GET | Method::HEAD);
        let answer_within = answer_within(&headers);
        let counter = Counter(wire);
        let send = |to: &ClusterMember, body: Option<reqwest::Body>| {
            let url = format!("{}{path_and_query}", wire.base(to).unwrap_or_default());
            let url =
                reqwest::Url::parse(&url).map_err(|e| Unreachable::Address(format!("{url}: {e}")));
            let req = url.map(|url| {
                let mut headers = headers.clone();
                let body = self.hop(&to.node_id, &method, &url, &mut headers, body);
                let mut req = self.client().request(method.clone(), url).headers(headers);
                if let Some(b) = body {
                    req = req.body(b);
                }
                req
            });
            async move { send_forwarded(req?, read, answer_within).await }
        };
        let suspect_for = self.cluster().suspects().remaining(owner);
        let cause = if suspect_for.is_some() {
            // It failed a moment ago: pass it over rather than wait for it again.
            counter.add("owner_suspect");
            Unreachable::Suspect(SUSPECT_FOR)
        } else {
            // A read refused at once is first sent once more, on a new connection: a pooled
            // one may be to the owner's previous process (restarted at the same address),
            // which says nothing about the owner now. (One that does not answer is not
            // asked twice.)
            let started = Instant::now();
            let mut sent = send(owner, body).await;
            if read && sent.is_err() && started.elapsed() < STALE_CONNECTION_FAILS_WITHIN {
                sent = send(owner, None).await;
            }
            match sent {
                Ok(resp) => return answer(resp, owner, counter),
                Err(cause) => {
                    // Only a read makes the owner a suspect; a write is refused with
                    // Retry-After, and its client's retry finds the owner again.
                    if read {
                        super::suspects::suspect_and_probe(self, owner);
                    }
                    counter.add("owner_unreachable");
                    cause
                }
            }
        };
        let why = unreachable(key, owner, wire, &cause.to_string());
        if !read {
            return unanswered_write(why, &cause, suspect_for);
        }
        // The key's next choice serves it (and fills it once for every member), unless
        // that is this node.
        let next = self
            .cluster()
            .next_choice(key, &owner.node_id)
            .filter(|m| wire.base(m).is_some());
        if let Some(next) = next {
            if let Ok(resp) = send(&next, None).await {
                tracing::warn!(next = %next.node_id, "{why}; asked the key's next choice");
                counter.add("next_choice");
                return answer(resp, &next, counter);
            }
        }
        tracing::warn!("{why}; serving it here");
        Forwarded::ServeHere
    }
}

/// A write its owner did not answer, `why`: refused when it never reached the owner (to
/// be retried when the owner is tried again: at once for one that just failed, when the
/// suspicion ends for a suspect one, `suspect_for`); otherwise of unknown outcome.
fn unanswered_write(why: String, cause: &Unreachable, suspect_for: Option<Duration>) -> Forwarded {
    if cause.may_have_arrived() {
        tracing::warn!("{why}; the write's outcome is unknown");
        return Forwarded::Unknown(format!(
            "{why}; the write was sent to it, so it may or may not have been stored: read the key before writing it again"
        ));
    }
    tracing::warn!("{why}; write refused");
    let retry_after = suspect_for.map_or(1, |left| left.as_secs_f64().ceil().max(1.0) as u64);
    Forwarded::Refused {
        why: format!("{why}; nothing was stored, retry shortly"),
        retry_after,
    }
}

/// The forwards counter of a wire: `rasa_cluster_forwards_total` on the native API,
/// `rasa_s3_forwards_total` on the S3 listener.
#[derive(Clone, Copy)]
struct Counter(Wire);

impl Counter {
    fn add(self, result: &'static str) {
        match self.0 {
            Wire::Api => catalog::CLUSTER_FORWARDS
                .counter_by(&[("result", result)])
                .increment(1),
            Wire::S3 => catalog::S3_FORWARDS
                .counter_by(&[("result", result)])
                .increment(1),
        }
    }
}

/// Why `owner` did not take the request for `key`: `cause`, with a hint for certificates.
fn unreachable(key: &str, owner: &ClusterMember, wire: Wire, cause: &str) -> String {
    let hint = if cause.contains("certificate") {
        " (members with a private certificate authority need --cluster-ca-file)"
    } else {
        ""
    };
    format!(
        "the owner of '{key}', node {} at {}, cannot be reached: {cause}{hint}",
        owner.node_id,
        wire.base(owner).unwrap_or_default(),
    )
}

/// Sends a request passed on to another member; a read's answer must start within
/// `answer_within` (it has no body to send first): a member that accepts but does not
/// answer (frozen, overloaded) then counts as unreachable. The error says why, on one line.
async fn send_forwarded(
    out: reqwest::RequestBuilder,
    read: bool,
    answer_within: Duration,
) -> Result<reqwest::Response, Unreachable> {
    if !read {
        return out.send().await.map_err(Unreachable::Send);
    }
    match tokio::time::timeout(answer_within, out.send()).await {
        Ok(sent) => sent.map_err(Unreachable::Send),
        Err(_) => Err(Unreachable::NoAnswer(answer_within)),
    }
}

/// Why a member a request was passed on to counts as unreachable.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    /// The request could not be sent (or its answer's head not read).
    #[error("{}", crate::net::error_chain(.0))]
    Send(reqwest::Error),
    /// Its address does not make a URL.
    #[error("{0}")]
    Address(String),
    /// It failed a moment ago, and is passed over rather than waited for again.
    #[error("it did not answer within the last {0:?}")]
    Suspect(Duration),
    /// A read's answer did not start in time.
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
}

impl Unreachable {
    /// Whether the request may have reached the member (and a write been stored there):
    /// anything but a connection that was never made.
    fn may_have_arrived(&self) -> bool {
        match self {
            Unreachable::Send(e) => !e.is_connect(),
            Unreachable::NoAnswer(_) => true,
            Unreachable::Address(_) | Unreachable::Suspect(_) => false,
        }
    }
}

/// The answer of `member`, relayed as it streams: its headers but those of one
/// connection, and [`SERVED_BY_HEADER`].
fn answer(resp: reqwest::Response, member: &ClusterMember, counter: Counter) -> Forwarded {
    counter.add("ok");
    let mut back = Response::new(axum::body::Body::empty());
    *back.status_mut() = resp.status();
    let mut headers = resp.headers().clone();
    crate::net::strip_hop_by_hop(&mut headers);
    if let Ok(v) = HeaderValue::from_str(&member.node_id) {
        headers.insert(SERVED_BY_HEADER, v);
    }
    *back.headers_mut() = headers;
    *back.body_mut() = axum::body::Body::from_stream(resp.bytes_stream());
    Forwarded::Answer(back)
}
