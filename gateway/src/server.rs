//! Serving: a caller-supplied listener and shutdown signal, so the binary and tests share it.

use std::future::Future;

use tokio::net::TcpListener;

use crate::http::{app, AppState};

/// Serves the API on `listener` until `shutdown` completes, then lets requests in flight
/// finish (an upload in progress is completed or abandoned, never half-published).
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Registers SIGINT and SIGTERM handlers now, and returns a future that completes when
/// either arrives. Registering before the gateway announces itself means a signal sent
/// right after start-up still shuts down gracefully instead of killing the process.
#[cfg(unix)]
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
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
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("Ctrl-C received, shutting down");
    })
}
