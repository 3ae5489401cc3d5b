//! Files read again on SIGHUP (tokens, namespaces, S3 keys) without a restart.

/// Reads `what` again (`reload`, which answers how many entries it holds) on every SIGHUP
/// (add or revoke tokens, add or resize namespaces, without losing the values in memory).
/// A file that fails to parse changes nothing and is logged.
pub fn reload_on_sighup<E: std::fmt::Display + 'static>(
    what: &'static str,
    count: fn(&'static str),
    reload: impl Fn() -> Result<usize, E> + Send + 'static,
) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            match reload() {
                Ok(n) => {
                    count("ok");
                    tracing::info!(entries = n, "SIGHUP: {what} reloaded");
                }
                Err(e) => {
                    count("error");
                    tracing::error!(error = %e, "SIGHUP: {what} not reloaded; what is in force stays");
                }
            }
        }
    });
    Ok(())
}
