//! Bodies bound to their hop proof. A member streaming a body to another seals it
//! ([`Sealing`]): the body goes chunked and ends with a trailer ([`SEAL_TRAILER`]), a MAC
//! over the proof and the body's BLAKE3 digest. The receiver reads the body through
//! [`Verified`], which hashes it as it passes and, at its end, compares it with what the
//! proof names (no body, a digest, or the seal): a body that differs, goes past its
//! length or ends without its seal ends in an error instead, so the handler reading it
//! stores nothing (every write publishes only a body read to its end).

use crate::catalog;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use subtle::ConstantTimeEq;

use super::{ClusterSecret, HopBody};

/// The trailer that seals a streamed body.
pub const SEAL_TRAILER: &str = "rasa-hop-seal";

impl ClusterSecret {
    /// The seal of a body whose BLAKE3 digest is `digest`, sent with `proof`.
    fn seal(&self, proof: &[u8], digest: &[u8; 32]) -> [u8; 32] {
        let tag = self.mac(&[b"rasa-hop-seal-v1", proof, digest]);
        hmac::Mac::finalize(tag).into_bytes().into()
    }
}

pin_project_lite::pin_project! {
    /// A body on its way to another member, sealed with a trailer for the proof `proof`.
    pub struct Sealing<B> {
        #[pin]
        inner: B,
        hasher: blake3::Hasher,
        secret: Arc<ClusterSecret>,
        proof: HeaderValue,
        done: bool,
    }
}

impl<B> Sealing<B> {
    /// `inner`, sealed for `proof` (the request's [`super::PROOF_HEADER`]).
    pub fn new(inner: B, secret: Arc<ClusterSecret>, proof: HeaderValue) -> Self {
        Self {
            inner,
            hasher: blake3::Hasher::new(),
            secret,
            proof,
            done: false,
        }
    }
}

impl<B> Body for Sealing<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        loop {
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        this.hasher.update(&data);
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    // The sender's own trailers (none today) are not passed on.
                    Err(_) => continue,
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    *this.done = true;
                    let seal = this
                        .secret
                        .seal(this.proof.as_bytes(), this.hasher.finalize().as_bytes());
                    let mut trailers = HeaderMap::new();
                    trailers.insert(
                        SEAL_TRAILER,
                        HeaderValue::from_str(&hex::encode(seal)).expect("hex is header-safe"),
                    );
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        // Chunked, whatever the inner body knows: only a chunked body has trailers.
        SizeHint::default()
    }
}

pin_project_lite::pin_project! {
    /// A body received with a valid hop proof, checked against what the proof names.
    pub struct Verified {
        #[pin]
        inner: axum::body::Body,
        covered: HopBody,
        hasher: blake3::Hasher,
        seen: u64,
        secret: Arc<ClusterSecret>,
        proof: HeaderValue,
        done: bool,
    }
}

impl Verified {
    /// `inner`, to be checked against `covered`, what `proof` names.
    pub fn new(
        inner: axum::body::Body,
        covered: HopBody,
        secret: Arc<ClusterSecret>,
        proof: HeaderValue,
    ) -> Self {
        Self {
            inner,
            covered,
            hasher: blake3::Hasher::new(),
            seen: 0,
            secret,
            proof,
            done: false,
        }
    }
}

/// The error a body that its proof does not cover ends with (counted, logged).
fn refused(why: &str) -> axum::Error {
    catalog::CLUSTER_HOPS_REJECTED.counter().increment(1);
    tracing::warn!("cluster: a forwarded request's body {why}; nothing of it is stored");
    axum::Error::new(format!(
        "the body {why} (the hop proof does not cover it); nothing was stored"
    ))
}

impl Body for Verified {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let mut this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        let mut end = |why: Option<&str>| {
            *this.done = true;
            Poll::Ready(why.map(|w| Err(refused(w))))
        };
        match frame {
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    *this.seen += data.len() as u64;
                    let over = match this.covered {
                        HopBody::Empty => !data.is_empty(),
                        HopBody::Sealed(Some(n)) => *this.seen > *n,
                        _ => false,
                    };
                    if over {
                        return end(Some("goes on past what its proof names"));
                    }
                    this.hasher.update(&data);
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Err(frame) => {
                    let Ok(trailers) = frame.into_trailers() else {
                        return Poll::Ready(None);
                    };
                    let HopBody::Sealed(length) = this.covered else {
                        return end(Some("carries trailers its proof does not name"));
                    };
                    if length.is_some_and(|n| n != *this.seen) {
                        return end(Some("is shorter than its proof names"));
                    }
                    let want = this
                        .secret
                        .seal(this.proof.as_bytes(), this.hasher.finalize().as_bytes());
                    let got = trailers
                        .get(SEAL_TRAILER)
                        .and_then(|v| hex::decode(v.as_bytes()).ok())
                        .unwrap_or_default();
                    if bool::from(got.ct_eq(&want)) {
                        end(None)
                    } else {
                        end(Some("is not the one its sender sealed"))
                    }
                }
            },
            None => match this.covered {
                HopBody::Empty => end(None),
                HopBody::Digest(d) => {
                    if bool::from(this.hasher.finalize().as_bytes().ct_eq(d)) {
                        end(None)
                    } else {
                        end(Some("is not the one its proof names"))
                    }
                }
                HopBody::Sealed(_) => end(Some("ended without its seal")),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        match self.covered {
            HopBody::Empty => SizeHint::with_exact(0),
            HopBody::Sealed(Some(n)) => SizeHint::with_exact(n.saturating_sub(self.seen)),
            _ => self.inner.size_hint(),
        }
    }
}
