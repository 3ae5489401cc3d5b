//! Serving: accept connections (plain or TLS) on a caller-supplied listener and hand them
//! to hyper with the gateway's connection limits, until a shutdown signal.
//!
//! `axum::serve` exposes none of hyper's connection settings, so this is the small accept
//! loop it would be, with:
//!
//! - **first-byte timeout** (`--first-byte-timeout`): a connection that sends nothing is
//!   closed (hyper's header timeout only starts at the first byte).
//! - **connection bound** (`--max-connections`, [`gate`]): past it, a small reserve serves
//!   health and admin routes only; beyond that, connections are closed on accept.
//! - **header read timeout** (`--header-timeout`): hyper closes an HTTP/1 connection whose
//!   request head is not complete in time — slowloris clients trickling headers, and idle
//!   keep-alive connections. The same bound applies to the TLS handshake.
//! - **send timeout** (`--send-timeout`): a connection whose writes make no progress for
//!   this long (a client that stopped reading) is closed, so it cannot pin the arena
//!   memory its response refers to.
//! - **TLS** (`--tls-cert`/`--tls-key`): rustls, HTTP/2 and HTTP/1.1 by ALPN.
//! - **graceful shutdown**: stop accepting, let requests in flight finish (an upload in
//!   progress is completed or abandoned, never half-published).

use crate::catalog;
use std::future::Future;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_io_timeout::TimeoutStream;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

pub mod gate;
pub mod sweeps;
use gate::{Admission, Gate};

/// Largest HTTP/2 header block hyper accepts (the gateway's `--max-header-size`, at most
/// 256 KiB, is enforced within it with a problem document).
const H2_MAX_HEADER_LIST: u32 = 400 << 10;

/// Connection-level settings.
#[derive(Clone)]
pub struct ServeOptions {
    /// Longest time to receive a complete request head (and to finish a TLS handshake).
    pub header_timeout: Duration,
    /// Longest time a write to the client may stay blocked (the client not reading).
    pub send_timeout: Duration,
    /// TLS, when the gateway serves HTTPS.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Longest wait for a new connection's first byte.
    pub first_byte_timeout: Duration,
    /// Most connections open at once (then the reserve, see [`gate`]).
    pub max_connections: usize,
    /// The listener's name in metrics and logs (`http`, `s3`).
    pub listener: &'static str,
    /// What a connection of the reserve may reach.
    pub reserve: Reserve,
}

/// What connections past `--max-connections` may reach: requests whose path `allowed`
/// accepts are served, every other request is answered `refuse()`.
#[derive(Clone, Copy)]
pub struct Reserve {
    /// Whether a path is a health or admin route.
    pub allowed: fn(&str) -> bool,
    /// The answer to any other request (a `503`).
    pub refuse: fn() -> axum::response::Response,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(60),
            tls: None,
            first_byte_timeout: Duration::from_secs(10),
            max_connections: 1024,
            listener: "http",
            reserve: Reserve {
                allowed: |_| false,
                refuse: || http::StatusCode::SERVICE_UNAVAILABLE.into_response(),
            },
        }
    }
}

/// How long a connection of the reserve may take to send its one request.
const RESERVE_TIMEOUT: Duration = Duration::from_secs(2);

/// hyper's connection builders: for served connections, and for the reserve's (one
/// request each, quickly).
fn builders(
    options: &ServeOptions,
) -> (auto::Builder<TokioExecutor>, auto::Builder<TokioExecutor>) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(options.header_timeout))
        .keep_alive_timeout(options.header_timeout)
        // HTTP/2's own bound on a header block (hyper's default is 16 MiB), matching the
        // outer bound HTTP/1's read buffer sets; --max-header-size is checked below it.
        .max_header_list_size(H2_MAX_HEADER_LIST);
    let mut reserve_builder = builder.clone();
    reserve_builder
        .http1()
        .keep_alive(false)
        .header_read_timeout(RESERVE_TIMEOUT);
    (builder, reserve_builder)
}

/// Serves `app` (the native API, or the S3 API) on `listener` until `shutdown` completes, then lets requests in flight
/// finish.
pub async fn run<S>(
    listener: TcpListener,
    app: S,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    S: App,
{
    let (builder, reserve_builder) = builders(&options);
    let gate = Gate::new(options.listener, options.max_connections);
    let tls = options.tls.map(TlsAcceptor::from);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let (ticket, reserved) = match gate.admit() {
            Admission::Served(t) => (t, false),
            Admission::Reserve(t) => (t, true),
            Admission::Refused => {
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = ConnService::new(&app, reserved.then_some(options.reserve));
        let builder = if reserved {
            reserve_builder.clone()
        } else {
            builder.clone()
        };
        let watcher = graceful.watcher();
        let tls = tls.clone();
        let handshake_timeout = options.header_timeout;
        let first_byte = if reserved {
            RESERVE_TIMEOUT
        } else {
            options.first_byte_timeout
        };
        let send_timeout = options.send_timeout;
        tokio::spawn(async move {
            if !ticket.first_byte(&stream, first_byte).await {
                return;
            }
            let mut stream = TimeoutStream::new(stream);
            stream.set_write_timeout(Some(send_timeout));
            let stream = Box::pin(stream);
            let result = match tls {
                None => serve_connection(&builder, stream, service, watcher).await,
                Some(acceptor) => {
                    match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            serve_connection(&builder, stream, service, watcher).await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    }
                }
            };
            if let Err(e) = result {
                if timed_out(&*e) {
                    catalog::HTTP_SEND_TIMEOUTS.counter().increment(1);
                    tracing::info!(%peer, "closed a connection whose client stopped reading (--send-timeout)");
                } else {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// What the server serves: any request in, a response out (errors are responses), with
/// a body hyper can send. The native API's stack ([`crate::http::App`]) and the S3
/// listener's router both are.
pub trait App:
    tower::Service<
        axum::extract::Request,
        Response = http::Response<Self::Body>,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
    /// The response body.
    type Body: http_body::Body<Data = bytes::Bytes, Error: Into<axum::BoxError>> + Send + 'static;
}

impl<S, B> App for S
where
    S: tower::Service<
            axum::extract::Request,
            Response = http::Response<B>,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static,
    B: http_body::Body<Data = bytes::Bytes, Error: Into<axum::BoxError>> + Send + 'static,
{
    type Body = B;
}

/// The service as one connection sees it: every route, or (for a connection of the
/// reserve) only those the reserve allows.
#[derive(Clone)]
struct ConnService<S> {
    app: S,
    reserve: Option<Reserve>,
}

impl<S: App> ConnService<S> {
    fn new(app: &S, reserve: Option<Reserve>) -> TowerToHyperService<Self> {
        TowerToHyperService::new(Self {
            app: app.clone(),
            reserve,
        })
    }
}

/// A response whose body is either the service's or a refusal's.
type EitherBody<B> = http_body_util::Either<B, Body>;

impl<S: App> tower::Service<http::Request<Incoming>> for ConnService<S> {
    type Response = http::Response<EitherBody<S::Body>>;
    type Error = std::convert::Infallible;
    type Future = futures_util::future::Either<
        futures_util::future::MapOk<
            tower::util::Oneshot<S, axum::extract::Request>,
            fn(http::Response<S::Body>) -> Self::Response,
        >,
        std::future::Ready<Result<Self::Response, Self::Error>>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        // Each request is sent to a clone of the service with `oneshot`, which waits for
        // that clone to be ready.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Incoming>) -> Self::Future {
        use futures_util::TryFutureExt;
        match self.reserve {
            Some(r) if !(r.allowed)(req.uri().path()) => {
                let refusal = (r.refuse)().map(http_body_util::Either::Right);
                futures_util::future::Either::Right(std::future::ready(Ok(refusal)))
            }
            _ => {
                let served: fn(http::Response<S::Body>) -> Self::Response =
                    |resp| resp.map(http_body_util::Either::Left);
                let call = self.app.clone().oneshot(req.map(Body::new));
                futures_util::future::Either::Left(call.map_ok(served))
            }
        }
    }
}

/// The service as hyper sees it.
type Service<S> = TowerToHyperService<ConnService<S>>;

/// Serves one connection (plain or TLS) until it ends or graceful shutdown has drained it.
async fn serve_connection<I, S: App>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    service: Service<S>,
    watcher: hyper_util::server::graceful::Watcher,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    watcher.watch(conn.into_owned()).await
}

/// Whether an I/O time-out (the send timeout) ended the connection.
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    crate::http::error::caused_by(e, |c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::TimedOut)
    })
}

/// A failed `accept`: a connection reset before it was accepted is nothing; anything else
/// (out of file descriptors) is logged and the loop pauses a second instead of spinning.
async fn accept_failed(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; pausing 1s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Loads a PEM certificate chain and private key into a rustls server configuration that
/// offers HTTP/2 and HTTP/1.1. The error names the file at fault.
pub fn tls_config(
    cert: &Path,
    key: &Path,
) -> Result<Arc<rustls::ServerConfig>, crate::setting::SettingError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| {
            crate::setting::SettingError::said(format!("--tls-cert {}: {e}", cert.display()))
        })?;
    if certs.is_empty() {
        return Err(crate::setting::SettingError::said(format!(
            "--tls-cert {}: no certificate in the file",
            cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        crate::setting::SettingError::said(format!("--tls-key {}: {e}", key.display()))
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| crate::setting::SettingError::said(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| crate::setting::SettingError::said(format!("--tls-cert/--tls-key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Registers SIGINT and SIGTERM handlers now, and returns a future that completes when
/// either arrives. Registering before the gateway announces itself means a signal sent
/// right after start-up still shuts down gracefully instead of killing the process.
#[cfg(unix)]
pub fn shutdown_signal() -> io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT received, shutting down"),
            _ = terminate.recv() => tracing::info!("SIGTERM received, shutting down"),
        }
    })
}

/// Returns a future that completes on Ctrl-C.
#[cfg(not(unix))]
pub fn shutdown_signal() -> io::Result<impl Future<Output = ()> + Send + 'static> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("Ctrl-C received, shutting down");
    })
}
