//! Why the gateway could not start: each layer's own error, wrapped at this edge, where
//! `main` reports it in one line.

use std::net::SocketAddr;

use crate::cluster::error::MembershipError;
use crate::credfile::FileError;
use crate::figures::RecorderError;
use crate::objects::namespaces::NamespacesError;
use crate::s3::listener::ListenerError;
use crate::setting::SettingError;
use crate::store::disk::DiskError;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting refused.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// A credentials file (tokens, S3 keys): unreadable or holding an error.
    #[error(transparent)]
    File(#[from] FileError),
    /// The namespaces file.
    #[error(transparent)]
    Namespaces(#[from] NamespacesError),
    /// The disk tier.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// The metrics recorder.
    #[error(transparent)]
    Recorder(#[from] RecorderError),
    /// Joining the cluster.
    #[error(transparent)]
    Membership(#[from] MembershipError),
    /// The S3 listener.
    #[error(transparent)]
    S3(#[from] ListenerError),
    /// A socket could not be bound or read.
    #[error("cannot {doing} {addr}: {source}")]
    Socket {
        /// What was being done (`listen on`, `read the address of`).
        doing: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A signal handler could not be installed.
    #[error("cannot install a {signal} handler: {source}")]
    Signal {
        /// The signal.
        signal: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A server stopped with an error.
    #[error("{server} stopped: {source}")]
    Served {
        /// Which server.
        server: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
