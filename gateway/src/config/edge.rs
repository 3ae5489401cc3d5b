//! Flags that bound what one client can hold at the edge: open connections, silent
//! connections, crawling uploads, and (in open mode) the host names a request may name.

use crate::setting::SettingError;
use std::time::Duration;

use crate::units::{parse_duration, parse_size};

/// The edge's limits (flattened into [`super::Args`]).
#[derive(Debug, Clone, clap::Args)]
pub struct EdgeArgs {
    /// Most connections each listener (HTTP, S3) holds open at once. Past it a small
    /// reserve serves only health and admin routes (`/healthz`, `/readyz`, `/metrics`);
    /// beyond that new connections are closed at once. Default: from the open-file limit
    /// (three quarters of it less 1024, shared by the listeners).
    #[arg(long, env = "RASA_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,

    /// Longest wait for the first byte of a new connection (HTTP, S3, and the fabric port
    /// of `tcp`/`sockets` providers); then it is closed. The request head then has
    /// `--header-timeout`.
    #[arg(long, env = "RASA_FIRST_BYTE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub first_byte_timeout: Duration,

    /// Slowest upload accepted, in bytes a second: after `--body-timeout`, a PUT (or S3
    /// upload) must have received at least this rate times the time since its body began,
    /// else `408` and nothing is stored. `0` turns it off.
    #[arg(long, env = "RASA_MIN_UPLOAD_RATE", default_value = "64KiB", value_parser = parse_size)]
    pub min_upload_rate: u64,

    /// A host name (or `host:port`) requests may name in `Host` when the gateway is open
    /// (no token file / no S3 credentials); repeat for more. IP literals, names without a
    /// dot (`localhost`, `rasa`), the machine's host name and the host of `--advertise-url`
    /// are always accepted; any other name is refused (`403`), which stops DNS-rebinding
    /// pages.
    #[arg(
        long = "allowed-host",
        env = "RASA_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
}

impl EdgeArgs {
    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), SettingError> {
        if self.first_byte_timeout.is_zero() {
            return Err(SettingError::said(
                "--first-byte-timeout must be more than 0",
            ));
        }
        if self.max_connections == Some(0) {
            return Err(SettingError::said("--max-connections must be at least 1"));
        }
        Ok(())
    }
}
