//! Reads of a pinned version and conditional writes: [`Client::get_version`],
//! [`Client::put_if`] and their [`Condition`].

use bytes::Bytes;
use rasa_openapi::Descriptor;

use crate::{Client, Error, FastPath, Object};

/// What must hold for a conditional write ([`Client::put_if`]) to store its body; when it
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

impl Client {
    /// Reads version `version` of `key` (a version id, as descriptors and
    /// `Object::version` name it) while the gateway still holds it: one-sided when the
    /// policy allows and it works, else over HTTP. `404` once it is gone.
    pub async fn get_version(&self, key: &str, version: &str) -> Result<Object, Error> {
        self.on_owner(key, |c| async move {
            let node = &c.inner;
            if node.fast_path != FastPath::Off && !node.fabric.known_unavailable() {
                let (d, sent) = node.http.resolve_version(key, version).await?;
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
        self.on_owner(key, |c| {
            let body = body.clone();
            async move {
                let r = c
                    .inner
                    .http
                    .put_if(key, body, content_type, condition)
                    .await;
                c.inner.wrote(key);
                r
            }
        })
        .await
    }
}
