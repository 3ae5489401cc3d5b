//! Configuration of a [`Client`]: [`ClientBuilder`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use crate::client::Node;
use crate::cluster::Topology;
use crate::fabric::{FabricPool, FabricState};
use crate::http::Transport;
use crate::stats::Counters;
use crate::{Client, Error, FastPath};

/// Builds a [`Client`].
#[derive(Clone)]
pub struct ClientBuilder {
    endpoint: String,
    fast_path: FastPath,
    fabric_addr: Option<String>,
    fabric_provider: Option<String>,
    verify_sha256: bool,
    read_timeout: Duration,
    lease_puts: Option<bool>,
    connect_timeout: Duration,
    request_timeout: Duration,
    token: Option<String>,
    ca_file: Option<std::path::PathBuf>,
    retries_when_busy: u32,
    discover_cluster: bool,
    fabric_endpoints: usize,
    /// The namespace this client's keys are in (`None`: the default one).
    pub(crate) namespace: Option<String>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("endpoint", &self.endpoint)
            .field("fast_path", &self.fast_path)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// Bearer token sent on every request (`Authorization: Bearer …`), for gateways run
    /// with `--token-file`. The token is marked sensitive and never printed.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The namespace this client's keys are in (a gateway run with `--namespaces`): its
    /// requests go to `/v1/ns/{namespace}/…`. Default: the default namespace
    /// (`/v1/objects/…`). A name is an S3 bucket name
    /// (3–63 characters of `a-z`, `0-9`, `-` and `.`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// How many times a request answered `503` with `Retry-After` (the gateway is
    /// overloaded or its memory is full of leased values; nothing was done) is sent again
    /// after waiting as told (default 2; 0 returns the `503` at once). Requests whose body
    /// is a stream are not retried.
    pub fn retries_when_busy(mut self, n: u32) -> Self {
        self.retries_when_busy = n;
        self
    }

    /// A PEM file of extra certificate authorities to trust for `https://` endpoints, in
    /// addition to the system's (for gateways with a private or self-signed certificate).
    pub fn ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Fast-path policy (default [`FastPath::Auto`]).
    pub fn fast_path(mut self, mode: FastPath) -> Self {
        self.fast_path = mode;
        self
    }

    /// Local address for this client's fabric endpoint (default: `127.0.0.1` when the
    /// gateway is on loopback, else the provider's choice).
    pub fn fabric_addr(mut self, addr: impl Into<String>) -> Self {
        self.fabric_addr = Some(addr.into());
        self
    }

    /// The gateway fabric endpoint to read through, by provider (`shm`, `tcp;ofi_rxm`,
    /// `efa`): for a gateway serving several at once. Default: `shm` when the gateway is on
    /// this host and cross-memory attach works, else its other provider. A provider the
    /// gateway does not serve (or `shm` that cannot work from here) means HTTP reads
    /// (with [`FastPath::Required`], an error saying why).
    pub fn fabric_provider(mut self, provider: impl Into<String>) -> Self {
        self.fabric_provider = Some(provider.into());
        self
    }

    /// Also check the SHA-256 of every read, one-sided or over HTTP (the frame checksum
    /// is always checked; this adds the content identity at ~1.6 GB/s). Over HTTP, a
    /// gateway that sends no frame checksum is always checked by SHA-256.
    pub fn verify_sha256(mut self, on: bool) -> Self {
        self.verify_sha256 = on;
        self
    }

    /// Longest wait for a connection to the gateway (TCP and TLS) to be established
    /// (default 3 s). A refused connection fails at once.
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// Longest an HTTP exchange may go without progress (default 30 s): without an answer
    /// while the request is sent, or without a body chunk while the answer is received. A
    /// large transfer that keeps moving is never cut off; a frozen gateway is given up on
    /// after this, with [`Error::Timeout`] naming the endpoint.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }

    /// Whether a PUT asks for a descriptor it can read one-sided (the gateway then leases
    /// the new version for its `--lease`, and its memory waits for that lease before
    /// reuse). Default: off — a writer is never throttled by leases it does not use (a
    /// writer that turned `--memory` over within one lease used to wait the leases out,
    /// 10 s a round, issue 63); turn it on when the returned descriptors are read
    /// one-sided.
    pub fn lease_puts(mut self, on: bool) -> Self {
        self.lease_puts = Some(on);
        self
    }

    /// Longest a single one-sided read may take (default 5 s; never past the lease).
    pub fn read_timeout(mut self, t: Duration) -> Self {
        self.read_timeout = t;
        self
    }

    /// Most fabric endpoints a client opens towards one gateway (1–64; default 4): one-sided
    /// reads issued at the same time (tasks calling `get` together, `get_many_into`) run on
    /// as many endpoints at once, each with its own registered scratch memory. Endpoints
    /// open on demand: a client that reads one value at a time has one.
    pub fn fabric_endpoints(mut self, n: usize) -> Self {
        self.fabric_endpoints = n.clamp(1, 64);
        self
    }

    /// Whether to ask the gateway whether it is one member of a cluster (`GET
    /// /v1/cluster`, once, on first use) and then send each key's requests to its owner
    /// (default `true`). With `false`, every request goes to the first endpoint.
    pub fn discover_cluster(mut self, on: bool) -> Self {
        self.discover_cluster = on;
        self
    }

    /// The client.
    pub fn build(self) -> Result<Client, Error> {
        self.check()?;
        let seeds = self.seeds()?;
        let first = seeds[0].clone();
        let https = seeds.iter().any(|s| s.starts_with("https://"));
        let http = self.http_client(https)?;
        let counters = Counters::default();
        let held: Arc<crate::cache::Held> = Arc::default();
        let topology = self.discover_cluster.then(|| {
            Arc::new(Topology::new(
                seeds,
                self.clone(),
                http.clone(),
                counters.clone(),
                Arc::clone(&held),
            ))
        });
        Ok(self.assemble(&first, http, counters, topology, (held, None)))
    }

    /// Checks the endpoint (one or more comma-separated `http://` or `https://` URLs)
    /// without building anything: what [`ClientBuilder::build`] would refuse it for.
    pub fn check(&self) -> Result<(), Error> {
        if let Some(ns) = &self.namespace {
            rasa_openapi::key::check_namespace(ns).map_err(|e| Error::Config(e.to_string()))?;
        }
        self.seeds().map(|_| ())
    }

    /// The endpoint's URLs (at least one), each checked.
    fn seeds(&self) -> Result<Vec<String>, Error> {
        let seeds: Vec<String> = self
            .endpoint
            .split(',')
            .map(|s| s.trim().trim_end_matches('/').to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        if seeds.is_empty() {
            return Err(Error::Config("no endpoint given".into()));
        }
        if let Some(bad) = seeds.iter().find(|s| !is_gateway_url(s)) {
            return Err(Error::Config(format!(
                "endpoint {bad:?} is not an http:// or https:// URL with a host (e.g. http://127.0.0.1:8080)"
            )));
        }
        Ok(seeds)
    }

    /// The longest a single exchange without progress may take.
    pub(crate) fn timeouts(&self) -> Duration {
        self.request_timeout
    }

    /// A client of the gateway at `endpoint` over `http`, counting into `counters`.
    pub(crate) fn assemble(
        &self,
        endpoint: &str,
        http: reqwest::Client,
        counters: Counters,
        topology: Option<Arc<Topology>>,
        (held, node): (Arc<crate::cache::Held>, Option<&str>),
    ) -> Client {
        let fabric_addr = self
            .fabric_addr
            .clone()
            .or_else(|| default_fabric_addr(endpoint));
        let descriptors = Arc::new(crate::cache::DescriptorCache::new(held, node));
        let http = Arc::new(Transport {
            http,
            endpoint: endpoint.to_owned(),
            space: self
                .namespace
                .as_ref()
                .map_or_else(String::new, |ns| format!("/ns/{ns}")),
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
            retries_when_busy: self.retries_when_busy,
            lease_puts: self.lease_puts.unwrap_or(false),
            verify_sha256: self.verify_sha256,
            counters: counters.clone(),
            descriptors: Arc::clone(&descriptors),
        });
        let fabric = FabricPool {
            slots: (0..self.fabric_endpoints)
                .map(|_| Arc::new(Mutex::new(FabricState::Unknown)))
                .collect(),
            next: Default::default(),
            rebuilding: Arc::default(),
            fabric_addr,
            provider: self.fabric_provider.clone(),
            in_use: self.fabric_endpoints.into(),
            fast_path: self.fast_path,
            read_timeout: self.read_timeout,
            call_timeout: crate::fabric::CallTimeout(self.request_timeout),
            verify_sha256: self.verify_sha256,
            http: Arc::clone(&http),
            descriptors,
            counters: counters.clone(),
        };
        Client {
            inner: Arc::new(Node {
                http,
                fabric,
                fast_path: self.fast_path,
                counters,
                topology,
            }),
        }
    }

    fn http_client(&self, https: bool) -> Result<reqwest::Client, Error> {
        let mut http = reqwest::Client::builder()
            // Below the gateway's default --header-timeout (30 s), which also closes idle
            // keep-alive connections: the pool lets go first, so no request races a close.
            .pool_idle_timeout(Duration::from_secs(20))
            .connect_timeout(self.connect_timeout)
            // A cluster member's redirect would lose the token and a streamed body: the
            // SDK goes to owners itself.
            .redirect(reqwest::redirect::Policy::none())
            .use_preconfigured_tls(crate::tls::client_config(https, self.ca_file.as_deref())?);
        if let Some(token) = &self.token {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| {
                    Error::Config("the token has characters a header cannot carry".into())
                })?;
            value.set_sensitive(true);
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::AUTHORIZATION, value);
            http = http.default_headers(headers);
        }
        Ok(http.build()?)
    }
}

impl Client {
    /// A builder for a client of the gateway at `endpoint` (e.g. `http://127.0.0.1:8080`).
    ///
    /// For a cluster, give one or more members as seeds, separated by commas
    /// (`http://a:8080,http://b:8080`): the client learns the others from them.
    pub fn builder(endpoint: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            endpoint: endpoint.into(),
            fast_path: FastPath::Auto,
            fabric_addr: None,
            fabric_provider: None,
            verify_sha256: false,
            read_timeout: Duration::from_secs(5),
            lease_puts: None,
            fabric_endpoints: 4,
            namespace: None,
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(30),
            token: None,
            ca_file: None,
            retries_when_busy: 2,
            discover_cluster: true,
        }
    }
}

/// The local address a client's fabric endpoint binds to when none is given: `127.0.0.1`
/// for a gateway on loopback (so both ends share the interface), else `None` (the
/// provider's choice).
pub fn default_fabric_addr(endpoint: &str) -> Option<String> {
    let host = endpoint
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split(['/', ':']).next());
    matches!(host, Some("127.0.0.1" | "localhost")).then(|| "127.0.0.1".to_owned())
}

/// Whether `s` is an `http://` or `https://` URL naming a host: what a gateway's endpoint
/// must be (a bare `host:port` would otherwise fail only at the first call, as a builder
/// error).
fn is_gateway_url(s: &str) -> bool {
    reqwest::Url::parse(s).is_ok_and(|u| {
        matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_that_is_not_a_gateway_url_is_refused_when_built() {
        for bad in [
            "localhost:1234",
            "not a url",
            "ftp://h:1",
            "http://",
            "h1:80,http://h2",
        ] {
            let e = Client::builder(bad).build().err();
            assert!(
                matches!(&e, Some(Error::Config(why)) if why.contains("not an http")),
                "{bad}: {e:?}"
            );
        }
        for good in [
            "http://127.0.0.1:8080",
            "https://gw.example/",
            "http://a:1, http://b:2",
        ] {
            assert!(Client::builder(good).build().is_ok(), "{good}");
        }
    }
}
