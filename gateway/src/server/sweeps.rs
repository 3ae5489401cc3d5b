//! The fast path's background sweeps: connections on a socket provider's fabric port that
//! never sent a byte (libfabric's socket providers accept them and wait for a connection
//! request without limit), and the `/dev/shm` regions that dead `shm` processes left.

use crate::catalog;
use rasa_fastpath::fabric::plan::is_shm;
use rasa_fastpath::fabrics::Fabrics;

/// Starts the sweeps `fabrics` needs: one per fabric TCP port (`--first-byte-timeout`), and
/// the stale-region sweep when one endpoint is `shm`.
pub fn spawn(fabrics: &Fabrics, first_byte_timeout: std::time::Duration) {
    for port in fabrics.servers().iter().filter_map(|s| s.tcp_port()) {
        tokio::spawn(close_silent_fabric_connections(port, first_byte_timeout));
    }
    if fabrics
        .servers()
        .iter()
        .any(|s| is_shm(s.node().provided().provider()))
    {
        tokio::spawn(sweep_stale_shm_regions());
    }
}

/// Removes, now and then every `SWEEP_EVERY`, the `/dev/shm` regions of shm endpoints
/// whose processes are gone (`rasa_fastpath::stale`).
async fn sweep_stale_shm_regions() {
    use rasa_fastpath::stale::{sweep, MIN_AGE, SWEEP_EVERY};
    loop {
        let removed =
            tokio::task::spawn_blocking(|| sweep(std::path::Path::new("/dev/shm"), MIN_AGE))
                .await
                .unwrap_or(0);
        if removed > 0 {
            tracing::info!(
                removed,
                "removed the shm regions of processes that are gone"
            );
        }
        tokio::time::sleep(SWEEP_EVERY).await;
    }
}

/// Every half `timeout`, shuts down connections to the fabric's TCP `port` that have sent
/// nothing for `timeout` (see [`rasa_fastpath::silent`]); counted as
/// `rasa_connections_closed_total{listener="fabric",reason="first_byte_timeout"}`.
async fn close_silent_fabric_connections(port: u16, timeout: std::time::Duration) {
    let mut every = tokio::time::interval((timeout / 2).max(std::time::Duration::from_millis(100)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let swept =
            tokio::task::spawn_blocking(move || rasa_fastpath::silent::close_silent(port, timeout))
                .await;
        match swept {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => {
                catalog::CONNECTIONS_CLOSED
                    .counter_by(&[("listener", "fabric"), ("reason", "first_byte_timeout")])
                    .increment(n as u64);
                tracing::debug!(
                    n,
                    port,
                    "closed fabric connections that sent nothing (--first-byte-timeout)"
                );
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot look for silent fabric connections; not looking again");
                return;
            }
            Err(_) => return,
        }
    }
}
