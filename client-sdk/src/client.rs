//! The [`Client`] and the [`Node`] it talks to: a gateway's HTTP API ([`Transport`]) and
//! fabric endpoints ([`FabricPool`]); `get` and `get_many` choose between them.

use std::sync::Arc;

use futures_util::StreamExt;
use rasa_openapi::Descriptor;

use crate::fabric::FabricPool;
use crate::http::Transport;
use crate::stats::Counters;
use crate::{Error, FastPath, Object};

/// One gateway, as a client reaches it: its HTTP API and its fabric endpoints (with the
/// descriptors they read with), and the choice between them that every read makes.
pub(crate) struct Node {
    pub(crate) http: Arc<Transport>,
    pub(crate) fabric: FabricPool,
    pub(crate) fast_path: FastPath,
    /// Counters, shared by a cluster client and its per-node clients.
    pub(crate) counters: Counters,
    /// The cluster behind the seed endpoints (`None` for a per-node client, or when
    /// discovery is off).
    pub(crate) topology: Option<Arc<crate::cluster::Topology>>,
}

/// A client of one gateway, or of a cluster of gateways (each request goes to the key's
/// owner). Cheap to clone: clones share connections, endpoints and descriptors.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Node>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.inner.http.endpoint)
            .field("fast_path", &self.inner.fast_path)
            .finish()
    }
}

impl Node {
    /// Reads `key`'s current version: one-sided when the policy allows and it works, else
    /// over HTTP.
    pub(crate) async fn get(&self, key: &str) -> Result<Object, Error> {
        if self.fast_path == FastPath::Off || self.fabric.known_unavailable() {
            return self.http.get(key, None).await;
        }
        match self.fabric.get(key).await {
            Ok(obj) => Ok(obj),
            // The gateway answered no, or did not answer in time: HTTP would not do better
            // (but for an object too large to cache, which only HTTP serves).
            Err(e @ (Error::Problem(_) | Error::Timeout { .. })) if !e.http_only() => Err(e),
            Err(e) if self.fast_path == FastPath::Required => Err(e),
            Err(e) => {
                tracing::debug!(key, error = %e, "fast path failed; reading over HTTP");
                self.http.get(key, None).await
            }
        }
    }

    /// Reads several keys: one descriptor round trip, then all one-sided reads in flight
    /// together; keys that cannot be read one-sided are read over HTTP (per the policy).
    /// One result per key, in order.
    pub(crate) async fn get_many(
        &self,
        keys: &[&str],
    ) -> Result<Vec<Result<Object, Error>>, Error> {
        if self.fast_path == FastPath::Off {
            return Ok(self
                .http_many(keys.iter().map(|k| (*k).to_owned()).collect())
                .await);
        }
        let (resolved, sent) = self.http.descriptors().many_timed(keys).await?;
        let mut out: Vec<Option<Result<Object, Error>>> = Vec::with_capacity(keys.len());
        let mut batch = Vec::new();
        for (i, r) in resolved.into_iter().enumerate() {
            match r {
                Ok(d) if self.fabric.descriptors.foreign(&d) => {
                    out.push(Some(Err(Error::FastPath(
                        "the descriptor names another member than the one asked".into(),
                    ))))
                }
                Ok(d) => {
                    batch.push((i, d));
                    out.push(None);
                }
                Err(p) => out.push(Some(Err(Error::Problem(p)))),
            }
        }
        let descs: Vec<&Descriptor> = batch.iter().map(|(_, d)| d).collect();
        match self.fabric.read_descriptors(&descs, sent).await {
            Ok(results) => {
                for ((i, _), r) in batch.iter().zip(results) {
                    out[*i] = Some(r);
                }
            }
            Err(e) => {
                for (i, _) in &batch {
                    out[*i] = Some(Err(Error::FastPath(e.to_string())));
                }
            }
        }
        let mut done: Vec<Result<Object, Error>> = out
            .into_iter()
            .map(|r| r.expect("every key answered"))
            .collect();
        // The keys the fast path could not read, over HTTP, several at once.
        let again: Vec<usize> = (0..done.len())
            .filter(|&i| {
                self.fast_path == FastPath::Auto && matches!(done[i], Err(Error::FastPath(_)))
            })
            .collect();
        let read = self
            .http_many(again.iter().map(|&i| keys[i].to_owned()).collect())
            .await;
        for (i, r) in again.into_iter().zip(read) {
            done[i] = r;
        }
        Ok(done)
    }

    /// Reads `keys` over HTTP, [`HTTP_CONCURRENCY`] at a time; one result per key, in order.
    /// (Owned keys and a cloned transport: the batch's future stays `Send` for any caller.)
    async fn http_many(&self, keys: Vec<String>) -> Vec<Result<Object, Error>> {
        futures_util::stream::iter(keys)
            .map(|k| {
                let http = Arc::clone(&self.http);
                async move { http.get(&k, None).await }
            })
            .buffered(HTTP_CONCURRENCY)
            .collect()
            .await
    }
}

/// HTTP reads of one batch in flight together (each on a pooled connection).
const HTTP_CONCURRENCY: usize = 16;

impl Node {
    /// The cluster behind this client, once discovery says there is one.
    pub(crate) async fn topology(&self) -> Option<&Arc<crate::cluster::Topology>> {
        let t = self.topology.as_ref()?;
        t.discover().await.then_some(t)
    }

    /// The member to send `key` to first, when this client talks to a cluster (a `read`
    /// of a key with replicas: the holder this client reads it from).
    pub(crate) async fn owner(&self, key: &str, read: bool) -> Option<Client> {
        self.topology().await?.first(key, read)
    }
}
