//! The first-byte timeout on the fabric port: libfabric's socket providers accept
//! connections there and wait for a connection request without limit, so the gateway
//! sweeps its own sockets for those that never sent a byte.

/// Every half `timeout`, shuts down connections to the fabric's TCP `port` that have sent
/// nothing for `timeout` (see [`rasa_fastpath::silent`]); counted as
/// `rasa_connections_closed_total{listener="fabric",reason="first_byte_timeout"}`.
pub async fn close_silent_fabric_connections(port: u16, timeout: std::time::Duration) {
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
                metrics::counter!("rasa_connections_closed_total", "listener" => "fabric", "reason" => "first_byte_timeout")
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
