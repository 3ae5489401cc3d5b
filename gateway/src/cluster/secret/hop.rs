//! Hop proofs: `<from> <to> <unix-ms> <nonce> <body> <mac>`, the MAC over all of them
//! with the method and the path. A proof is good for one request, to one member (`to`),
//! for [`PROOF_WITHIN`] of the receiver's clock, with the body it names ([`HopBody`]).

use crate::catalog;
use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use axum::body::Body;
use http::{header, HeaderMap, HeaderValue, Method, Request};
use rasa_openapi::cluster::PEER_FILL_HEADER;
use rasa_openapi::HOP_HEADER;

use super::seal::Verified;
use super::{now_ms, ClusterSecret};

/// The header that proves a hop marker.
pub const PROOF_HEADER: &str = "rasa-hop-proof";

/// How far a proof's time may be from this member's clock (members' clocks are kept by
/// NTP; a captured request replayed later than this is refused).
pub const PROOF_WITHIN: Duration = Duration::from_secs(60);

/// At most this many nonces are remembered; past it the oldest go, and proofs no newer
/// than those are refused (the window shrinks rather than a replay pass).
const MAX_NONCES: usize = 1 << 20;

/// What a hop's proof says of its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HopBody {
    /// None (a read, a bodiless request): a byte of body breaks the request off.
    Empty,
    /// A body known before it is sent: its BLAKE3 digest.
    Digest([u8; 32]),
    /// A body streamed as it arrives, sealed by a trailer over its digest
    /// ([`super::seal`]); its length when declared.
    Sealed(Option<u64>),
}

/// Why a request marked as a hop from another member is served as a client's instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HopRefused {
    /// It carries no proof.
    #[error("no proof")]
    Missing,
    /// Its proof does not parse.
    #[error("a malformed proof")]
    Malformed,
    /// Its proof was made too far from this member's clock.
    #[error("a proof {seconds} s away from this member's clock")]
    Clock {
        /// How far, in seconds.
        seconds: u64,
    },
    /// Its proof's MAC does not verify.
    #[error("a proof that does not verify under --cluster-secret-file")]
    Mac,
    /// Its proof was made for another member.
    #[error("a proof made by {from} for another member ({to}), replayed here")]
    OtherMember {
        /// Who made it.
        from: String,
        /// Whom it was for.
        to: String,
    },
    /// Its proof was used already.
    #[error("a proof already used (a replay)")]
    Replay,
}

impl HopBody {
    /// A body of `chunks`, by digest.
    pub fn of<B: AsRef<[u8]>>(chunks: &[B]) -> Self {
        let mut h = blake3::Hasher::new();
        for c in chunks {
            h.update(c.as_ref());
        }
        Self::Digest(*h.finalize().as_bytes())
    }

    fn text(&self) -> String {
        match self {
            Self::Empty => "e".into(),
            Self::Digest(d) => format!("d:{}", hex::encode(d)),
            Self::Sealed(None) => "s".into(),
            Self::Sealed(Some(n)) => format!("s:{n}"),
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text.split_once(':') {
            None if text == "e" => Some(Self::Empty),
            None if text == "s" => Some(Self::Sealed(None)),
            Some(("s", n)) => n.parse().ok().map(|n| Self::Sealed(Some(n))),
            Some(("d", d)) => {
                let mut out = [0u8; 32];
                hex::decode_to_slice(d, &mut out).ok()?;
                Some(Self::Digest(out))
            }
            _ => None,
        }
    }
}

/// The nonces of the proofs seen lately, each kept until no proof with it can be
/// accepted any more: a check is O(1) (a set, and a queue in arrival order whose front
/// is dropped as it ages).
#[derive(Default)]
pub struct Nonces {
    set: HashSet<u64>,
    /// (arrived at, the proof's time, nonce), in arrival order.
    order: VecDeque<(u64, u64, u64)>,
    /// Proofs at or before this time are refused (nonces of theirs were let go).
    floor: u64,
}

impl Nonces {
    /// Whether `nonce` (of a proof made at `at`) is new; remembered from now on.
    pub(super) fn spend(&mut self, nonce: u64, at: u64, now: u64) -> bool {
        // A proof is accepted while its time is within the window of the clock, so its
        // nonce must be kept until `at + window`: two windows after it arrived (it
        // arrived no earlier than `at - window`).
        let keep = 2 * PROOF_WITHIN.as_millis() as u64;
        while let Some(&(arrived, _, old)) = self.order.front() {
            if now.saturating_sub(arrived) <= keep {
                break;
            }
            self.order.pop_front();
            self.set.remove(&old);
        }
        if at <= self.floor || !self.set.insert(nonce) {
            return false;
        }
        self.order.push_back((now, at, nonce));
        if self.order.len() > MAX_NONCES {
            if let Some((_, old_at, old)) = self.order.pop_front() {
                self.set.remove(&old);
                self.floor = self.floor.max(old_at);
            }
        }
        true
    }
}

impl ClusterSecret {
    fn hop_mac(&self, fields: [&str; 5], method: &Method, path: &str) -> hmac::Hmac<sha2::Sha256> {
        let [from, to, at, nonce, body] = fields;
        self.mac(&[
            b"rasa-hop-v2",
            from.as_bytes(),
            to.as_bytes(),
            at.as_bytes(),
            nonce.as_bytes(),
            body.as_bytes(),
            method.as_str().as_bytes(),
            path.as_bytes(),
        ])
    }

    /// The proof of a request `from` sends the member `to`: `method` on `path_and_query`
    /// (as the receiver will see it), with `body`.
    pub fn proof(
        &self,
        from: &str,
        to: &str,
        method: &Method,
        path_and_query: &str,
        body: &HopBody,
    ) -> HeaderValue {
        let (at, nonce) = (
            now_ms().to_string(),
            format!("{:016x}", rand::random::<u64>()),
        );
        let body = body.text();
        let tag = self.hop_mac([from, to, &at, &nonce, &body], method, path_and_query);
        let tag = hex::encode(hmac::Mac::finalize(tag).into_bytes());
        HeaderValue::from_str(&format!("{from} {to} {at} {nonce} {body} {tag}"))
            .expect("node ids are header-safe")
    }

    /// What body `proof` covers, if it proves a hop of `method` on `path_and_query` to
    /// member `me` (its nonce is then spent: the same proof is refused a second time);
    /// else why not.
    pub fn check(
        &self,
        me: &str,
        proof: &str,
        method: &Method,
        path_and_query: &str,
    ) -> Result<HopBody, HopRefused> {
        let malformed = || HopRefused::Malformed;
        let fields: Vec<&str> = proof.split(' ').collect();
        let [from, to, at_text, nonce_text, body_text, tag] = fields[..] else {
            return Err(malformed());
        };
        let (Ok(at), Ok(nonce), Ok(tag), Some(body)) = (
            at_text.parse::<u64>(),
            u64::from_str_radix(nonce_text, 16),
            hex::decode(tag),
            HopBody::parse(body_text),
        ) else {
            return Err(malformed());
        };
        let now = now_ms();
        let window = PROOF_WITHIN.as_millis() as u64;
        if at.abs_diff(now) > window {
            return Err(HopRefused::Clock {
                seconds: at.abs_diff(now) / 1000,
            });
        }
        // Compared in constant time.
        let fields = [from, to, at_text, nonce_text, body_text];
        if hmac::Mac::verify_slice(self.hop_mac(fields, method, path_and_query), &tag).is_err() {
            return Err(HopRefused::Mac);
        }
        if to != me {
            return Err(HopRefused::OtherMember {
                from: from.to_owned(),
                to: to.to_owned(),
            });
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.spend(nonce, at, now) {
            return Err(HopRefused::Replay);
        }
        Ok(body)
    }

    /// `req` as this member (`me`) serves it: with a valid proof, its hop marker kept
    /// and its body bound to what the proof names (a body that differs breaks off, so
    /// nothing of it is stored); without one, the hop marker (and the peer-fill marker it
    /// carries) taken off, counted and logged. The proof header stays (an S3 signature
    /// may cover it): it is spent, and a member passing the request on replaces it.
    pub fn admit(self: &std::sync::Arc<Self>, me: &str, req: Request<Body>) -> Request<Body> {
        let (mut parts, body) = req.into_parts();
        if !parts.headers.contains_key(HOP_HEADER) {
            return Request::from_parts(parts, body);
        }
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let proven = match parts.headers.get(PROOF_HEADER) {
            None => Err(HopRefused::Missing),
            Some(p) => match p.to_str() {
                Err(_) => Err(HopRefused::Malformed),
                Ok(text) => self
                    .check(me, text, &parts.method, path)
                    .map(|covered| (covered, p.clone())),
            },
        };
        match proven {
            Ok((covered, proof)) => {
                restore_length(&mut parts.headers, &covered);
                let secret = std::sync::Arc::clone(self);
                let body = Body::new(Verified::new(body, covered, secret, proof));
                Request::from_parts(parts, body)
            }
            Err(why) => {
                parts.headers.remove(HOP_HEADER);
                parts.headers.remove(PEER_FILL_HEADER);
                catalog::CLUSTER_HOPS_REJECTED.counter().increment(1);
                tracing::warn!(
                    method = %parts.method, path,
                    "cluster: a request marked as forwarded came with {why}; served as a client's request"
                );
                Request::from_parts(parts, body)
            }
        }
    }
}

/// A sealed body's head as its sender received it: the declared length (which the proof
/// names: the sender sends the body chunked, for its trailer) back in `Content-Length`,
/// the framing the seal needed gone.
fn restore_length(headers: &mut HeaderMap, covered: &HopBody) {
    if let HopBody::Sealed(length) = covered {
        headers.remove(header::TRANSFER_ENCODING);
        headers.remove(header::TRAILER);
        if let Some(n) = length {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(*n));
        }
    }
}
