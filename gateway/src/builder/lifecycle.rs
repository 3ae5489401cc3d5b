//! The last stages: listen and announce, serve both fronts until shutdown, then drain,
//! leave the cluster and write memory's values down; and reloads on SIGHUP.

use super::error::StartError;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::Cluster;
use crate::objects::namespaces::Namespaces;
use crate::server::{self, ServeOptions};
use crate::store::Store;

use super::Gateway;

/// A gateway listening (connections queue from here on), not yet serving.
pub(super) struct Listening {
    gw: Gateway,
    listener: tokio::net::TcpListener,
}

/// Listens on the reserved port and announces it (one line per listener on stdout).
pub(super) fn listen(mut gw: Gateway) -> Result<Listening, StartError> {
    let addr = gw.addr;
    let socket = gw
        .socket
        .take()
        .expect("a gateway listens once: it is consumed");
    let listener = socket
        .listen(crate::net::BACKLOG)
        .map_err(|source| StartError::Socket {
            doing: "listen on",
            addr,
            source,
        })?;
    let (args, tls) = (&gw.args, gw.tls.is_some());
    tracing::info!(
        %addr,
        memory = args.memory,
        arena_size = args.arena_size,
        max_object_size = args.max_object_size,
        lease_ms = args.lease.as_millis() as u64,
        tokens = gw.tokens.as_ref().map_or(0, |t| t.current().len()),
        tls,
        max_concurrent_requests = args.max_concurrent_requests,
        "rasa-gateway ready"
    );
    warn_if_open(addr, gw.tokens.is_some(), tls);
    announce(tls, addr, gw.s3.as_ref().map(|s3| (s3.addr, s3.open)));
    Ok(Listening { gw, listener })
}

/// Serves until `shutdown`, then shuts down in order.
pub(super) async fn serve(
    listening: Listening,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let Listening { gw, listener } = listening;
    let Gateway {
        args,
        tokens: _,
        tls,
        namespaces,
        state,
        socket: _,
        addr: _,
        s3,
        cluster,
    } = gw;
    let listeners = 1 + usize::from(s3.is_some());
    let fd_limit = server::gate::raise_fd_limit();
    let options = ServeOptions {
        header_timeout: args.header_timeout,
        send_timeout: args.send_timeout,
        tls,
        first_byte_timeout: args.edge.first_byte_timeout,
        max_connections: args
            .edge
            .max_connections
            .unwrap_or_else(|| server::gate::default_max_connections(fd_limit, listeners)),
        listener: "http",
        reserve: server::Reserve {
            allowed: crate::http::ops::is_health_or_admin,
            refuse: crate::http::ops::connection_limit_refusal,
        },
    };
    if let Some(fabrics) = state.store().fabric() {
        server::sweeps::spawn(fabrics, args.edge.first_byte_timeout);
    }
    let store = Arc::clone(state.store());
    let leaving = cluster.clone();
    let grace = args.lease_grace;
    // Both listeners stop together: on the signal, after a cluster member's drain.
    let shutdown = futures_util::FutureExt::shared(Box::pin(async move {
        shutdown.await;
        if let Some(cluster) = &leaving {
            drain(cluster, &store, grace).await;
        }
    }));
    let s3_served = s3.map(|s3| {
        let options = ServeOptions {
            listener: "s3",
            reserve: server::Reserve {
                allowed: |_| false,
                refuse: crate::s3::listener::connection_limit_refusal,
            },
            ..options.clone()
        };
        tokio::spawn(server::run(s3.listener, s3.app, options, shutdown.clone()))
    });
    tokio::spawn(crate::http::stats::sample_forever(state.clone()));
    let served = server::run(listener, crate::http::app(state), options, shutdown)
        .await
        .map_err(|source| StartError::Served {
            server: "the HTTP server",
            source,
        });
    if let Some(s3) = s3_served {
        match s3.await {
            Ok(Err(e)) => tracing::error!(error = %e, "S3 listener error"),
            Err(e) => tracing::error!(error = %e, "S3 listener task failed"),
            Ok(Ok(())) => {}
        }
    }
    if let Some(cluster) = cluster {
        cluster.leave(Duration::from_secs(5)).await;
    }
    write_down(&namespaces, args.disk.disk_shutdown_timeout).await;
    served
}

/// Warnings for a gateway others can reach without tokens, or with tokens in clear.
fn warn_if_open(addr: SocketAddr, tokens: bool, tls: bool) {
    if !tokens && !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "listening beyond loopback with no --token-file: anyone who can reach this port can read, write and obtain descriptors"
        );
    }
    if !tls && tokens && !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "bearer tokens over plain HTTP beyond loopback: anyone on the path can copy them; use --tls-cert/--tls-key or a TLS proxy"
        );
    }
}

/// One line on stdout per listener, for people and for tests that bind port 0; `s3`: the
/// S3 listener's address and whether it is open.
fn announce(tls: bool, addr: SocketAddr, s3: Option<(SocketAddr, bool)>) {
    let scheme = if tls { "https" } else { "http" };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "rasa-gateway listening on {scheme}://{addr}");
    if let Some((at, open)) = s3 {
        if open && !at.ip().is_loopback() {
            tracing::warn!(%at, "the S3 listener has no --s3-credentials-file: anyone who can reach it can read and write");
        }
        let _ = writeln!(out, "rasa-gateway S3 on {scheme}://{at}");
    }
    let _ = out.flush();
}

/// At a clean shutdown, writes the values still only in memory to each namespace's disk
/// tier, within `timeout` (none without one).
async fn write_down(namespaces: &Namespaces, timeout: Duration) {
    if timeout.is_zero() {
        return;
    }
    for ns in namespaces.all() {
        let store = Arc::clone(ns.objects.store());
        if store.disk().is_none() {
            continue;
        }
        let began = std::time::Instant::now();
        let done = tokio::task::spawn_blocking(move || store.tier().spill_all(timeout)).await;
        match done {
            Ok((values, true)) => {
                tracing::info!(namespace = %ns.name, values, took = ?began.elapsed(), "wrote memory's values to the disk tier")
            }
            Ok((values, false)) => {
                tracing::warn!(namespace = %ns.name, values, ?timeout, "the disk tier did not finish writing memory's values in --disk-shutdown-timeout")
            }
            Err(e) => tracing::error!(error = %e, "writing memory's values to disk failed"),
        }
    }
}

/// A cluster member's graceful exit: turn `draining` (other members stop sending it keys),
/// then keep serving HTTP and one-sided reads until the last lease it handed out, plus
/// the grace, has ended.
async fn drain(cluster: &Cluster, store: &Store, grace: Duration) {
    cluster.drain(Duration::from_secs(5)).await;
    let until = store.memory().leases_end() + grace;
    if let Ok(left) = until.duration_since(std::time::SystemTime::now()) {
        tracing::info!(
            ?left,
            "draining: serving until the last lease handed out ends"
        );
        tokio::time::sleep(left).await;
    }
}
