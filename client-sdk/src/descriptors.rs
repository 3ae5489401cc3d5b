//! Resolving keys to descriptors, and what a descriptor promises a fast-path reader (the
//! cache of held descriptors is in `cache.rs`).

use std::time::{Duration, Instant};

use rasa_fastpath::frame::FRAME_FORMAT;
use rasa_fastpath::frame::{key_hash, FrameIdentity};
use rasa_fastpath::reader::{BlockTable, RemoteFrame};
use rasa_openapi::{
    Descriptor, DescriptorBatchRequest, DescriptorBatchResponse, DescriptorResult, Problem,
};

use crate::http::Transport;
use crate::Error;

/// A transport's descriptor requests ([`Transport::descriptors`]): for one key, one
/// version, or a batch of keys.
#[derive(Clone, Copy)]
pub(crate) struct Descriptors<'a>(&'a Transport);

impl Transport {
    /// Its descriptor requests.
    pub(crate) fn descriptors(&self) -> Descriptors<'_> {
        Descriptors(self)
    }
}

/// Part of the lease kept in reserve: no read starts later than `lease - margin` after the
/// resolve request was sent.
fn lease_margin(lease: Duration) -> Duration {
    (lease / 4).min(Duration::from_secs(1))
}

/// What a descriptor promises, as the fast-path reader needs it: where the frame is and
/// what it must contain. `None` when the descriptor has no fabric address (HTTP only) or
/// names a frame format this SDK does not know (read it over HTTP).
pub fn remote_frame(d: &Descriptor) -> Result<Option<RemoteFrame>, Error> {
    remote_frame_on(d, 0)
}

/// [`remote_frame`] on the gateway's fabric endpoint number `endpoint` (in
/// `GET /v1/fabric`'s `endpoints`; 0 is the primary, whose address and key are the
/// descriptor's own). `None` also when the descriptor names no address there.
pub fn remote_frame_on(d: &Descriptor, endpoint: usize) -> Result<Option<RemoteFrame>, Error> {
    let (addr, rkey) = match endpoint {
        0 => (d.addr, d.rkey),
        n => match d.endpoints.get(n - 1) {
            Some(r) => (d.addr.map(|_| r.addr), d.rkey.map(|_| r.rkey)),
            None => (None, None),
        },
    };
    let (Some(addr), Some(rkey), FRAME_FORMAT) = (addr, rkey, d.frame_format) else {
        return Ok(None);
    };
    let blocks = d
        .block_table_offset
        .filter(|_| d.block_size > 0)
        .map(|at| BlockTable {
            block_size: d.block_size,
            at,
        });
    let hex = |s: &str, what: &str| {
        u64::from_str_radix(s, 16).map_err(|_| Error::Protocol(format!("bad {what} {s:?}")))
    };
    Ok(Some(RemoteFrame {
        addr,
        rkey,
        identity: FrameIdentity {
            key_hash: key_hash(&d.key),
            version: hex(&d.version, "version")?,
            payload_len: d.length,
        },
        checksum: hex(&d.checksum, "checksum")?,
        blocks,
    }))
}

/// Why `d` cannot be read one-sided, when [`remote_frame`] says `None`.
pub(crate) fn why_http_only(d: &Descriptor) -> String {
    if d.frame_format != FRAME_FORMAT {
        format!(
            "frame format {} is not one this SDK reads (it reads {FRAME_FORMAT})",
            d.frame_format
        )
    } else {
        "the gateway serves HTTP only".to_owned()
    }
}

/// The instant after which no one-sided read of `d` may start: counted from when the
/// request was *sent* (never from when the answer arrived), minus a margin.
pub(crate) fn deadline_of(d: &Descriptor, sent: Instant) -> Instant {
    let lease = Duration::from_millis(d.lease_ms);
    sent + lease.saturating_sub(lease_margin(lease))
}

impl Descriptors<'_> {
    /// A descriptor of `key`'s current version (a lease on it).
    pub(crate) async fn one(&self, key: &str) -> Result<Descriptor, Error> {
        let resp = self
            .0
            .send(self.0.http.get(self.0.url("descriptors", key)?))
            .await?;
        self.0.decode(resp).await
    }

    /// A descriptor of version `version` of `key`, and when its request was sent.
    pub(crate) async fn version(
        &self,
        key: &str,
        version: &str,
    ) -> Result<(Descriptor, Instant), Error> {
        let url = format!("{}?version={version}", self.0.url("descriptors", key)?);
        let sent = Instant::now();
        let resp = self.0.send(self.0.http.get(url)).await?;
        Ok((self.0.decode(resp).await?, sent))
    }

    /// Resolves several keys in one round trip; one result per key, in order.
    pub(crate) async fn many(
        &self,
        keys: &[&str],
    ) -> Result<Vec<Result<Descriptor, Problem>>, Error> {
        let (list, _) = self.0.descriptors().many_timed(keys).await?;
        Ok(list)
    }

    pub(crate) async fn many_timed(
        &self,
        keys: &[&str],
    ) -> Result<(Vec<Result<Descriptor, Problem>>, Instant), Error> {
        let sent = Instant::now();
        let body = DescriptorBatchRequest {
            keys: keys.iter().map(|k| k.to_string()).collect(),
        };
        let resp = self
            .0
            .send(
                self.0
                    .http
                    .post(format!(
                        "{}/v1{}/descriptors",
                        self.0.endpoint, self.0.space
                    ))
                    .json(&body),
            )
            .await?;
        let batch: DescriptorBatchResponse = self.0.decode(resp).await?;
        let out = batch
            .results
            .into_iter()
            .map(DescriptorResult::into_result)
            .collect();
        Ok((out, sent))
    }
}
