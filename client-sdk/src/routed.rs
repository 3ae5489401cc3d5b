//! The public calls that name a key. Against a cluster each goes to the key's owner (and
//! on to its next choices when the owner does not answer); against a single gateway it is
//! served by that gateway. The work itself is in the `*_here` methods.

use bytes::Bytes;
use rasa_openapi::{Descriptor, ObjectList, Problem};

use crate::{Client, Error, Meta, Object};

impl Client {
    /// Reads `key`'s current version: one-sided when the policy allows and it works, else
    /// over HTTP.
    pub async fn get(&self, key: &str) -> Result<Object, Error> {
        crate::cluster::on_owner(self, key, |c| async move { c.inner.get(key).await }).await
    }

    /// Reads `key` by `path` only: [`ReadPath::Fabric`] one-sided or fails (never falls
    /// back to HTTP; a stale, revoked, torn or timed-out read drops the cached descriptor
    /// and gets one more try with a fresh one), [`ReadPath::Http`] over HTTP.
    pub async fn get_by(&self, key: &str, path: crate::ReadPath) -> Result<Object, Error> {
        crate::cluster::on_owner(self, key, |c| async move {
            match path {
                crate::ReadPath::Fabric => c.inner.fabric.get(key).await,
                crate::ReadPath::Http => c.inner.http.get(key, None).await,
            }
        })
        .await
    }

    /// Reads bytes `start..end` of `key`'s current version: one-sided when the policy
    /// allows and the version's frame has a block table (the covering blocks are read and
    /// each is validated against its entry), else over HTTP. An end past the value is cut
    /// at its end, as HTTP does; a start past it is a `range_not_satisfiable` problem.
    pub async fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> Result<Object, Error> {
        let r = &range;
        crate::cluster::on_owner(self, key, |c| async move {
            c.inner.get_range(key, r.clone()).await
        })
        .await
    }

    /// [`Client::get_range`] into the front of `buf`, handed back with the result; a buffer
    /// shorter than the range gives [`Error::BufferTooSmall`] before anything is read.
    pub async fn get_range_into<B: AsMut<[u8]> + Send + 'static>(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
        buf: B,
    ) -> crate::BufResult<crate::Written, B> {
        crate::timeouts::call_scope(async {
            match self.inner.owner(key, true).await {
                Some(c) => c.inner.get_range_into(key, range, buf).await,
                None => self.inner.get_range_into(key, range, buf).await,
            }
        })
        .await
    }

    /// A descriptor of `key`'s current version (a lease on it).
    pub async fn resolve(&self, key: &str) -> Result<Descriptor, Error> {
        crate::cluster::on_owner(self, key, |c| async move {
            c.inner.http.descriptors().one(key).await
        })
        .await
    }

    /// Streams `key`'s current version into `out` (one-sided when the policy allows, else
    /// over HTTP), a piece at a time: memory does not grow with the value. The last bytes
    /// are written only once the whole value has been validated; on an error the output
    /// holds at most a part of the value ([`Error::Incomplete`] says how much) and must be
    /// discarded. A one-sided failure before any byte was written falls back to HTTP
    /// (per the policy); after, it is returned — use [`Client::get_to_file`] for a read
    /// that starts over.
    pub async fn get_to<W: tokio::io::AsyncWrite + Unpin + ?Sized>(
        &self,
        key: &str,
        out: &mut W,
    ) -> Result<crate::Written, Error> {
        crate::timeouts::call_scope(async {
            match self.inner.owner(key, true).await {
                Some(c) => c.inner.get_to(key, out).await,
                None => self.inner.get_to(key, out).await,
            }
        })
        .await
    }

    /// Streams `key`'s current version into the file `path`: written under a temporary
    /// name next to it and renamed into place once complete and validated, so `path`
    /// never holds a partial or wrong value. A one-sided read that fails midway starts
    /// over on HTTP (per the policy).
    pub async fn get_to_file(
        &self,
        key: &str,
        path: impl AsRef<std::path::Path>,
    ) -> Result<crate::Written, Error> {
        crate::FileTransfer::new(self).get_to_file(key, path).await
    }

    /// Stores `body` as a new version of `key`.
    pub async fn put(
        &self,
        key: &str,
        body: impl Into<reqwest::Body>,
    ) -> Result<Descriptor, Error> {
        self.put_typed(key, body, None).await
    }

    /// Stores `body` with a media type. A body in memory goes through the key's next
    /// choice when the owner cannot be reached from here (that member passes it on to the
    /// owner, or refuses it: only the owner stores a write); a write the owner got and did
    /// not answer is not sent again (its error says so: it may have been stored); a
    /// streamed body is sent once.
    pub async fn put_typed(
        &self,
        key: &str,
        body: impl Into<reqwest::Body>,
        content_type: Option<&str>,
    ) -> Result<Descriptor, Error> {
        let body: reqwest::Body = body.into();
        let Some(bytes) = body.as_bytes().map(Bytes::copy_from_slice) else {
            return match self.inner.owner(key, false).await {
                Some(c) => c.inner.http.put_typed(key, body, content_type).await,
                None => self.inner.http.put_typed(key, body, content_type).await,
            };
        };
        let b = &bytes;
        crate::cluster::on_owner_write(self, key, |c| async move {
            c.inner.put_one(key, b.clone(), content_type).await
        })
        .await
    }

    /// Stores the file at `path` as a new version of `key`, streamed from disk with its
    /// length (memory does not grow with the file); read again from the start for the
    /// key's next choice if its owner cannot be reached (not when it got the file and did
    /// not answer).
    pub async fn put_file(
        &self,
        key: &str,
        path: impl AsRef<std::path::Path>,
        content_type: Option<&str>,
    ) -> Result<Descriptor, Error> {
        crate::FileTransfer::new(self)
            .put_file(key, path, content_type)
            .await
    }

    /// Deletes `key` (succeeds when absent too).
    pub async fn delete(&self, key: &str) -> Result<(), Error> {
        crate::cluster::on_owner_write(self, key, |c| async move { c.inner.http.delete(key).await })
            .await
    }

    /// The metadata of `key`'s current version.
    pub async fn head(&self, key: &str) -> Result<Meta, Error> {
        crate::cluster::on_owner(self, key, |c| async move { c.inner.http.head(key).await }).await
    }

    /// A page of keys starting with `prefix`, after `after`, at most `limit` (1–1000).
    /// Against a cluster, the member asked merges every member's page; a member that does
    /// not answer is replaced by the next.
    pub async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<ObjectList, Error> {
        let Some(topology) = self.inner.topology().await else {
            return self.inner.http.list(prefix, after, limit).await;
        };
        let mut last = None;
        for c in topology.all() {
            match c.inner.http.list(prefix, after, limit).await {
                Err(e) if e.is_unreachable() => last = Some(e),
                other => return other,
            }
        }
        match last {
            Some(e) => Err(e),
            None => self.inner.http.list(prefix, after, limit).await,
        }
    }

    /// How this gateway serves one-sided reads.
    pub async fn fabric_info(&self) -> Result<rasa_openapi::FabricInfo, Error> {
        self.inner.http.fabric_info().await
    }
}

impl crate::Many<'_> {
    /// Reads several keys: one descriptor round trip per member, then all one-sided reads
    /// in flight together; keys that cannot be read one-sided are read over HTTP (per the
    /// policy). One result per key, in order.
    pub async fn get(&self, keys: &[&str]) -> Result<Vec<Result<Object, Error>>, Error> {
        let Some(out) = crate::cluster::per_owner(self.0, keys, |c, sub| async move {
            c.inner.get_many(&sub).await
        })
        .await
        else {
            return self.0.inner.get_many(keys).await;
        };
        let mut done = Vec::with_capacity(keys.len());
        for (i, r) in out.into_iter().enumerate() {
            done.push(match r {
                Some(Err(e)) if e.is_unreachable() => self.0.get(keys[i]).await,
                Some(r) => r,
                None => self.0.get(keys[i]).await,
            });
        }
        Ok(done)
    }

    /// Resolves several keys in one round trip per member; one result per key, in order.
    pub async fn resolve(&self, keys: &[&str]) -> Result<Vec<Result<Descriptor, Problem>>, Error> {
        let Some(out) = crate::cluster::per_owner(self.0, keys, |c, sub| async move {
            c.inner.http.descriptors().many(&sub).await
        })
        .await
        else {
            return self.0.inner.http.descriptors().many(keys).await;
        };
        let mut done = Vec::with_capacity(keys.len());
        for (i, r) in out.into_iter().enumerate() {
            done.push(match r {
                Some(r) => r,
                None => match self.0.resolve(keys[i]).await {
                    Ok(d) => Ok(d),
                    Err(Error::Problem(p)) => Err(p),
                    Err(e) => return Err(e),
                },
            });
        }
        Ok(done)
    }
}
