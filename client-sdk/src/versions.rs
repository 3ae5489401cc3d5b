//! Version-aware calls, through [`Client::versions`]: reads of a pinned version
//! ([`Versions::get`], or of the version a descriptor names: [`Versions::read_descriptor`])
//! and writes on a condition about the current one ([`Versions::put_if`]).

use std::time::Instant;

use bytes::Bytes;
use rasa_openapi::Descriptor;

use crate::{Client, Error, FastPath, Object};

/// What must hold for a conditional write ([`Versions::put_if`]) to store its body; when it
/// does not, nothing is stored and the call fails with `412`
/// ([`ProblemCode::PreconditionFailed`](crate::ProblemCode::PreconditionFailed)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// The key's current version has this ETag (`If-Match`; the quotes may be left out):
    /// compare-and-swap on the value last read.
    IfMatch(String),
    /// The key has no current version (`If-None-Match: *`): create, never overwrite.
    IfAbsent,
}

/// A client's version-aware calls ([`Client::versions`]).
#[derive(Clone, Copy, Debug)]
pub struct Versions<'a>(&'a Client);

impl Client {
    /// Calls that name versions: read one by id, write only if the current one is as
    /// expected (`client.versions().get(key, v)`, `client.versions().put_if(…)`).
    pub fn versions(&self) -> Versions<'_> {
        Versions(self)
    }
}

impl Versions<'_> {
    /// Reads the version `d` names one-sided, from the member that handed it out. `sent`
    /// is when the request that returned `d` was sent: the lease is counted from then.
    pub async fn read_descriptor(&self, d: &Descriptor, sent: Instant) -> Result<Object, Error> {
        if let (Some(node), Some(topology)) = (&d.node_id, self.0.inner.topology().await) {
            let Some(c) = topology.node(node) else {
                return Err(Error::FastPath(format!(
                    "node {node}, which handed out this descriptor, is no longer a member"
                )));
            };
            return c.inner.fabric.read_descriptor(d, sent).await;
        }
        self.0.inner.fabric.read_descriptor(d, sent).await
    }

    /// Streams the version `d` names, one-sided, into `out` (see [`Client::get_to`]);
    /// `sent` is when the request that returned `d` was sent.
    pub async fn read_descriptor_to<W: tokio::io::AsyncWrite + Unpin + ?Sized>(
        &self,
        d: &Descriptor,
        sent: Instant,
        out: &mut W,
    ) -> Result<crate::Written, Error> {
        if let (Some(node), Some(topology)) = (&d.node_id, self.0.inner.topology().await) {
            let Some(c) = topology.node(node) else {
                return Err(Error::FastPath(format!(
                    "node {node}, which handed out this descriptor, is no longer a member"
                )));
            };
            return c
                .inner
                .fabric
                .streams()
                .read_descriptor_to(d, sent, out)
                .await;
        }
        self.0
            .inner
            .fabric
            .streams()
            .read_descriptor_to(d, sent, out)
            .await
    }

    /// Reads version `version` of `key` (a version id, as descriptors and
    /// `Object::version` name it) while the gateway still holds it: one-sided when the
    /// policy allows and it works, else over HTTP. `404` once it is gone.
    pub async fn get(&self, key: &str, version: &str) -> Result<Object, Error> {
        crate::cluster::on_owner(self.0, key, |c| async move {
            let node = &c.inner;
            if node.fast_path != FastPath::Off && !node.fabric.known_unavailable() {
                let (d, sent) = node.http.descriptors().version(key, version).await?;
                match node.fabric.read_descriptor(&d, sent).await {
                    Ok(obj) => return Ok(obj),
                    Err(e) if node.fast_path == FastPath::Required => return Err(e),
                    Err(e) => {
                        tracing::debug!(key, version, error = %e, "reading the version over HTTP")
                    }
                }
            }
            node.http.get_version(key, version).await
        })
        .await
    }

    /// Stores `body` as a new version of `key` only if `condition` holds; atomically with
    /// respect to other writes of the key.
    pub async fn put_if(
        &self,
        key: &str,
        body: impl Into<Bytes>,
        content_type: Option<&str>,
        condition: Condition,
    ) -> Result<Descriptor, Error> {
        let (body, condition) = (body.into(), &condition);
        crate::cluster::on_owner_write(self.0, key, |c| {
            let body = body.clone();
            async move {
                c.inner
                    .http
                    .put_if(key, body, content_type, condition)
                    .await
            }
        })
        .await
    }
}
