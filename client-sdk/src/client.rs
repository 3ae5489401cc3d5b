//! The [`Client`] and its shared state; `get` and `get_many` choose between the fast path
//! and HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rasa_openapi::Descriptor;
use tokio::sync::Mutex;

use crate::fabric::FabricState;
use crate::{Error, FastPath, Object, Stats};

pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    pub(crate) endpoint: String,
    pub(crate) fast_path: FastPath,
    pub(crate) fabric_addr: Option<String>,
    pub(crate) verify_sha256: bool,
    pub(crate) read_timeout: Duration,
    /// Longest wait for a connection.
    pub(crate) connect_timeout: Duration,
    /// Longest an HTTP exchange may go without progress.
    pub(crate) request_timeout: Duration,
    pub(crate) retries_when_busy: u32,
    /// Fabric endpoints towards the gateway, each behind its own lock, opened on first use
    /// ([`Client::endpoint`] picks one for a read).
    pub(crate) fabric: Box<[Arc<Mutex<FabricState>>]>,
    /// Where waiting for a busy endpoint starts next (round robin).
    pub(crate) next_endpoint: std::sync::atomic::AtomicUsize,
    /// Set while the endpoint is rebuilt in the background; reads go over HTTP meanwhile.
    pub(crate) rebuilding: Arc<std::sync::atomic::AtomicBool>,
    /// Descriptors with the instant after which no read may start.
    pub(crate) cache: std::sync::Mutex<std::collections::HashMap<String, (Descriptor, Instant)>>,
    /// Counters, shared by a cluster client and its per-node clients.
    pub(crate) stats: Arc<std::sync::Mutex<Stats>>,
    /// The cluster behind the seed endpoints (`None` for a per-node client, or when
    /// discovery is off).
    pub(crate) topology: Option<Arc<crate::cluster::Topology>>,
}

/// A client of one gateway.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.inner.endpoint)
            .field("fast_path", &self.inner.fast_path)
            .finish()
    }
}

impl Client {
    /// Reads `key`'s current version: one-sided when the policy allows and it works, else
    /// over HTTP.
    pub(crate) async fn get_here(&self, key: &str) -> Result<Object, Error> {
        if self.inner.fast_path == FastPath::Off || self.known_unavailable() {
            return self.get_http_here(key).await;
        }
        match self.get_fabric_here(key).await {
            Ok(obj) => Ok(obj),
            // The gateway answered no, or did not answer in time: HTTP would not do better
            // (but for an object too large to cache, which only HTTP serves).
            Err(e @ (Error::Problem(_) | Error::Timeout { .. })) if !e.http_only() => Err(e),
            Err(e) if self.inner.fast_path == FastPath::Required => Err(e),
            Err(e) => {
                tracing::debug!(key, error = %e, "fast path failed; reading over HTTP");
                self.get_http_here(key).await
            }
        }
    }

    /// Reads several keys: one descriptor round trip, then all one-sided reads in flight
    /// together; keys that cannot be read one-sided are read over HTTP (per the policy).
    /// One result per key, in order.
    pub(crate) async fn get_many_here(
        &self,
        keys: &[&str],
    ) -> Result<Vec<Result<Object, Error>>, Error> {
        if self.inner.fast_path == FastPath::Off {
            let mut out = Vec::with_capacity(keys.len());
            for k in keys {
                out.push(self.get_http_here(k).await);
            }
            return Ok(out);
        }
        let (resolved, sent) = self.resolve_many_timed(keys).await?;
        let mut out: Vec<Option<Result<Object, Error>>> = Vec::with_capacity(keys.len());
        let mut batch = Vec::new();
        for (i, r) in resolved.into_iter().enumerate() {
            match r {
                Ok(d) => {
                    batch.push((i, d));
                    out.push(None);
                }
                Err(p) => out.push(Some(Err(Error::Problem(p)))),
            }
        }
        let descs: Vec<&Descriptor> = batch.iter().map(|(_, d)| d).collect();
        match self.read_descriptors(&descs, sent).await {
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
        let mut done = Vec::with_capacity(keys.len());
        for (i, r) in out.into_iter().enumerate() {
            let r = r.expect("every key answered");
            done.push(match r {
                Err(Error::FastPath(_)) if self.inner.fast_path == FastPath::Auto => {
                    self.get_http_here(keys[i]).await
                }
                other => other,
            });
        }
        Ok(done)
    }
}
