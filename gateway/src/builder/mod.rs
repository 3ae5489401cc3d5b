//! The gateway built from its configuration, in stages, as the binary and the tests start
//! it: [`Gateway::build`] sets up storage (the store, its disk tier and reclaimer), binds
//! the fronts' ports, makes the cluster membership and the way to the other members
//! (`Peers`, connected to etcd, not yet registered), then the origin (read-through), the
//! object service and namespaces and the fronts (HTTP and S3), each given the `Peers` it
//! needs when it is made, and last registers the node in the cluster; [`Gateway::serve`]
//! announces the listeners, serves until a signal, and shuts down (a cluster member
//! drains, memory's values are written to disk).
//!
//! Modelled on Garage's `server.rs`: one configuration in, one handle passed on, each stage
//! a function of what the stages before it built — nothing is handed to a part after it
//! was made.

use crate::catalog;
pub use error::StartError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::Cluster;
use crate::config::Args;
use crate::http::AppState;
use crate::objects::namespaces::Namespaces;
use crate::objects::Objects;
use crate::tokens::TokenFile;

mod error;
mod fronts;
mod lifecycle;
mod storage;

/// A gateway built and bound, not yet listening: its port is reserved (a cluster member
/// refuses connections until it serves, rather than leaving them queued).
pub struct Gateway {
    args: Args,
    tokens: Option<Arc<TokenFile>>,
    tls: Option<Arc<rustls::ServerConfig>>,
    namespaces: Arc<Namespaces>,
    state: AppState,
    /// Reserved, taken when the gateway listens.
    socket: Option<tokio::net::TcpSocket>,
    addr: SocketAddr,
    s3: Option<crate::s3::listener::Prepared>,
    cluster: Option<Arc<Cluster>>,
}

impl Gateway {
    /// Builds the gateway `args` describe (already checked with [`Args::validate`]): storage,
    /// origin, object service and namespaces, fronts, cluster. Needs a Tokio runtime.
    pub async fn build(args: Args) -> Result<Gateway, StartError> {
        crate::planted::plant(args.test_plant);
        let tokens = match &args.token_file {
            Some(path) => Some(Arc::new(TokenFile::load(path)?)),
            None => None,
        };
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(crate::server::tls_config(cert, key)?),
            _ => None,
        };
        if let Some(file) = &tokens {
            let file = Arc::clone(file);
            let count = |r| {
                catalog::TOKEN_RELOADS
                    .counter_by(&[("result", r)])
                    .increment(1)
            };
            crate::reload::reload_on_sighup("token file", count, move || file.reload()).map_err(
                |source| StartError::Signal {
                    signal: "SIGHUP",
                    source,
                },
            )?;
        }
        let storage = storage::Storage::build(&args)?;
        let ports = fronts::Ports::bind(&args)?;
        let peers = fronts::membership(&args, &storage.store, &ports, tls.is_some()).await?;
        let origin = match args.s3_config() {
            Some(cfg) => {
                Some(storage::read_through(&args, cfg, &storage.store, peers.clone()).await)
            }
            None => None,
        };
        storage.revalidate_recovered(&args, origin.as_deref());
        let objects = Objects::new(
            Arc::clone(&storage.store),
            origin,
            args.effective_write_policy(),
            peers.clone(),
        );
        let namespaces = storage::namespaces(
            &args,
            &objects,
            (storage.tick, storage.disk),
            storage.namespaces,
        )?;
        let (state, s3) = fronts::build(
            &args,
            (&objects, &namespaces),
            (tokens.clone(), storage.recorder),
            peers.as_ref(),
            ports.s3,
        )
        .await?;
        let cluster = fronts::join(peers.as_ref(), &objects).await?;
        Ok(Gateway {
            args,
            tokens,
            tls,
            namespaces,
            state,
            socket: Some(ports.socket),
            addr: ports.addr,
            s3,
            cluster,
        })
    }

    /// The HTTP address (its port chosen when `--listen` gave 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Listens, prints one line per listener on stdout, and serves until SIGINT or SIGTERM;
    /// then drains (a cluster member), stops both listeners, leaves the cluster and writes
    /// memory's values to the disk tier.
    pub async fn serve(self) -> Result<(), StartError> {
        let signal = crate::server::shutdown_signal().map_err(|source| StartError::Signal {
            signal: "SIGINT and SIGTERM",
            source,
        })?;
        self.serve_until(signal).await
    }

    /// [`Gateway::serve`] until `shutdown` completes rather than a signal (for embedders
    /// and tests). It listens (and announces) at once, when called: connections made after
    /// it returns queue until the returned future, spawned or awaited, serves them.
    pub fn serve_until(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<(), StartError>> + Send {
        let listening = lifecycle::listen(self);
        async move { lifecycle::serve(listening?, shutdown).await }
    }
}

/// How often the reclaimer looks for arenas to free: half the grace, within 10–250 ms.
fn reclaim_tick(grace: Duration) -> Duration {
    (grace / 2).clamp(Duration::from_millis(10), Duration::from_millis(250))
}
