//! The fronts (the HTTP API and the S3 listener) over the object service, and the
//! cluster they are members of: its membership made before anything that uses it, joined
//! once everything is built.

use super::error::StartError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::figures::Recorders;

use crate::cluster::{Cluster, Peers};
use crate::config::Args;
use crate::http::{AppState, HttpConfig, Wiring};
use crate::objects::namespaces::Namespaces;
use crate::objects::Objects;
use crate::s3::listener::Prepared;
use crate::store::Store;
use crate::tokens::TokenFile;

/// The ports both fronts serve on, bound before anything else is built: their addresses
/// are what a cluster member advertises.
pub(super) struct Ports {
    /// The HTTP API's socket, reserved: listening only once the node can serve (a member
    /// joining refuses connections instead of leaving them queued).
    pub socket: tokio::net::TcpSocket,
    /// Its address (the port chosen when `--listen` gave 0).
    pub addr: SocketAddr,
    /// The S3 listener's, when `--s3-listen` asks for one.
    pub s3: Option<tokio::net::TcpListener>,
}

impl Ports {
    /// Binds `--listen` and `--s3-listen`.
    pub fn bind(args: &Args) -> Result<Ports, StartError> {
        let socket = crate::net::reserve(args.listen).map_err(|source| StartError::Socket {
            doing: "listen on",
            addr: args.listen,
            source,
        })?;
        let addr = socket.local_addr().map_err(|source| StartError::Socket {
            doing: "read the address of",
            addr: args.listen,
            source,
        })?;
        let s3 = crate::s3::listener::bind(&args.s3)?;
        Ok(Ports { socket, addr, s3 })
    }
}

/// Both fronts, built over `objects` and `namespaces` (and, in a cluster, `peers`), their
/// ports bound and not yet listening.
pub(super) async fn build(
    args: &Args,
    (objects, namespaces): (&Arc<Objects>, &Arc<Namespaces>),
    (tokens, recorder): (Option<Arc<TokenFile>>, Recorders),
    peers: Option<&Arc<Peers>>,
    s3: Option<tokio::net::TcpListener>,
) -> Result<(AppState, Option<Prepared>), StartError> {
    let limits = args.front_limits();
    let state = AppState::build(
        Arc::clone(objects),
        HttpConfig {
            limits,
            test_hooks: args.test_hooks,
            tokens,
            public_metrics: args.public_metrics,
            chunked_upload_memory: args.chunked_upload_memory,
            hosts: Arc::new(args.host_policy(&[])),
            max_batch_size: args.max_batch_size,
            ..HttpConfig::new(args.max_object_size, args.max_batch_keys)
        },
        Wiring {
            namespaces: Some(Arc::clone(namespaces)),
            metrics: Some(recorder),
            peers: peers.cloned(),
        },
    );
    let Some(listener) = s3 else {
        return Ok((state, None));
    };
    let wide = match peers {
        Some(p) => Some(crate::s3::cluster::Wide::new(
            Arc::clone(p),
            args.cluster.cluster_ca_file.as_deref(),
        )?),
        None => None,
    };
    let shared = crate::s3::listener::Shared {
        objects: Arc::clone(objects),
        namespaces: Arc::clone(namespaces),
        origin_location: args.origin.clone(),
        limits,
        hosts: args.host_policy(&args.s3.s3_domains),
        wide,
    };
    let s3 = crate::s3::listener::prepare(&args.s3, shared, listener).await?;
    Ok((state, Some(s3)))
}

/// The membership `--cluster` asks for (none without it), connected to etcd but not yet
/// registered ([`Cluster::connect`]), and the way to the other members: made before the
/// object service, the origin and the fronts, which are given it.
pub(super) async fn membership(
    args: &Args,
    store: &Store,
    ports: &Ports,
    tls: bool,
) -> Result<Option<Arc<Peers>>, StartError> {
    let s3_addr = match &ports.s3 {
        Some(l) => Some(l.local_addr().map_err(|source| StartError::Socket {
            doing: "read the address of",
            addr: ports.addr,
            source,
        })?),
        None => None,
    };
    let Some(config) = args.cluster_config(ports.addr, tls, s3_addr)? else {
        return Ok(None);
    };
    if config.secret.is_none() {
        tracing::warn!(
            "cluster: no --cluster-secret-file: anyone who can write etcd can join this cluster (and be sent its clients' requests and credentials), and a client can mark a request as forwarded; give every member the same secret on a shared network"
        );
    }
    let fabric = crate::http::fabric::info(store);
    let incarnation = fabric.incarnation.clone();
    let client = crate::cluster::peer_client(
        Duration::from_secs(2),
        args.body_timeout,
        config.ca_file.as_deref(),
    )?;
    let cluster = Cluster::connect(config, incarnation, fabric).await?;
    // Near copies only without a read-through origin: its objects change elsewhere.
    let copies = match args.cluster.cluster_near_cache {
        size if size > 0 && args.origin.is_some() => {
            tracing::warn!("cluster: --cluster-near-cache is off with a read-through origin (its objects change where no owner sees the write)");
            0
        }
        size => size,
    };
    let lease = crate::cluster::replicas::REPLICA_LEASE;
    let hot = (args.cluster.cluster_hot_reads > 0).then_some(crate::cluster::hot::HotRule {
        reads: args.cluster.cluster_hot_reads,
        replicas: args.cluster.cluster_hot_replicas,
        window: args.cluster.cluster_hot_window,
    });
    let replicated = !args.cluster.cluster_replicas.is_empty() || hot.is_some();
    if replicated && args.cluster.member_ttl < lease * 3 {
        tracing::warn!(ttl = ?args.cluster.member_ttl, "cluster: replicas (--cluster-replicas, --cluster-hot-reads) want a --member-ttl of at least 6s: an owner grants a replica only while its etcd lease surely outlasts the replica's ({lease:?}), and with a shorter TTL it often cannot (reads then go to the owner)");
    }
    // The namespaces file may name replicas (`replicas=`), now or once read again.
    let replicas = (replicated || args.namespaces.is_some()).then(|| {
        let budget = args
            .cluster
            .cluster_replica_memory
            .unwrap_or(args.memory / 4);
        let rules = args.cluster.cluster_replicas.clone();
        crate::cluster::replicas::Replicas::new(rules, budget, hot)
    });
    let near = (copies > 0 || replicas.is_some())
        .then(|| crate::cluster::near::Near::new(copies, replicas));
    let peers = Arc::new(Peers::new(cluster, client, near));
    if let Some(hot) = hot {
        tokio::spawn(crate::cluster::hot::follow(
            Arc::downgrade(&peers),
            hot.window,
        ));
    }
    Ok(Some(peers))
}

/// Registers this node in the cluster `peers` reach, last, once everything it serves is
/// built; back after a lost lease, the read-through origin revalidates what it holds
/// (others may have written its keys meanwhile).
pub(super) async fn join(
    peers: Option<&Arc<Peers>>,
    objects: &Objects,
) -> Result<Option<Arc<Cluster>>, StartError> {
    let Some(peers) = peers else {
        return Ok(None);
    };
    let on_rejoin = objects.read_through().map(|rt| {
        let stale = Arc::clone(rt);
        Box::new(move || stale.revalidate_all()) as Box<dyn Fn() + Send + Sync>
    });
    let cluster = Arc::clone(peers.cluster());
    cluster.join(on_rejoin).await?;
    Ok(Some(cluster))
}
