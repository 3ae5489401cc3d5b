//! The fronts (the HTTP API and the S3 listener, their ports reserved) and the cluster they
//! join.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::cluster::Cluster;
use crate::config::Args;
use crate::http::{AppState, HttpConfig};
use crate::objects::namespaces::Namespaces;
use crate::objects::Objects;
use crate::s3::listener::Prepared;
use crate::tokens::TokenFile;

/// Both fronts, bound and not yet listening.
pub(super) struct Fronts {
    pub state: AppState,
    pub socket: tokio::net::TcpSocket,
    pub addr: SocketAddr,
    pub s3: Option<Prepared>,
}

impl Fronts {
    /// The HTTP API's state and reserved port, and the S3 listener when `--s3-listen`
    /// asks for one.
    pub async fn build(
        args: &Args,
        objects: &Arc<Objects>,
        namespaces: &Arc<Namespaces>,
        tokens: Option<Arc<TokenFile>>,
        recorder: PrometheusHandle,
    ) -> Result<Fronts, String> {
        let mut state = AppState::new(
            Arc::clone(objects),
            HttpConfig {
                test_hooks: args.test_hooks,
                tokens,
                public_metrics: args.public_metrics,
                max_concurrent_requests: args.max_concurrent_requests,
                max_header_size: args.max_header_size as usize,
                body_timeout: args.body_timeout,
                chunked_upload_memory: args.chunked_upload_memory,
                hosts: Arc::new(args.host_policy(&[])),
                min_upload_rate: args.edge.min_upload_rate,
                max_batch_size: args.max_batch_size,
                ..HttpConfig::new(args.max_object_size, args.max_batch_keys)
            },
        );
        state.metrics = Some(recorder);
        state.namespaces = Arc::clone(namespaces);
        // Bound now (the port, and its number, are ours), listening only once the node can
        // serve: a cluster member joining refuses connections instead of leaving them queued.
        let socket = crate::net::reserve(args.listen)
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        let addr = socket
            .local_addr()
            .map_err(|e| format!("cannot read the listening address: {e}"))?;
        let s3 = crate::s3::listener::prepare(
            &args.s3,
            crate::s3::listener::Shared {
                objects: Arc::clone(objects),
                namespaces: Arc::clone(namespaces),
                origin_location: args.origin.clone(),
                max_object_size: args.max_object_size,
                max_concurrent_requests: args.max_concurrent_requests,
                body_timeout: args.body_timeout,
                max_header_size: args.max_header_size as usize,
                hosts: args.host_policy(&args.s3.s3_domains),
                min_upload_rate: args.edge.min_upload_rate,
            },
        )
        .await?;
        Ok(Fronts {
            state,
            socket,
            addr,
            s3,
        })
    }
}

/// Joins the cluster `--cluster` names (none without it) and hands it to both fronts and
/// to the read-through origin (peer fill, revalidation after a lost lease).
pub(super) async fn join_cluster(
    args: &Args,
    state: &mut AppState,
    objects: &Arc<Objects>,
    s3: Option<&Prepared>,
    addr: SocketAddr,
    tls: bool,
) -> Result<Option<Arc<Cluster>>, String> {
    let Some(config) = args.cluster_config(addr, tls, s3.map(|s3| s3.addr))? else {
        return Ok(None);
    };
    if config.secret.is_none() {
        tracing::warn!(
            "cluster: no --cluster-secret-file: anyone who can write etcd can join this cluster (and be sent its clients' requests and credentials), and a client can mark a request as forwarded; give every member the same secret on a shared network"
        );
    }
    let fabric = crate::http::fabric::info(state.store());
    let incarnation = fabric.incarnation.clone();
    let peers = crate::cluster::peer_client(
        Duration::from_secs(2),
        args.body_timeout,
        config.ca_file.as_deref(),
    )?;
    let cluster = Cluster::join(config, incarnation, fabric).await?;
    // Near copies only without a read-through origin: its objects change elsewhere.
    let near = match args.cluster.cluster_near_cache {
        0 => None,
        _ if objects.read_through().is_some() => {
            tracing::warn!("cluster: --cluster-near-cache is off with a read-through origin (its objects change where no owner sees the write)");
            None
        }
        size => Some(crate::cluster::near::Near::new(size)),
    };
    let peers = Arc::new(crate::cluster::Peers::new(
        Arc::clone(&cluster),
        peers,
        near,
    ));
    if let Some(rt) = objects.read_through() {
        // Back after its lease was lost: others may have written its keys.
        let stale = Arc::clone(rt);
        cluster.on_rejoin(move || stale.revalidate_all());
    }
    objects.join(&peers);
    if let Some(s3) = s3 {
        let wide = crate::s3::cluster::Wide::new(
            Arc::clone(&peers),
            args.cluster.cluster_ca_file.as_deref(),
        )?;
        let _ = s3.front.wide.set(wide);
    }
    state.peers = Some(peers);
    state.cluster = Some(Arc::clone(&cluster));
    Ok(Some(cluster))
}
